"""An allowlist edit that would not load is refused by the apiserver before
any replica reads it (the validate-allowlist entry, issue 15), and the
release namespace is never blocked by a down webhook."""

from __future__ import annotations

from harness import FULLNAME, PROMOTED_DIGEST, RELEASE_NAMESPACE, edited


def test_a_broken_allowlist_edit_is_refused_with_the_loaders_message(cluster, release):
    release.install()
    name = f"{FULLNAME}-allowlist"
    configmap = cluster.get("configmap", name, RELEASE_NAMESPACE)
    assert configmap["metadata"]["labels"]["digest-gate.dev/allowlist"] == "true"
    text = configmap["data"]["source.yaml"]
    line = next(i for i, t in enumerate(text.splitlines(), 1) if PROMOTED_DIGEST in t)

    refused = cluster.apply(edited(configmap, text.replace(PROMOTED_DIGEST, "sha256:abc")), check=False)
    assert refused.returncode != 0
    assert 'admission webhook "validate-allowlist.digest-gate.dev" denied the request' in refused.stderr, \
        refused.stderr
    assert f"source.yaml:{line}:" in refused.stderr and "64 hex characters" in refused.stderr, refused.stderr
    assert cluster.get("configmap", name, RELEASE_NAMESPACE)["data"]["source.yaml"] == text
    # (kubectl apply may send an edit twice: it patches in the missing last-applied annotation.)
    assert release.pod.metric("digest_gate_admission_requests_total", endpoint="validate-allowlist",
                              verdict="deny") >= 1

    # A good edit goes through, and is checked too.
    good = text + "\n# reviewed by the platform team\n"
    cluster.apply(edited(configmap, good))
    assert cluster.get("configmap", name, RELEASE_NAMESPACE)["data"]["source.yaml"] == good
    assert release.pod.metric("digest_gate_admission_requests_total", endpoint="validate-allowlist",
                              verdict="allow") >= 1
    judged = release.pod.metric("digest_gate_admission_requests_total", endpoint="validate-allowlist")

    # Only labelled ConfigMaps are judged: any other in the release namespace is never sent.
    other = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "notes", "namespace": RELEASE_NAMESPACE},
             "data": {"source.yaml": "registry.example.com/x@sha256:abc\n"}}
    cluster.apply(other)
    assert release.pod.metric("digest_gate_admission_requests_total", endpoint="validate-allowlist") == judged
    assert release.pod.metric("digest_gate_admission_requests_total") == judged

    # With the webhook down, nothing in the release namespace is blocked:
    # the allowlist can always be fixed.
    release.pod.stop()
    fixed = good + "# fixed while digest-gate was down\n"
    cluster.apply(edited(configmap, fixed))
    assert cluster.get("configmap", name, RELEASE_NAMESPACE)["data"]["source.yaml"] == fixed
    cluster.kubectl("-n", RELEASE_NAMESPACE, "delete", "configmap", "notes")
