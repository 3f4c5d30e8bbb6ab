"""The incident, replayed on a real apiserver: a runtime pinned to a digest
that was never promoted is stored with the promoted one, whichever way it
arrives (applied directly, made by a controller, embedded in the dashboard's
ConfigMap), and the person applying it is told."""

from __future__ import annotations

import json

import pytest

from cluster import wait_until
from harness import FIXTURES, INCIDENT_IMAGE, PROMOTED_IMAGE, incident_runtime, load_yaml, warnings

# In the chart's own image, run as a container (test_image.py).
@pytest.mark.parametrize("release", ["container"], indirect=True)
def test_incident_servingruntime_is_stored_with_the_promoted_digest_and_kubectl_warns(cluster, release, models):
    release.install()
    applied = cluster.apply(incident_runtime(models))

    stored = cluster.get("servingruntime", "ovms", models)
    assert stored["spec"]["containers"][0]["image"] == PROMOTED_IMAGE
    record = json.loads(stored["metadata"]["annotations"]["digest-gate.dev/rewritten-images"])
    assert INCIDENT_IMAGE in json.dumps(record) and PROMOTED_IMAGE in json.dumps(record)
    # kubectl shows digest-gate's warning to the person who applied it.
    (warning,) = [w for w in warnings(applied.stderr) if w.startswith("digest-gate")]
    assert "sha256:7ef272bc7be8" in warning and "sha256:8af20e48bb48" in warning
    assert len(warning) <= 120
    assert release.pod.metric("digest_gate_admission_requests_total", endpoint="mutate",
                              kind="ServingRuntime", verdict="rewrite") == 1


def test_pod_made_by_the_replicaset_controller_carries_the_promoted_digest(cluster, release, models):
    """The incident's real path: nobody applies the runtime Pod; a controller
    makes it from a template that still names the stale digest."""
    release.install()
    labels = {"app": "ovms"}
    cluster.apply({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "modelmesh-serving-ovms", "namespace": models},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [{"name": "ovms", "image": INCIDENT_IMAGE}]}}},
    })

    def pods():
        return cluster.get("pods", namespace=models)["items"]
    (pod,) = wait_until("the ReplicaSet controller's Pod", pods)
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
    assert pod["spec"]["containers"][0]["image"] == PROMOTED_IMAGE
    assert "digest-gate.dev/rewritten-images" in pod["metadata"]["annotations"]
    # The Deployment itself is not a reviewed kind by default (webhook.workloads).
    deployment = cluster.get("deployment", "modelmesh-serving-ovms", models)
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == INCIDENT_IMAGE


def test_server_dry_run_gets_the_same_answer_and_stores_nothing(cluster, release, models):
    release.install()
    dry = cluster.apply(incident_runtime(models), "--dry-run=server", "-o", "json")
    answered = json.loads(dry.stdout)
    assert answered["spec"]["containers"][0]["image"] == PROMOTED_IMAGE
    assert any(w.startswith("digest-gate") for w in warnings(dry.stderr))
    assert cluster.get("servingruntime", "ovms", models) is None

    # The real apply gets exactly the dry run's answer.
    real = cluster.apply(incident_runtime(models), "-o", "json")
    stored = json.loads(real.stdout)
    assert stored["spec"] == answered["spec"]
    assert warnings(real.stderr) == warnings(dry.stderr)
    assert (stored["metadata"]["annotations"]["digest-gate.dev/rewritten-images"]
            == answered["metadata"]["annotations"]["digest-gate.dev/rewritten-images"])


def test_incident_configmap_is_rewritten_in_place_with_the_chart_defaults(cluster, release):
    """The stale servingruntimes-config of RHODS 1.21, applied into the
    dashboard's namespace, is stored with the promoted digest in its embedded
    runtime, the rest of the text left as it was, with the chart's default
    values: ConfigMaps have entries of their own, selecting the application
    namespaces, so the Pods there are never sent to the webhook."""
    namespace = "redhat-ods-applications"
    # No model-namespace label: only the ConfigMap entry selects it.
    cluster.namespace(namespace)
    try:
        rel = release.install()
        # Rendered for the cluster: 1.20 has no matchConditions.
        assert "matchConditions" not in rel["manifest"]
        (cm,) = load_yaml(FIXTURES / "servingruntimes" / "01_rhods-1.21_odh-dashboard_servingruntimes-config.cm.yaml")
        original = cm["data"]["default-config"]
        assert INCIDENT_IMAGE in original
        applied = cluster.apply(cm, namespace=namespace)

        stored = cluster.get("configmap", "servingruntimes-config", namespace)["data"]["default-config"]
        assert INCIDENT_IMAGE not in stored and PROMOTED_IMAGE in stored
        assert stored == original.replace(INCIDENT_IMAGE, PROMOTED_IMAGE)
        assert any("sha256:8af20e48bb48" in w for w in warnings(applied.stderr))

        # Another name is allowed as it is, without its data being judged
        # (before 1.28 the apiserver still sends it).
        other = dict(cm, metadata=dict(cm["metadata"], name="my-runtimes-draft"))
        cluster.apply(other, namespace=namespace)
        assert cluster.get("configmap", "my-runtimes-draft", namespace)["data"]["default-config"] == original
        assert release.pod.metric("digest_gate_admission_requests_total", endpoint="mutate", kind="ConfigMap",
                                  verdict="skipped") == 1

        # A Pod in that namespace never reaches the webhook.
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dashboard", "namespace": namespace},
               "spec": {"containers": [{"name": "ovms", "image": INCIDENT_IMAGE}]}}
        cluster.apply(pod)
        assert cluster.get("pod", "dashboard", namespace)["spec"]["containers"][0]["image"] == INCIDENT_IMAGE
        assert release.pod.metric("digest_gate_admission_requests_total", kind="Pod") == 0
    finally:
        cluster.delete_namespace(namespace)
