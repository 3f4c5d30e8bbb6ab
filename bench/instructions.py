#!/usr/bin/env python3
"""Instructions per answered review, server side, under callgrind.

    make bench-instructions    # or: python3 bench/instructions.py [--requests 2000]

Wall-clock figures on a shared 2-core VM swing by 10-30 % between runs; counted
instructions do not. For each server and review this starts the release
binary under `valgrind --tool=callgrind`, sends the review over one HTTPS
keep-alive connection (HTTP/1.1, as the apiserver does) N times, and stops it
with SIGINT; a second run with one request measures startup, TLS handshake and
shutdown, which are subtracted. Servers: the null webhook
(examples/null_webhook.rs), and digest-gate with the text decision log, the
JSON decision log, and no decision log (--log-level warn); with --baseline,
the same for another build's binary. Reviews: the
README's 2 KB ServingRuntime review (rewritten), the same with the promoted
digest (allowed), and the load benchmark's 13 KB ModelMesh pod (allowed).

Writes target/bench-load/instructions.{md,json}. Only 127.0.0.1 is used.
"""

from __future__ import annotations

import argparse
import http.client
import json
import pathlib
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import load  # noqa: E402  (same directory: build, certificates, the pod review)

INCIDENT = "7ef272bc7be866257b8126620e139d6e915ee962304d3eceba9c9d50d4e79767"
PROMOTED = "8af20e48bb480a7ba1ee1268a3cf0a507e05b256c5fcf988f8e4a3de8b87edc6"


def bodies(pod_review: pathlib.Path) -> dict[str, bytes]:
    rewrite = (load.ROOT / "examples" / "review.json").read_bytes()
    assert INCIDENT.encode() in rewrite, "examples/review.json no longer carries the incident digest"
    return {
        "ServingRuntime, rewrite": rewrite,
        "ServingRuntime, allow": rewrite.replace(INCIDENT.encode(), PROMOTED.encode()),
        "ModelMesh pod, allow": pod_review.read_bytes(),
    }


def drive(port: int, ca: pathlib.Path, body: bytes, n: int) -> dict:
    context = ssl.create_default_context(cafile=str(ca))
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=60)
    answers = []
    for _ in range(n):
        conn.request("POST", "/mutate", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        data = response.read()
        assert response.status == 200, f"HTTP {response.status}: {data[:200]!r}"
        answers.append(json.loads(data)["response"])
    conn.close()
    return answers[-1]


def wait_for(port: int, proc: subprocess.Popen):
    deadline = time.monotonic() + 120  # valgrind starts slowly
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            assert proc.poll() is None, "server exited under valgrind"
            assert time.monotonic() < deadline, "server did not start under valgrind"
            time.sleep(0.2)


def counted(argv: list[str], port: int, ca: pathlib.Path, body: bytes, n: int, out: pathlib.Path) -> tuple[int, dict]:
    proc = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"] + argv,
                            stdout=subprocess.DEVNULL, stderr=open(str(out) + ".log", "w"))
    try:
        wait_for(port, proc)
        answer = drive(port, ca, body, n)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for line in out.read_text(errors="replace").splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1]), answer
    raise RuntimeError(f"no instruction total in {out}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--baseline", help="a digest-gate binary of another build, measured in the same run")
    args = parser.parse_args()
    if not shutil.which("valgrind"):
        sys.exit("valgrind is needed (apt-get install valgrind)")
    files = load.prepare(10)  # release binaries, certificates, the pod review
    ca = files["certs"] / "ca.crt"
    allowlists = ["--allowlist", str(load.ROOT / "examples" / "allowlist.yaml"),
                  "--allowlist", str(load.ROOT / "bench" / "modelmesh-promoted.txt")]
    release = load.ROOT / "target" / "release"
    tls = ["--tls-cert", str(files["certs"] / "tls.crt"), "--tls-key", str(files["certs"] / "tls.key")]
    port = load.free_port()
    servers = {
        "null webhook": [str(release / "examples" / "null_webhook")] + tls + ["--listen", f"127.0.0.1:{port}"],
    }
    builds = [("digest-gate", str(release / "digest-gate"))]
    if args.baseline:
        builds.append(("baseline", args.baseline))
    for build, binary in builds:
        for name, extra in [("text log", []), ("JSON log", ["--log-format", "json"]),
                            ("no decision log", ["--log-level", "warn"])]:
            servers[f"{build}, {name}"] = [binary, "serve"] + tls + allowlists + [
                "--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{load.free_port()}"] + extra
    results = {}
    for review, body in bodies(files["body"]).items():
        for name, argv in servers.items():
            base, _ = counted(argv, port, ca, body, 1, load.OUT / "callgrind.base.out")
            total, answer = counted(argv, port, ca, body, args.requests, load.OUT / "callgrind.run.out")
            per = (total - base) / (args.requests - 1)
            verdict = "patch" if answer.get("patch") else ("allowed" if answer.get("allowed") else "denied")
            results.setdefault(review, {})[name] = {"instructions": round(per), "answer": verdict}
            print(f"{review:26} {name:30} {per:10.0f} instructions/request ({verdict})", file=sys.stderr)
    lines = ["| review | server | instructions per request | ratio to the null webhook | answer |",
             "|---|---|---|---|---|"]
    for review, by in results.items():
        null = by["null webhook"]["instructions"]
        for name, r in by.items():
            lines.append(f"| {review} | {name} | {r['instructions']:,} | {r['instructions'] / null:.2f} × | {r['answer']} |")
    report = "\n".join(lines) + "\n"
    (load.OUT / "instructions.md").write_text(report)
    (load.OUT / "instructions.json").write_text(json.dumps(results, indent=2) + "\n")
    print(report)


if __name__ == "__main__":
    main()
