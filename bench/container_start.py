#!/usr/bin/env python3
"""The image `make image` builds: its size, and how long the webhook takes
from start to ready as a container (runc, the e2e suite's node) against the
same release binary started directly on the host, in the same run.

    make image && .venv/bin/python bench/container_start.py [--runs 10] [--image target/image]

Both run `serve` with a serving certificate from certs/gen-certs.sh and the
example allowlist, as the chart's args have it (TLS, the last-good copy in a
state directory, JSON logs), on loopback ports. The container runs under the
chart's securityContext and resources (tests/e2e/runtime.py): read-only
root, no capabilities, RuntimeDefault seccomp, the memory limit. Runs
alternate host and container; each is timed from the spawn to the first
200 from /readyz. The unpack of the image into a bundle (umoci; a node's
snapshotter does it once per image, not per start) is timed apart.

Writes target/bench-container/report.md (and prints it).
"""

from __future__ import annotations

import argparse
import gzip
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
sys.path.insert(0, str(ROOT / "tests"))
from runtime import Container  # noqa: E402 (needs the path above)
from support import free_port  # noqa: E402

CHART_SECURITY = {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False, "runAsNonRoot": True,
                  "capabilities": {"drop": ["ALL"]}}
CHART_RESOURCES = {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"cpu": "1", "memory": "128Mi"}}


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def until_ready(port: int, alive, started: float) -> float:
    deadline = started + 60
    while time.monotonic() < deadline:
        if ready(port):
            return time.monotonic() - started
        if not alive():
            raise SystemExit("the server exited before it was ready")
        time.sleep(0.002)
    raise SystemExit("not ready after 60 s")


def args(tls: str, allowlist: str, state: str, port: int, admin: int) -> list[str]:
    return ["serve", f"--tls-cert={tls}/tls.crt", f"--tls-key={tls}/tls.key", f"--allowlist={allowlist}",
            f"--state-dir={state}", "--mode=rewrite", f"--listen=127.0.0.1:{port}",
            f"--admin-listen=127.0.0.1:{admin}", "--log-format=json", "--drain-delay=0s"]


def host_run(binary: pathlib.Path, certs: pathlib.Path, work: pathlib.Path) -> float:
    port, admin = free_port(), free_port()
    state = work / f"host-state-{port}"
    state.mkdir()
    started = time.monotonic()
    proc = subprocess.Popen([str(binary), *args(str(certs), str(ROOT / "examples" / "allowlist.yaml"), str(state),
                                                 port, admin)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return until_ready(admin, lambda: proc.poll() is None, started)
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def container_run(layout: pathlib.Path, certs: pathlib.Path, work: pathlib.Path) -> tuple[float, float]:
    port, admin = free_port(), free_port()
    state = work / f"container-state-{port}"
    state.mkdir(mode=0o777)
    state.chmod(0o777)
    spec = {"pod": {"securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}},
            "container": {"args": [], "securityContext": CHART_SECURITY, "resources": CHART_RESOURCES},
            "args": args("/etc/digest-gate/tls", "/etc/digest-gate/allowlist/allowlist.yaml", "/var/lib/digest-gate",
                         port, admin),
            "env": {}, "hostname": "bench",
            "mounts": {"/etc/digest-gate/tls": (certs, True),
                       "/etc/digest-gate/allowlist": (ROOT / "examples", True),
                       "/var/lib/digest-gate": (state, False)}}
    unpack = time.monotonic()
    container = Container("bench", layout, work / f"bundle-{port}", work / f"container-{port}.log", spec,
                          start=False)
    unpacked = time.monotonic() - unpack
    started = time.monotonic()
    container.start()
    try:
        return unpacked, until_ready(admin, container.alive, started)
    finally:
        code = container.stop()
        if code != 0:
            raise SystemExit(f"the container exited {code}:\n{container.tail()}")


def sizes(layout: pathlib.Path) -> list[tuple[str, int, int]]:
    blobs = layout / "blobs" / "sha256"
    (entry,) = json.loads((layout / "index.json").read_text())["manifests"]
    manifest = json.loads((blobs / entry["digest"][7:]).read_text())
    config = json.loads((blobs / manifest["config"]["digest"][7:]).read_text())
    out = []
    for layer, history in zip(manifest["layers"], config["history"]):
        data = (blobs / layer["digest"][7:]).read_bytes()
        out.append((history["created_by"].removeprefix("image/assemble.py: "), len(data), len(gzip.decompress(data))))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--image", type=pathlib.Path, default=ROOT / "target" / "image")
    parser.add_argument("--binary", type=pathlib.Path, default=ROOT / "target" / "release" / "digest-gate")
    options = parser.parse_args()
    layout, out_dir = options.image, ROOT / "target" / "bench-container"
    (entry,) = json.loads((layout / "index.json").read_text())["manifests"]
    with tempfile.TemporaryDirectory(prefix="digest-gate-bench-") as tmp:
        work = pathlib.Path(tmp)
        # The layout unpacks as the pushed image does: `oci:DIR:TAG`.
        tagged = work / "image"
        subprocess.run(["skopeo", "copy", "--quiet", f"oci:{layout}:{entry['annotations']['org.opencontainers.image.ref.name']}",
                        f"oci:{tagged}:image"], check=True)
        certs = work / "certs"
        subprocess.run(["sh", str(ROOT / "certs" / "gen-certs.sh"), "--service", "bench", "--namespace", "bench",
                        "--out", str(certs), "--days", "2"], check=True, capture_output=True)
        for f in certs.iterdir():
            f.chmod(0o644)
        host, container, unpack = [], [], []
        for _ in range(options.runs):
            host.append(host_run(options.binary, certs, work))
            u, c = container_run(tagged, certs, work)
            unpack.append(u)
            container.append(c)
    layers = sizes(layout)
    rows = [f"| {what} | {c / 1e6:.1f} MB | {u / 1e6:.1f} MB |" for what, c, u in layers]
    compressed = sum(c for _, c, _ in layers)
    med_h, med_c = statistics.median(host), statistics.median(container)
    report = "\n".join([
        "# digest-gate's image: size and start-to-ready",
        "",
        f"`make image` → `{entry['digest']}` (linux/amd64), measured by `bench/container_start.py --runs {options.runs}`.",
        "",
        "| layer | compressed | uncompressed |",
        "|---|---:|---:|",
        *rows,
        f"| **image** | **{compressed / 1e6:.1f} MB** | **{sum(u for _, _, u in layers) / 1e6:.1f} MB** |",
        "",
        "Start to the first 200 from `/readyz`, runs alternating: the release binary on the host, its stripped",
        "copy in the image:",
        "",
        "| how | median | worst |",
        "|---|---:|---:|",
        f"| host process | {med_h * 1000:.0f} ms | {max(host) * 1000:.0f} ms |",
        f"| container (runc, the chart's securityContext) | {med_c * 1000:.0f} ms | {max(container) * 1000:.0f} ms |",
        f"| ratio container / host | {med_c / med_h:.2f}× | |",
        f"| unpacking the image into a bundle (umoci, once per image on a node) | "
        f"{statistics.median(unpack) * 1000:.0f} ms | {max(unpack) * 1000:.0f} ms |",
        "",
    ])
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "report.md").write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
