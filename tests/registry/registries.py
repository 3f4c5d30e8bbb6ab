"""Real registries on loopback for the registry-facing tests.

Debian's `docker-registry` (the CNCF distribution registry 2.8) serves TLS
from a test CA, with htpasswd or token auth and blob deletion enabled;
Debian's `skopeo` pushes OCI layouts built here by hand (tiny layers, no
network). `make registry-tools` installs both; the paths can be overridden
with DIGEST_GATE_DOCKER_REGISTRY and DIGEST_GATE_SKOPEO.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import pathlib
import shutil
import socket
import ssl
import subprocess
import sys
import tarfile
import time
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from support import free_port  # noqa: E402 (needs the path above)

CACHE = pathlib.Path(os.environ.get("DIGEST_GATE_REGISTRY_CACHE", pathlib.Path.home() / ".cache" / "digest-gate-registry"))


def tool(env: str, cached: pathlib.Path, name: str) -> str:
    path = os.environ.get(env) or (str(cached) if cached.exists() else shutil.which(name))
    if not path:
        raise RuntimeError(f"{name} is not installed: run `make registry-tools`")
    return path


def docker_registry() -> str:
    return tool("DIGEST_GATE_DOCKER_REGISTRY", CACHE / "docker-registry", "docker-registry")


def skopeo() -> str:
    return tool("DIGEST_GATE_SKOPEO", CACHE / "skopeo-not-cached", "skopeo")


# --- certificates ---------------------------------------------------------

def openssl(*args: str, cwd: pathlib.Path):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(out: pathlib.Path, name: str = "ca") -> pathlib.Path:
    """A CA key and self-signed certificate: out/NAME.{key,crt}."""
    out.mkdir(parents=True, exist_ok=True)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN=digest-gate test {name}",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout", f"{name}.key", "-out", f"{name}.crt", cwd=out)
    return out / f"{name}.crt"


def make_leaf(out: pathlib.Path, name: str, ca: str = "ca", san: str = "IP:127.0.0.1,DNS:localhost") -> pathlib.Path:
    """A key and a certificate for 127.0.0.1 signed by out/CA: out/NAME.{key,crt}."""
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", f"{name}.key",
            "-out", f"{name}.csr", cwd=out)
    (out / f"{name}.ext").write_text(f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n"
                                     "keyUsage=digitalSignature,keyEncipherment\n")
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
            "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt", cwd=out)
    return out / f"{name}.crt"


# --- OCI layouts ------------------------------------------------------------

def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def canonical(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


class Layout:
    """An OCI image layout directory built blob by blob."""

    def __init__(self, path: pathlib.Path):
        self.path = path
        (path / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
        (path / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
        self.refs: list[dict] = []

    def blob(self, data: bytes, media_type: str, **extra) -> dict:
        d = digest(data)
        (self.path / "blobs" / "sha256" / d.split(":")[1]).write_bytes(data)
        return {"mediaType": media_type, "digest": d, "size": len(data), **extra}

    def layer(self, text: str) -> dict:
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w") as tar:
            data = text.encode()
            info = tarfile.TarInfo("hello.txt")
            info.size = len(data)
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
        return self.blob(gzip.compress(raw.getvalue(), mtime=0), "application/vnd.oci.image.layer.v1.tar+gzip")

    def image(self, os_: str, arch: str, variant: str | None = None, text: str = "hello") -> dict:
        """An image manifest for a platform; its descriptor."""
        layer = self.layer(f"{text} {os_}/{arch}")
        config = {"architecture": arch, "os": os_, "rootfs": {"type": "layers", "diff_ids": []},
                  "config": {"Cmd": ["/hello"]}}
        if variant:
            config["variant"] = variant
        config_d = self.blob(canonical(config), "application/vnd.oci.image.config.v1+json")
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": config_d, "layers": [layer]}
        platform = {"os": os_, "architecture": arch, **({"variant": variant} if variant else {})}
        return self.blob(canonical(manifest), manifest["mediaType"], platform=platform)

    def index(self, children: list[dict]) -> dict:
        index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": children}
        return self.blob(canonical(index), index["mediaType"])

    def manifest(self, manifest: dict) -> dict:
        return self.blob(canonical(manifest), manifest.get("mediaType", "application/vnd.oci.image.manifest.v1+json"))

    def tag(self, descriptor: dict, tag: str):
        entry = {k: v for k, v in descriptor.items() if k in ("mediaType", "digest", "size")}
        entry["annotations"] = {"org.opencontainers.image.ref.name": tag}
        self.refs.append(entry)
        (self.path / "index.json").write_text(json.dumps(
            {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": self.refs}))


def cosign_signature(layout: Layout, subject: str) -> dict:
    """A cosign `.sig` manifest in the shape cosign writes (an image config,
    one simple-signing layer with its signature annotation)."""
    payload = canonical({"critical": {"identity": {"docker-reference": "127.0.0.1/x"},
                                      "image": {"docker-manifest-digest": subject},
                                      "type": "cosign container image signature"}, "optional": None})
    layer = layout.blob(payload, "application/vnd.dev.cosign.simplesigning.v1+json",
                        annotations={"dev.cosignproject.cosign/signature": base64.b64encode(b"sig").decode()})
    config = layout.blob(canonical({"architecture": "", "os": "", "rootfs": {"type": "layers", "diff_ids": []},
                                    "config": {}}), "application/vnd.oci.image.config.v1+json")
    return layout.manifest({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                            "config": config, "layers": [layer]})


def cosign_attestation(layout: Layout, subject: str) -> dict:
    """A cosign `.att` manifest: a DSSE envelope layer."""
    envelope = canonical({"payloadType": "application/vnd.in-toto+json",
                          "payload": base64.b64encode(canonical({"subject": [{"digest": {"sha256": subject[7:]}}]})).decode(),
                          "signatures": [{"sig": "c2ln"}]})
    layer = layout.blob(envelope, "application/vnd.dsse.envelope.v1+json",
                        annotations={"predicateType": "https://slsa.dev/provenance/v0.2"})
    config = layout.blob(canonical({"architecture": "", "os": "", "rootfs": {"type": "layers", "diff_ids": []},
                                    "config": {}}), "application/vnd.oci.image.config.v1+json")
    return layout.manifest({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                            "config": config, "layers": [layer]})


def artifact(layout: Layout) -> dict:
    """An OCI 1.1 artifact (an SBOM): artifactType, the empty config."""
    empty = layout.blob(b"{}", "application/vnd.oci.empty.v1+json")
    sbom = layout.blob(b'{"spdxVersion":"SPDX-2.3"}', "application/spdx+json")
    return layout.manifest({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                            "artifactType": "application/spdx+json", "config": empty, "layers": [sbom]})


# --- the registry -----------------------------------------------------------

class Registry:
    """`docker-registry serve` on a loopback port, TLS from `certs`, for the
    length of a `with` block. `users` turns on htpasswd auth; `token` (a
    dict of realm, service, issuer, rootcertbundle) token auth."""

    def __init__(self, work: pathlib.Path, certs: pathlib.Path, name: str, users: dict[str, str] | None = None,
                 token: dict | None = None, tls: bool = True):
        self.dir = work / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.certs = certs
        self.users = users or {}
        config = {
            "version": 0.1,
            "log": {"level": "error", "accesslog": {"disabled": True}},
            "storage": {"filesystem": {"rootdirectory": str(self.dir / "data")}, "delete": {"enabled": True},
                        "maintenance": {"uploadpurging": {"enabled": False}}},
            "http": {"addr": self.host, "headers": {"X-Content-Type-Options": ["nosniff"]}},
        }
        if tls:
            make_leaf(certs, name)
            config["http"]["tls"] = {"certificate": str(certs / f"{name}.crt"), "key": str(certs / f"{name}.key")}
        if users:
            import bcrypt  # only here: the benchmark runs the harness without the test venv

            lines = [f"{u}:{bcrypt.hashpw(p.encode(), bcrypt.gensalt(rounds=4)).decode()}" for u, p in users.items()]
            (self.dir / "htpasswd").write_text("\n".join(lines) + "\n")
            config["auth"] = {"htpasswd": {"realm": "digest-gate-test", "path": str(self.dir / "htpasswd")}}
        if token:
            config["auth"] = {"token": token}
        (self.dir / "config.yml").write_text(json.dumps(config))
        self.proc = None
        self.tls = tls

    def __enter__(self):
        log = open(self.dir / "registry.log", "wb")
        self.proc = subprocess.Popen([docker_registry(), "serve", str(self.dir / "config.yml")],
                                     stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"docker-registry did not start: {(self.dir / 'registry.log').read_text()}")
                time.sleep(0.05)

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def push(self, layout: Layout, tag: str, repo: str, dest_tag: str | None = None, user: str | None = None):
        """skopeo copy --all --preserve-digests oci:LAYOUT:TAG docker://HOST/REPO:TAG."""
        argv = [skopeo(), "--insecure-policy", "copy", "--all", "--preserve-digests", "--quiet",
                f"oci:{layout.path}:{tag}", f"docker://{self.host}/{repo}:{dest_tag or tag}"]
        if self.tls:
            argv.insert(-2, f"--dest-cert-dir={self.skopeo_certs()}")
        else:
            argv.insert(-2, "--dest-tls-verify=false")
        if user:
            argv.insert(-2, f"--dest-creds={user}:{self.users.get(user, '')}")
        elif self.users:
            u, p = next(iter(self.users.items()))
            argv.insert(-2, f"--dest-creds={u}:{p}")
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if done.returncode:
            raise RuntimeError(f"skopeo copy failed: {done.stderr}")

    def skopeo_certs(self) -> pathlib.Path:
        """A directory with the CA as `ca.crt`, as skopeo's --cert-dir wants."""
        d = self.certs / "skopeo"
        d.mkdir(exist_ok=True)
        shutil.copy(self.certs / "ca.crt", d / "ca.crt")
        return d

    def delete_blob(self, repo: str, blob: str, user: str | None = None):
        """DELETE /v2/REPO/blobs/DIGEST (storage.delete is enabled): a sparse mirror."""
        request = urllib.request.Request(f"https://{self.host}/v2/{repo}/blobs/{blob}", method="DELETE")
        if self.users:
            u = user or next(iter(self.users))
            creds = base64.b64encode(f"{u}:{self.users[u]}".encode()).decode()
            request.add_header("Authorization", f"Basic {creds}")
        context = ssl.create_default_context(cafile=str(self.certs / "ca.crt"))
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:
            assert answer.status == 202, answer.status


