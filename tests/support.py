"""Helpers the Python suites share (tests/chart and tests/e2e): where the
repository and the debug binary are, loopback ports, and the JSON answer of
the small HTTP servers the tests run."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
import socket
import ssl
import subprocess
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = pathlib.Path(__file__).resolve().parents[1]


def binary() -> pathlib.Path:
    """The debug binary `cargo test` built (the Makefile builds it first)."""
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    path = target / "debug" / "digest-gate"
    if not path.exists():
        subprocess.run(["cargo", "build", "--locked"], cwd=ROOT, check=True)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def send_json(handler: BaseHTTPRequestHandler, status: int, body: object):
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that keeps the test output free of access logs."""

    def log_message(self, *args):
        pass


class BackgroundServer:
    """A threaded HTTP(S) server on a free loopback port for the length of a
    `with` block."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], tls: ssl.SSLContext | None = None):
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def serve(cert: pathlib.Path, key: pathlib.Path, *args: str):
    """Runs `digest-gate serve` on loopback with the key pair and `args`
    until ready; yields (webhook port, admin port); on exit sends SIGTERM
    and checks the process exits 0."""
    import http.client
    import signal
    import time
    port, admin = free_port(), free_port()
    proc = subprocess.Popen(
        [str(binary()), "serve", "--tls-cert", str(cert), "--tls-key", str(key),
         "--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{admin}", *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                c = http.client.HTTPConnection("127.0.0.1", admin, timeout=2)
                c.request("GET", "/readyz")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "digest-gate did not become ready"
            time.sleep(0.1)
        yield port, admin
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=15)
        assert code == 0, proc.stderr.read().decode()


# --- the docs' loopback samples ---------------------------------------------------

@dataclass
class Step:
    """One command of a docs sample, and what the docs say it prints
    (`# prints: TEXT` lines under it)."""
    command: str
    prints: list[str]


def docs_pages() -> list[pathlib.Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def docs_sample(sample_id: str) -> list[Step]:
    """The ```sh block after `<!-- sample: loopback ID -->` in README.md or
    docs/ (tests/docs.rs holds every shell block to a marker), as steps:
    continuation lines joined, trailing comments dropped, `# prints:` lines
    attached to the command before them, other comment lines skipped."""
    marker = f"<!-- sample: loopback {sample_id} -->\n"
    for page in docs_pages():
        text = page.read_text()
        if marker not in text:
            continue
        after = text[text.index(marker) + len(marker):]
        assert after.startswith("```sh\n"), f"{page}: {sample_id}: the marker must stand right above a ```sh block"
        body = after[len("```sh\n"):after.index("\n```")]
        steps: list[Step] = []
        pending = ""
        for line in body.splitlines():
            stripped = line.strip()
            if stripped.startswith("# prints: "):
                steps[-1].prints.append(stripped[len("# prints: "):])
                continue
            if stripped.startswith("#") or not stripped:
                continue
            line = re.sub(r"\s+#\s.*$", "", line)
            if line.endswith("\\"):
                pending += line[:-1].rstrip() + " "
                continue
            steps.append(Step((pending + line.strip()).strip(), []))
            pending = ""
        return steps
    raise AssertionError(f"no sample `{sample_id}` in README.md or docs/")
