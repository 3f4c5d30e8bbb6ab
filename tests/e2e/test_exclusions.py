"""The webhook can never block its own recovery: its namespace and
kube-system are never sent to it, even when it is down with
failurePolicy: Fail, while the namespaces it guards refuse what it cannot
review."""

from __future__ import annotations

import subprocess

from cluster import binary, wait_until
from harness import FULLNAME, INCIDENT_IMAGE, RELEASE_NAMESPACE, ROOT


def pod(name: str, namespace: str, image: str = INCIDENT_IMAGE) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [{"name": "c", "image": image}]}}


def test_release_namespace_and_kube_system_are_never_intercepted(cluster, release, models):
    release.install()
    for namespace in (RELEASE_NAMESPACE, "kube-system"):
        # Labelled like a model namespace: the exclusion still wins.
        cluster.kubectl("label", "namespace", namespace, "modelmesh-enabled=true", "--overwrite")
    try:
        for namespace in (RELEASE_NAMESPACE, "kube-system"):
            cluster.apply(pod("never-reviewed", namespace))
            stored = cluster.get("pod", "never-reviewed", namespace)
            assert stored["spec"]["containers"][0]["image"] == INCIDENT_IMAGE, namespace
            cluster.kubectl("-n", namespace, "delete", "pod", "never-reviewed", "--wait=false")
        assert release.pod.metric("digest_gate_admission_requests_total") == 0

        # The same Pod in a model namespace is reviewed (and rewritten).
        cluster.apply(pod("reviewed", models))
        assert cluster.get("pod", "reviewed", models)["spec"]["containers"][0]["image"] != INCIDENT_IMAGE
        assert release.pod.metric("digest_gate_admission_requests_total", kind="Pod") == 2  # mutate + validate
    finally:
        for namespace in (RELEASE_NAMESPACE, "kube-system"):
            cluster.kubectl("label", "namespace", namespace, "modelmesh-enabled-")


def test_webhook_down_refuses_selected_namespaces_but_kube_system_still_works(cluster, release, models):
    release.install({"webhook": {"failurePolicy": "Fail"}})
    release.pod.stop()

    refused = cluster.apply(pod("refused", models), check=False)
    assert refused.returncode != 0
    assert 'failed calling webhook "mutate.digest-gate.dev"' in refused.stderr, refused.stderr
    assert cluster.get("pod", "refused", models) is None

    for namespace in ("kube-system", RELEASE_NAMESPACE):
        cluster.apply(pod("still-works", namespace))
        assert cluster.get("pod", "still-works", namespace) is not None
        cluster.kubectl("-n", namespace, "delete", "pod", "still-works", "--wait=false")

    # And once it is back, the model namespace works again.
    release.pod.start()
    cluster.apply(pod("admitted", models))
    assert cluster.get("pod", "admitted", models) is not None


def test_on_1_20_an_exclusion_holds_only_once_the_namespace_is_labelled(cluster, release):
    """What the install notes warn 1.20 users about: the exclusion selects on
    kubernetes.io/metadata.name, which 1.20 does not set."""
    name = "excluded-unlabelled"
    # As 1.20 makes it: no kubernetes.io/metadata.name label.
    cluster.namespace(name, {"modelmesh-enabled": "true"})
    cluster.kubectl("label", "namespace", name, "kubernetes.io/metadata.name-")
    try:
        release.install({"webhook": {"excludeNamespaces": [name]}})

        cluster.apply(pod("before-label", name))
        assert cluster.get("pod", "before-label", name)["spec"]["containers"][0]["image"] != INCIDENT_IMAGE

        cluster.kubectl("label", "namespace", name, f"kubernetes.io/metadata.name={name}")
        cluster.apply(pod("after-label", name))
        assert cluster.get("pod", "after-label", name)["spec"]["containers"][0]["image"] == INCIDENT_IMAGE
    finally:
        cluster.delete_namespace(name)


def test_break_glass_label_lets_a_namespace_deploy_while_the_webhook_is_down(cluster, release, models):
    """The runbook in SECURITY.md: label the namespace, deploy, unlabel. The
    background audit names the namespace and counts it meanwhile."""
    release.install({"webhook": {"failurePolicy": "Fail"}, "audit": {"enabled": True, "interval": "1h"}})
    label = "digest-gate.dev/break-glass"
    hooks = [w for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration")
             for w in cluster.get(kind, FULLNAME)["webhooks"]
             if w["name"] != "validate-allowlist.digest-gate.dev"]
    for w in hooks:
        assert {"key": label, "operator": "DoesNotExist"} in w["namespaceSelector"]["matchExpressions"], w["name"]
    release.pod.stop()
    try:
        assert cluster.apply(pod("refused", models), check=False).returncode != 0
        cluster.kubectl("label", "namespace", models, f"{label}=INC-1234")
        # Break glass: the apiserver no longer calls the webhook here.
        cluster.apply(pod("deployed-now", models))
        assert cluster.get("pod", "deployed-now", models)["spec"]["containers"][0]["image"] == INCIDENT_IMAGE
        # The CLI audit names it too.
        out = subprocess.run([str(binary()), "audit", "--kubeconfig", str(cluster.kubeconfig), "-n", models,
                              "--allowlist", str(ROOT / "examples" / "allowlist.yaml")],
                             capture_output=True, text=True, timeout=60)
        assert f'namespace "{models}" has {label}=INC-1234: break glass' in out.stdout, out.stdout + out.stderr

        # Back up: the audit names the namespace, its label value, and counts it.
        release.pod.start()
        wait_until("the background audit's first run",
                   lambda: release.pod.metric("digest_gate_audit_duration_seconds_count") >= 1)
        assert release.pod.metric("digest_gate_break_glass_namespaces") == 1
        log = release.pod.log_path.read_text()
        assert "break glass" in log and models in log and "INC-1234" in log, log
        assert release.pod.metric("digest_gate_admission_requests_total", kind="Pod") == 0
    finally:
        cluster.kubectl("label", "namespace", models, f"{label}-")
    # Undone: the namespace is reviewed again.
    cluster.apply(pod("reviewed-again", models))
    assert cluster.get("pod", "reviewed-again", models)["spec"]["containers"][0]["image"] != INCIDENT_IMAGE
