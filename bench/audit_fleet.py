#!/usr/bin/env python3
"""`digest-gate audit` over a fleet: one run over 2 and 4 clusters against
the sum of the single-cluster runs, in the same run.

    make bench-fleet [SIZE=5500]
    .venv/bin/python bench/audit_fleet.py [--size 5500] [--clusters 4] [--runs 3] [--binary B]

Starts --clusters of the e2e suite's control planes (tests/e2e/cluster.py, on
loopback), fills each as bench/audit_scale.py fills its one (ten in eleven
objects ModelMesh runtime Pods, 8 KB each, one in eleven ServingRuntimes, one in
ten on the incident's never-promoted digest), and writes one kubeconfig naming
them all. Then, median of --runs each, under the kernel's accounting (wall
time, peak RSS): `audit -A -o json` of each cluster alone, and one
`audit --context c0 --context c1 [...] -o json` over the first 2 and over all
of them (several contexts read every namespace). Each fleet run is checked to
have judged every object of every cluster and found exactly the stale ones.

Writes target/bench-fleet/report.md (and prints it).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from audit_scale import (ALLOWLIST, REPORT_CRDS, SR_CRD, fill, median_of,  # noqa: E402
                         namespaces_ready, split)
from cluster import ControlPlane, binaries  # noqa: E402 (needs the path above)
from rss import binary_argument, built, measure, write_report  # noqa: E402

OUT = ROOT / "target" / "bench-fleet"
NAMESPACES = 5


def start(tmp: pathlib.Path, i: int, size: int) -> ControlPlane:
    cp = ControlPlane(tmp / f"c{i}", binaries())
    cp.start()
    cp.kubectl("apply", "-f", str(SR_CRD))
    for crd in sorted(REPORT_CRDS.glob("*.yaml")):
        cp.kubectl("apply", "-f", str(crd))
    cp.kubectl("wait", "--for=condition=Established", "crd/servingruntimes.serving.kserve.io", "--timeout=60s")
    namespaces_ready(cp, NAMESPACES)
    fill(cp, *split(size), NAMESPACES)
    return cp


def kubeconfig(path: pathlib.Path, clusters: list[ControlPlane]) -> pathlib.Path:
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "c0", "clusters": [], "users": [],
              "contexts": []}
    for i, cp in enumerate(clusters):
        config["clusters"].append({"name": f"c{i}", "cluster": {"server": cp.url,
                                                                 "certificate-authority": str(cp.pki / "ca.crt")}})
        config["users"].append({"name": f"c{i}", "user": {"token": cp.ADMIN_TOKEN}})
        config["contexts"].append({"name": f"c{i}", "context": {"cluster": f"c{i}", "user": f"c{i}"}})
    path.write_text(json.dumps(config))
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=5500, help="objects per cluster")
    ap.add_argument("--clusters", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    binary_argument(ap)
    args = ap.parse_args()
    binary = built(args.binary)
    OUT.mkdir(parents=True, exist_ok=True)
    pods, runtimes = split(args.size)
    stale = sum(1 for i in range(pods) if i % 10 == 0) + sum(1 for i in range(runtimes) if i % 10 == 0)
    with tempfile.TemporaryDirectory(prefix="digest-gate-bench-fleet-") as tmp:
        tmp = pathlib.Path(tmp)
        clusters: list[ControlPlane] = []
        try:
            for i in range(args.clusters):
                clusters.append(start(tmp, i, args.size))
            kc = kubeconfig(tmp / "kubeconfig", clusters)
            out = tmp / "audit.json"

            def audit(contexts: list[str]) -> tuple[float, float]:
                flags = [f for c in contexts for f in ("--context", c)]

                def one():
                    r = measure([binary, "audit", "--allowlist", str(ALLOWLIST), "--kubeconfig", str(kc),
                                 "-A", "-o", "json", "--quiet", *flags], out)
                    assert r[2] == 1, f"audit exited {r[2]}"
                    return r
                result = median_of(args.runs, one)
                report = json.loads(out.read_text())
                judged = sum(1 for r in report["results"] if r["kind"] in ("Pod", "ServingRuntime"))
                found = sum(1 for r in report["results"] if r["verdict"] != "allow")
                assert judged == args.size * len(contexts) and found == stale * len(contexts), (judged, found)
                assert not report.get("errors"), report.get("errors")
                return result

            single = [audit([f"c{i}"]) for i in range(args.clusters)]
            rows = [(f"{i} clusters", audit([f"c{j}" for j in range(i)]), single[:i])
                    for i in sorted({2, args.clusters}) if i <= args.clusters]
        finally:
            for cp in clusters:
                cp.stop()
    lines = [
        f"{args.clusters} control planes on loopback, {args.size} objects each (ten in eleven ModelMesh runtime "
        f"Pods, 8 KB each, one in eleven ServingRuntimes, one in ten stale) in {NAMESPACES} namespaces; "
        f"`audit -A -o json`, median of {args.runs} runs, the release build, 2 cores.",
        "",
        "| what | wall s | peak RSS MiB | single runs: sum of wall s | largest peak RSS MiB | wall / sum | RSS / largest |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, (s, mib) in enumerate(single):
        lines.append(f"| cluster c{i} alone | {s:.2f} | {mib:.1f} | | | | |")
    for what, (s, mib), alone in rows:
        total, peak = sum(a[0] for a in alone), max(a[1] for a in alone)
        lines.append(f"| one run over {what} (`--parallel 4`) | {s:.2f} | {mib:.1f} | {total:.2f} | {peak:.1f} "
                     f"| {s / total:.2f} | {mib / peak:.2f} |")
    lines += ["", "Every run judged every Pod and ServingRuntime of every cluster it read and found exactly the "
              "stale ones, with no errors."]
    write_report(OUT, lines)


if __name__ == "__main__":
    main()
