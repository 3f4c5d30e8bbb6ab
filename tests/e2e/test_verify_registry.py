"""The chart's `allowlist.verifyRegistry` on a real apiserver, against a
real registry on loopback (tests/registry's harness: the distribution
registry with htpasswd auth, TLS from a test CA): the pull secret is a real
kubernetes.io/dockerconfigjson Secret mounted as the chart mounts it, the CA
its caBundle. A missing secret does not keep the webhook from starting; once
credentials that work arrive (as the kubelet swaps a rotated Secret in), a
rewrite to a promoted digest the registry does not have is denied, and a
runtime already on it is admitted with a warning. The NetworkPolicy's egress
is render-tested only (tests/chart): this control plane has no CNI."""

from __future__ import annotations

import base64
import json
import sys

import pytest

from cluster import ROOT, wait_until
from harness import RELEASE_NAMESPACE, incident_runtime, warnings

USER, PASSWORD = "puller", "s3cret"
NEVER_PUSHED = "sha256:" + "7ef272bc" * 8
NOT_PROMOTED = "sha256:" + "8af20e48" * 8
SECRET = "registry-pull"


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    """A registry that asks for credentials, with one image pushed."""
    sys.path.insert(0, str(ROOT / "tests" / "registry"))
    import registries as reg

    work = tmp_path_factory.mktemp("verify-registry")
    certs = work / "certs"
    reg.make_ca(certs)
    layout = reg.Layout(work / "layout")
    plain = layout.image("linux", "amd64", text="plain")
    layout.tag(plain, "plain")
    with reg.Registry(work, certs, "source", users={USER: PASSWORD}) as source:
        source.push(layout, "plain", "models/plain")
        yield {"host": source.host, "ca": (certs / "ca.crt").read_text(), "plain": plain["digest"]}


def allowlist(host: str, plain: str) -> str:
    return (f"apiVersion: digest-gate.dev/v1alpha1\nkind: Allowlist\nmetadata: {{name: promoted}}\nspec:\n"
            f"  repositories:\n"
            f"    - name: {host}/models/gone\n      digests: [{{digest: {NEVER_PUSHED}}}]\n"
            f"    - name: {host}/models/plain\n      digests: [{{digest: {plain}}}]\n")


def pull_secret(cluster, host: str, password: str):
    config = {"auths": {host: {"auth": base64.b64encode(f"{USER}:{password}".encode()).decode()}}}
    cluster.apply({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
                   "metadata": {"name": SECRET, "namespace": RELEASE_NAMESPACE},
                   "data": {".dockerconfigjson": base64.b64encode(json.dumps(config).encode()).decode()}})


def runtime(namespace: str, name: str, image: str) -> dict:
    sr = incident_runtime(namespace)
    sr["metadata"]["name"] = name
    sr["spec"]["containers"][0]["image"] = image
    return sr


def test_the_chart_verifies_with_its_pull_secret_and_denies_a_rewrite_to_a_missing_digest(
        cluster, release, models, registry):
    host = registry["host"]
    cluster.kubectl("-n", RELEASE_NAMESPACE, "delete", "secret", SECRET, "--ignore-not-found")
    try:
        release.install({"allowlist": {"text": allowlist(host, registry["plain"]),
                                       "verifyRegistry": {"enabled": True, "pullSecret": SECRET,
                                                          "caBundle": registry["ca"]}},
                         "server": {"reloadInterval": "200ms"}})
        pod = release.pod
        # No Secret yet: the webhook serves (the volume is optional), counts
        # the credentials it cannot read, and the allowlist decides alone.
        assert pod.arg("--registry-auth").endswith("/.dockerconfigjson")
        wait_until("a setup error counted",
                   lambda: pod.metric("digest_gate_registry_verification_errors_total", reason="setup") >= 1)
        assert pod.metric("digest_gate_promoted_images", state="unverifiable") == 2
        applied = cluster.apply(runtime(models, "before", f"{host}/models/gone@{NOT_PROMOTED}"))
        stored = cluster.get("servingruntime", "before", models)
        assert stored["spec"]["containers"][0]["image"] == f"{host}/models/gone@{NEVER_PUSHED}", applied.stderr

        # A Secret with a wrong password: refused, still unverifiable.
        pull_secret(cluster, host, "wrong")
        pod.sync_volumes()
        wait_until("refused credentials counted",
                   lambda: pod.metric("digest_gate_registry_verification_errors_total", reason="credentials") >= 1)
        # The right one, rotated in as the kubelet does: verified within a
        # reload interval, and the rewrite to the missing digest is denied.
        pull_secret(cluster, host, PASSWORD)
        pod.sync_volumes()
        wait_until("the missing digest known",
                   lambda: pod.metric("digest_gate_promoted_images", state="missing") == 1)
        assert pod.metric("digest_gate_promoted_images", state="ok") == 1
        assert pod.metric("digest_gate_promoted_images", state="unverifiable") == 0
        denied = cluster.apply(runtime(models, "after", f"{host}/models/gone@{NOT_PROMOTED}"), check=False)
        assert denied.returncode != 0, denied.stdout
        assert f"would be rewritten to '{host}/models/gone@{NEVER_PUSHED}'" in denied.stderr, denied.stderr
        assert "promoted by Allowlist promoted" in denied.stderr and "(MANIFEST_UNKNOWN)" in denied.stderr
        assert cluster.get("servingruntime", "after", models) is None
        # Already on the promoted-but-missing digest: admitted, with a warning.
        applied = cluster.apply(runtime(models, "on-it", f"{host}/models/gone@{NEVER_PUSHED}"))
        assert any("is promoted, but missing" in w for w in warnings(applied.stderr)), applied.stderr
        # A pullable one: nothing said.
        applied = cluster.apply(runtime(models, "fine", f"{host}/models/plain@{registry['plain']}"))
        assert not [w for w in warnings(applied.stderr) if w.startswith("digest-gate")], applied.stderr
    finally:
        cluster.kubectl("-n", RELEASE_NAMESPACE, "delete", "secret", SECRET, "--ignore-not-found")
