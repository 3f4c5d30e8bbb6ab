#!/usr/bin/env python3
"""Where two builds' instructions per review differ, function by function.

    python3 bench/callgrind_diff.py before=/path/to/old/digest-gate now=target/release/digest-gate

Serves the allowed (or, with --review rewritten, the rewritten) README review
once and N times with each build under callgrind, as compare_builds.py does,
and prints per function the instructions of one review (N-request run minus
one-request run, over N-1) in each build and the difference, largest first.
Under fat LTO a function's name covers whatever was inlined into it, so read
a pair of rows that move in opposite directions as one change. Only
127.0.0.1.
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import re
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import instructions as ins  # noqa: E402
import load  # noqa: E402
from compare_builds import serve_argv, setup  # noqa: E402

ROW = re.compile(r"\s*([\d,]+) \([^)]*\)\s+(.*?)(?: \[[^\]]*\])?$")


def functions(out: pathlib.Path) -> collections.Counter:
    """Self instructions by function name, callgrind's recursion marks folded."""
    text = subprocess.run(["callgrind_annotate", "--threshold=100", "--auto=no", str(out)],
                          check=True, capture_output=True, text=True).stdout
    counts: collections.Counter = collections.Counter()
    for line in text.splitlines():
        m = ROW.match(line)
        if m and "PROGRAM TOTALS" not in line:
            counts[re.sub(r"'\d+$", "", m.group(2))] += int(m.group(1).replace(",", ""))
    return counts


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", help="NAME=BINARY")
    parser.add_argument("now", help="NAME=BINARY")
    parser.add_argument("--requests", type=int, default=1001)
    parser.add_argument("--review", choices=["allowed", "rewritten"], default="allowed")
    parser.add_argument("--rows", type=int, default=40)
    args = parser.parse_args()
    certs, reviews = setup()
    body = reviews[args.review]
    per_review = {}
    for build in (args.before, args.now):
        name, _, binary = build.partition("=")
        runs = []
        for n in (1, args.requests):
            port = load.free_port()
            argv = serve_argv(binary, certs, port)
            out = load.OUT / f"callgrind.{name}.{n}.out"
            ins.counted(argv, port, certs / "ca.crt", body, n, out)
            runs.append(functions(out))
        one, many = runs
        per_review[name] = {f: (many[f] - one.get(f, 0)) / (args.requests - 1) for f in many}
    (a, before), (b, now) = per_review.items()
    names = set(before) | set(now)
    rows = sorted(names, key=lambda f: -abs(now.get(f, 0) - before.get(f, 0)))
    total = sum(now.values()) - sum(before.values())
    print(f"{args.review} review: {b} - {a} = {total:+,.0f} instructions per review\n")
    print(f"| {a} | {b} | difference | function |\n|---:|---:|---:|---|")
    for f in rows[:args.rows]:
        print(f"| {before.get(f, 0):,.0f} | {now.get(f, 0):,.0f} | {now.get(f, 0) - before.get(f, 0):+,.0f} | `{f[:120]}` |")


if __name__ == "__main__":
    main()