def auth_file(path: pathlib.Path, entries: dict[str, tuple[str, str]]) -> pathlib.Path:
    """A containers-auth.json with `auths` for each key."""
    auths = {k: {"auth": base64.b64encode(f"{u}:{p}".encode()).decode()} for k, (u, p) in entries.items()}
    path.write_text(json.dumps({"auths": auths}))
    return path


# --- token auth ---------------------------------------------------------------

def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenIssuer:
    """The token service of the Docker token flow (what registry.redhat.io
    and quay.io use), as a small HTTPS server: GET /token with Basic
    credentials answers a JWT granting the scope asked for, signed RS256
    with a key whose certificate (in `x5c`) chains to the CA the registry
    trusts (`rootcertbundle`). Wrong credentials get 401."""

    def __init__(self, certs: pathlib.Path, users: dict[str, str], service: str = "digest-gate-test"):
        """`certs` holds the test CA the servers' certificates come from;
        the signing key has a CA of its own there, as a registry's token
        service does."""
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization

        make_ca(certs, "token-ca")
        make_leaf(certs, "token-signer", ca="token-ca", san="DNS:token-signer")
        make_leaf(certs, "token-server")
        self.key = serialization.load_pem_private_key((certs / "token-signer.key").read_bytes(), None)
        leaf = x509.load_pem_x509_certificate((certs / "token-signer.crt").read_bytes())
        self.x5c = [base64.b64encode(leaf.public_bytes(serialization.Encoding.DER)).decode()]
        self.users = users
        self.service = service
        self.issuer = "digest-gate-test-issuer"
        self.certs = certs
        self.requests = 0

    def config(self, port: int) -> dict:
        """The registry's `auth.token` section."""
        return {"realm": f"https://127.0.0.1:{port}/token", "service": self.service, "issuer": self.issuer,
                "rootcertbundle": str(self.certs / "token-ca.crt")}

    def token(self, user: str, scopes: list[str]) -> str:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        access = []
        for scope in scopes:
            kind, _, rest = scope.partition(":")
            name, _, actions = rest.rpartition(":")
            access.append({"type": kind, "name": name, "actions": actions.split(",")})
        now = int(time.time())
        header = {"typ": "JWT", "alg": "RS256", "x5c": self.x5c}
        claims = {"iss": self.issuer, "sub": user, "aud": self.service, "exp": now + 300, "nbf": now - 10,
                  "iat": now, "jti": f"{now}-{self.requests}", "access": access}
        signing = f"{b64url(canonical(header))}.{b64url(canonical(claims))}"
        signature = self.key.sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing}.{b64url(signature)}"

    def handler(self):
        import urllib.parse
        from http.server import BaseHTTPRequestHandler

        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                issuer.requests += 1
                url = urllib.parse.urlparse(self.path)
                query = urllib.parse.parse_qs(url.query)
                header = self.headers.get("Authorization", "")
                user = None
                if header.startswith("Basic "):
                    u, _, p = base64.b64decode(header[6:]).decode().partition(":")
                    if issuer.users.get(u) != p:
                        self.send_response(401)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    user = u
                # Anonymous callers get a token granting nothing.
                token = issuer.token(user or "", query.get("scope", []) if user else [])
                body = json.dumps({"token": token, "access_token": token, "expires_in": 300}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler

    def tls(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.certs / "token-server.crt", self.certs / "token-server.key")
        return context


# --- a rate-limiting proxy ------------------------------------------------------

class RateLimiter:
    """An HTTPS reverse proxy in front of a registry (which never sends 429
    itself) that answers the first `limited` manifest requests with 429
    TOOMANYREQUESTS and `Retry-After`, then forwards. Counts what it saw."""

    def __init__(self, certs: pathlib.Path, upstream: Registry, limited: int, tamper: bool = False):
        """With `tamper`, manifest bodies are forwarded with a byte added:
        what a broken cache or a hostile proxy serves."""
        make_leaf(certs, "rate-limiter")
        self.certs = certs
        self.upstream = upstream
        self.limited = limited
        self.tamper = tamper
        self.refused = 0
        self.forwarded = 0

    def handler(self):
        import http.client
        from http.server import BaseHTTPRequestHandler

        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def answer(self):
                if "/manifests/" in self.path and proxy.refused < proxy.limited:
                    proxy.refused += 1
                    body = b'{"errors":[{"code":"TOOMANYREQUESTS","message":"slow down","detail":null}]}'
                    self.send_response(429)
                    self.send_header("Retry-After", "1")
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(body)
                    return
                proxy.forwarded += 1
                context = ssl.create_default_context(cafile=str(proxy.certs / "ca.crt"))
                conn = http.client.HTTPSConnection("127.0.0.1", proxy.upstream.port, context=context, timeout=10)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn.request(self.command, self.path, headers=headers)
                answer = conn.getresponse()
                body = answer.read()
                if proxy.tamper and "/manifests/" in self.path and answer.status == 200:
                    body += b" "
                self.send_response(answer.status)
                for k, v in answer.getheaders():
                    if k.lower() not in ("connection", "transfer-encoding", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)
                conn.close()

            do_GET = answer
            do_HEAD = answer

        return Handler

    def tls(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.certs / "rate-limiter.crt", self.certs / "rate-limiter.key")
        return context


# --- an HTTPS_PROXY ---------------------------------------------------------------

class ConnectProxy:
    """A forward proxy as HTTPS_PROXY names one: CONNECT host:port, then a
    byte tunnel. Counts the tunnels it opened."""

    def __init__(self):
        self.tunnels: list[str] = []

    def handler(self):
        import select
        from http.server import BaseHTTPRequestHandler

        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_CONNECT(self):
                host, _, port = self.path.rpartition(":")
                proxy.tunnels.append(self.path)
                upstream = socket.create_connection((host, int(port)), timeout=10)
                self.send_response(200, "Connection established")
                self.end_headers()
                sockets = [self.connection, upstream]
                try:
                    while True:
                        ready, _, _ = select.select(sockets, [], [], 10)
                        if not ready:
                            return
                        for s in ready:
                            data = s.recv(65536)
                            if not data:
                                return
                            (upstream if s is self.connection else self.connection).sendall(data)
                finally:
                    upstream.close()

        return Handler
