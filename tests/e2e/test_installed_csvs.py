"""The installed operators' ClusterServiceVersions as the allowlist
(`audit --allowlist-csv`), on a real apiserver with OLM's CSV kind
(a permissive CRD): during an upgrade both CSVs are installed, and the
stale digest is rewritten to the newest release's."""

from __future__ import annotations

import json

from cluster import ROOT
from harness import INCIDENT_IMAGE, PROMOTED_IMAGE, incident_runtime, load_yaml
from test_audit import against

CSVS = ROOT / "tests" / "data" / "allowlists"
OPERATOR_NS = "redhat-ods-operator"


def test_the_newest_installed_release_promotes_and_is_named(cluster, models):
    cluster.namespace(OPERATOR_NS)
    try:
        for file in ("rhods-operator.1.20.1.csv.yaml", "rhods-operator.csv.yaml"):
            (csv,) = load_yaml(CSVS / file)
            csv["metadata"]["namespace"] = OPERATOR_NS
            cluster.apply(csv)
        # Stored before any webhook: what the audit is for.
        cluster.apply(incident_runtime(models))

        def audit() -> dict:
            r = against(cluster.kubeconfig, "audit", "--allowlist-csv", f"{OPERATOR_NS}/rhods-operator",
                        "-n", models, "--kinds", "ServingRuntime", "-o", "json")
            assert r.returncode == 1, r.stderr
            (result,) = json.loads(r.stdout)["results"]
            return result["images"][0]

        image = audit()
        assert (image["image"], image["rewrite"]) == (INCIDENT_IMAGE, PROMOTED_IMAGE)
        assert "newest release promoting it, rhods-operator 1.21.0" in image["reason"], image["reason"]
        assert image["promotions"][0]["origin"] == "ClusterServiceVersion rhods-operator.1.21.0 (installed)"
        assert image["promotions"][0]["source"] == f"cluster:{OPERATOR_NS}/rhods-operator.1.21.0"

        # OLM deletes the old release when the upgrade completes: one candidate.
        cluster.kubectl("delete", "clusterserviceversion", "rhods-operator.1.20.1", "-n", OPERATOR_NS)
        image = audit()
        assert image["rewrite"] == PROMOTED_IMAGE
        assert "(the repository's promoted digest; promoted by ClusterServiceVersion rhods-operator.1.21.0 (installed)" \
            in image["reason"], image["reason"]
    finally:
        cluster.delete_namespace(OPERATOR_NS)
