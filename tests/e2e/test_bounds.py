"""Every cluster conversation bounded (issue 57), on the real 1.20 control
plane: a credential plugin that hangs loses only its own cluster, and a
cluster that misbehaves — a list whose continue token never changes, an
answer trickled a byte at a time, an answer larger than any page — ends
that cluster's read with an error that says so, within the time and memory
the flags give.

The misbehaving cluster is the real apiserver behind a scripted proxy on
loopback (plain HTTP to digest-gate, TLS with the admin token upstream):
everything is the apiserver's answer but Pod lists, which the proxy spoils.
A real apiserver never does these things; a compromised or broken one, or
something in between, can.
"""

from __future__ import annotations

import http.client
import http.server
import json
import pathlib
import ssl
import subprocess
import sys
import threading
import time

import pytest

from cluster import ROOT, ControlPlane

sys.path.insert(0, str(ROOT / "bench"))
import rss  # noqa: E402  (bench/: the launcher that measures a child's peak)

from support import binary  # noqa: E402

ALLOWLIST = ROOT / "examples" / "allowlist.yaml"
NS = "bounds-models"
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "NO_PROXY": "127.0.0.1,localhost"}
# Each run must end well within this, or the test fails: the bound under test.
RUN_TIMEOUT = 60


class Spoiling(http.server.BaseHTTPRequestHandler):
    """Forwards to the apiserver; a Pod list is spoiled as `server.mode` says."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        upstream: ControlPlane = self.server.upstream
        ctx = ssl.create_default_context(cafile=str(upstream.pki / "ca.crt"))
        conn = http.client.HTTPSConnection("127.0.0.1", upstream.port, context=ctx, timeout=10)
        path = self.path
        if self.server.mode == "again":
            # The apiserver would refuse the made-up token: it is asked for
            # the first page again, as a server stuck in a loop answers.
            base, _, query = path.partition("?")
            kept = [p for p in query.split("&") if p and not p.startswith("continue=")]
            path = base + ("?" + "&".join(kept) if kept else "")
        conn.request("GET", path, headers={"Authorization": f"Bearer {ControlPlane.ADMIN_TOKEN}",
                                                "Accept": "application/json"})
        answer = conn.getresponse()
        body = answer.read()
        pods = self.path.split("?")[0].endswith("/pods")
        if pods:
            self.server.pod_lists += 1
        mode = self.server.mode if pods else None
        if mode == "again":
            page = json.loads(body)
            page["metadata"]["continue"] = "again"
            body = json.dumps(page).encode()
        if mode == "trickle":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            for b in body:
                self.wfile.write(bytes([b]))
                self.wfile.flush()
                time.sleep(0.5)
            return
        if mode == "huge":
            # A page larger than --cluster-max-response-bytes: 80 MiB of
            # one Pod's worth of JSON, streamed.
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunk = b" " * (1 << 20)
            try:
                self._chunk(b'{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[')
                for _ in range(80):
                    self._chunk(chunk)
                self._chunk(b"]}")
                self._chunk(b"")
            except OSError:
                pass  # digest-gate hung up once it had enough: the point.
            return
        self.send_response(answer.status)
        self.send_header("Content-Type", answer.getheader("Content-Type") or "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _chunk(self, data: bytes):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))


@pytest.fixture
def spoiler(cluster):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Spoiling)
    server.daemon_threads = True
    server.upstream, server.mode, server.pod_lists = cluster, None, 0
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    cluster.kubectl("create", "namespace", NS, check=False)
    yield server
    server.shutdown()
    server.server_close()


def kubeconfig(path: pathlib.Path, cluster: ControlPlane, contexts: dict[str, dict]) -> pathlib.Path:
    """A kubeconfig whose contexts are `name: {server, user}`."""
    doc = {"apiVersion": "v1", "kind": "Config", "clusters": [], "users": [], "contexts": [],
           "current-context": next(iter(contexts))}
    for name, c in contexts.items():
        server = {"server": c["server"]}
        if c["server"].startswith("https://127.0.0.1:%d" % cluster.port):
            server["certificate-authority"] = str(cluster.pki / "ca.crt")
        doc["clusters"].append({"name": name, "cluster": server})
        doc["users"].append({"name": name, "user": c["user"]})
        doc["contexts"].append({"name": name, "context": {"cluster": name, "user": name}})
    path.write_text(json.dumps(doc))
    return path


def audit(config: pathlib.Path, *args: str) -> tuple[int, str, str, float]:
    started = time.monotonic()
    run = subprocess.run([str(binary()), "audit", "--allowlist", str(ALLOWLIST), "--kubeconfig", str(config),
                          "-o", "json", *args], env=ENV, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    return run.returncode, run.stdout, run.stderr, time.monotonic() - started


def test_a_hung_credential_plugin_loses_only_its_own_cluster(cluster, spoiler, tmp_path):
    config = kubeconfig(tmp_path / "kubeconfig", cluster, {
        "good": {"server": cluster.url, "user": {"token": ControlPlane.ADMIN_TOKEN}},
        # Never contacted: the plugin never gives a credential.
        "hung": {"server": "https://127.0.0.1:1", "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1", "command": "sleep", "args": ["150"],
            "interactiveMode": "Never"}}},
    })
    # The namespace holds nothing here: read wholly is what this is about
    # (issue 60 made an empty read exit 2 without --allow-empty).
    code, out, err, _ = audit(config, "--context", "good", "--context", "hung", "-n", NS,
                              "--cluster-deadline", "10s", "--allow-empty")
    assert code == 2, err
    clusters = {c["context"]: c for c in json.loads(out)["clusters"]}
    assert clusters["good"]["status"] == "ok", clusters
    assert clusters["hung"]["status"] != "ok", clusters
    assert "--cluster-deadline 10s" in clusters["hung"]["error"], clusters
    # With its own timeout shorter than the deadline, the plugin is what
    # the error names.
    code, out, err, _ = audit(config, "--context", "hung", "-n", NS, "--cluster-timeout", "2s")
    assert code == 2
    assert 'context "hung": the exec credential plugin sleep gave no credential within 2s' in err, err


def test_a_list_whose_continue_token_never_changes_is_ended(cluster, spoiler, tmp_path):
    spoiler.mode = "again"
    config = kubeconfig(tmp_path / "kubeconfig", cluster, {
        "spoiled": {"server": f"http://127.0.0.1:{spoiler.server_port}", "user": {}}})
    code, out, err, _ = audit(config, "-n", NS)
    assert code == 2, err
    assert 'gave the continue token again twice' in out + err, out + err
    # The first page and the one that repeated its token: no more.
    assert spoiler.pod_lists == 2, spoiler.pod_lists


def test_an_answer_trickled_a_byte_at_a_time_ends_at_the_timeout(cluster, spoiler, tmp_path):
    spoiler.mode = "trickle"
    config = kubeconfig(tmp_path / "kubeconfig", cluster, {
        "spoiled": {"server": f"http://127.0.0.1:{spoiler.server_port}", "user": {}}})
    code, out, err, _ = audit(config, "-n", NS, "--cluster-timeout", "3s")
    assert code == 2, err
    assert "no whole answer within 3s (--cluster-timeout)" in out + err, out + err


def test_an_answer_larger_than_a_page_is_refused_without_holding_it(cluster, spoiler, tmp_path):
    spoiler.mode = "huge"
    config = kubeconfig(tmp_path / "kubeconfig", cluster, {
        "spoiled": {"server": f"http://127.0.0.1:{spoiler.server_port}", "user": {}}})
    out = tmp_path / "out.json"
    args = [str(binary()), "audit", "--allowlist", str(ALLOWLIST), "--kubeconfig", str(config), "-n", NS,
            "-o", "json", "--cluster-max-response-bytes", str(16 << 20)]
    _, peak_mib, code = rss.measure(args, out)
    assert code == 2
    assert "the answer is larger than 16 MiB (--cluster-max-response-bytes)" in out.read_text()
    # What was read of the 80 MiB before the cap, and no more.
    assert peak_mib < 64, peak_mib
