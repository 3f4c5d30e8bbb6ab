"""The installed operators' ClusterServiceVersions as the allowlist
(`audit --allowlist-csv`, and the webhook's `allowlist.fromInstalledOperators`
watch), on a real apiserver with OLM's CSV kind (a permissive CRD): during
an upgrade both CSVs are installed, and the stale digest is rewritten to the
newest release's."""

from __future__ import annotations

import itertools
import json
import time

import pytest

from cluster import ROOT, wait_until
from harness import FULLNAME, INCIDENT_IMAGE, PROMOTED_IMAGE, RELEASE_NAMESPACE, incident_runtime, load_yaml, warnings
from test_audit import against

CSVS = ROOT / "tests" / "data" / "allowlists"
_operator_namespaces = itertools.count()
# What rhods-operator.1.20.1.csv.yaml promotes for the runtime.
IMAGE_1_20_1 = ("registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8@sha256:"
                "1201000000000000000000000000000000000000000000000000000000000000")


@pytest.fixture
def operators(cluster) -> str:
    """A fresh operator namespace (redhat-ods-operator on a real cluster): a
    deleted namespace stays terminating for a while, so each test has its own."""
    name = f"operators-{next(_operator_namespaces)}"
    cluster.namespace(name)
    yield name
    cluster.delete_namespace(name)


def install_both_releases(cluster, namespace: str):
    """OLM mid-upgrade: the old and the new CSV side by side."""
    for file in ("rhods-operator.1.20.1.csv.yaml", "rhods-operator.csv.yaml"):
        (csv,) = load_yaml(CSVS / file)
        csv["metadata"]["namespace"] = namespace
        cluster.apply(csv)


def test_the_newest_installed_release_promotes_and_is_named(cluster, operators, models):
    install_both_releases(cluster, operators)
    # Stored before any webhook: what the audit is for.
    cluster.apply(incident_runtime(models))

    def audit() -> dict:
        r = against(cluster.kubeconfig, "audit", "--allowlist-csv", f"{operators}/rhods-operator",
                    "-n", models, "--kinds", "ServingRuntime", "-o", "json")
        assert r.returncode == 1, r.stderr
        (result,) = json.loads(r.stdout)["results"]
        return result["images"][0]

    image = audit()
    assert (image["image"], image["rewrite"]) == (INCIDENT_IMAGE, PROMOTED_IMAGE)
    assert "newest release promoting it, rhods-operator 1.21.0" in image["reason"], image["reason"]
    assert image["promotions"][0]["origin"] == "ClusterServiceVersion rhods-operator.1.21.0 (installed)"
    assert image["promotions"][0]["source"] == f"cluster:{operators}/rhods-operator.1.21.0"

    # OLM deletes the old release when the upgrade completes: one candidate.
    cluster.kubectl("delete", "clusterserviceversion", "rhods-operator.1.20.1", "-n", operators)
    image = audit()
    assert image["rewrite"] == PROMOTED_IMAGE
    assert "(the repository's promoted digest; promoted by ClusterServiceVersion rhods-operator.1.21.0 (installed)" \
        in image["reason"], image["reason"]


def test_the_webhook_follows_the_installed_csvs(cluster, operators, release, models):
    """The chart's allowlist.fromInstalledOperators, with no promoted digest
    in its ConfigMap: the webhook reads both releases' CSVs on its own
    service account, rewrites the stale digest to the newest release's, and
    follows the upgrade's end (the old CSV deleted) within seconds."""
    install_both_releases(cluster, operators)
    release.install({"allowlist": {"text": "", "fromInstalledOperators": [
        {"namespace": operators, "namePrefixes": ["rhods-operator"]}]}})
    # The chart's Role: list and watch CSVs there, nothing else.
    account = f"system:serviceaccount:{RELEASE_NAMESPACE}:{FULLNAME}"
    for verb, namespace, expected in [("watch", operators, "yes"), ("list", operators, "yes"),
                                      ("get", operators, "no"), ("list", "default", "no")]:
        r = cluster.kubectl("auth", "can-i", verb, "clusterserviceversions.operators.coreos.com",
                            "-n", namespace, f"--as={account}", check=False)
        assert r.stdout.strip() == expected, (verb, namespace, r.stdout, r.stderr)

    applied = cluster.apply(incident_runtime(models))
    stored = cluster.get("servingruntime", "ovms", models)
    assert stored["spec"]["containers"][0]["image"] == PROMOTED_IMAGE
    (record,) = json.loads(stored["metadata"]["annotations"]["digest-gate.dev/rewritten-images"]).values()
    assert record["promotedBy"].startswith("ClusterServiceVersion rhods-operator.1.21.0 (installed) "
                                           f"(cluster:{operators}/rhods-operator.1.21.0:"), record
    (warning,) = [w for w in warnings(applied.stderr) if w.startswith("digest-gate")]
    assert warning.endswith("(rhods-operator 1.21.0)") and len(warning) <= 120, warning

    def dry_run_of(image: str) -> str:
        runtime = incident_runtime(models)
        runtime["metadata"]["name"] = "ovms-old"
        runtime["spec"]["containers"][0]["image"] = image
        r = cluster.apply(runtime, "--dry-run=server", "-o", "json")
        return json.loads(r.stdout)["spec"]["containers"][0]["image"]

    # While 1.20.1 is installed its digest is promoted too.
    assert dry_run_of(IMAGE_1_20_1) == IMAGE_1_20_1
    changes = release.pod.metric("digest_gate_reloads_total", source="installed-csvs", result="success")

    # The upgrade completes: OLM deletes the old release. One candidate.
    cluster.kubectl("delete", "clusterserviceversion", "rhods-operator.1.20.1", "-n", operators)
    deleted = time.monotonic()
    wait_until("the 1.20.1 digest no longer promoted", lambda: dry_run_of(IMAGE_1_20_1) == PROMOTED_IMAGE,
               timeout=15)
    print(f"the webhook followed the deletion in {time.monotonic() - deleted:.1f} s")
    assert release.pod.metric("digest_gate_reloads_total", source="installed-csvs", result="success") == changes + 1
    assert release.pod.metric("digest_gate_reloads_total", source="installed-csvs", result="failure") == 0
    assert release.pod.admin("/readyz")[0] == 200


def test_without_its_csvs_the_webhook_is_not_ready(cluster, operators, release):
    """A pod that cannot read the CSVs (here its RoleBinding is gone) stays
    unready, says why, and counts each failure: it neither crash-loops nor
    serves an allowlist without the operator's digests."""
    release.install({"allowlist": {"fromInstalledOperators": [{"namespace": operators}]}})
    release.pod.stop()
    cluster.kubectl("-n", operators, "delete", "rolebinding", f"{FULLNAME}-csvs")
    release.pod.start(ready=False)
    wait_until("a failed watch counted", lambda: release.pod.metric(
        "digest_gate_reloads_total", source="installed-csvs", result="failure") >= 1)
    status, body = release.pod.admin("/readyz")
    assert status == 503 and "ClusterServiceVersions" in body, (status, body)
    release.pod.process.check_alive()
    log = release.pod.log_path.read_text()
    assert "forbidden" in log and "clusterserviceversions" in log, log[-2000:]
