#!/usr/bin/env python3
"""Reviews while another client holds connections open (issue 15 §4).

    python3 bench/idle_clients.py [NAME=BINARY ...] [--held 2000] [--reviews 200]

For each build and each way of holding (idle: TCP open, nothing sent;
slow-handshake: a ClientHello a byte a second; slow-headers: the handshake
done, then request headers a byte a second), a flooding process holds
--held connections from 127.0.0.2 and reopens each a second after the
server closes it. Meanwhile a well-behaved client on 127.0.0.1 sends
--reviews reviews, each on a new TLS connection (the worst case: every one
needs a handshake slot), with the apiserver's 5 s timeout (the chart's
`timeoutSeconds`). Reports p50/p99/max latency and the reviews that failed
(no answer within 5 s), as markdown. The server runs with its defaults.

Only loopback is used; each run is bounded (--budget seconds of reviews).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import pathlib
import signal
import socket
import ssl
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import load  # noqa: E402

FLOODER = "127.0.0.2"
TIMEOUT = 5.0
HELLO = bytes([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xFC, 0x03, 0x03])
HEADERS = b"POST /mutate HTTP/1.1\r\nhost: digest-gate\r\ncontent-type: application/json\r\n"


async def hold_one(mode: str, port: int, context: ssl.SSLContext | None):
    while True:
        try:
            if mode == "slow-headers":
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", port, local_addr=(FLOODER, 0), ssl=context, server_hostname="127.0.0.1")
            else:
                reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(FLOODER, 0))
            drip = {"idle": b"", "slow-handshake": HELLO, "slow-headers": HEADERS}[mode]

            async def dribble():
                i = 0
                while drip:
                    writer.write(drip[i % len(drip):i % len(drip) + 1])
                    await writer.drain()
                    i += 1
                    await asyncio.sleep(1)
                await asyncio.Event().wait()

            dripping = asyncio.ensure_future(dribble())
            try:
                await reader.read(1)  # returns when the server closes it
            finally:
                dripping.cancel()
                writer.close()
        except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
            pass
        await asyncio.sleep(1)


async def flood(mode: str, port: int, n: int, ca: str):
    context = None
    if mode == "slow-headers":
        context = ssl.create_default_context(cafile=ca)
        context.set_alpn_protocols(["http/1.1"])
    await asyncio.gather(*(hold_one(mode, port, context) for _ in range(n)))


def review_once(port: int, context: ssl.SSLContext, body: bytes) -> float | None:
    started = time.monotonic()
    try:
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=TIMEOUT)
        conn.request("POST", "/mutate", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        conn.close()
        took = time.monotonic() - started
        return took if response.status == 200 and took <= TIMEOUT else None
    except (OSError, ssl.SSLError, http.client.HTTPException):
        return None


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(binary: str, mode: str, args, certs: pathlib.Path, body: bytes) -> dict:
    port, admin = load.free_port(), load.free_port()
    argv = [binary, "serve", "--tls-cert", str(certs / "tls.crt"), "--tls-key", str(certs / "tls.key"),
            "--allowlist", str(load.ROOT / "examples" / "allowlist.yaml"),
            "--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{admin}", "--log-level", "warn"]
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    flooder = None
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "server did not start"
                time.sleep(0.05)
        flooder = subprocess.Popen([sys.executable, __file__, "--flood", mode, "--port", str(port),
                                    "--held", str(args.held), "--ca", str(certs / "ca.crt")])
        time.sleep(args.settle)
        context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        took, failed = [], 0
        started = time.monotonic()
        for _ in range(args.reviews):
            if time.monotonic() - started > args.budget:
                break
            t = review_once(port, context, body)
            if t is None:
                failed += 1
            else:
                took.append(t)
        sent = len(took) + failed
        row = {"build": binary, "mode": mode, "sent": sent, "failed": failed}
        if took:
            row.update(p50_ms=percentile(took, 0.5) * 1000, p99_ms=percentile(took, 0.99) * 1000,
                       max_ms=max(took) * 1000)
        return row
    finally:
        if flooder:
            flooder.kill()
            flooder.wait()
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("builds", nargs="*", help="NAME=BINARY (default: now=target/release/digest-gate)")
    parser.add_argument("--held", type=int, default=2000)
    parser.add_argument("--reviews", type=int, default=200)
    parser.add_argument("--budget", type=float, default=60.0, help="seconds of reviews per run at most")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds the flood runs before reviews")
    parser.add_argument("--modes", default="idle,slow-handshake,slow-headers")
    parser.add_argument("--flood", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--ca", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.flood:
        asyncio.run(flood(args.flood, args.port, args.held, args.ca))
        return
    files = load.prepare(10)
    body = (load.ROOT / "examples" / "review.json").read_bytes()
    builds = args.builds or [f"now={load.ROOT / 'target' / 'release' / 'digest-gate'}"]
    rows = []
    print(f"{args.held} connections held from {FLOODER}; reviews on new connections, {TIMEOUT:.0f} s timeout\n")
    print("| build | held how | reviews | failed | p50 | p99 | max |\n|---|---|---|---|---|---|---|")
    for mode in args.modes.split(","):
        for build in builds:
            name, _, binary = build.partition("=")
            row = measure(binary, mode, args, files["certs"], body)
            row["name"] = name
            rows.append(row)
            ms = lambda k: f"{row[k]:,.1f} ms" if k in row else "–"  # noqa: E731
            print(f"| {name} | {mode} | {row['sent']} | {row['failed']} | {ms('p50_ms')} | {ms('p99_ms')} | "
                  f"{ms('max_ms')} |", flush=True)
    (load.OUT / "idle_clients.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
