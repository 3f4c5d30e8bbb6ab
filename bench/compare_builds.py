#!/usr/bin/env python3
"""Instructions per review (server side, callgrind, no decision log) for
several digest-gate builds in one run, as bench/instructions.py counts them.

    python3 bench/compare_builds.py before=/path/to/old/digest-gate now=target/release/digest-gate

Each build serves the README's 2 KB ServingRuntime review, rewritten and
allowed, N times over one keep-alive connection; a one-request run is
subtracted (startup, handshake, shutdown). Needs valgrind and the
certificates `make bench-instructions` (load.prepare) writes. Only 127.0.0.1.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import instructions as ins  # noqa: E402
import load  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("builds", nargs="+", help="NAME=BINARY")
    parser.add_argument("--requests", type=int, default=1000)
    args = parser.parse_args()
    load.prepare(10)
    certs = load.OUT / "certs"
    tls = ["--tls-cert", str(certs / "tls.crt"), "--tls-key", str(certs / "tls.key")]
    allowlists = ["--allowlist", str(load.ROOT / "examples" / "allowlist.yaml"),
                  "--allowlist", str(load.ROOT / "bench" / "modelmesh-promoted.txt")]
    rewrite = (load.ROOT / "examples" / "review.json").read_bytes()
    reviews = {"rewritten": rewrite, "allowed": rewrite.replace(ins.INCIDENT.encode(), ins.PROMOTED.encode())}
    print("| build | review | instructions per review |\n|---|---|---|")
    for build in args.builds:
        name, _, binary = build.partition("=")
        for review, body in reviews.items():
            port = load.free_port()
            argv = [binary, "serve"] + tls + allowlists + [
                "--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{load.free_port()}",
                "--log-level", "warn"]
            base, _ = ins.counted(argv, port, certs / "ca.crt", body, 1, load.OUT / "callgrind.base.out")
            total, _ = ins.counted(argv, port, certs / "ca.crt", body, args.requests, load.OUT / "callgrind.run.out")
            print(f"| {name} | {review} | {(total - base) / (args.requests - 1):,.0f} |", flush=True)


if __name__ == "__main__":
    main()
