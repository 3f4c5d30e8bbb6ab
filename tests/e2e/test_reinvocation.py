"""A later mutating webhook adds an image; the apiserver reinvokes
digest-gate (reinvocationPolicy: IfNeeded), so the added image is judged too.

The sidecar injector is a tiny TLS webhook of this test's own. Its
configuration is named to sort after digest-gate's, because the apiserver
calls mutating webhooks in configuration-name order."""

from __future__ import annotations

import base64
import json
import ssl

from cluster import BackgroundServer, QuietHandler, external_name_service, send_json, service_certificate
from harness import FULLNAME, INCIDENT_IMAGE, PROMOTED_IMAGE, PROMOTED_TAG

INJECTOR = "zz-e2e-sidecar-injector"  # sorts after "dg-digest-gate"
INJECTOR_NAMESPACE = "e2e-sidecar"


class SidecarInjector(BackgroundServer):
    """Adds a `sidecar` container with a tag-only image to every Pod that
    has none; counts its calls."""

    def __init__(self, certs):
        self.calls = 0
        outer = self

        class Handler(QuietHandler):
            def do_POST(self):  # noqa: N802 (http.server's naming)
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.calls += 1
                request = review["request"]
                response = {"uid": request["uid"], "allowed": True}
                containers = request["object"]["spec"]["containers"]
                if not any(c["name"] == "sidecar" for c in containers):
                    patch = [{"op": "add", "path": "/spec/containers/-",
                              "value": {"name": "sidecar", "image": PROMOTED_TAG}}]
                    response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
                    response["patchType"] = "JSONPatch"
                send_json(self, 200, {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                      "response": response})

        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(certs / "tls.crt", certs / "tls.key")
        super().__init__(Handler, tls)


def injector_configuration(port: int, ca: bytes, namespace: str) -> dict:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": INJECTOR},
        "webhooks": [{
            "name": "inject.e2e.digest-gate.dev",
            "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
            "reinvocationPolicy": "Never", "timeoutSeconds": 5,
            "clientConfig": {"service": {"name": INJECTOR, "namespace": INJECTOR_NAMESPACE, "path": "/inject",
                                         "port": port},
                             "caBundle": base64.b64encode(ca).decode()},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
        }],
    }


def create_with_injector(cluster, models, tmp_path, image: str, name: str):
    """Creates a Pod whose `ovms` container has `image` while the sidecar
    injector runs; returns the stored Pod, its audit event and the injector."""
    cluster.namespace(INJECTOR_NAMESPACE)
    certs = service_certificate(tmp_path / "injector", INJECTOR, INJECTOR_NAMESPACE)
    with SidecarInjector(certs) as injector:
        cluster.apply(external_name_service(INJECTOR, INJECTOR_NAMESPACE, injector.port))
        cluster.apply(injector_configuration(injector.port, (certs / "ca.crt").read_bytes(), models))
        try:
            cluster.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": models},
                           "spec": {"containers": [{"name": "ovms", "image": image}]}})
        finally:
            cluster.kubectl("delete", "mutatingwebhookconfiguration", INJECTOR, "--ignore-not-found")
            cluster.kubectl("delete", "namespace", INJECTOR_NAMESPACE, "--wait=true", "--timeout=60s")
    (event,) = cluster.audit_events(lambda e: e.get("objectRef", {}).get("resource") == "pods"
                                    and e["objectRef"].get("namespace") == models
                                    and e["objectRef"].get("name") == name and e["verb"] == "create")
    return cluster.get("pod", name, models), event, injector


def test_sidecar_added_by_a_later_webhook_is_judged_on_reinvocation(cluster, release, models, tmp_path):
    release.install()
    # The Pod's own image is promoted: the first call changes nothing, so
    # everything digest-gate does here is the reinvocation's work.
    stored, event, injector = create_with_injector(cluster, models, tmp_path, PROMOTED_IMAGE, "runtime")
    images = {c["name"]: c["image"] for c in stored["spec"]["containers"]}
    assert images["ovms"] == PROMOTED_IMAGE
    # The injector wrote a tag; the stored Pod has the digest that tag promotes.
    assert images["sidecar"].endswith("@" + PROMOTED_IMAGE.split("@")[1]), images
    assert injector.calls == 1
    assert release.pod.metric("digest_gate_admission_requests_total", endpoint="mutate", kind="Pod") == 2

    annotations = event["annotations"]
    mutations = {k.rsplit("/", 1)[1]: json.loads(v) for k, v in annotations.items()
                 if k.startswith("mutation.webhook.admission.k8s.io/")}
    # Indexes count every mutating webhook entry in order: digest-gate's
    # configuration has three (Pods' and others', ConfigMaps', Templates'),
    # the injector's comes after them.
    assert mutations == {
        "round_0_index_0": {"configuration": FULLNAME, "webhook": "mutate.digest-gate.dev", "mutated": False},
        "round_0_index_3": {"configuration": INJECTOR, "webhook": "inject.e2e.digest-gate.dev", "mutated": True},
        "round_1_index_0": {"configuration": FULLNAME, "webhook": "mutate.digest-gate.dev", "mutated": True},
    }
    rewritten = json.loads(annotations["mutate.digest-gate.dev/rewritten-images"])
    assert "/spec/containers/1/image" in json.dumps(rewritten), rewritten
    assert PROMOTED_TAG in json.dumps(rewritten)
    # The patch digest-gate sent on reinvocation is in the event too.
    patch = json.loads(annotations["patch.webhook.admission.k8s.io/round_1_index_0"])
    assert patch["configuration"] == FULLNAME
    assert any(op["path"] == "/spec/containers/1/image" for op in patch["patch"])
    # One rewrite, one invocation: the first key, no invocation number.
    assert "mutate.digest-gate.dev/rewritten-images-2" not in annotations


def test_each_invocation_keeps_its_own_audit_annotation(cluster, release, models, tmp_path):
    """Both calls rewrite: the first the incident's digest, the reinvocation the
    injected sidecar's tag. The apiserver keeps the first value of an audit
    annotation key and drops a later one, so the second answer uses its own."""
    release.install()
    stored, event, _ = create_with_injector(cluster, models, tmp_path, INCIDENT_IMAGE, "runtime-2")
    images = {c["name"]: c["image"] for c in stored["spec"]["containers"]}
    assert images["ovms"] == PROMOTED_IMAGE
    assert images["sidecar"].endswith("@" + PROMOTED_IMAGE.split("@")[1]), images

    annotations = event["annotations"]
    first = json.loads(annotations["mutate.digest-gate.dev/rewritten-images"])
    second = json.loads(annotations["mutate.digest-gate.dev/rewritten-images-2"])
    assert list(first) == ["/spec/containers/0/image"]
    entry = first["/spec/containers/0/image"]
    assert (entry["from"], entry["to"]) == (INCIDENT_IMAGE, PROMOTED_IMAGE)
    # Who promoted the target: the chart's allowlist ConfigMap, mounted.
    assert entry["promotedBy"].startswith("Allowlist "), entry
    assert list(second) == ["/spec/containers/1/image"] and second["/spec/containers/1/image"]["from"] == PROMOTED_TAG
    # The object's own record tells both invocations apart.
    record = json.loads(stored["metadata"]["annotations"]["digest-gate.dev/rewritten-images"])
    assert "invocation" not in record["/spec/containers/0/image"]
    assert record["/spec/containers/1/image"]["invocation"] == 2
