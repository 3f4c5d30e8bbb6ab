"""KServe's llm-d based serving on a real apiserver (permissive CRDs of the
same group, versions and kinds, since KServe's do not validate on 1.20):
every pod an LLMInferenceService defines is rewritten at admission in both
served versions, so is a ClusterStorageContainer, and `audit` finds what was
stored before digest-gate was there."""

from __future__ import annotations

import copy
import json

from harness import FIXTURES, INCIDENT_IMAGE, PROMOTED_IMAGE, load_yaml
from test_audit import audit

LLM = FIXTURES / "llm"
POD_SPECS = ("/spec/template", "/spec/worker", "/spec/prefill/template", "/spec/prefill/worker",
             "/spec/router/scheduler/template", "/spec/router/scheduler/tokenizer/template")


def at(obj: dict, pointer: str) -> dict:
    for token in pointer.strip("/").split("/"):
        obj = obj.setdefault(token, {})
    return obj


def stale_llm_service(namespace: str, version: str) -> dict:
    """The KServe release smoke test's LLMInferenceService, every part given
    a main container on the incident's never-promoted digest."""
    (svc,) = load_yaml(LLM / "llmisvc-opt-125m-cpu.yaml")
    svc = copy.deepcopy(svc)
    svc["apiVersion"] = f"serving.kserve.io/{version}"
    svc["metadata"]["namespace"] = namespace
    for pointer in POD_SPECS:
        at(svc, pointer)["containers"] = [{"name": "main", "image": INCIDENT_IMAGE}]
    return svc


def images(obj: dict) -> list[str]:
    return [c["image"] for p in POD_SPECS for c in at(obj, p)["containers"]]


def test_llm_inference_services_are_rewritten_in_every_part_and_version(cluster, release, models):
    release.install({"webhook": {"llmInferenceServices": True, "clusterStorageContainers": True}})
    for version in ("v1alpha1", "v1alpha2"):
        svc = stale_llm_service(models, version)
        svc["metadata"]["name"] = f"opt-{version}"
        cluster.apply(svc)
        stored = cluster.get(f"llminferenceservices.{version}.serving.kserve.io", f"opt-{version}", models)
        assert images(stored) == [PROMOTED_IMAGE] * len(POD_SPECS), json.dumps(stored["spec"])
        assert "digest-gate.dev/rewritten-images" in stored["metadata"]["annotations"]

    (storage,) = load_yaml(LLM / "clusterstoragecontainer-default.yaml")
    storage["metadata"]["name"] = "e2e-storage"
    storage["spec"]["container"]["image"] = INCIDENT_IMAGE
    cluster.apply(storage)
    stored = cluster.get("clusterstoragecontainer", "e2e-storage")
    assert stored["spec"]["container"]["image"] == PROMOTED_IMAGE
    cluster.kubectl("delete", "clusterstoragecontainer", "e2e-storage")


def test_without_the_switch_they_are_not_sent_and_audit_finds_them(cluster, release, models):
    release.install()
    svc = stale_llm_service(models, "v1alpha2")
    cluster.apply(svc)
    stored = cluster.get("llminferenceservice", svc["metadata"]["name"], models)
    assert images(stored) == [INCIDENT_IMAGE] * len(POD_SPECS)
    assert release.pod.metric("digest_gate_admission_requests_total", kind="LLMInferenceService") == 0

    r = audit(cluster.kubeconfig, "-n", models, "--kinds", "LLMInferenceService", "-o", "json")
    assert r.returncode == 1, r.stderr
    (result,) = json.loads(r.stdout)["results"]
    assert result["kind"] == "LLMInferenceService" and result["verdict"] == "rewrite"
    paths = [i["path"] for i in result["images"]]
    assert paths == [f"{p}/containers/0/image" for p in POD_SPECS]
    assert {i["rewrite"] for i in result["images"]} == {PROMOTED_IMAGE}
