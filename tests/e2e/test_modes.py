"""enforce and audit, as the person running `kubectl apply` meets them."""

from __future__ import annotations

from harness import INCIDENT_IMAGE, PROMOTED_IMAGE, incident_runtime, warnings


def test_enforce_mode_denies_with_digest_gates_message(cluster, release, models):
    release.install({"mode": "enforce"})
    assert release.pod.arg("--mode") == "enforce"
    result = cluster.apply(incident_runtime(models), check=False)

    assert result.returncode != 0
    assert cluster.get("servingruntime", "ovms", models) is None
    # kubectl prints the apiserver's refusal with digest-gate's own message:
    # which webhook, which container, why, and the reference to use instead.
    assert 'admission webhook "mutate.digest-gate.dev" denied the request' in result.stderr
    assert 'container "ovms"' in result.stderr
    assert "sha256:7ef272bc7be8" in result.stderr or INCIDENT_IMAGE in result.stderr
    assert PROMOTED_IMAGE in result.stderr
    assert release.pod.metric("digest_gate_admission_requests_total", endpoint="mutate",
                              kind="ServingRuntime", verdict="deny") == 1


def test_audit_mode_admits_unchanged_with_the_warning(cluster, release, models):
    release.install({"mode": "audit"})
    result = cluster.apply(incident_runtime(models))

    stored = cluster.get("servingruntime", "ovms", models)
    assert stored["spec"]["containers"][0]["image"] == INCIDENT_IMAGE
    assert "digest-gate.dev/rewritten-images" not in (stored["metadata"].get("annotations") or {})
    (warning,) = [w for w in warnings(result.stderr) if w.startswith("digest-gate")]
    assert warning.startswith("digest-gate audit:")
    assert "sha256:8af20e48bb48" in warning and len(warning) <= 120
    # What it would have done reaches the apiserver's audit log.
    events = cluster.audit_events(lambda e: e.get("objectRef", {}).get("resource") == "servingruntimes"
                                  and e["objectRef"].get("namespace") == models and e["verb"] == "create")
    assert events, "no audit event for the ServingRuntime"
    annotations = events[-1].get("annotations", {})
    assert "sha256:8af20e48" in annotations.get("mutate.digest-gate.dev/would-rewrite", ""), annotations
