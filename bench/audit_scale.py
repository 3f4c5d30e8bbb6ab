#!/usr/bin/env python3
"""Wall time and peak memory of `digest-gate audit` on a big cluster.

    make bench-audit
    .venv/bin/python bench/audit_scale.py [--pods 5000] [--runtimes 500] [--namespaces 10] [--runs 3]

Starts the e2e suite's control plane (tests/e2e/cluster.py: etcd, kube-apiserver
and kube-controller-manager on loopback, built by tests/e2e/control-plane.sh),
fills it with --pods Pods (the ModelMesh runtime pod of bench/modelmesh-pod.json,
8 KB each) and --runtimes ServingRuntimes (examples/manifests/incident-servingruntime.yaml)
over --namespaces namespaces, one object in ten on the incident's never-promoted
digest, then runs `digest-gate audit -A -o json` (release build) under the
kernel's accounting: wall time and peak RSS (`ru_maxrss`), median of --runs.

The baseline, measured in the same run against the same apiserver, is what a
person does without `audit`: the control plane's own kubectl reading the same
objects (`kubectl get pods,servingruntimes -A -o json`), alone and followed by
`digest-gate check -f -` on what it printed.

Writes target/bench-audit/report.md (and prints it).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import copy
import http.client
import json
import os
import pathlib
import ssl
import statistics
import sys
import tempfile
import time

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from cluster import ControlPlane, binaries, wait_until  # noqa: E402 (needs the path above)
from rss import binary_argument, built, measure  # noqa: E402 (bench/ is on the path as the script's directory)

POD = ROOT / "bench" / "modelmesh-pod.json"
RUNTIME = ROOT / "examples" / "manifests" / "incident-servingruntime.yaml"
ALLOWLIST = ROOT / "bench" / "modelmesh-promoted.txt"
SR_CRD = ROOT / "tests" / "fixtures" / "upstream" / "crds" / "modelmesh-serving_serving.kserve.io_servingruntimes.yaml"
STALE = ("registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8@sha256:"
         "7ef272bc7be866257b8126620e139d6e915ee962304d3eceba9c9d50d4e79767")
PROMOTED = ("registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8@sha256:"
            "8af20e48bb480a7ba1ee1268a3cf0a507e05b256c5fcf988f8e4a3de8b87edc6")
OUT = ROOT / "target" / "bench-audit"
# Concurrent writers while filling the cluster: enough to keep the apiserver
# busy on two cores, few enough not to starve it.
WRITERS = 4


def pod_template() -> dict:
    pod = json.loads(POD.read_text())
    pod.pop("status", None)
    meta = pod["metadata"]
    for key in ("generateName", "ownerReferences", "namespace"):
        # An owner that does not exist would have the garbage collector
        # delete the Pod while the benchmark runs.
        meta.pop(key, None)
    # The namespace's default ServiceAccount, without a token volume: nothing
    # here runs the Pod.
    for key in ("serviceAccountName", "serviceAccount"):
        pod["spec"].pop(key, None)
    pod["spec"]["automountServiceAccountToken"] = False
    return pod


def runtime_template() -> dict:
    (sr,) = [d for d in yaml.safe_load_all(RUNTIME.read_text()) if d]
    sr["metadata"].pop("namespace", None)
    return sr


def objects(pods: int, runtimes: int, namespaces: int):
    """(path, body) of every object to create; one in ten is stale."""
    pod, sr = pod_template(), runtime_template()
    for i in range(pods):
        p = copy.deepcopy(pod)
        p["metadata"]["name"] = f"modelmesh-serving-ovms-{i}"
        ns = f"bench-{i % namespaces}"
        (ovms,) = [c for c in p["spec"]["containers"] if c["name"] == "ovms"]
        ovms["image"] = STALE if i % 10 == 0 else PROMOTED
        yield f"/api/v1/namespaces/{ns}/pods", p
    for i in range(runtimes):
        r = copy.deepcopy(sr)
        r["metadata"]["name"] = f"ovms-{i}"
        ns = f"bench-{i % namespaces}"
        r["spec"]["containers"][0]["image"] = STALE if i % 10 == 0 else PROMOTED
        yield f"/apis/serving.kserve.io/v1alpha1/namespaces/{ns}/servingruntimes", r


def fill(cp: ControlPlane, pods: int, runtimes: int, namespaces: int):
    for n in range(namespaces):
        cp.namespace(f"bench-{n}")
    for n in range(namespaces):
        wait_until(f"the default ServiceAccount of bench-{n}",
                   lambda n=n: cp.get("serviceaccount", "default", f"bench-{n}") is not None)
    todo = list(objects(pods, runtimes, namespaces))
    ctx = ssl.create_default_context(cafile=str(cp.pki / "ca.crt"))

    def writer(part: list[tuple[str, dict]]) -> int:
        conn = http.client.HTTPSConnection("127.0.0.1", cp.port, context=ctx, timeout=60)
        headers = {"Authorization": f"Bearer {cp.ADMIN_TOKEN}", "Content-Type": "application/json"}
        for path, body in part:
            conn.request("POST", path, json.dumps(body), headers)
            r = conn.getresponse()
            data = r.read()
            if r.status != 201:
                raise RuntimeError(f"POST {path}: {r.status} {data[:300]!r}")
        conn.close()
        return len(part)

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(WRITERS) as pool:
        created = sum(pool.map(writer, [todo[i::WRITERS] for i in range(WRITERS)]))
    print(f"created {created} objects in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)


def median_of(runs: int, one) -> tuple[float, float]:
    results = [one() for _ in range(runs)]
    return statistics.median(r[0] for r in results), statistics.median(r[1] for r in results)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=5000)
    ap.add_argument("--runtimes", type=int, default=500)
    ap.add_argument("--namespaces", type=int, default=10)
    ap.add_argument("--runs", type=int, default=3)
    binary_argument(ap)
    args = ap.parse_args()
    built(args.binary)
    OUT.mkdir(parents=True, exist_ok=True)
    total = args.pods + args.runtimes
    stale = len(range(0, args.pods, 10)) + len(range(0, args.runtimes, 10))

    with tempfile.TemporaryDirectory(prefix="digest-gate-bench-audit-") as tmp:
        tmp = pathlib.Path(tmp)
        cp = ControlPlane(tmp / "control-plane", binaries())
        try:
            cp.start()
            cp.kubectl("apply", "-f", str(SR_CRD))
            wait_until("the ServingRuntime CRD", lambda: any(
                c["type"] == "Established" and c["status"] == "True"
                for c in cp.get("crd", "servingruntimes.serving.kserve.io").get("status", {}).get("conditions", [])))
            fill(cp, args.pods, args.runtimes, args.namespaces)
            kc = str(cp.kubeconfig)

            audit_json = tmp / "audit.json"

            def audit():
                r = measure([args.binary, "audit", "--allowlist", str(ALLOWLIST), "--kubeconfig", kc,
                             "-A", "-o", "json"], audit_json)
                assert r[2] == 1, f"audit exited {r[2]}"
                return r
            audit_s, audit_mib = median_of(args.runs, audit)
            report = json.loads(audit_json.read_text())
            judged = sum(1 for r in report["results"] if r["kind"] in ("Pod", "ServingRuntime"))
            found = sum(1 for r in report["results"] if r["verdict"] != "allow")
            assert judged == total and found == stale and not report.get("errors"), (judged, found, report.get("errors"))

            listing = tmp / "kubectl.json"
            kubectl = [str(cp.bin / "kubectl"), f"--kubeconfig={kc}", "get", "pods,servingruntimes", "-A",
                       "-o", "json"]

            def read():
                r = measure(kubectl, listing)
                assert r[2] == 0, f"kubectl exited {r[2]}"
                return r
            get_s, get_mib = median_of(args.runs, read)

            def read_and_check():
                s1, m1, _ = read()
                s2, m2, code = measure([args.binary, "check", "--allowlist", str(ALLOWLIST), "-f", "-",
                                        "-o", "json"], tmp / "check.json", stdin=listing)
                assert code == 1, f"check exited {code}"
                return s1 + s2, max(m1, m2)
            pipe_s, pipe_mib = median_of(args.runs, read_and_check)
            checked = json.loads((tmp / "check.json").read_text())["summary"]["objects"]
            assert checked == total, checked
        finally:
            cp.stop()

    rows = [
        ("`digest-gate audit -A -o json`", audit_s, audit_mib),
        ("`kubectl get pods,servingruntimes -A -o json` (baseline: reading only)", get_s, get_mib),
        ("the same `kubectl get`, then `digest-gate check -f -`", pipe_s, pipe_mib),
    ]
    lines = [
        f"{args.pods:,} Pods (ModelMesh runtime pods, 8 KB each) and {args.runtimes:,} ServingRuntimes in "
        f"{args.namespaces} namespaces, {stale} of them stale; median of {args.runs} runs.",
        "",
        "| what | wall s | peak RSS MiB | wall / kubectl | RSS / kubectl |",
        "|---|---|---|---|---|",
    ]
    for what, s, mib in rows:
        lines.append(f"| {what} | {s:.2f} | {mib:.1f} | {s / get_s:.2f} | {mib / get_mib:.2f} |")
    lines += ["", f"`audit` judged {total:,} objects and found the {stale} stale ones, with no errors."]
    text = "\n".join(lines) + "\n"
    (OUT / "report.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
