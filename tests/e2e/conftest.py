"""Fixtures for the e2e suite: one real control plane per session, a fresh
model namespace and a digest-gate release per test."""

from __future__ import annotations

import itertools

import pytest

from cluster import ControlPlane, binaries
from harness import FIXTURES, MODEL_LABEL, PERMISSIVE_CRDS, RELEASE_NAMESPACE, Release


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
        # chart's exclusion names (the README tells 1.20 users the same).
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


@pytest.fixture
def release(cluster, tmp_path) -> Release:
    # A control plane that died mid-session fails here with its log, not
    # later as a puzzling kubectl error.
    cluster.check_alive()
    r = Release(cluster, tmp_path)
    yield r
    if r.installed:
        r.uninstall()
    # Leave no webhook behind for the next test, whatever this one did.
    assert not r.webhook_configurations(), "a webhook configuration outlived its release"
