#!/usr/bin/env python3
"""`digest-gate check -f -` on a cluster dump: what a platform engineer types first.

    make bench-dump
    python3 bench/check_dump.py [--objects 5500] [--big 55000] [--runs 3] [--baseline OLD_BINARY]

Writes what `kubectl get pods,servingruntimes -A -o json` prints for a cluster
of --objects objects: one `kind: List`, indented by four spaces, its `items`
before its `kind` as kubectl writes them; nine in ten are ModelMesh runtime
Pods (bench/modelmesh-pod.json, with their status), one in ten ServingRuntimes
(examples/manifests/incident-servingruntime.yaml), one object in ten on the
incident's never-promoted digest. The dump is written to disk an item at a
time, so the script's own memory stays small.

Measured, each from a bare interpreter (bench/rss.py), median of --runs:
`digest-gate check -o json -f -` (release build) with the dump on standard
input; `jq -c '.items[]'` over the same file, the usual way to take a List
apart; and, with --baseline, an earlier build of digest-gate. Then the same
check on a dump of --big objects (once; jq and the baseline are left out
there: each holds the whole document).

Writes target/bench-dump/report.md (and prints it).
"""

from __future__ import annotations

import argparse
import copy
import json
import pathlib
import statistics
import sys
import tempfile

import yaml

from rss import binary_argument, built, measure, write_report

ROOT = pathlib.Path(__file__).resolve().parents[1]
POD = ROOT / "bench" / "modelmesh-pod.json"
RUNTIME = ROOT / "examples" / "manifests" / "incident-servingruntime.yaml"
ALLOWLIST = ROOT / "bench" / "modelmesh-promoted.txt"
OUT = ROOT / "target" / "bench-dump"
STALE = ("registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8@sha256:"
         "7ef272bc7be866257b8126620e139d6e915ee962304d3eceba9c9d50d4e79767")
PROMOTED = ("registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8@sha256:"
            "8af20e48bb480a7ba1ee1268a3cf0a507e05b256c5fcf988f8e4a3de8b87edc6")


def item(i: int, pod: dict, runtime: dict) -> dict:
    """Object i of the dump: a ServingRuntime every tenth, else a Pod."""
    image = STALE if i % 10 < 1 or i % 100 == 55 else PROMOTED
    if i % 10 == 5:
        r = copy.deepcopy(runtime)
        r["metadata"].update(name=f"ovms-{i}", namespace=f"bench-{i % 10}", uid=f"00000000-0000-0000-0000-{i:012d}")
        r["spec"]["containers"][0]["image"] = image
        return r
    p = copy.deepcopy(pod)
    p["metadata"].update(name=f"modelmesh-serving-ovms-{i}", namespace=f"bench-{i % 10}",
                         uid=f"00000000-0000-0000-0000-{i:012d}")
    (ovms,) = [c for c in p["spec"]["containers"] if c["name"] == "ovms"]
    ovms["image"] = image
    return p


def dump(path: pathlib.Path, n: int) -> int:
    """Writes the List of n objects as kubectl does; the stale count."""
    pod = json.loads(POD.read_text())
    (runtime,) = [d for d in yaml.safe_load_all(RUNTIME.read_text()) if d]
    stale = 0
    with path.open("w") as f:
        f.write('{\n    "apiVersion": "v1",\n    "items": [\n')
        for i in range(n):
            obj = item(i, pod, runtime)
            stale += STALE in json.dumps(obj)
            text = json.dumps(obj, indent=4)
            f.write(("" if i == 0 else ",\n") + "\n".join("        " + line for line in text.split("\n")))
        f.write('\n    ],\n    "kind": "List",\n    "metadata": {\n        "resourceVersion": ""\n    }\n}\n')
    return stale


def median(runs: int, argv: list[str], out: pathlib.Path, stdin: pathlib.Path, code: int) -> tuple[float, float]:
    results = []
    for _ in range(runs):
        seconds, mib, got = measure(argv, out, stdin=stdin)
        if got != code:
            sys.exit(f"{argv[0]} exited {got}, expected {code}")
        results.append((seconds, mib))
    return statistics.median(r[0] for r in results), statistics.median(r[1] for r in results)


def check(binary: str) -> list[str]:
    return [binary, "check", "--allowlist", str(ALLOWLIST), "-f", "-", "-o", "json"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--objects", type=int, default=5500)
    ap.add_argument("--big", type=int, default=55000, help="the second dump's objects (0: none)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--baseline", help="an earlier digest-gate build, measured on the first dump")
    binary_argument(ap)
    args = ap.parse_args()
    built(args.binary)
    OUT.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="digest-gate-bench-dump-") as tmp:
        tmp = pathlib.Path(tmp)
        path = tmp / "dump.json"
        stale = dump(path, args.objects)
        size = path.stat().st_size / 1e6
        report = tmp / "report.json"
        new = median(args.runs, check(args.binary), report, path, 1)
        judged = json.loads(report.read_text())["summary"]
        found = judged["rewrite"] + judged["deny"]
        assert (judged["objects"], found) == (args.objects, stale), (judged, stale)
        jq = median(args.runs, ["/usr/bin/jq", "-c", ".items[]"], tmp / "jq.out", path, 0)
        rows.append((f"`digest-gate check -o json -f -`, {args.objects:,} objects ({size:.0f} MB)", new, jq))
        if args.baseline:
            old = median(args.runs, check(args.baseline), report, path, 1)
            rows.append((f"the baseline build, the same dump ({args.baseline})", old, jq))
        rows.append((f"`jq -c '.items[]'`, the same dump", jq, jq))
        big_size = 0.0
        if args.big:
            path.unlink()
            stale = dump(path, args.big)
            big_size = path.stat().st_size / 1e6
            big = median(1, check(args.binary), report, path, 1)
            judged = json.loads(report.read_text())["summary"]
            assert (judged["objects"], judged["rewrite"] + judged["deny"]) == (args.big, stale), judged
            rows.append((f"`digest-gate check -o json -f -`, {args.big:,} objects ({big_size:.0f} MB), once", big, None))
    lines = [
        "# `digest-gate check -f -` on a cluster dump",
        "",
        f"`{' '.join(sys.argv)}`: peak RSS and wall time, median of {args.runs} runs (the big dump: one). "
        f"Every run judged every object and found the stale ones.",
        "",
        "| what | wall s | peak RSS MiB | wall / jq | RSS / jq |",
        "|---|---:|---:|---:|---:|",
    ]
    for what, (s, mib), base in rows:
        ratio = f"{s / base[0]:.2f} | {mib / base[1]:.2f}" if base else "– | –"
        lines.append(f"| {what} | {s:.2f} | {mib:.1f} | {ratio} |")
    write_report(OUT, lines)


if __name__ == "__main__":
    main()
