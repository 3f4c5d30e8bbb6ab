"""Shared helpers: render the chart with real Helm (helm-python-sdk), parse
the manifests, and find objects in them."""

from __future__ import annotations

import contextlib
import pathlib
import sys

import helm_python as helm
import pytest
import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from support import ROOT, BackgroundServer, QuietHandler, binary, free_port, send_json, serve  # noqa: E402 (needs the path above)

# The tests import these from here.
__all__ = ["ROOT", "binary", "free_port"]

CHART = ROOT / "charts" / "digest-gate"
RELEASE = "dg"
NAMESPACE = "digest-gate"


@contextlib.contextmanager
def serving(certs: pathlib.Path, *extra: str, admin_port: bool = False):
    """Runs `digest-gate serve` on loopback with certs/tls.{crt,key}, the
    example allowlist and `extra` arguments until ready; yields the webhook
    port (and the admin port, with admin_port); on exit sends SIGTERM and
    checks the process exits 0."""
    with serve(certs / "tls.crt", certs / "tls.key", "--allowlist", str(ROOT / "examples" / "allowlist.yaml"),
               *extra) as (port, admin):
        yield (port, admin) if admin_port else port


def parse(manifests: dict[str, str]) -> list[dict]:
    """Every object of a render, in template order."""
    objects = []
    for name in sorted(manifests):
        if not name.endswith((".yaml", ".yml")):
            continue
        for doc in yaml.safe_load_all(manifests[name]):
            if doc:
                objects.append(doc)
    return objects


def render(values: dict | None = None, *, namespace: str = NAMESPACE, config: helm.Config | None = None,
           is_upgrade: bool | None = None) -> list[dict]:
    chart = helm.Chart.load(str(CHART))
    if config is None:
        manifests = chart.render(values, name=RELEASE, namespace=namespace)
    else:
        manifests = config.render(chart, values, name=RELEASE, namespace=namespace, is_upgrade=is_upgrade)
    return parse(manifests)


def find(objects: list[dict], kind: str, name: str | None = None) -> list[dict]:
    return [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(objects: list[dict], kind: str) -> dict:
    found = find(objects, kind)
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def container(objects: list[dict]) -> dict:
    return one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]


def args(objects: list[dict]) -> list[str]:
    return container(objects)["args"]


class FakeApiserver(BackgroundServer):
    """A tiny HTTP server that answers Helm's `lookup` of Secrets the way the
    apiserver does (discovery of core/v1, then GET of one Secret) and its
    question of the server's version."""

    def __init__(self, secrets: dict[tuple[str, str], dict], version: str = "v1.20.0"):
        self.secrets = secrets
        self.version = version
        self.requests: list[str] = []
        outer = self

        class Handler(QuietHandler):
            def do_GET(self):  # noqa: N802 (http.server's naming)
                path = self.path.split("?")[0]
                outer.requests.append(path)
                send_json(self, *outer.answer(path))

        super().__init__(Handler)

    def answer(self, path: str) -> tuple[int, dict]:
        # Helm reads the server's version for .Capabilities.KubeVersion.
        if path == "/version":
            major, minor = self.version.lstrip("v").split(".")[:2]
            return 200, {"major": major, "minor": minor, "gitVersion": self.version,
                         "platform": "linux/amd64"}
        if path == "/api/v1":
            return 200, {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": "v1",
                "resources": [{"name": "secrets", "singularName": "secret", "namespaced": True,
                               "kind": "Secret", "verbs": ["get", "list"]}],
            }
        parts = path.strip("/").split("/")
        if len(parts) == 6 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "secrets":
            secret = self.secrets.get((parts[3], parts[5]))
            if secret is not None:
                return 200, secret
        return 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def default_objects() -> list[dict]:
    return render()
