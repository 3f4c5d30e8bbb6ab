#!/usr/bin/env python3
"""How long after an apiserver restart the installed-CSV watch puts a new
CSV in force (issue 42), for this build and a baseline, in the same run.

    .venv/bin/python bench/csv_watch_restart.py [--runs 5] [--down 3] [--baseline OLD_BINARY]

Starts the e2e suite's control plane (tests/e2e/cluster.py, built by
tests/e2e/control-plane.sh) with OLM's CSV kind, and for each binary runs
`digest-gate serve --dev --allowlist-csv redhat-ods-operator/rhods-operator`
with an empty allowlist file, so the CSVs alone promote. Each run: the old
release's CSV installed, the apiserver stopped for --down seconds and started
again, and as soon as it answers /readyz the new release's CSV applied; the
time until the server's `digest_gate_allowlist_digests` grows is the
recovery (what an operator upgrade applied then waits, judged meanwhile by
the previous release's promotions). Median and worst of --runs.

Writes target/bench-csv-watch/report.md (and prints it).
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
sys.path.insert(0, str(ROOT / "tests"))
from cluster import ControlPlane, admin_metric, binaries, serve_dev, wait_until  # noqa: E402 (needs the path above)
from harness import install_csv, serve_csvs  # noqa: E402
from support import binary  # noqa: E402

CSVS = ROOT / "tests" / "data" / "allowlists"
OPERATORS = "redhat-ods-operator"


def digests(admin: int) -> float:
    return admin_metric(admin, "digest_gate_allowlist_digests")


def one_run(cluster: ControlPlane, program: pathlib.Path, down: float, tmp: pathlib.Path) -> float:
    cluster.kubectl("delete", "clusterserviceversions", "--all", "-n", OPERATORS, "--wait=true")
    install_csv(cluster, OPERATORS, CSVS / "rhods-operator.1.20.1.csv.yaml")
    empty = tmp / "empty.txt"
    empty.write_text("# the installed CSVs promote\n")
    serve, admin = serve_dev(cluster, tmp, "--allowlist", str(empty), "--allowlist-csv", f"{OPERATORS}/rhods-operator",
                             program=program)
    try:
        wait_until("serve with the old release's CSV", lambda: digests(admin) > 0, 60)
        before = digests(admin)
        cluster.stop_apiserver()
        time.sleep(down)
        back = cluster.start_apiserver()
        install_csv(cluster, OPERATORS, CSVS / "rhods-operator.csv.yaml")
        wait_until("the new CSV in force", lambda: digests(admin) > before, 300, interval=0.05)
        return time.monotonic() - back
    finally:
        serve.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--down", type=float, default=3.0, help="seconds the apiserver stays down")
    parser.add_argument("--baseline", type=pathlib.Path, help="an earlier digest-gate build to measure too")
    args = parser.parse_args()
    programs = [("this build", binary())] + ([("baseline", args.baseline)] if args.baseline else [])
    out = ROOT / "target" / "bench-csv-watch"
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as state:
        cluster = ControlPlane(pathlib.Path(state) / "control-plane", binaries())
        try:
            cluster.start()
            serve_csvs(cluster, OPERATORS)
            results = {}
            for name, program in programs:
                times = []
                for i in range(args.runs):
                    run = pathlib.Path(state) / f"{name.replace(' ', '-')}-{i}"
                    run.mkdir()
                    times.append(one_run(cluster, program, args.down, run))
                    print(f"{name} run {i + 1}: {times[-1]:.1f} s", flush=True)
                results[name] = times
        finally:
            cluster.stop()
    lines = ["# The installed-CSV watch after an apiserver restart", "",
             f"Seconds from the apiserver answering /readyz again (down {args.down:g} s) to a CSV applied then "
             f"being in force; {args.runs} runs each, `python3 bench/csv_watch_restart.py"
             f"{' --baseline ' + str(args.baseline) if args.baseline else ''}`.", "",
             "| build | median | worst | runs |", "|---|---:|---:|---|"]
    for name, times in results.items():
        lines.append(f"| {name} | {statistics.median(times):.1f} | {max(times):.1f} | "
                     + ", ".join(f"{t:.1f}" for t in times) + " |")
    if len(results) == 2:
        ratio = statistics.median(results["this build"]) / statistics.median(results["baseline"])
        lines += ["", f"Median, this build against the baseline: {ratio:.2f}×."]
    report = "\n".join(lines) + "\n"
    (out / "report.md").write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
