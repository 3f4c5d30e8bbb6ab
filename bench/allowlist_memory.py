#!/usr/bin/env python3
"""Peak memory and time of loading an allowlist, per format and size.

    python3 bench/allowlist_memory.py [--sizes 10000,50000] [--baseline OLD_BINARY]

Writes a native Allowlist (what the chart renders) and a plain list of N
repositories each (one digest with one tag per repository), then runs
`digest-gate allowlist lint` on each under the kernel's accounting
(`ru_maxrss` of the child: peak RSS) and reports MiB and seconds, the median
of three runs. With --baseline, the same files are loaded by that binary too,
in the same run, and ratios are printed (new / baseline).

Loading is what `serve` does at start and on every reload, so this bounds
what the allowlist adds to the server's peak; BENCHMARKS.md's load benchmark
measures the serving process as a whole.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def write_native(path: pathlib.Path, n: int):
    with path.open("w") as f:
        f.write("apiVersion: digest-gate.dev/v1alpha1\nkind: Allowlist\nmetadata:\n  name: bench\nspec:\n  repositories:\n")
        for i in range(n):
            d = hashlib.sha256(str(i).encode()).hexdigest()
            f.write(f"    - name: quay.io/org{i % 50}/repo{i}\n      digests:\n"
                    f"        - digest: sha256:{d}\n          tags: [\"v1.{i}\"]\n")


def write_plain(path: pathlib.Path, n: int):
    with path.open("w") as f:
        for i in range(n):
            d = hashlib.sha256(str(i).encode()).hexdigest()
            f.write(f"quay.io/org{i % 50}/repo{i}:v1.{i}@sha256:{d}\n")


def measure(binary: str, path: pathlib.Path) -> tuple[float, float]:
    """(peak RSS MiB, seconds) of one lint, median of three."""
    rss, secs = [], []
    for _ in range(3):
        start = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.execv(binary, [binary, "allowlist", "lint", str(path)])
        _, status, usage = os.wait4(pid, 0)
        secs.append(time.perf_counter() - start)
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"{binary} allowlist lint {path} failed")
        rss.append(usage.ru_maxrss / 1024)
    return statistics.median(rss), statistics.median(secs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,50000")
    ap.add_argument("--binary", default=str(ROOT / "target" / "release" / "digest-gate"))
    ap.add_argument("--baseline", help="another digest-gate binary to compare with")
    args = ap.parse_args()
    if args.binary == str(ROOT / "target" / "release" / "digest-gate"):
        subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    binaries = [("digest-gate", args.binary)] + ([("baseline", args.baseline)] if args.baseline else [])
    print("| format | repositories | " + " | ".join(f"{n} MiB | {n} s" for n, _ in binaries)
          + (" | RSS ratio | time ratio |" if args.baseline else " |"))
    print("|---" * (2 + 2 * len(binaries) + (2 if args.baseline else 0)) + "|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(s) for s in args.sizes.split(",")):
            for fmt, writer in (("native", write_native), ("plain list", write_plain)):
                path = pathlib.Path(tmp) / f"{fmt.replace(' ', '-')}-{n}.yaml"
                writer(path, n)
                got = [measure(b, path) for _, b in binaries]
                cells = " | ".join(f"{r:.1f} | {s:.2f}" for r, s in got)
                ratio = ""
                if args.baseline:
                    ratio = f" | {got[0][0] / got[1][0]:.2f} | {got[0][1] / got[1][1]:.2f}"
                print(f"| {fmt} | {n:,} | {cells}{ratio} |", flush=True)


if __name__ == "__main__":
    main()
