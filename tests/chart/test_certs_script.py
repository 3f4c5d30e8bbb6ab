"""certs/gen-certs.sh: the certificates it makes verify, name the Service,
and digest-gate serves with them to a client that checks the name."""

from __future__ import annotations

import base64
import json
import socket
import ssl
import subprocess

import pytest

from conftest import ROOT, serving

SCRIPT = ROOT / "certs" / "gen-certs.sh"


@pytest.fixture
def certs(tmp_path):
    out = tmp_path / "certs"
    run = subprocess.run(["sh", str(SCRIPT), "--service", "digest-gate", "--namespace", "demo", "--out", str(out),
                          "--days", "30"], capture_output=True, text=True, check=True)
    return out, run.stdout.strip()


def test_certificates_verify_and_name_the_service(certs):
    out, ca_bundle = certs
    for name in ["ca.crt", "ca.key", "tls.crt", "tls.key"]:
        assert (out / name).exists(), name
    assert (out / "tls.key").stat().st_mode & 0o077 == 0, "the key must not be readable by others"
    verify = subprocess.run(["openssl", "verify", "-CAfile", str(out / "ca.crt"), str(out / "tls.crt")],
                            capture_output=True, text=True, check=True)
    assert "OK" in verify.stdout
    sans = subprocess.run(["openssl", "x509", "-in", str(out / "tls.crt"), "-noout", "-ext", "subjectAltName"],
                          capture_output=True, text=True, check=True).stdout
    for name in ["DNS:digest-gate.demo.svc", "DNS:digest-gate.demo.svc.cluster.local", "DNS:localhost", "IP Address:127.0.0.1"]:
        assert name in sans
    assert base64.b64decode(ca_bundle) == (out / "ca.crt").read_bytes()


def test_bad_arguments_are_refused(tmp_path):
    for argv in (["--days", "soon"], ["--bogus"], ["--service"]):
        run = subprocess.run(["sh", str(SCRIPT), "--out", str(tmp_path), *argv], capture_output=True, text=True)
        assert run.returncode != 0, argv
        assert run.stderr


def test_digest_gate_serves_with_them(certs):
    out, _ = certs
    with serving(out) as port:
        context = ssl.create_default_context(cafile=str(out / "ca.crt"))
        review = json.loads((ROOT / "examples" / "review.json").read_text())
        # The apiserver connects to the Service name; verify the certificate for it.
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with context.wrap_socket(raw, server_hostname="digest-gate.demo.svc") as tls:
                body = json.dumps(review).encode()
                tls.sendall(b"POST /mutate HTTP/1.1\r\nHost: digest-gate.demo.svc\r\nContent-Type: application/json\r\n"
                            + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
                response = b""
                while chunk := tls.recv(65536):
                    response += chunk
        head, _, payload = response.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        answer = json.loads(payload)
        assert answer["response"]["uid"] == review["request"]["uid"]
        assert answer["response"]["patchType"] == "JSONPatch"
        # A name the certificate does not carry is refused by the client.
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with pytest.raises(ssl.SSLCertVerificationError):
                context.wrap_socket(raw, server_hostname="other.demo.svc")
