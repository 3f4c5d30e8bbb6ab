"""The webhook's TLS surface, probed with OpenSSL (Python's ssl) as an
independent client: TLS 1.2+ only, AEAD cipher suites only."""

from __future__ import annotations

import socket
import ssl
import subprocess
import warnings

import pytest

from conftest import serving
from test_certs_script import SCRIPT


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    out = tmp_path_factory.mktemp("tls")
    subprocess.run(["sh", str(SCRIPT), "--namespace", "demo", "--out", str(out)], capture_output=True, check=True)
    with serving(out) as port:
        yield port, out / "ca.crt"


def handshake(port, ca, configure):
    ctx = ssl.create_default_context(cafile=str(ca))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        configure(ctx)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="digest-gate.demo.svc") as s:
            return s.version(), s.cipher()[0]


def only(version, ciphers=None):
    def configure(ctx):
        ctx.minimum_version = version
        ctx.maximum_version = version
        # Let the client offer what the server must refuse.
        ctx.set_ciphers(ciphers or "DEFAULT:@SECLEVEL=0")
    return configure


def test_tls13_and_tls12_with_aead_suites_work(server):
    port, ca = server
    assert handshake(port, ca, lambda ctx: None)[0] == "TLSv1.3"
    version, cipher = handshake(port, ca, only(ssl.TLSVersion.TLSv1_2, "ECDHE-ECDSA-AES128-GCM-SHA256"))
    assert (version, cipher) == ("TLSv1.2", "ECDHE-ECDSA-AES128-GCM-SHA256")
    assert handshake(port, ca, only(ssl.TLSVersion.TLSv1_2, "ECDHE-ECDSA-CHACHA20-POLY1305"))[0] == "TLSv1.2"


@pytest.mark.parametrize("name, configure", [
    ("TLS 1.0", only(ssl.TLSVersion.TLSv1)),
    ("TLS 1.1", only(ssl.TLSVersion.TLSv1_1)),
    ("TLS 1.2 with CBC suites only", only(ssl.TLSVersion.TLSv1_2, "ECDHE-ECDSA-AES128-SHA:ECDHE-ECDSA-AES256-SHA:AES128-SHA")),
    ("TLS 1.2 without forward secrecy", only(ssl.TLSVersion.TLSv1_2, "AES128-GCM-SHA256:AES256-GCM-SHA384")),
])
def test_old_protocols_and_weak_suites_are_refused_by_the_server(server, name, configure):
    port, ca = server
    with pytest.raises(ssl.SSLError) as err:
        handshake(port, ca, configure)
    # An alert from the server: the client did offer these.
    assert "ALERT" in str(err.value).upper(), f"{name}: {err.value}"
