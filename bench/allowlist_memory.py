#!/usr/bin/env python3
"""Peak memory of an allowlist, per format and size: loading it, and serving
with it under load while it is reloaded.

    python3 bench/allowlist_memory.py [--sizes 10000,50000] [--baseline OLD_BINARY]
    python3 bench/allowlist_memory.py --serve [--sizes 10000,50000] [--seconds 12] [--baseline OLD_BINARY]

Without --serve: writes a native Allowlist (what the chart renders) and a
plain list of N repositories each (one digest with one tag per repository),
then runs `digest-gate allowlist lint` on each under GNU time (the kernel's
`ru_maxrss`: peak RSS) and reports MiB and seconds, the median of three runs. With --baseline, the same files are loaded by that binary too,
in the same run, and ratios are printed (new / baseline).

With --serve: the load benchmark's ModelMesh pod review (bench/load.py) is
sent by oha over 32 keep-alive connections to `digest-gate serve` holding an
allowlist of N repositories, in each format: the plain list, and the native
Allowlist `digest-gate allowlist convert` makes of it, each as a mounted
ConfigMap is (a `..data` symlink swapped atomically) with `--state-dir` set,
as the chart runs it. Two runs per format and size, the same traffic: one
with the allowlist left alone (the baseline), one with a new version of it
swapped in every second (each differs in one digest, so each is a full
reload). Reports the server's peak RSS (`VmHWM`, the process's own high-water
mark), its RSS at the end and the reloads that succeeded (from /metrics);
with --baseline, the same for that binary in the same run and the ratio of
the peaks while reloading (new / baseline). Every answer must be 200.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import load
from rss import stop

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
    """(peak RSS MiB, seconds) of one lint, median of three.

    Under GNU time (Debian's `time`): a child forked from this interpreter
    would count the interpreter's ~10 MiB in its `ru_maxrss` (the kernel
    keeps the peak of the process it was forked from across exec), which
    hid a third of a 10,000-repository list's figure."""
    rss, secs = [], []
    for _ in range(3):
        run = subprocess.run(["/usr/bin/time", "-f", "%M %e", binary, "allowlist", "lint", str(path)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if run.returncode != 0:
            sys.exit(f"{binary} allowlist lint {path} failed: {run.stderr}")
        kib, seconds = run.stderr.split()[-2:]
        rss.append(int(kib) / 1024)
        secs.append(float(seconds))
    return statistics.median(rss), statistics.median(secs)


class Mounted:
    """An allowlist as the kubelet mounts a ConfigMap key: `dir/allowlist.yaml`
    -> `..data/allowlist.yaml`, `..data` -> a timestamped directory, and an
    update swaps `..data` atomically."""

    def __init__(self, root: pathlib.Path, name: str):
        self.root, self.name, self.n = root, name, 0
        root.mkdir(parents=True)
        (root / name).symlink_to(pathlib.Path("..data") / name)

    def put(self, text: str):
        self.n += 1
        version = self.root / f"..version-{self.n}"
        version.mkdir()
        (version / self.name).write_text(text)
        link = self.root / "..data_tmp"
        link.symlink_to(version.name)
        os.replace(link, self.root / "..data")
        if self.n > 2:
            shutil.rmtree(self.root / f"..version-{self.n - 2}")

    @property
    def path(self) -> pathlib.Path:
        return self.root / self.name


def metric(admin: int, series: str) -> float:
    """One series' value from /metrics, labels written as exposed; 0 when absent."""
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(series + " "):
                return float(line.split()[-1])
    return 0.0


def status_mib(pid: int, field: str) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def serve_run(binary: str, files: dict, mounted: Mounted, versions: list[str], seconds: float, reload: bool) -> dict:
    """One server, `seconds` of oha at 32 connections; with `reload`, a new
    version of the allowlist every second. Peak and final RSS, reloads."""
    mounted.put(versions[0])
    port, admin = load.free_port(), load.free_port()
    state = mounted.root.with_name(mounted.root.name + "-state")
    state.mkdir()
    argv = [binary, "serve", "--tls-cert", str(files["certs"] / "tls.crt"), "--tls-key", str(files["certs"] / "tls.key"),
            "--allowlist", str(mounted.path), "--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{admin}",
            "--state-dir", str(state), "--reload-interval", "250ms", "--log-format", "json"]
    with open(os.devnull, "wb") as devnull:
        proc = subprocess.Popen(argv, stdout=devnull, stderr=devnull)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=1):
                    break
            except OSError:
                assert proc.poll() is None, "digest-gate serve exited"
                assert time.monotonic() < deadline, "digest-gate serve did not become ready"
                time.sleep(0.1)
        url = f"https://127.0.0.1:{port}/mutate"
        load.oha(url, files, seconds=2, connections=32)  # warm-up
        before = metric(admin, 'digest_gate_reloads_total{source="allowlist",result="success"}')
        stop = threading.Event()

        def swap():
            i = 0
            while not stop.wait(1.0):
                i += 1
                mounted.put(versions[i % len(versions)])

        swapper = threading.Thread(target=swap)
        if reload:
            swapper.start()
        result = load.oha(url, files, seconds=seconds, connections=32)
        stop.set()
        if reload:
            swapper.join()
            time.sleep(1)  # the last swap's reload
        result["peak_rss_mib"] = status_mib(proc.pid, "VmHWM")
        result["rss_mib"] = status_mib(proc.pid, "VmRSS")
        result["reloads"] = metric(admin, 'digest_gate_reloads_total{source="allowlist",result="success"}') - before
        result["failed_reloads"] = metric(admin, 'digest_gate_reloads_total{source="allowlist",result="failure"}')
        return result
    finally:
        stop(proc)


def plain_versions(n: int) -> list[str]:
    """Two plain lists of the load benchmark's pod's images plus filler,
    differing in the last filler repository's digest."""
    pod = [l for l in (ROOT / "bench" / "modelmesh-promoted.txt").read_text().splitlines() if l and not l.startswith("#")]
    out = []
    for variant in range(2):
        lines = list(pod)
        for i in range(n - len(pod)):
            d = hashlib.sha256(f"{i}/{variant if i == n - len(pod) - 1 else 0}".encode()).hexdigest()
            lines.append(f"registry.example.com/team-{i % 97}/model-server-{i}:v{i}@sha256:{d}")
        out.append("\n".join(lines) + "\n")
    return out


def serve_table(binaries: list[tuple[str, str]], sizes: list[int], seconds: float):
    files = load.prepare(10)  # certificates and the review; its own allowlist is not used
    head = "| format | repositories | " + " | ".join(
        f"{n}: peak MiB, no reload | {n}: peak MiB, reloading | {n}: RSS at the end MiB | {n}: reloads" for n, _ in binaries)
    print(head + (" | reloading, peak ratio |" if len(binaries) > 1 else " |"))
    print("|---" * (2 + 4 * len(binaries) + (1 if len(binaries) > 1 else 0)) + "|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            plain = plain_versions(n)
            native = []
            for i, text in enumerate(plain):
                src = pathlib.Path(tmp) / f"plain-{n}-{i}.txt"
                src.write_text(text)
                native.append(subprocess.run([binaries[0][1], "allowlist", "convert", "--name", "promoted", str(src)],
                                             check=True, capture_output=True, text=True).stdout)
            for fmt, versions in (("native", native), ("plain list", plain)):
                cells, peaks = [], []
                for name, binary in binaries:
                    runs = {}
                    for reload in (False, True):
                        root = pathlib.Path(tmp) / f"{name}-{fmt.replace(' ', '-')}-{n}-{reload}"
                        runs[reload] = serve_run(binary, files, Mounted(root, "allowlist.yaml"), versions, seconds, reload)
                    calm, busy = runs[False], runs[True]
                    assert busy["reloads"] >= seconds / 2, f"{name}: only {busy['reloads']} reloads"
                    assert busy["failed_reloads"] == 0, f"{name}: failed reloads"
                    cells.append(f"{calm['peak_rss_mib']:.1f} | {busy['peak_rss_mib']:.1f} | {busy['rss_mib']:.1f} "
                                 f"| {busy['reloads']:.0f}")
                    peaks.append(busy["peak_rss_mib"])
                ratio = f" | {peaks[0] / peaks[1]:.2f}" if len(peaks) > 1 else ""
                print(f"| {fmt} | {n:,} | " + " | ".join(cells) + ratio + " |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,50000")
    ap.add_argument("--binary", default=str(ROOT / "target" / "release" / "digest-gate"))
    ap.add_argument("--baseline", help="another digest-gate binary to compare with")
    ap.add_argument("--serve", action="store_true", help="measure `serve` under load with reloads")
    ap.add_argument("--seconds", type=float, default=12, help="seconds of load per --serve run (default 12)")
    args = ap.parse_args()
    if args.serve:
        binaries = [("digest-gate", args.binary)] + ([("baseline", args.baseline)] if args.baseline else [])
        serve_table(binaries, [int(s) for s in args.sizes.split(",")], args.seconds)
        return
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
