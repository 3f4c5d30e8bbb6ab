#!/usr/bin/env python3
"""Wall time and peak memory of `digest-gate audit` on a big cluster.

    make bench-audit [SIZE=5500,55000] [BASELINE=OLD_BINARY]
    .venv/bin/python bench/audit_scale.py [--sizes 5500,55000] [--namespaces 10] [--runs 3]
                                          [--baseline OLD_BINARY] [--kubectl-max 5500]

Starts the e2e suite's control plane (tests/e2e/cluster.py: etcd, kube-apiserver
and kube-controller-manager on loopback, built by tests/e2e/control-plane.sh),
and fills it, size by size, with objects over --namespaces namespaces: ten in
eleven are Pods (the ModelMesh runtime pod of bench/modelmesh-pod.json, 8 KB
each), one in eleven ServingRuntimes (examples/manifests/incident-servingruntime.yaml),
one object in ten on the incident's never-promoted digest. At each size it runs
`digest-gate audit -A -o json` (release build), without and with
`--policy-reports` (the CRDs the chart ships applied first), under the kernel's
accounting: wall time and peak RSS (`ru_maxrss`), median of --runs; then
`digest-gate serve --dev` with its background audit (`--audit-interval 1h
--audit-policy-reports`): the first run's seconds (its metric) and the
server's peak RSS (`VmHWM`) once it is done, against the chart's 128 Mi limit.

The baselines, measured in the same run against the same apiserver: an earlier
build (--baseline, `audit -A -o json`), and, up to --kubectl-max objects, what a
person does without `audit`: the control plane's own kubectl reading the same
objects (`kubectl get pods,servingruntimes -A -o json`; 22 GiB at 55,000
objects), alone and followed by `digest-gate check -f -` on what it printed.

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
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from cluster import ControlPlane, binaries, wait_until  # noqa: E402 (needs the path above)
from harness import permissive_crd  # noqa: E402
from rss import binary_argument, built, measure, stop  # noqa: E402 (bench/ is on the path as the script's directory)

POD = ROOT / "bench" / "modelmesh-pod.json"
RUNTIME = ROOT / "examples" / "manifests" / "incident-servingruntime.yaml"
ALLOWLIST = ROOT / "bench" / "modelmesh-promoted.txt"
SR_CRD = ROOT / "tests" / "fixtures" / "upstream" / "crds" / "modelmesh-serving_serving.kserve.io_servingruntimes.yaml"
STALE = ("registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8@sha256:"
         "7ef272bc7be866257b8126620e139d6e915ee962304d3eceba9c9d50d4e79767")
PROMOTED = ("registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8@sha256:"
            "8af20e48bb480a7ba1ee1268a3cf0a507e05b256c5fcf988f8e4a3de8b87edc6")
OUT = ROOT / "target" / "bench-audit"
CSVS = ROOT / "tests" / "data" / "allowlists"
OPERATORS = "bench-operators"
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


REPORT_CRDS = ROOT / "charts" / "digest-gate" / "files" / "policyreport"


def split(size: int) -> tuple[int, int]:
    """(Pods, ServingRuntimes) of a cluster of `size` objects."""
    runtimes = size // 11
    return size - runtimes, runtimes


def objects(pods: int, runtimes: int, namespaces: int, start: tuple[int, int] = (0, 0)):
    """(path, body) of every object to create past `start` (Pods,
    ServingRuntimes already there); one in ten is stale."""
    pod, sr = pod_template(), runtime_template()
    for i in range(start[0], pods):
        p = copy.deepcopy(pod)
        p["metadata"]["name"] = f"modelmesh-serving-ovms-{i}"
        ns = f"bench-{i % namespaces}"
        (ovms,) = [c for c in p["spec"]["containers"] if c["name"] == "ovms"]
        ovms["image"] = STALE if i % 10 == 0 else PROMOTED
        yield f"/api/v1/namespaces/{ns}/pods", p
    for i in range(start[1], runtimes):
        r = copy.deepcopy(sr)
        r["metadata"]["name"] = f"ovms-{i}"
        ns = f"bench-{i % namespaces}"
        r["spec"]["containers"][0]["image"] = STALE if i % 10 == 0 else PROMOTED
        yield f"/apis/serving.kserve.io/v1alpha1/namespaces/{ns}/servingruntimes", r


def namespaces_ready(cp: ControlPlane, namespaces: int):
    """The namespaces, each with its default ServiceAccount (a Pod is
    refused without it)."""
    for n in range(namespaces):
        cp.namespace(f"bench-{n}")
    for n in range(namespaces):
        wait_until(f"the default ServiceAccount of bench-{n}",
                   lambda n=n: cp.get("serviceaccount", "default", f"bench-{n}") is not None)


def fill(cp: ControlPlane, pods: int, runtimes: int, namespaces: int, start: tuple[int, int] = (0, 0)):
    todo = list(objects(pods, runtimes, namespaces, start))
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metrics(admin: int, prefix: str) -> float:
    """The sum of the series starting with `prefix` on /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5) as r:
        return sum(float(line.split()[-1]) for line in r.read().decode().splitlines() if line.startswith(prefix))


