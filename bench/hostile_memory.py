#!/usr/bin/env python3
"""Peak memory and time of hostile inputs, per build (issue 57).

    python3 bench/hostile_memory.py before=OLD_BINARY now=target/release/digest-gate

For each build and each input: a fresh `digest-gate serve --dev` answers one
ordinary review (the README's), then the hostile one; the peak is VmHWM of
the server's /proc entry after each, the time the hostile review's round
trip. `check` inputs are measured as one run each (bench/rss.py's launcher,
ru_maxrss). No memory limit is set here, so what a build would need is
seen whole: tests/bounds.rs runs the same inputs under the chart's 128 MiB.
Writes target/bench-hostile/report.md. Only 127.0.0.1 is used.
"""

from __future__ import annotations

import http.client
import json
import os
import pathlib
import socket
import ssl
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import rss  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "target" / "bench-hostile"
STALE = "sha256:7ef272bc7be866257b8126620e139d6e915ee962304d3eceba9c9d50d4e79767"
RUNTIME_HEAD = ("apiVersion: serving.kserve.io/v1alpha1\nkind: ServingRuntime\nmetadata:\n  name: ovms\n"
                "spec:\n")


def laughs() -> str:
    text = RUNTIME_HEAD + "  a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
    for i in range(1, 12):
        text += f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]\n"
    return text


def flow(size: int, item: str = "0") -> str:
    head = RUNTIME_HEAD + "  containers: ["
    n = (size - len(head)) // (len(item) + 1)
    return head + ",".join([item] * n) + "]\n"


def configmap(text: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "servingruntimes-config", "namespace": "redhat-ods-applications"},
            "data": {"default-config": text}}


def pod(**spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "demo-models"},
            "spec": {"containers": [], **spec}}


def review(obj: dict) -> bytes:
    kind = obj["kind"]
    group, _, version = obj["apiVersion"].rpartition("/")
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "bench", "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": kind.lower() + "s"},
        "namespace": "demo-models", "operation": "CREATE", "userInfo": {"username": "bench"},
        "object": obj, "oldObject": None, "dryRun": False}}, separators=(",", ":")).encode()


def reviews() -> dict[str, bytes]:
    container = {"name": "c", "image": f"registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8@{STALE}"}
    annotations = pod()
    annotations["metadata"]["annotations"] = {f"k{i}": "" for i in range(600_000)}
    return {
        "billion laughs in servingruntimes-config (1.4 KB)": review(configmap(laughs())),
        "`[0,0,…]` in servingruntimes-config (6.3 MB)": review(configmap(flow(6_300_000))),
        "`[0,0,…]` in servingruntimes-config (1 MB)": review(configmap(flow(1_000_000))),
        "`[zero,zero,…]` in servingruntimes-config (1 MB)": review(configmap(flow(1_000_000, "zero"))),
        "a Pod of 50,000 stale containers (7.7 MB)": review(pod(containers=[container] * 50_000)),
        "a Pod of 5,000 stale containers (0.6 MB)": review(pod(containers=[container] * 5_000)),
        "600,000 one-byte annotations (7.5 MB)": review(annotations),
        "200,000 empty volumes (5.3 MB)": review(pod(volumes=[{"name": "v", "emptyDir": {}}] * 200_000)),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vm_hwm(pid: int) -> float | None:
    try:
        for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def serve_one(binary: str, body: bytes) -> tuple[float, float | None, float, str]:
    """(warm MiB, peak MiB or None if it died, seconds, answer)."""
    with tempfile.TemporaryDirectory() as d:
        port, admin = free_port(), free_port()
        proc = subprocess.Popen([binary, "serve", "--dev", "--dev-dir", d, "--listen", f"127.0.0.1:{port}",
                                 "--admin-listen", f"127.0.0.1:{admin}", "--log-level", "warn"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            while not (os.path.exists(f"{d}/ca.crt") and _listening(port)):
                assert time.monotonic() < deadline, "serve --dev did not come up"
                time.sleep(0.05)
            ctx = ssl.create_default_context(cafile=f"{d}/ca.crt")
            post(port, ctx, (ROOT / "examples" / "review.json").read_bytes())
            warm = vm_hwm(proc.pid)
            started = time.monotonic()
            try:
                status, answer = post(port, ctx, body)
                said = _said(status, answer)
            except (OSError, http.client.HTTPException) as e:
                said = f"no answer ({type(e).__name__})"
            seconds = time.monotonic() - started
            return warm, vm_hwm(proc.pid) if proc.poll() is None else None, seconds, said
        finally:
            proc.kill()
            proc.wait()


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def post(port: int, ctx: ssl.SSLContext, body: bytes) -> tuple[int, bytes]:
    conn = http.client.HTTPSConnection("localhost", port, context=ctx, timeout=600)
    conn.request("POST", "/mutate", body, {"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, r.read()


def _said(status: int, answer: bytes) -> str:
    doc = json.loads(answer)
    if status != 200:
        return f"{status}: {doc.get('error', '')[:70]}"
    response = doc["response"]
    if response["allowed"]:
        return "allowed" + (" with a patch" if "patch" in response else "")
    return "denied: " + response["status"]["message"][:70]


def main():
    builds = dict(arg.split("=", 1) for arg in sys.argv[1:])
    assert builds, __doc__
    OUT.mkdir(parents=True, exist_ok=True)
    lines = ["| input | build | warm MiB | peak MiB | over warm | seconds | answer |", "|---|---|---:|---:|---:|---:|---|"]
    for name, body in reviews().items():
        for build, binary in builds.items():
            warm, peak, seconds, said = serve_one(binary, body)
            over = f"{peak - warm:.1f}" if peak is not None else "—"
            shown = f"{peak:.1f}" if peak is not None else "killed"
            lines.append(f"| {name} | {build} | {warm:.1f} | {shown} | {over} | {seconds:.2f} | {said.replace('|', '/')} |")
            print(lines[-1], flush=True)
    lines += ["", "| `check` input | build | peak MiB | seconds | exit |", "|---|---|---:|---:|---:|"]
    for name, text in {"billion laughs (1.4 KB)": laughs(), "`[0,0,…]` (8 MiB)": flow(8 << 20)}.items():
        path = OUT / "input.yaml"
        path.write_text(text)
        for build, binary in builds.items():
            seconds, peak, code = rss.measure([binary, "check", "--allowlist", str(ROOT / "examples" / "allowlist.yaml"),
                                              "-f", str(path)], OUT / "check.out")
            lines.append(f"| {name} | {build} | {peak:.1f} | {seconds:.2f} | {code} |")
            print(lines[-1], flush=True)
    rss.write_report(OUT, lines)


if __name__ == "__main__":
    main()
