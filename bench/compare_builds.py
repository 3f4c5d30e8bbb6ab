#!/usr/bin/env python3
"""Instructions per review (server side, callgrind, no decision log) for
several digest-gate builds in one run, as bench/instructions.py counts them.

    python3 bench/compare_builds.py before=/path/to/old/digest-gate now=target/release/digest-gate
    python3 bench/compare_builds.py off=target/release/digest-gate "on=target/release/digest-gate --verify-registry"

A build is NAME=BINARY, optionally followed by flags for its `serve`.

Each build serves the README's 2 KB ServingRuntime review, rewritten and
allowed, and the load test's ModelMesh Pod review (allowed), N times over
one keep-alive connection; a one-request run is
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


def setup() -> tuple[pathlib.Path, dict[str, bytes]]:
    """The certificates (release binaries built first) and the README's
    review, rewritten and allowed."""
    prepared = load.prepare(10)
    rewrite = (load.ROOT / "examples" / "review.json").read_bytes()
    return load.OUT / "certs", {"rewritten": rewrite,
                                "allowed": rewrite.replace(ins.INCIDENT.encode(), ins.PROMOTED.encode()),
                                # The load test's ModelMesh Pod, every image promoted.
                                "pod": prepared["body"].read_bytes()}


def serve_argv(binary: str, certs: pathlib.Path, port: int) -> list[str]:
    """`serve` as every build is measured: the example allowlists, no
    decision log. `binary` may carry flags of its own after a space."""
    binary, *extra = binary.split()
    return [binary, "serve", *extra, "--tls-cert", str(certs / "tls.crt"), "--tls-key", str(certs / "tls.key"),
            "--allowlist", str(load.ROOT / "examples" / "allowlist.yaml"),
            "--allowlist", str(load.ROOT / "bench" / "modelmesh-promoted.txt"),
            "--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{load.free_port()}", "--log-level", "warn"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("builds", nargs="+", help="NAME=BINARY")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--baseline-requests", type=int, default=1,
                        help="the run subtracted; raise it (e.g. half of --requests) when a build does background "
                             "work of its own after start (--verify-registry), so both runs hold all of it")
    args = parser.parse_args()
    certs, reviews = setup()
    print("| build | review | instructions per review |\n|---|---|---|")
    for build in args.builds:
        name, _, binary = build.partition("=")
        for review, body in reviews.items():
            port = load.free_port()
            argv = serve_argv(binary, certs, port)
            base, _ = ins.counted(argv, port, certs / "ca.crt", body, args.baseline_requests,
                                  load.OUT / "callgrind.base.out")
            total, _ = ins.counted(argv, port, certs / "ca.crt", body, args.requests, load.OUT / "callgrind.run.out")
            print(f"| {name} | {review} | {(total - base) / (args.requests - args.baseline_requests):,.0f} |", flush=True)


if __name__ == "__main__":
    main()