def peak_mib(pid: int) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


class Bench:
    """One run's cluster, binaries and measurements."""

    def __init__(self, args, cp: ControlPlane, tmp: pathlib.Path):
        self.args, self.cp, self.tmp = args, cp, tmp
        self.kc = str(cp.kubeconfig)

    def audit(self, binary: str, total: int, stale: int, *extra: str) -> tuple[float, float]:
        out = self.tmp / "audit.json"

        def one():
            r = measure([binary, "audit", "--allowlist", str(ALLOWLIST), "--kubeconfig", self.kc,
                         "-A", "-o", "json", *extra], out)
            assert r[2] == 1, f"audit exited {r[2]}"
            return r
        result = median_of(self.args.runs, one)
        # Read back a result at a time: the report may be hundreds of MB.
        report = json.loads(out.read_text())
        judged = sum(1 for r in report["results"] if r["kind"] in ("Pod", "ServingRuntime"))
        found = sum(1 for r in report["results"] if r["verdict"] != "allow")
        assert judged == total and found == stale and not report.get("errors"), (judged, found, report.get("errors"))
        return result

    def preflight(self, binary: str, total: int, stale: int) -> tuple[float, float]:
        out = self.tmp / "preflight.json"

        def one():
            r = measure([binary, "preflight", "--allowlist", str(ALLOWLIST), "--kubeconfig", self.kc,
                         "--installplan", f"{OPERATORS}/install-bench", "-o", "json"], out)
            assert r[2] == 1, f"preflight exited {r[2]}: {out.read_text()[-2000:]}"
            return r
        result = median_of(self.args.runs, one)
        report = json.loads(out.read_text())
        summary = report["summary"]
        # The stale objects are on a digest neither release promotes.
        assert (summary["objects"] >= total, summary["already_stale"], summary["stale_after_upgrade"],
                report.get("errors")) == (True, stale, 0, None), (summary, report.get("errors"))
        return result

    def kubectl(self, total: int) -> tuple[tuple[float, float], tuple[float, float]]:
        listing = self.tmp / "kubectl.json"
        kubectl = [str(self.cp.bin / "kubectl"), f"--kubeconfig={self.kc}", "get", "pods,servingruntimes", "-A",
                   "-o", "json"]

        def read():
            r = measure(kubectl, listing)
            assert r[2] == 0, f"kubectl exited {r[2]}"
            return r
        get = median_of(self.args.runs, read)

        def read_and_check():
            s1, m1, _ = read()
            s2, m2, code = measure([self.args.binary, "check", "--allowlist", str(ALLOWLIST), "-f", "-",
                                    "-o", "json"], self.tmp / "check.json", stdin=listing)
            assert code == 1, f"check exited {code}"
            return s1 + s2, max(m1, m2)
        pipe = median_of(self.args.runs, read_and_check)
        checked = json.loads((self.tmp / "check.json").read_text())["summary"]["objects"]
        assert checked == total, checked
        return get, pipe

    def background(self, binary: str, stale: int) -> tuple[float, float]:
        """The webhook's background audit (`serve --audit-interval`, with
        `--audit-policy-reports`): its first run's seconds, and the server's
        peak RSS (`VmHWM`) once it is done."""
        port, admin = free_port(), free_port()
        argv = [binary, "serve", "--dev", "--dev-dir", str(self.tmp / f"dev-{port}"), "--allowlist", str(ALLOWLIST),
                "--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{admin}", "--kubeconfig", self.kc,
                "--audit-interval", "1h", "--audit-policy-reports"]
        with open(os.devnull, "wb") as devnull:
            proc = subprocess.Popen(argv, stdout=devnull, stderr=devnull)
        try:
            wait_until("the background audit's first run",
                       lambda: metrics(admin, "digest_gate_audit_duration_seconds_count") >= 1, timeout=600)
            seconds = metrics(admin, "digest_gate_audit_duration_seconds_sum")
            assert metrics(admin, "digest_gate_audit_errors_total") == 0
            found = metrics(admin, "digest_gate_audit_findings{")
            assert found == stale, (found, stale)
            return seconds, peak_mib(proc.pid)
        finally:
            stop(proc)

    def size(self, size: int) -> list[tuple[str, float, float]]:
        pods, runtimes = split(size)
        stale = len(range(0, pods, 10)) + len(range(0, runtimes, 10))
        label = f"{size:,} objects"
        rows = [(f"`digest-gate audit -A -o json`, {label}", *self.audit(self.args.binary, size, stale))]
        rows.append((f"the same with `--policy-reports`, {label}",
                     *self.audit(self.args.binary, size, stale, "--policy-reports")))
        if self.args.baseline:
            rows.append((f"the baseline build's `audit -A -o json`, {label}",
                         *self.audit(self.args.baseline, size, stale)))
        rows.append((f"`digest-gate preflight` of a pending InstallPlan, {label} (each object judged before and after)",
                     *self.preflight(self.args.binary, size, stale)))
        rows.append((f"`serve`'s background audit with `--audit-policy-reports`, {label} (peak of the server)",
                     *self.background(self.args.binary, stale)))
        if self.args.baseline:
            rows.append((f"the baseline build's background audit, {label} (peak of the server)",
                         *self.background(self.args.baseline, stale)))
        if size <= self.args.kubectl_max:
            get, pipe = self.kubectl(size)
            rows.append((f"`kubectl get pods,servingruntimes -A -o json`, {label}", *get))
            rows.append((f"the same `kubectl get`, then `digest-gate check -f -`, {label}", *pipe))
        return rows


