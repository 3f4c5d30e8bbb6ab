"""Fixtures for the e2e suite: one real control plane per session, a fresh
model namespace and a digest-gate release per test."""

from __future__ import annotations

import base64
import itertools
import json
import os
import pathlib
import subprocess
import sys

import pytest

from cluster import ROOT, ControlPlane, binaries
from harness import FIXTURES, MODEL_LABEL, PERMISSIVE_CRDS, RELEASE_NAMESPACE, Release, WebhookImage
from runtime import Runtime
from support import docs_sample

sys.path.insert(0, str(ROOT / "tests" / "registry"))
import registries  # noqa: E402 (needs the path above)

PULLER, PULLER_PASSWORD = "node", "pull-s3cret"
PUSHER, PUSHER_PASSWORD = "release", "push-s3cret"


@pytest.fixture(scope="session")
def cluster(tmp_path_factory) -> ControlPlane:
    cp = ControlPlane(tmp_path_factory.mktemp("control-plane"), binaries())
    try:
        cp.start()
        # The ModelMesh copy of KServe's ServingRuntime CRD installs on 1.20.
        cp.kubectl("apply", "-f", str(FIXTURES / "crds" / "modelmesh-serving_serving.kserve.io_servingruntimes.yaml"))
        for crd in PERMISSIVE_CRDS:
            cp.apply(crd)
        for crd in ["servingruntimes.serving.kserve.io"] + [c["metadata"]["name"] for c in PERMISSIVE_CRDS]:
            cp.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
        # 1.20 has no kubernetes.io/metadata.name label: label by hand what the
        # chart's exclusion names (the install notes tell 1.20 users the same).
        cp.namespace("kube-system")
        cp.namespace(RELEASE_NAMESPACE)
        yield cp
    finally:
        cp.stop()


_counter = itertools.count()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On a failure, attach the tails of the webhook's and the control plane's
    logs: a CI run leaves nothing else behind to read."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        release = item.funcargs.get("release") if hasattr(item, "funcargs") else None
        if release is not None and release.pod.log_path.exists():
            lines = release.pod.log_path.read_text(errors="replace").splitlines()
            report.sections.append(("digest-gate log", "\n".join(lines[-40:])))
        cluster = item.funcargs.get("cluster") if hasattr(item, "funcargs") else None
        for p in (cluster.processes if cluster else []):
            report.sections.append((f"{p.name} log", p.tail(15)))


@pytest.fixture
def models(cluster) -> str:
    """A fresh model-serving namespace that digest-gate's selector picks."""
    name = f"models-{next(_counter)}"
    cluster.namespace(name, MODEL_LABEL)
    yield name
    cluster.delete_namespace(name)


def image_layout() -> pathlib.Path:
    layout = pathlib.Path(os.environ.get("DIGEST_GATE_E2E_IMAGE", ROOT / "target" / "image"))
    if not (layout / "index.json").exists():
        pytest.fail(f"no image at {layout}: `make image` builds it (make e2e does); "
                    "the container tests never fall back to the host binary")
    return layout


@pytest.fixture(scope="session")
def webhook_image(tmp_path_factory):
    """digest-gate's own image (`make image`), pushed with `make image-push`
    as docs/install.md shows to a registry with TLS from a test CA and htpasswd
    auth, and the node that pulls it with the pod's imagePullSecret."""
    layout = image_layout()
    work = tmp_path_factory.mktemp("image-registry")
    certs = work / "certs"
    registries.make_ca(certs)
    with registries.Registry(work, certs, "registry", users={PUSHER: PUSHER_PASSWORD,
                                                             PULLER: PULLER_PASSWORD}) as registry:
        repository = f"{registry.host}/digest-gate/digest-gate"
        # docs/install.md's sample: `make image` is what `make e2e` ran;
        # `skopeo login` asks for a password at a terminal, so its
        # credentials go in SKOPEO_FLAGS; the push runs as written, to this
        # registry; the chart is installed with the values it names
        # (WebhookImage.values).
        make_image, login, push_step, install = docs_sample("install-own-image")
        assert make_image.command == "make image" and login.command.startswith("skopeo login ")
        assert "--set image.repository=" in install.command and "--set image.digest=" in install.command
        example = push_step.command.split("IMAGE=", 1)[1]
        push = subprocess.run(
            ["bash", "-c", push_step.command.replace(example, repository)
             + f" IMAGE_DIR={layout} SKOPEO_FLAGS='--dest-cert-dir={registry.skopeo_certs()}"
             + f" --dest-creds={PUSHER}:{PUSHER_PASSWORD}' --no-print-directory"],
            cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert push.returncode == 0, push.stdout + push.stderr
        pushed = push.stdout.strip().splitlines()[-1]
        (entry,) = json.loads((layout / "index.json").read_text())["manifests"]
        assert pushed == f"{repository}@{entry['digest']}", push.stdout
        (prints,) = push_step.prints
        assert pushed.startswith(prints.replace(example, repository))
        auth = base64.b64encode(f"{PULLER}:{PULLER_PASSWORD}".encode()).decode()
        secret = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
                  "metadata": {"name": "e2e-image-pull", "namespace": RELEASE_NAMESPACE},
                  "data": {".dockerconfigjson": base64.b64encode(json.dumps(
                      {"auths": {registry.host: {"auth": auth}}}).encode()).decode()}}
        yield WebhookImage(repository, entry["digest"], secret,
                           Runtime(work / "node-images", registry.skopeo_certs()))


@pytest.fixture
def release(cluster, tmp_path, request) -> Release:
    """digest-gate installed by Helm; parametrized indirectly with
    "container", its pod runs the chart's image with runc."""
    # A control plane that died mid-session fails here with its log, not
    # later as a puzzling kubectl error.
    cluster.check_alive()
    how = getattr(request, "param", "host")
    assert how in ("host", "container"), how
    r = Release(cluster, tmp_path, request.getfixturevalue("webhook_image") if how == "container" else None)
    yield r
    if r.installed:
        r.uninstall()
    # Leave no webhook behind for the next test, whatever this one did.
    assert not r.webhook_configurations(), "a webhook configuration outlived its release"
