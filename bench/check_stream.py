#!/usr/bin/env python3
"""Peak memory of `digest-gate check` on long manifest streams.

    make bench-check
    python3 bench/check_stream.py [--sizes 1,1000,5000,20000] [--runs 3]

Each stream repeats the incident's ServingRuntime
(examples/manifests/incident-servingruntime.yaml, on the never-promoted
digest, so every document has a finding) under distinct names, `---`
between documents, and is checked with the text report and with
`--output json` (release build), peak RSS (`ru_maxrss`) and wall time,
median of --runs. The baseline, measured in the same run, is the
one-document stream: what is left above it is what the stream costs.

Writes target/bench-check/report.md (and prints it).
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import tempfile

from rss import binary_argument, built, measure, write_report

ROOT = pathlib.Path(__file__).resolve().parents[1]
RUNTIME = ROOT / "examples" / "manifests" / "incident-servingruntime.yaml"
ALLOWLIST = ROOT / "examples" / "allowlist.yaml"
OUT = ROOT / "target" / "bench-check"


def stream(path: pathlib.Path, n: int):
    body = RUNTIME.read_text()
    with path.open("w") as f:
        for i in range(n):
            if i:
                f.write("---\n")
            f.write(body.replace("name: ovms\n  namespace:", f"name: ovms-{i}\n  namespace:", 1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,1000,5000,20000")
    ap.add_argument("--runs", type=int, default=3)
    binary_argument(ap)
    args = ap.parse_args()
    built(args.binary)
    OUT.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="digest-gate-bench-check-") as tmp:
        tmp = pathlib.Path(tmp)
        for n in sizes:
            path = tmp / f"stream-{n}.yaml"
            stream(path, n)
            row = {"documents": n, "mib": path.stat().st_size / 2**20}
            for output in ("text", "json"):
                runs = []
                for _ in range(args.runs):
                    seconds, peak, code = measure(
                        [args.binary, "check", "--allowlist", str(ALLOWLIST), "-f", str(path), "-o", output],
                        tmp / "out")
                    if code != 1:
                        sys.exit(f"check on {n} documents exited {code}, expected 1 (findings)")
                    runs.append((seconds, peak))
                row[output] = (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs))
            rows.append(row)
    base = rows[0]
    lines = [
        "# `digest-gate check` on long streams",
        "",
        f"`{' '.join(sys.argv)}`; peak RSS and wall time, median of {args.runs} runs. "
        f"Baseline: the {base['documents']}-document stream in the same run "
        f"(text {base['text'][1]:.1f} MiB, JSON {base['json'][1]:.1f} MiB).",
        "",
        "| documents | stream | text: peak | over baseline | per 1,000 documents | JSON: peak | over baseline | seconds (text) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        extra = r["text"][1] - base["text"][1]
        per = extra / (r["documents"] - base["documents"]) * 1000 if r["documents"] > base["documents"] else 0
        lines.append(
            f"| {r['documents']:,} | {r['mib']:.1f} MiB | {r['text'][1]:.1f} MiB | {r['text'][1] / base['text'][1]:.2f}× "
            f"| {per:.2f} MiB | {r['json'][1]:.1f} MiB | {r['json'][1] / base['json'][1]:.2f}× | {r['text'][0]:.2f} |")
    write_report(OUT, lines)


if __name__ == "__main__":
    main()