def pending_upgrade(cp: ControlPlane):
    """rhods-operator 1.20.1 installed, and an InstallPlan to 1.21.0 waiting
    for an approval (its CSV inline), as OLM would leave them."""
    for kind, plural in (("ClusterServiceVersion", "clusterserviceversions"), ("InstallPlan", "installplans"),
                         ("Subscription", "subscriptions")):
        cp.apply(permissive_crd(kind, plural, "Namespaced", ("v1alpha1",), group="operators.coreos.com"))
        cp.kubectl("wait", "--for=condition=Established", f"crd/{plural}.operators.coreos.com", "--timeout=60s")
    cp.namespace(OPERATORS)
    old = yaml.safe_load((CSVS / "rhods-operator.1.20.1.csv.yaml").read_text())
    old["metadata"]["namespace"] = OPERATORS
    cp.apply(old)
    new = yaml.safe_load((CSVS / "rhods-operator.csv.yaml").read_text())
    step = {"resolving": new["metadata"]["name"], "status": "Unknown", "resource": {
        "group": "operators.coreos.com", "version": "v1alpha1", "kind": "ClusterServiceVersion",
        "name": new["metadata"]["name"], "manifest": json.dumps(new)}}
    cp.apply({"apiVersion": "operators.coreos.com/v1alpha1", "kind": "InstallPlan",
              "metadata": {"name": "install-bench", "namespace": OPERATORS},
              "spec": {"approval": "Manual", "approved": False, "clusterServiceVersionNames": [step["resolving"]]},
              "status": {"phase": "RequiresApproval", "plan": [step]}})


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="5500", help="cluster sizes (objects), ascending")
    ap.add_argument("--namespaces", type=int, default=10)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--baseline", help="an earlier digest-gate build to measure beside this one")
    ap.add_argument("--kubectl-max", type=int, default=5500, help="largest size kubectl reads (it holds it all)")
    binary_argument(ap)
    args = ap.parse_args()
    built(args.binary)
    OUT.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="digest-gate-bench-audit-") as tmp:
        tmp = pathlib.Path(tmp)
        cp = ControlPlane(tmp / "control-plane", binaries())
        try:
            cp.start()
            cp.kubectl("apply", "-f", str(SR_CRD))
            for crd in sorted(REPORT_CRDS.glob("*.yaml")):
                cp.kubectl("apply", "-f", str(crd))
            for crd in ("servingruntimes.serving.kserve.io", "policyreports.wgpolicyk8s.io"):
                cp.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
            namespaces_ready(cp, args.namespaces)
            pending_upgrade(cp)
            bench = Bench(args, cp, tmp)
            there = (0, 0)
            for size in sizes:
                fill(cp, *split(size), args.namespaces, start=there)
                there = split(size)
                rows += bench.size(size)
        finally:
            cp.stop()
    first = rows[0]
    lines = [
        f"Sizes {args.sizes} (ten in eleven objects ModelMesh runtime Pods, 8 KB each, one in eleven "
        f"ServingRuntimes) in {args.namespaces} namespaces, one in ten stale; median of {args.runs} runs.",
        "",
        f"| what | wall s | peak RSS MiB | wall / first row | RSS / first row |",
        "|---|---|---|---|---|",
    ]
    for what, s, mib in rows:
        lines.append(f"| {what} | {s:.2f} | {mib:.1f} | {s / first[1]:.2f} | {mib / first[2]:.2f} |")
    lines += ["", "Every `audit` judged every Pod and ServingRuntime and found exactly the stale ones, with no "
              "errors; `preflight` found them `already_stale` (neither release promotes their digest) and nothing "
              "`stale_after_upgrade`."]
    text = "\n".join(lines) + "\n"
    (OUT / "report.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
