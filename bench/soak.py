#!/usr/bin/env python3
"""Soak test: `make soak` (default 60 s).

Starts the release `digest-gate serve` with a 10,000-repository allowlist and
drives it at a steady rate from several keep-alive connections with a mix of
reviews (promoted pods, rewrites, denials, an embedded runtime ConfigMap,
UPDATEs, DELETEs), over loopback with oha. Passes when every request is
answered 200, and resident memory grows by less than 10 % from the first to
the last 10 seconds. Writes target/soak/report.md and results.json.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import load  # noqa: E402  (same directory: binaries, certificates, oha)

ROOT = load.ROOT
OUT = ROOT / "target" / "soak"


def reviews() -> list[dict]:
    pod = json.loads((ROOT / "bench" / "modelmesh-pod.json").read_text())
    never = "sha256:7ef272bc7be866257b8126620e139d6e915ee962304d3eceba9c9d50d4e79767"
    ovms = "registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8"
    rewrite = json.loads(json.dumps(pod))
    rewrite["spec"]["containers"][3]["image"] = f"{ovms}@{never}"
    denied = json.loads(json.dumps(pod))
    denied["spec"]["containers"][0]["image"] = "ovms-1:replace"
    runtime = {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "ServingRuntime",
               "metadata": {"name": "ovms", "namespace": "demo-models"},
               "spec": {"containers": [{"name": "ovms", "image": f"{ovms}:v1.21.0-15"}]}}
    configmap_text = (ROOT / "tests" / "fixtures" / "upstream" / "servingruntimes" /
                      "01_rhods-1.21_odh-dashboard_servingruntimes-config.cm.yaml").read_text()
    data = configmap_text.split("default-config: |\n", 1)[1]
    data = "\n".join(line[4:] for line in data.splitlines()) + "\n"
    configmap = {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "servingruntimes-config", "namespace": "redhat-ods-applications"},
                 "data": {"default-config": data}}

    def review(i, op, obj, old=None, group="", kind=None):
        kind = kind or obj["kind"]
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": f"soak-{i}", "kind": {"group": group, "version": "v1", "kind": kind},
            "resource": {"group": group, "version": "v1", "resource": kind.lower() + "s"},
            "namespace": "demo-models", "operation": op, "userInfo": {"username": "soak"},
            "object": obj, "oldObject": old, "dryRun": False}}

    return [
        review(0, "CREATE", pod),
        review(1, "CREATE", rewrite),
        review(2, "CREATE", denied),
        review(3, "CREATE", runtime, group="serving.kserve.io", kind="ServingRuntime"),
        review(4, "CREATE", configmap),
        review(5, "UPDATE", pod, old=rewrite),
        review(6, "DELETE", None, old=pod, kind="Pod"),
        review(7, "CREATE", pod),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--rate", type=int, default=2000, help="requests per second (default 2000)")
    ap.add_argument("--connections", type=int, default=8)
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    files = load.prepare(10_000)
    lines = OUT / "reviews.jsonl"
    lines.write_text("\n".join(json.dumps(r, separators=(",", ":")) for r in reviews()) + "\n")

    server = load.Server("digest-gate", files)
    samples: list[tuple[float, float]] = []
    stop = threading.Event()

    def sample():
        start = time.monotonic()
        while not stop.is_set():
            status = pathlib.Path(f"/proc/{server.proc.pid}/status").read_text()
            rss = next(int(l.split()[1]) for l in status.splitlines() if l.startswith("VmRSS:")) / 1024
            samples.append((time.monotonic() - start, rss))
            stop.wait(1.0)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        # -w: requests in flight at the deadline are waited for, not counted as aborted.
        argv = [load.oha_path(), "-z", f"{args.seconds}s", "-w", "-c", str(args.connections), "-q", str(args.rate),
                "--no-tui", "--output-format", "json", "--insecure", "--http-version", "1.1",
                "-m", "POST", "-T", "application/json", "-Z", str(lines),
                f"https://127.0.0.1:{server.port}/mutate"]
        result = json.loads(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)
        with urllib.request.urlopen(f"http://127.0.0.1:{server.admin}/metrics", timeout=5) as r:
            metrics = r.read().decode()
        with urllib.request.urlopen(f"http://127.0.0.1:{server.admin}/readyz", timeout=5) as r:
            ready = r.status
    finally:
        stop.set()
        sampler.join()
        server.proc.send_signal(signal.SIGTERM)
        code = server.proc.wait(timeout=30)
        server.log.close()

    codes = result["statusCodeDistribution"]
    errors = result.get("errorDistribution", {})
    total = sum(codes.values())
    non_200 = total - codes.get("200", 0)
    first = [r for t, r in samples if t < 10]
    last = [r for t, r in samples if t >= args.seconds - 10]
    growth = statistics.mean(last) / statistics.mean(first) - 1
    answered = sum(float(l.split()[-1]) for l in metrics.splitlines()
                   if l.startswith("digest_gate_admission_requests_total"))
    p = result["latencyPercentiles"]
    report = {
        "seconds": args.seconds, "rate": args.rate, "connections": args.connections,
        "requests": total, "non_200": non_200, "errors": errors, "server_answered": answered,
        "p50_ms": p["p50"] * 1e3, "p99_ms": p["p99"] * 1e3, "p99.9_ms": p["p99.9"] * 1e3,
        "rss_first_10s_mib": statistics.mean(first), "rss_last_10s_mib": statistics.mean(last),
        "rss_growth": growth, "ready_at_end": ready, "exit_code": code, "rss_samples": samples,
    }
    (OUT / "results.json").write_text(json.dumps(report, indent=2) + "\n")
    text = (f"Soak: {args.seconds} s at {args.rate} req/s from {args.connections} connections, 8 kinds of review\n\n"
            f"- requests: {total}, non-200: {non_200}, transport errors: {sum(errors.values()) if errors else 0}, "
            f"answered by the server: {answered:.0f}\n"
            f"- latency p50 {report['p50_ms']:.2f} ms, p99 {report['p99_ms']:.2f} ms, p99.9 {report['p99.9_ms']:.2f} ms\n"
            f"- RSS first 10 s {report['rss_first_10s_mib']:.1f} MiB, last 10 s {report['rss_last_10s_mib']:.1f} MiB "
            f"(growth {growth * 100:+.1f} %)\n"
            f"- /readyz at the end: {ready}; exit code after SIGTERM: {code}\n")
    (OUT / "report.md").write_text(text)
    print(text)
    ok = non_200 == 0 and not errors and growth < 0.10 and ready == 200 and code == 0 and answered >= total
    if not ok:
        print("SOAK FAILED", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
