"""`digest-gate preflight` on a real apiserver, the incident before its
upgrade: rhods-operator 1.20.1 installed (a CSV), the incident's ConfigMap in
the applications namespace, and a ServingRuntime and the Deployment made from
it on 1.20.1's runtime digest; InstallPlans to 1.21.0 pending in every shape
OLM stores a step in (the CSV inline; a reference to the bundle ConfigMap,
gzip+base64 under binaryData as OLM's unpacker writes it, or plain under data
as older OLM did), one whose ConfigMap is missing, one still unpacking, one
superseded, one carrying two operators. OLM's kinds are permissive CRDs:
no OLM runs here, so the objects are written as OLM writes them (the shapes
of tests/fixtures/olm/)."""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import os
import pathlib
import shlex
import subprocess
import time

import jsonschema
import pytest

from cluster import ROOT, admin_metric, wait_until
from harness import INCIDENT_IMAGE, PROMOTED_DIGEST, PROMOTED_IMAGE, incident_runtime, load_yaml, permissive_crd
from support import binary, docs_sample
from test_audit import INCIDENT_CM, against, deployment
from test_installed_csvs import IMAGE_1_20_1

CSVS = ROOT / "tests" / "data" / "allowlists"
OPERATORS = "pf-operators"
OTHERS = "pf-operators-two"
APPS = "pf-apps"
MODELS = "pf-models"
MARKETPLACE = "pf-marketplace"
SELECTOR = "digest-gate-e2e/preflight=yes"
# The e2e control plane's admin user (cluster.py's token file).
ADMIN = "e2e-admin"
JUDGED = "digest-gate.dev/preflight"
ACKNOWLEDGED = "digest-gate.dev/approve-despite-findings"
OLD, NEW = "rhods-operator.1.20.1", "rhods-operator.1.21.0"
BUNDLE = "registry.redhat.io/rhods/odh-operator-bundle:v1.21.0"
PROPERTIES = json.dumps({"properties": [
    {"type": "olm.package", "value": {"packageName": "rhods-operator", "version": "1.21.0"}}]})


def csv(name: str) -> dict:
    (c,) = load_yaml(CSVS / name)
    return c


def new_csv() -> dict:
    return csv("rhods-operator.csv.yaml")


def csv_step(name: str, manifest: str) -> dict:
    return {"resolving": name, "status": "Unknown", "resource": {
        "group": "operators.coreos.com", "version": "v1alpha1", "kind": "ClusterServiceVersion", "name": name,
        "sourceName": "redhat-operators", "sourceNamespace": MARKETPLACE, "manifest": manifest}}


def reference(configmap: str, replaces: str = OLD, properties: str = PROPERTIES) -> str:
    """OLM's UnpackedBundleReference, as its catalog operator marshals it."""
    return json.dumps({"kind": "ConfigMap", "name": configmap, "namespace": MARKETPLACE,
                       "catalogSourceName": "redhat-operators", "catalogSourceNamespace": MARKETPLACE,
                       "replaces": replaces, "properties": properties}, separators=(",", ":"))


def lookup(identifier: str, replaces: str = OLD, properties: str = PROPERTIES, pending: bool = False) -> dict:
    out = {"path": BUNDLE, "identifier": identifier, "replaces": replaces, "properties": properties,
           "catalogSourceRef": {"name": "redhat-operators", "namespace": MARKETPLACE}}
    if pending:
        out["conditions"] = [{"type": "BundleLookupPending", "status": "True", "reason": "JobIncomplete"}]
    return out


def plan(name: str, steps: list[dict], lookups: list[dict] | None = None, *, namespace: str = OPERATORS,
         owner: dict | None = None, approved: bool = False, phase: str = "RequiresApproval") -> dict:
    metadata = {"name": name, "namespace": namespace}
    if owner:
        metadata["ownerReferences"] = [{"apiVersion": "operators.coreos.com/v1alpha1", "kind": "Subscription",
                                        "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                                        "controller": False, "blockOwnerDeletion": False}]
    return {"apiVersion": "operators.coreos.com/v1alpha1", "kind": "InstallPlan", "metadata": metadata,
            "spec": {"approval": "Manual", "approved": approved,
                     "clusterServiceVersionNames": sorted({s["resolving"] for s in steps}), "generation": 1},
            "status": {"phase": phase, "catalogSources": [], "plan": steps, "bundleLookups": lookups or []}}


def bundle_configmap(name: str, files: dict[str, str], gzipped: bool) -> dict:
    """A bundle unpacked as `opm alpha bundle extract [-z]` writes it."""
    metadata = {"name": name, "namespace": MARKETPLACE, "labels": {"olm.managed": "true"},
                "annotations": {"operators.operatorframework.io.bundle.package.v1": "rhods-operator",
                                "operators.operatorframework.io.bundle.mediatype.v1": "registry+v1",
                                "olm.sourceImage": BUNDLE}}
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}
    if gzipped:
        metadata["annotations"]["olm.contentEncoding"] = "gzip+base64"
        # binaryData holds base64 text of the gzip stream; the API encodes
        # those bytes once more.
        cm["binaryData"] = {k: base64.b64encode(base64.b64encode(gzip.compress(v.encode()))).decode()
                            for k, v in files.items()}
    else:
        cm["data"] = files
    return cm


@pytest.fixture(scope="module")
def incident(cluster):
    """The cluster before the upgrade, and its pending plans."""
    for kind, plural in (("InstallPlan", "installplans"), ("Subscription", "subscriptions")):
        crd = permissive_crd(kind, plural, "Namespaced", ("v1alpha1",), group="operators.coreos.com")
        cluster.apply(crd)
        cluster.kubectl("wait", "--for=condition=Established", f"crd/{plural}.operators.coreos.com",
                        "--timeout=60s")
    label = dict([SELECTOR.split("=")])
    for ns in (OPERATORS, OTHERS, APPS, MODELS, MARKETPLACE):
        cluster.namespace(ns, label)
    old = csv("rhods-operator.1.20.1.csv.yaml")
    old["metadata"]["namespace"] = OPERATORS
    cluster.apply(old)
    (cm,) = load_yaml(INCIDENT_CM)
    cluster.apply(cm, namespace=APPS)
    runtime = incident_runtime(MODELS)
    runtime["spec"]["containers"][0]["image"] = IMAGE_1_20_1
    cluster.apply(runtime)
    runtime = cluster.get("servingruntime", runtime["metadata"]["name"], MODELS)
    cluster.apply(deployment(MODELS, "modelmesh-serving-ovms", IMAGE_1_20_1, owner=runtime))

    csv_yaml = (CSVS / "rhods-operator.csv.yaml").read_text()
    cluster.apply(bundle_configmap("bundle-gzip", {"rhods-operator.clusterserviceversion.yaml": csv_yaml,
                                                   "annotations.yaml": "annotations: {}\n"}, gzipped=True))
    cluster.apply(bundle_configmap("bundle-plain", {"rhods-operator.clusterserviceversion.yaml": csv_yaml},
                                   gzipped=False))
    subscription = {"apiVersion": "operators.coreos.com/v1alpha1", "kind": "Subscription",
                    "metadata": {"name": "rhods-operator", "namespace": OPERATORS},
                    "spec": {"channel": "stable", "name": "rhods-operator", "source": "redhat-operators",
                             "sourceNamespace": MARKETPLACE, "installPlanApproval": "Manual"},
                    "status": {"installedCSV": OLD, "currentCSV": NEW,
                               "installPlanRef": {"name": "install-gzip", "namespace": OPERATORS}}}
    cluster.apply(subscription)
    subscription = cluster.get("subscription.operators.coreos.com", "rhods-operator", OPERATORS)

    inline = json.dumps(new_csv(), separators=(",", ":")) + "\n"
    plans = [
        plan("install-gzip", [csv_step(NEW, reference("bundle-gzip"))], [lookup(NEW)], owner=subscription),
        plan("install-earlier", [csv_step(NEW, reference("bundle-gzip"))], [lookup(NEW)], owner=subscription),
        plan("install-inline", [csv_step(NEW, inline)]),
        plan("install-plain", [csv_step(NEW, reference("bundle-plain"))], [lookup(NEW)]),
        plan("install-missing", [csv_step(NEW, reference("bundle-gone"))], [lookup(NEW)]),
        plan("install-unpacking", [], [lookup(NEW, pending=True)]),
        plan("install-done", [csv_step(NEW, inline)], approved=True, phase="Complete"),
    ]
    for p in plans:
        cluster.apply(p)
    yield cluster
    for ns in (OPERATORS, OTHERS, APPS, MODELS, MARKETPLACE):
        cluster.delete_namespace(ns)


def preflight(cluster, *args: str) -> tuple[int, str, str]:
    r = against(cluster.kubeconfig, "preflight", "--namespace-selector", SELECTOR, *args)
    return r.returncode, r.stdout, r.stderr


def test_the_incident_upgrade_is_named_before_approval(incident):
    code, out, err = preflight(incident, "--installplan", f"{OPERATORS}/install-gzip")
    assert code == 1, out + err
    assert f"{NEW} (package rhods-operator) replaces {OLD} (the plan's step says it replaces it)" in out, out
    assert ("changes registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8 "
            "(odh-openvino-servingruntime-rhel8): sha256:120100000000 → sha256:8af20e48bb48") in out, out
    stale = [line.strip() for line in out.splitlines() if line.strip().startswith("stale_after_upgrade: ")]
    objects = {line.split(": ")[1] for line in stale}
    assert {f"{MODELS}/ServingRuntime/ovms", f"{MODELS}/Deployment/modelmesh-serving-ovms (ServingRuntime ovms)",
            } <= objects, stale
    # The controller-manager made a ReplicaSet and a Pod: named with their owners.
    assert any(o.startswith(f"{MODELS}/Pod/") and "← Deployment modelmesh-serving-ovms" in o for o in objects), stale
    assert all("the webhook will rewrite it" in line and PROMOTED_DIGEST in line for line in stale), stale
    # The incident's ConfigMap never was on a promoted digest.
    assert f"already_stale: {APPS}/ConfigMap/servingruntimes-config" in out, out
    assert "verdict: rhods-operator.1.21.0: do not approve yet: approving leaves" in out, out


def docs(sample_id: str, cluster, plan_name: str) -> None:
    """A docs/preflight.md sample, run here: the plan it names is this
    cluster's, the catalog the fixture, and only this test's namespaces
    are read."""
    for step in docs_sample(sample_id):
        argv = shlex.split(step.command.replace("redhat-ods-operator/install-abcde", f"{OPERATORS}/{plan_name}")
                           .replace("redhat-ods-operator", OPERATORS)
                           .replace("catalog/rhods-operator", str(ROOT / "tests" / "fixtures" / "olm" / "rhods")))
        assert argv[:2] == ["digest-gate", "preflight"], argv
        code, out, err = preflight(cluster, *argv[2:])
        for line in step.prints:
            assert line in out, f"{sample_id}: `{step.command}` should print {line!r}:\n{out}{err}"


def test_the_docs_samples_say_what_it_prints(incident):
    docs("preflight-one-plan", incident, "install-gzip")
    docs("preflight-all-pending", incident, "install-gzip")
    docs("preflight-catalog", incident, "install-gzip")
    docs("readme-preflight", incident, "install-gzip")


def test_every_shape_of_step_reads_the_same_csv(incident):
    answers = {}
    for name in ("install-gzip", "install-inline", "install-plain"):
        code, out, err = preflight(incident, "--installplan", f"{OPERATORS}/{name}", "-o", "json")
        assert code == 1, out + err
        doc = json.loads(out)
        (upgrade,) = doc["upgrade"]
        assert (upgrade["to"], upgrade["from"], upgrade["package"]) == (NEW, [OLD], "rhods-operator"), upgrade
        answers[name] = (upgrade["changes"], doc["summary"], sorted((r["kind"], r["name"], r["change"])
                                                                    for r in doc["results"]))
    assert answers["install-gzip"] == answers["install-inline"] == answers["install-plain"], answers
    # The inline step says nothing of what it replaces: the CSV's spec.replaces does.
    code, out, _ = preflight(incident, "--installplan", f"{OPERATORS}/install-inline")
    assert f"replaces {OLD} (the target CSV's spec.replaces)" in out, out
    results = json.loads(preflight(incident, "--installplan", f"{OPERATORS}/install-gzip", "-o", "json")[1])["results"]
    (runtime,) = [r for r in results if r["kind"] == "ServingRuntime"]
    image = runtime["images"][0]
    assert (runtime["change"], image["change"], image["code"], image["rewrite"]) == \
        ("stale_after_upgrade", "stale_after_upgrade", "digest_not_promoted", PROMOTED_IMAGE)


def test_sarif_has_the_categories_as_rules_and_validates(incident):
    code, out, err = preflight(incident, "--installplan", f"{OPERATORS}/install-gzip", "-o", "sarif")
    assert code == 1, out + err
    document = json.loads(out)
    schema = json.loads((ROOT / "tests" / "data" / "sarif-schema-2.1.0.json").read_text())
    jsonschema.Draft7Validator(schema).validate(document)
    run = document["runs"][0]
    ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert ids == ["stale_after_upgrade", "already_stale", "fixed_by_upgrade"]
    seen = {(r["ruleId"], r["locations"][0]["logicalLocations"][0]["fullyQualifiedName"].split(":")[0])
            for r in run["results"]}
    assert ("stale_after_upgrade", f"ServingRuntime {MODELS}/ovms") in seen, seen
    assert ("already_stale", f"ConfigMap {APPS}/servingruntimes-config") in seen, seen
    assert all(ids[r["ruleIndex"]] == r["ruleId"] and r["properties"]["code"] == "digest_not_promoted"
               for r in run["results"]), run["results"]


def test_naming_the_plans_own_namespace_again_changes_nothing(incident):
    plain = json.loads(preflight(incident, "--installplan", f"{OPERATORS}/install-gzip", "-o", "json")[1])
    code, out, err = preflight(incident, "--installplan", f"{OPERATORS}/install-gzip", "-o", "json",
                               "--allowlist-csv", OPERATORS)
    again = json.loads(out)
    assert code == 1 and not again.get("errors"), out + err
    def without_age(doc: dict) -> list[dict]:
        # The age may have moved on a minute between the two runs.
        return [{k: v for k, v in u.items() if k != "age"} for u in doc["upgrade"]]

    assert (without_age(again), again["summary"]) == (without_age(plain), plain["summary"])


def test_a_catalog_given_says_where_its_channel_head_is(incident):
    catalog = ROOT / "tests" / "fixtures" / "olm" / "rhods"
    code, out, err = preflight(incident, "--installplan", f"{OPERATORS}/install-gzip", "--allowlist", str(catalog),
                               "--catalog-package", "rhods-operator", "--catalog-channel", "fast-3.x")
    assert ("note: the catalog given does not list rhods-operator.1.21.0; "
            "its channel head is rhods-operator.3.3.1") in out, out + err


def test_progress_is_drawn_on_a_terminal_only(incident):
    argv = [str(binary()), "preflight", "--kubeconfig", str(incident.kubeconfig), "--namespace-selector", SELECTOR,
            "--installplan", f"{OPERATORS}/install-gzip"]
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "NO_PROXY": "127.0.0.1,localhost", "TERM": "xterm"}
    piped = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert piped.returncode == 1 and "objects read and judged" not in piped.stderr, piped.stderr
    # script(1) gives it a terminal; the bar is cleared at the end, so it
    # shows in what the terminal was sent, not in what stays on screen.
    tty = subprocess.run(["script", "-qec", shlex.join(argv), "/dev/null"], capture_output=True, text=True,
                         timeout=120, env=env)
    assert "objects read and judged" in tty.stdout, tty.stdout[-2000:]
    quiet = subprocess.run(["script", "-qec", shlex.join([*argv, "--quiet"]), "/dev/null"], capture_output=True,
                           text=True, timeout=120, env=env)
    assert "objects read and judged" not in quiet.stdout and "verdict:" in quiet.stdout, quiet.stdout[-2000:]


def test_what_cannot_be_read_is_exit_2_and_never_safe(incident):
    # Errors are said on standard error (issue 58), whatever the format.
    code, out, err = preflight(incident, "--installplan", f"{OPERATORS}/install-missing")
    assert code == 2, out + err
    assert f"error: InstallPlan {OPERATORS}/install-missing: the bundle of {NEW} cannot be read: " \
           f"cannot get the bundle ConfigMap {MARKETPLACE}/bundle-gone" in err, out + err
    code, out, err = preflight(incident, "--installplan", f"{OPERATORS}/install-unpacking")
    assert code == 2 and f"InstallPlan {OPERATORS}/install-unpacking is not ready yet: OLM is still unpacking" in err
    code, out, err = preflight(incident, "--installplan", f"{OPERATORS}/install-done")
    assert code == 2 and "does not wait for an approval: approved already (phase Complete)" in err, out + err
    code, out, err = preflight(incident, "--installplan", f"{OPERATORS}/no-such-plan")
    assert code == 2 and "cannot get InstallPlan" in err and "not found" in err, out + err


def test_a_hostile_bundle_is_not_judged_and_costs_little(incident, tmp_path):
    """Issue 57: a bundle ConfigMap whose files inflate past what any bundle
    holds is "too large or too complex; not judged" — its plan exit 2, never
    safe — at a cost far below the webhook's memory limit (the background
    round runs this code in the webhook's process). Eight keys of 15 MiB of
    spaces: 120 KB stored, 120 MiB inflated; the build before issue 57 held
    each file whole (up to 64 MiB each, all at once)."""
    import sys
    sys.path.insert(0, str(ROOT / "bench"))
    import rss

    cluster = incident
    with hostile_bundle(cluster, "bomb"):
        out = tmp_path / "out.txt"
        _, peak_mib, code = rss.measure(
            [str(binary()), "preflight", "--kubeconfig", str(cluster.kubeconfig), "--cluster-timeout", "10s",
             "--namespace-selector", SELECTOR, "--installplan", f"{OPERATORS}/install-bomb", "-o", "json"], out)
        text = out.read_text()
        assert code == 2, text
        # The measured run's standard error is not kept: the JSON report
        # holds its errors too.
        assert f"ConfigMap {MARKETPLACE}/bundle-bomb: key crd-4.yaml: bundle too large or too complex: " \
               "its files hold over 64 MiB; not judged" in " ".join(json.loads(text)["errors"]), text
        # The debug binary's own ~30 MiB, one 15 MiB file, and its gzip.
        assert peak_mib < 96, peak_mib


@contextlib.contextmanager
def hostile_bundle(cluster, name: str):
    """A plan `install-NAME` waiting on the bundle ConfigMap `bundle-NAME`:
    eight keys of 15 MiB of spaces, 120 KB stored and 120 MiB inflated.
    Both are deleted after."""
    spaces = " " * (15 << 20)
    cluster.apply(bundle_configmap(f"bundle-{name}", {f"crd-{i}.yaml": spaces for i in range(8)}, gzipped=True))
    cluster.apply(plan(f"install-{name}", [csv_step(NEW, reference(f"bundle-{name}"))], [lookup(NEW)]))
    try:
        yield
    finally:
        cluster.kubectl("delete", "installplan.operators.coreos.com", f"install-{name}", "-n", OPERATORS)
        cluster.kubectl("delete", "configmap", f"bundle-{name}", "-n", MARKETPLACE)


def test_all_pending_reports_every_plan_and_the_superseded_one_unjudged(incident):
    code, out, err = preflight(incident, "--all-pending", "--plan-namespace", OPERATORS)
    # The missing bundle and the plan still unpacking make it 2; every
    # readable plan is still reported.
    assert code == 2, out + err
    verdicts = [line for line in out.splitlines() if line.startswith("  verdict: ")]
    assert len(verdicts) == 3, out  # gzip, inline, plain
    assert (f"InstallPlan {OPERATORS}/install-earlier" in out
            and "superseded: Subscription rhods-operator now points at InstallPlan install-gzip; not judged" in out), out
    assert "1 InstallPlan(s) that do not wait for an approval were passed over" in out, out


def test_one_plan_carrying_two_operators_judges_each(incident):
    other = {"apiVersion": "operators.coreos.com/v1alpha1", "kind": "ClusterServiceVersion",
             "metadata": {"name": "other-operator.v2.0.0"},
             "spec": {"version": "2.0.0", "relatedImages": []}}
    steps = [csv_step(NEW, json.dumps(new_csv())), csv_step("other-operator.v2.0.0", json.dumps(other))]
    incident.apply(plan("install-two", steps, namespace=OTHERS))
    # Nothing is installed in that namespace: what the cluster runs is
    # promoted by the operators of another (--allowlist-csv).
    code, out, err = preflight(incident, "--installplan", f"{OTHERS}/install-two", "-o", "json",
                               "--allowlist-csv", OPERATORS)
    doc = json.loads(out)
    assert [u["to"] for u in doc["upgrade"]] == [NEW, "other-operator.v2.0.0"], out + err
    # A fresh install of each: nothing replaced, so nothing the cluster
    # runs changes its verdict; only what each adds is listed.
    assert [u["from"] for u in doc["upgrade"]] == [[], []], out
    assert doc["results"] == [] and doc["summary"]["objects"] == 0, out
    assert all(u["verdict"].startswith("safe to approve: a fresh install") for u in doc["upgrade"]), out
    assert "quay.io/modh/text-generation-inference" in doc["upgrade"][0]["added"], out
    assert code == 0, out


def test_a_csv_file_and_a_bundle_are_judged_before_any_plan_exists(incident, tmp_path):
    """What a vendor ships, before OLM resolves a plan: the package's
    Subscription (in any namespace) says what is installed."""
    file = CSVS / "rhods-operator.csv.yaml"
    code, out, err = preflight(incident, "--csv", str(file))
    assert code == 1, out + err
    assert out.startswith(f"CSV file {file}\n"), out
    assert f"{NEW} (package rhods-operator) replaces {OLD} (the Subscription's installed CSV)" in out, out
    bundle = tmp_path / "bundle"
    (bundle / "manifests").mkdir(parents=True)
    (bundle / "metadata").mkdir()
    (bundle / "manifests" / "rhods-operator.clusterserviceversion.yaml").write_text(file.read_text())
    (bundle / "metadata" / "annotations.yaml").write_text(
        "annotations:\n  operators.operatorframework.io.bundle.package.v1: rhods-operator\n")

    def judged(*target: str) -> tuple:
        doc = json.loads(preflight(incident, *target, "-o", "json")[1])
        (upgrade,) = doc["upgrade"]
        return ({k: v for k, v in upgrade.items() if k not in ("plan", "age", "replacedBecause")}, doc["summary"],
                sorted((r["kind"], r["name"], r["change"]) for r in doc["results"]))

    from_plan = judged("--installplan", f"{OPERATORS}/install-gzip")
    assert judged("--bundle", str(bundle)) == judged("--csv", str(file)) == from_plan
    # The promotions name the file, not a plan.
    code, out, _ = preflight(incident, "--csv", str(file), "-o", "json")
    (runtime,) = [r for r in json.loads(out)["results"] if r["kind"] == "ServingRuntime"]
    assert runtime["images"][0]["promotions"][0]["origin"] == \
        f"ClusterServiceVersion {NEW} (pending in CSV file {file})", runtime
    code, out, err = preflight(incident, "--bundle", str(tmp_path))
    assert code == 2 and "a registry+v1 bundle keeps its CSV in manifests/" in err, out + err
    # Nothing promoted before a fresh install: in audit mode that is said,
    # not an error, as audit says it.
    other = tmp_path / "other.clusterserviceversion.yaml"
    other.write_text(json.dumps({"apiVersion": "operators.coreos.com/v1alpha1", "kind": "ClusterServiceVersion",
                                 "metadata": {"name": "other-operator.v2.0.0"}, "spec": {"version": "2.0.0"}}))
    code, out, err = preflight(incident, "--csv", str(other), "--mode", "audit")
    assert code == 0 and "note: the allowlist promotes no repository" in out, out + err


def test_a_catalogs_channel_head_or_a_named_version_is_the_target(incident):
    """The real RHOAI catalog fragment: fast-3.x's head is 3.3.1, found by
    the graph; the Subscription says what it replaces, and that it follows
    another channel."""
    catalog = ROOT / "tests" / "fixtures" / "olm" / "rhods"
    target = ("--catalog", str(catalog), "--catalog-package", "rhods-operator", "--catalog-channel", "fast-3.x")
    code, out, err = preflight(incident, *target)
    assert code == 1, out + err
    assert out.startswith(f"catalog {catalog} package rhods-operator\n"), out
    assert f"rhods-operator.3.3.1 (package rhods-operator) replaces {OLD} (the Subscription's installed CSV)" in out
    assert (f"note: Subscription {OPERATORS}/rhods-operator follows channel stable, the target is fast-3.x's: "
            "name --catalog-channel stable") in out, out
    # 1.20.1's runtime is no release of 3.3.1: left unpromoted.
    assert f"stale_after_upgrade: {MODELS}/ServingRuntime/ovms" in out, out
    code, out, err = preflight(incident, *target, "--target-version", "3.3.0", "-o", "json")
    (upgrade,) = json.loads(out)["upgrade"]
    assert (upgrade["from"], upgrade["to"]) == ([OLD], "rhods-operator.3.3.0"), upgrade
    # RHOAI 3 moved every repository from rhods/ to rhoai/.
    assert "registry.redhat.io/rhoai/odh-dashboard-rhel9" in upgrade["added"], upgrade["added"][:3]
    code, out, err = preflight(incident, *target, "--catalog-package", "other-operator")
    assert code == 2 and "--catalog needs exactly one --catalog-package" in err, out + err
    code, out, err = preflight(incident, *target, "--target-version", "9.9.9")
    assert code == 2 and "no bundle in a channel at version or name '9.9.9'" in err, out + err


@pytest.fixture(scope="module")
def mirror(incident, tmp_path_factory):
    """The mirror a disconnected cluster pulls registry.redhat.io/rhods
    from: a real registry with htpasswd auth (tests/registry's harness)
    holding a two-platform index, and a sparse copy of one whose arm64 image
    lost its config (as oc-mirror's platform filter leaves); an allowlist
    whose mirror rule never contacts the source; an amd64 and an arm64 Node
    (made by hand: no kubelet runs here)."""
    import sys
    sys.path.insert(0, str(ROOT / "tests" / "registry"))
    import registries as reg

    work = tmp_path_factory.mktemp("pf-registry")
    certs = work / "certs"
    reg.make_ca(certs)
    layout = reg.Layout(work / "layout")
    arm64 = layout.image("linux", "arm64")
    multi = layout.index([layout.image("linux", "amd64"), arm64])
    layout.tag(multi, "multi")
    with reg.Registry(work, certs, "mirror", users={"puller": "s3cret"}) as registry:
        registry.push(layout, "multi", "rhods/multi")
        registry.push(layout, "multi", "rhods/sparse")
        config = json.loads((layout.path / "blobs" / "sha256" / arm64["digest"][7:]).read_text())["config"]
        registry.delete_blob("rhods/sparse", config["digest"])
        rules = work / "mirrors.yaml"
        rules.write_text(json.dumps({"apiVersion": "digest-gate.dev/v1alpha1", "kind": "Allowlist",
                                     "metadata": {"name": "disconnected"},
                                     "spec": {"repositories": [], "mirrors": [{
                                         "source": "registry.redhat.io/rhods", "mirrors": [f"{registry.host}/rhods"],
                                         "mirrorSourcePolicy": "NeverContactSource"}]}}))
        for arch in ("amd64", "arm64"):
            incident.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"pf-{arch}", "labels": {
                "kubernetes.io/os": "linux", "kubernetes.io/arch": arch}}})

        def target(name: str, related: dict[str, str]) -> pathlib.Path:
            """A release of rhods-operator promoting `related` (name → digest
            under registry.redhat.io/rhods/)."""
            path = work / f"{name}.yaml"
            path.write_text(json.dumps({
                "apiVersion": "operators.coreos.com/v1alpha1", "kind": "ClusterServiceVersion",
                "metadata": {"name": f"rhods-operator.{name}"},
                "spec": {"version": name, "relatedImages": [
                    {"name": n, "image": f"registry.redhat.io/rhods/{n}@{d}"} for n, d in related.items()]}}))
            return path

        yield {"rules": rules, "ca": certs / "ca.crt", "host": registry.host, "work": work, "target": target,
               "multi": multi["digest"], "auth": reg.auth_file(work / "auth.json", {registry.host: ("puller", "s3cret")}),
               "refused": reg.auth_file(work / "refused.json", {registry.host: ("puller", "wrong")})}
    for arch in ("amd64", "arm64"):
        incident.kubectl("delete", "node", f"pf-{arch}")


def pulls(cluster, mirror: dict, csv: pathlib.Path, *args: str, auth: str = "auth") -> tuple[int, str, str]:
    """--registry against the mirror; only a namespace with no workloads is
    read, so what the registry says decides alone."""
    r = against(cluster.kubeconfig, "preflight", "--csv", str(csv), "-n", OTHERS, "--allowlist",
                str(mirror["rules"]), "--registry", "--registry-ca", str(mirror["ca"]), "--registry-auth",
                str(mirror[auth]), "--registry-timeout", "10s", *args)
    return r.returncode, r.stdout, r.stderr


def test_registry_names_the_digests_that_will_not_pull_where_the_cluster_pulls(incident, mirror):
    never = "sha256:" + "7ef272bc" * 8
    csv = mirror["target"]("1.22.0", {"multi": mirror["multi"], "sparse": mirror["multi"], "gone": never})
    code, out, err = pulls(incident, mirror, csv)
    assert code == 1, out + err
    host = mirror["host"]
    assert (f"unpullable_after_upgrade: registry.redhat.io/rhods/gone@{never} (missing): "
            f"{host} does not have this manifest (MANIFEST_UNKNOWN)") in out, out
    # The nodes' arm64 cannot run the sparse copy.
    assert any(line.strip().startswith(f"unpullable_after_upgrade: registry.redhat.io/rhods/sparse@{mirror['multi']} "
                                       f"(platform-missing at {host}/rhods/sparse)") and "linux/arm64" in line
               for line in out.splitlines()), out
    assert "registry: 3 digests asked, 2 will not pull, 0 not answered" in out, out
    assert (f"verdict: rhods-operator.1.22.0: do not approve yet: 2 digests the new release promotes will not pull "
            f"where this cluster pulls from; mirror them first: registry.redhat.io/rhods/gone@{never}, "
            f"registry.redhat.io/rhods/sparse@{mirror['multi']}") in out, out
    code, out, err = pulls(incident, mirror, csv, "-o", "sarif")
    document = json.loads(out)
    jsonschema.Draft7Validator(json.loads((ROOT / "tests" / "data" / "sarif-schema-2.1.0.json").read_text())) \
        .validate(document)
    run = document["runs"][0]
    ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert ids[3:] == ["unpullable_after_upgrade", "unverifiable_after_upgrade"], ids
    assert sorted(r["properties"]["state"] for r in run["results"]) == ["missing", "platform-missing"], run["results"]
    # Named platforms replace the nodes': amd64 alone pulls the sparse copy.
    code, out, err = pulls(incident, mirror, csv, "--platform", "linux/amd64", "-o", "json")
    doc = json.loads(out)
    assert [v["repository"] for v in doc["upgrade"][0]["registry"]["unpullable_after_upgrade"]] == \
        ["registry.redhat.io/rhods/gone"], out
    assert doc["summary"]["unpullable_after_upgrade"] == 1 and code == 1, out


def test_what_will_not_pull_is_reported_on_the_subscription(report_crds, mirror):
    never = "sha256:" + "7ef272bc" * 8
    csv = mirror["target"]("1.22.0", {"multi": mirror["multi"], "gone": never})
    code, out, err = pulls(report_crds, mirror, csv, "--policy-reports")
    assert code == 1, out + err
    report = report_crds.get(POLICY_REPORT, "digest-gate-preflight-rhods-operator.1.22.0", OPERATORS)
    (result,) = report["results"]
    assert (result["rule"], result["result"], result["resources"][0]["kind"], result["resources"][0]["name"]) == \
        ("unpullable_after_upgrade", "fail", "Subscription", "rhods-operator"), result
    assert result["properties"]["image"] == f"registry.redhat.io/rhods/gone@{never}", result
    assert against(report_crds.kubeconfig, "cleanup").returncode == 0


def test_the_docs_registry_sample_says_what_it_prints(incident, mirror):
    never = "sha256:" + "7ef272bc" * 8
    csv = mirror["target"]("1.22.0", {"multi": mirror["multi"], "sparse": mirror["multi"], "gone": never})
    (step,) = docs_sample("preflight-registry")
    argv = shlex.split(step.command.replace("rhods-operator.1.22.0.yaml", str(csv))
                       .replace("mirrors.yaml", str(mirror["rules"])))
    assert argv[:3] == ["digest-gate", "preflight", "--csv"], argv
    # The sample's registry is the loopback mirror, read with its CA and
    # credentials; only a namespace without workloads is read.
    r = against(incident.kubeconfig, *argv[1:], "-n", OTHERS, "--registry-ca", str(mirror["ca"]),
                "--registry-auth", str(mirror["auth"]))
    assert r.returncode == 1, r.stdout + r.stderr
    for line in step.prints:
        assert line in r.stdout, f"`{step.command}` should print {line!r}:\n{r.stdout}{r.stderr}"


def test_registry_refusing_the_credentials_is_exit_2_never_safe(incident, mirror):
    csv = mirror["target"]("1.22.1", {"multi": mirror["multi"]})
    code, out, err = pulls(incident, mirror, csv)
    assert code == 0, out + err
    assert "verdict: rhods-operator.1.22.1: safe to approve" in out, out
    code, out, err = pulls(incident, mirror, csv, auth="refused")
    assert code == 2, out + err
    assert "unverifiable: registry.redhat.io/rhods/multi@" in out and "401" in out, out
    assert "verdict: rhods-operator.1.22.1: not known to be safe: the registry did not answer for 1 digest" in out, out


@pytest.fixture(scope="module")
def report_crds(incident):
    """The wgpolicyk8s.io CRDs the chart ships."""
    for crd in sorted((ROOT / "charts" / "digest-gate" / "files" / "policyreport").glob("*.yaml")):
        incident.kubectl("apply", "-f", str(crd))
    for crd in ("policyreports.wgpolicyk8s.io", "clusterpolicyreports.wgpolicyk8s.io"):
        incident.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
    return incident


POLICY_REPORT = "policyreports.v1alpha2.wgpolicyk8s.io"
PREFLIGHT_REPORT = "digest-gate-preflight-install-gzip"


def note(stdout: str, prefix: str) -> str:
    (line,) = [line for line in stdout.splitlines() if line.startswith(f"note: {prefix}: ")]
    return line.removeprefix(f"note: {prefix}: ")


def test_policy_reports_are_written_beside_the_audits_rerun_unchanged_and_cleaned_up(report_crds):
    cluster = report_crds
    r = against(cluster.kubeconfig, "audit", "--namespace-selector", SELECTOR, "--allowlist-csv", OPERATORS,
                "--policy-reports")
    assert r.returncode == 1, r.stdout + r.stderr
    audits = {ns: cluster.get(POLICY_REPORT, "digest-gate", ns)["metadata"]["resourceVersion"] for ns in (MODELS, APPS)}
    run = ("--installplan", f"{OPERATORS}/install-gzip", "--policy-reports")
    code, out, err = preflight(cluster, *run)
    assert code == 1, out + err
    assert note(out, f"policy reports {PREFLIGHT_REPORT}") == "2 created, 0 updated, 0 unchanged", out
    models = cluster.get(POLICY_REPORT, PREFLIGHT_REPORT, MODELS)
    assert models["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "digest-gate"
    by_object = {(r["resources"][0]["kind"], r["resources"][0]["name"]): (r["rule"], r["result"])
                 for r in models["results"]}
    assert by_object[("ServingRuntime", "ovms")] == ("stale_after_upgrade", "fail"), by_object
    assert all(r["policy"] == "digest-gate-preflight" and r["properties"]["target"] == NEW
               for r in models["results"]), models["results"]
    (config,) = cluster.get(POLICY_REPORT, PREFLIGHT_REPORT, APPS)["results"]
    assert (config["rule"], config["result"], config["resources"][0]["name"]) == \
        ("already_stale", "warn", "servingruntimes-config"), config
    # The audit's reports are not touched.
    assert {ns: cluster.get(POLICY_REPORT, "digest-gate", ns)["metadata"]["resourceVersion"]
            for ns in (MODELS, APPS)} == audits
    # A rerun that finds the same writes nothing.
    versions = {ns: cluster.get(POLICY_REPORT, PREFLIGHT_REPORT, ns)["metadata"]["resourceVersion"]
                for ns in (MODELS, APPS)}
    code, out, err = preflight(cluster, *run)
    assert note(out, f"policy reports {PREFLIGHT_REPORT}") == "0 created, 0 updated, 2 unchanged", out
    assert {ns: cluster.get(POLICY_REPORT, PREFLIGHT_REPORT, ns)["metadata"]["resourceVersion"]
            for ns in (MODELS, APPS)} == versions
    # `cleanup` takes back both kinds of report.
    r = against(cluster.kubeconfig, "cleanup")
    assert r.returncode == 0 and r.stdout.startswith("deleted 4 policy reports"), r.stdout + r.stderr
    for ns in (MODELS, APPS):
        assert cluster.get(POLICY_REPORT, PREFLIGHT_REPORT, ns) is None
        assert cluster.get(POLICY_REPORT, "digest-gate", ns) is None
    # A plan whose bundle cannot be read is not judged whole: no report.
    code, out, err = preflight(cluster, "--installplan", f"{OPERATORS}/install-missing", "--policy-reports",
                               "--annotate")
    assert code == 2, out + err
    assert f"note: InstallPlan {OPERATORS}/install-missing: no policy report written: a target could not be read" \
        in out and "no judgement annotated: a target could not be read" in out, out
    assert cluster.get(POLICY_REPORT, "digest-gate-preflight-install-missing", APPS) is None
    annotations = cluster.get("installplan", "install-missing", OPERATORS)["metadata"].get("annotations", {})
    assert "digest-gate.dev/preflight" not in annotations


def approve(cluster, name: str, reason: str | None = None) -> subprocess.CompletedProcess:
    """`kubectl patch` approving InstallPlan `name`, as a person does, but
    server-side dry run: the webhook answers, the plan stays pending."""
    patch = {"spec": {"approved": True}}
    if reason:
        patch["metadata"] = {"annotations": {"digest-gate.dev/approve-despite-findings": reason}}
    return cluster.kubectl("-n", OPERATORS, "patch", "installplan", name, "--type", "merge", "-p",
                           json.dumps(patch), "--dry-run=server", check=False)


def judgement_on(cluster, namespace: str, name: str) -> dict | None:
    """The pre-flight's judgement on InstallPlan `namespace/name`, if any."""
    found = cluster.get("installplan", name, namespace)["metadata"].get("annotations", {})
    text = found.get("digest-gate.dev/preflight")
    return json.loads(text) if text else None


def test_the_approval_is_answered_from_the_judgement_on_the_plan(incident, release):
    # Kubernetes 1.20 does not label a namespace with its name (1.21 does):
    # the chart's selector for the operators' namespaces needs it.
    incident.kubectl("label", "namespace", OPERATORS, f"kubernetes.io/metadata.name={OPERATORS}", "--overwrite")
    name = "install-approve"
    incident.apply(plan(name, [csv_step(NEW, reference("bundle-gzip"))], [lookup(NEW)]))
    # The person who runs `preflight --annotate` is named a judgement writer.
    operators = {"audit": {"preflight": {"enabled": True, "judgementWriters": [ADMIN]}},
                 "allowlist": {"fromInstalledOperators": [{"namespace": OPERATORS}]}}
    release.install(operators | {"kindModes": {"InstallPlan": "enforce"}})
    # Not judged yet: let through, and said.
    r = approve(incident, name)
    assert r.returncode == 0, r.stderr
    assert f"digest-gate has not judged InstallPlan {OPERATORS}/{name} yet" in r.stderr, r.stderr
    # The judgement travels with the plan.
    code, out, err = preflight(incident, "--installplan", f"{OPERATORS}/{name}", "--annotate")
    assert code == 1 and f"note: judgement annotated (digest-gate.dev/preflight) on InstallPlan {OPERATORS}/{name}" \
        in out, out + err
    judged = judgement_on(incident, OPERATORS, name)
    assert judged["targets"] == [NEW] and judged["staleAfterUpgrade"] >= 2, judged
    assert f"{MODELS}/ServingRuntime/ovms" in judged["named"], judged
    # In enforce mode for InstallPlans the approval is denied, the objects named.
    r = approve(incident, name)
    assert r.returncode != 0, r.stdout
    assert 'admission webhook "validate-approvals.digest-gate.dev" denied the request' in r.stderr, r.stderr
    assert (f"digest-gate: approving InstallPlan {OPERATORS}/{name} leaves {judged['staleAfterUpgrade']} objects "
            f"on unpromoted images ({MODELS}/") in r.stderr and f"(judged {judged['judgedAt']})" in r.stderr, r.stderr
    # With a reason given, it goes through.
    r = approve(incident, name, reason="the runtime is replaced in the same change")
    assert r.returncode == 0, r.stderr
    assert "approved despite these findings" in r.stderr and "the runtime is replaced" in r.stderr, r.stderr
    # In rewrite mode (the chart's default for every kind) it is warned of.
    release.upgrade(operators)
    r = approve(incident, name)
    assert r.returncode == 0, r.stderr
    assert f"{MODELS}/ServingRuntime/ovms" in r.stderr and "update them with the approval" in r.stderr, r.stderr
    assert release.pod.metric("digest_gate_admission_requests_total", endpoint="validate-approval",
                              kind="InstallPlan", verdict="allow") >= 1
    # The webhook down never holds an approval up (failurePolicy: Ignore).
    release.pod.stop()
    r = approve(incident, name)
    assert r.returncode == 0 and "digest-gate" not in r.stderr, r.stderr
    incident.kubectl("-n", OPERATORS, "delete", "installplan", name)


def nested(depth: int) -> dict:
    """A value `depth` mappings deep: past serde_json's 128."""
    out: dict = {}
    for _ in range(depth):
        out = {"f:x": out}
    return out


def test_the_gate_holds_against_the_people_it_gates(incident, release):
    """Issue 59, each bypass found on a real apiserver with the chart's
    entries, in enforce mode for InstallPlans: a judgement forged or removed
    before approving, an acknowledgement set earlier, and one request whose
    managedFields nest past the decoder's depth (answered with a 400 before,
    which the entry's failurePolicy: Ignore turned into an approval)."""
    incident.kubectl("label", "namespace", OPERATORS, f"kubernetes.io/metadata.name={OPERATORS}", "--overwrite")
    name = "install-gate"
    incident.apply(plan(name, [csv_step(NEW, reference("bundle-gzip"))], [lookup(NEW)]))
    enforce = {"kindModes": {"InstallPlan": "enforce"},
               "allowlist": {"fromInstalledOperators": [{"namespace": OPERATORS}]}}
    release.install(enforce | {"audit": {"preflight": {"enabled": True}}})
    # Only the server, and those named, write the judgement.
    code, out, err = preflight(incident, "--installplan", f"{OPERATORS}/{name}", "--annotate")
    assert code == 2 and f"only digest-gate writes InstallPlan {OPERATORS}/{name}'s {JUDGED} annotation" in out + err \
        and f"{ADMIN} may not add it" in out + err, out + err
    assert judgement_on(incident, OPERATORS, name) is None
    release.upgrade(enforce | {"audit": {"preflight": {"enabled": True, "judgementWriters": [ADMIN]}}})
    code, out, err = preflight(incident, "--installplan", f"{OPERATORS}/{name}", "--annotate")
    assert code == 1, out + err
    judged = judgement_on(incident, OPERATORS, name)
    assert judged["staleAfterUpgrade"] >= 2, judged
    release.upgrade(enforce | {"audit": {"preflight": {"enabled": True}}})

    def denied(r: subprocess.CompletedProcess, *said: str):
        assert r.returncode != 0 and 'admission webhook "validate-approvals.digest-gate.dev" denied' in r.stderr, \
            r.stdout + r.stderr
        for s in said:
            assert s in r.stderr, r.stderr

    # A clean judgement forged, then the approval: the forgery is denied.
    clean = {**judged, "staleAfterUpgrade": 0, "alreadyStale": 0, "named": [], "more": 0}
    r = incident.kubectl("-n", OPERATORS, "annotate", "--overwrite", "installplan", name,
                         f"{JUDGED}={json.dumps(clean)}", check=False)
    denied(r, f"{ADMIN} may not change it", "Leave it as it is")
    # Removed, to be approved as "not judged yet": denied as well.
    r = incident.kubectl("-n", OPERATORS, "annotate", "installplan", name, f"{JUDGED}-", check=False)
    denied(r, f"{ADMIN} may not remove it")
    assert judgement_on(incident, OPERATORS, name) == judged
    # An acknowledgement set earlier (by anyone) does not carry a later
    # approval; one given with it does.
    incident.kubectl("-n", OPERATORS, "annotate", "installplan", name, f"{ACKNOWLEDGED}=set last week")
    denied(approve(incident, name), "it counts only when given with it")
    r = approve(incident, name, reason="the runtime goes today")
    assert r.returncode == 0 and "approved despite these findings" in r.stderr, r.stderr
    # One request: the approval with managedFields 200 deep.
    stored = incident.get("installplan", name, OPERATORS)
    stored["spec"]["approved"] = True
    stored["metadata"]["managedFields"] = [{"manager": "e2e", "operation": "Update", "fieldsType": "FieldsV1",
                                            "apiVersion": "operators.coreos.com/v1alpha1", "fieldsV1": nested(200)}]
    r = incident.kubectl("replace", "--dry-run=server", "-f", "-", input=json.dumps(stored), check=False)
    denied(r, f"approving InstallPlan {OPERATORS}/{name} leaves {judged['staleAfterUpgrade']} objects")
    assert not judgement_on(incident, OPERATORS, name) is None
    incident.kubectl("-n", OPERATORS, "delete", "installplan", name)


def test_one_plan_nobody_can_read_is_its_own_error_and_nothing_is_written_twice(incident):
    """Issue 59: one stored plan with managedFields nested past serde_json's
    depth made every list of plans fail, and so every round; one that does
    not read as OLM writes plans is that plan's error; a round re-wrote
    every plan's judgement, an update event for OLM each time."""
    deep = plan("install-deep", [csv_step(NEW, reference("bundle-plain"))], [lookup(NEW)])
    deep["metadata"]["managedFields"] = [{"manager": "e2e", "operation": "Update", "fieldsType": "FieldsV1",
                                          "apiVersion": "operators.coreos.com/v1alpha1", "fieldsV1": nested(200)}]
    # (A spec nested 200 deep, which the permissive CRD would keep, makes
    # this apiserver time out; a unit test of the list's items has it.)
    garbled = plan("install-garbled", [csv_step(NEW, "{not json")], [lookup(NEW)])
    many = [plan(f"install-many-{i:02}", [csv_step(NEW, reference("bundle-plain"))], [lookup(NEW)])
            for i in range(50)]
    incident.kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                              "items": [deep, garbled, *many]}))
    try:
        assert incident.get("installplan", "install-deep", OPERATORS)["metadata"]["managedFields"][0]["manager"] \
            == "e2e", "the apiserver did not keep the managedFields"
        # The plans of the tests before are their own; those of this one are
        # all in the operators' namespace.
        run = ("--all-pending", "--plan-namespace", OPERATORS, "--annotate")
        code, out, err = preflight(incident, *run)
        assert code == 2, out + err
        assert f"InstallPlan {OPERATORS}/install-garbled: the step of CSV {NEW} holds no manifest" in out + err, \
            out + err
        assert "cannot list" not in out + err, out + err
        for judged in ("install-deep", "install-many-00", "install-many-49"):
            assert judgement_on(incident, OPERATORS, judged) is not None, f"{judged}:\n{out}{err}"
        versions = {p["metadata"]["name"]: p["metadata"]["resourceVersion"]
                    for p in incident.get("installplans", namespace=OPERATORS)["items"]}
        code, out, err = preflight(incident, *run)
        assert "judgement unchanged, not written again, on InstallPlan" in out, out
        after = {p["metadata"]["name"]: p["metadata"]["resourceVersion"]
                 for p in incident.get("installplans", namespace=OPERATORS)["items"]}
        assert after == versions
    finally:
        incident.kubectl("-n", OPERATORS, "delete", "installplan", "install-deep", "install-garbled",
                         *(p["metadata"]["name"] for p in many))


def test_the_webhook_judges_pending_plans_in_the_background(report_crds, release):
    """serve --audit-preflight: the leader judges every plan waiting in the
    operators' namespace after its audit, leaves the judgement on each,
    reports it (a PolicyReport, an Event on the plan, a metric), and takes
    the reports and the Event back once the plan no longer waits; the
    approval is answered without anyone running preflight."""
    incident = report_crds
    # As Kubernetes 1.20 leaves a namespace: no kubernetes.io/metadata.name,
    # which the approval gate's entry selects the operators' namespace by.
    incident.kubectl("label", "namespace", OPERATORS, "kubernetes.io/metadata.name-")
    name = "install-background"
    incident.apply(plan(name, [csv_step(NEW, reference("bundle-plain"))], [lookup(NEW)]))
    started = time.monotonic()
    installed = release.install({"audit": {"enabled": True, "interval": "1h", "preflight": {"enabled": True},
                               "policyReports": {"enabled": True},
                               "namespaceSelector": {"matchLabels": dict([SELECTOR.split("=")])}},
                     "allowlist": {"fromInstalledOperators": [{"namespace": OPERATORS}]},
                     "kindModes": {"InstallPlan": "enforce"}})
    assert "--audit-preflight" in release.pod.args

    def judgement(plan_name: str) -> dict | None:
        return judgement_on(incident, OPERATORS, plan_name)

    def events(plan_name: str) -> list[dict]:
        return [e for e in incident.get("events", namespace=OPERATORS)["items"]
                if e["reason"] == "UpgradeWouldBreak" and e["involvedObject"]["name"] == plan_name]

    def report(plan_name: str) -> dict | None:
        return incident.get(POLICY_REPORT, f"digest-gate-preflight-{plan_name}", MODELS)

    judged = wait_until("the background pre-flight's judgement on the plan", lambda: judgement(name), timeout=90)
    assert judged["targets"] == [NEW] and judged["staleAfterUpgrade"] >= 2, judged
    # Issue 58: unlabelled, the gate is silently not called: the approval of
    # a plan judged to break things passes without a word from digest-gate.
    # The audit says so before anyone approves: a metric and a log line.
    assert release.pod.metric("digest_gate_namespaces_without_name_label") >= 1
    log = release.pod.log_path.read_text()
    assert "namespace without its name label" in log and f"kubectl label namespace {OPERATORS} " \
        f"kubernetes.io/metadata.name={OPERATORS}" in log, log[-2000:]
    r = approve(incident, name)
    assert r.returncode == 0 and "digest-gate" not in r.stderr, r.stderr
    # The install notes print what to run; run it as a reader would.
    follow = [line.strip() for line in installed["notes"].splitlines()
              if "kubectl" in line and f"namespace {OPERATORS} " in line]
    assert follow, installed["notes"]
    env = {**os.environ, "PATH": f"{incident.bin}:{os.environ['PATH']}", "KUBECONFIG": str(incident.kubeconfig)}
    for line in follow:
        subprocess.run(["bash", "-c", line], env=env, check=True, capture_output=True, timeout=60)
    # The plan whose bundle is gone and the one still unpacking are said in
    # the log, and hold no other plan's judgement back. The annotation is
    # written first in a round; the metric, the Event and the report after.
    wait_until("the round's metric", lambda: release.pod.metric(
        "digest_gate_pending_upgrade_findings", plan_namespace=OPERATORS, package="rhods-operator",
        reason="stale_after_upgrade") >= 2, timeout=60)
    wait_until("the round's Event and report", lambda: events(name) and report(name), timeout=60)
    # The plan whose bundle is gone cannot be judged: counted, so it alerts.
    assert release.pod.metric("digest_gate_pending_upgrade_unjudged", plan_namespace=OPERATORS,
                              reason="bundle_unreadable") >= 1
    (event,) = events(name)
    assert event["type"] == "Warning" and event["involvedObject"]["uid"], event
    assert event["message"].startswith("digest-gate: approving it leaves "), event
    assert {r["rule"] for r in report(name)["results"]} == {"stale_after_upgrade"}, report(name)
    r = approve(incident, name)
    assert r.returncode != 0 and "validate-approvals.digest-gate.dev" in r.stderr, r.stderr
    # A plan that comes to wait is judged at once (the watch), not at the
    # next audit an hour away.
    rounds = release.pod.metric("digest_gate_audit_duration_seconds_count")
    version = incident.get("installplan", name, OPERATORS)["metadata"]["resourceVersion"]
    later = "install-later"
    incident.apply(plan(later, [csv_step(NEW, reference("bundle-plain"))], [lookup(NEW)]))
    judged = wait_until("the judgement of a plan that came to wait", lambda: judgement(later), timeout=60)
    assert judged["targets"] == [NEW], judged
    assert release.pod.metric("digest_gate_audit_duration_seconds_count") == rounds, "it was not the audit"
    # That round judged the first plan again and found the same: it left
    # the plan alone (no update event for OLM).
    assert incident.get("installplan", name, OPERATORS)["metadata"]["resourceVersion"] == version
    # The InstallPlan watch stays open in a quiet cluster: the client's
    # request bound (30 s) no longer cuts it, which logged a WARN and
    # listed every plan again twice a minute.
    time.sleep(max(0.0, 65 - (time.monotonic() - started)))
    log = release.pod.log_path.read_text()
    assert "the InstallPlan watch failed" not in log, log[-3000:]
    # Approved (with a reason: enforce mode), the plan no longer waits: its
    # report, its Event and its series go; the other plan's stay.
    incident.kubectl("-n", OPERATORS, "patch", "installplan", name, "--type", "merge", "-p", json.dumps(
        {"spec": {"approved": True},
         "metadata": {"annotations": {"digest-gate.dev/approve-despite-findings": "e2e"}}}))
    wait_until("the approved plan's report and Event removed",
               lambda: report(name) is None and not events(name), timeout=60)
    assert report(later) is not None and events(later)
    # Gone, the other plan's go too.
    incident.kubectl("-n", OPERATORS, "delete", "installplan", later)
    wait_until("the deleted plan's report and Event removed",
               lambda: report(later) is None and not events(later), timeout=60)
    incident.kubectl("-n", OPERATORS, "delete", "installplan", name)


def test_the_round_settles_when_the_last_waiting_plan_is_approved(incident, release):
    """Issue 60: "no InstallPlan waits" was an error that left the round
    incomplete, so once the last waiting plan of the operators' namespaces
    was approved its Warning Event and its series stayed for ever."""
    operators = "pf-operators-last"
    incident.namespace(operators, dict([SELECTOR.split("=")]))
    installed = csv("rhods-operator.1.20.1.csv.yaml")
    installed["metadata"]["namespace"] = operators
    incident.apply(installed)
    name = "install-last"
    incident.apply(plan(name, [csv_step(NEW, reference("bundle-plain"))], [lookup(NEW)], namespace=operators))
    release.install({"audit": {"enabled": True, "interval": "1h", "preflight": {"enabled": True},
                               "namespaceSelector": {"matchLabels": dict([SELECTOR.split("=")])}},
                     "allowlist": {"fromInstalledOperators": [{"namespace": operators}]}})

    def events() -> list[dict]:
        return [e for e in incident.get("events", namespace=operators)["items"]
                if e["reason"] == "UpgradeWouldBreak" and e["involvedObject"]["name"] == name]

    def series() -> float:
        return release.pod.metric("digest_gate_pending_upgrade_findings", plan_namespace=operators,
                                  reason="stale_after_upgrade")
    wait_until("the waiting plan's Event and series", lambda: events() and series() >= 1, timeout=90)
    incident.kubectl("-n", operators, "patch", "installplan", name, "--type", "merge", "-p",
                     json.dumps({"spec": {"approved": True}}))
    wait_until("the approved plan's Event and series gone", lambda: not events() and series() == 0, timeout=60)
    log = release.pod.log_path.read_text()
    assert "nothing was judged" not in log, log[-2000:]
    incident.delete_namespace(operators)


def test_the_background_pre_flight_asks_the_registry_about_a_waiting_plan(incident, mirror, tmp_path):
    """serve --audit-preflight --verify-registry: the waiting plan's new
    digests are verified where the nodes pull them (the mirror), not only
    the allowlist in force. An operators' namespace of its own holds only
    this plan, so nothing but the loopback mirror is asked."""
    from cluster import serve_dev
    from test_cluster_faults import lease_for
    operators = "pf-mirror-operators"
    incident.namespace(operators, {})
    never = "sha256:" + "7ef272bc" * 8
    target = json.loads(mirror["target"]("1.23.0", {"multi": mirror["multi"], "gone": never}).read_text())
    name = "install-mirrored"
    incident.apply(plan(name, [csv_step(target["metadata"]["name"], json.dumps(target))], namespace=operators))
    args = ("--mode", "audit", "--allowlist", str(mirror["rules"]), "--audit-interval", "1h",
            "--audit-lease", lease_for(incident, "pf-mirrored"), "--audit-preflight", "--allowlist-csv", operators,
            "--audit-namespace-selector", "digest-gate-e2e/none=yes", "--verify-registry",
            "--verify-platform", "linux/amd64", "--registry-ca", str(mirror["ca"]),
            "--registry-auth", str(mirror["auth"]))
    serve, admin = serve_dev(incident, tmp_path / "mirrored", *args, name="replica-mirrored")
    try:
        def judged() -> dict | None:
            return judgement_on(incident, operators, name)
        found = wait_until("the judgement with the registry's answers", judged, timeout=90)
        assert found["unpullableAfterUpgrade"] == 1 and found["unverifiable"] == 0, found
        assert found["named"] == [f"registry.redhat.io/rhods/gone@{never}"], found
        # The annotation is written first in a round, the metric after.
        wait_until("the round's metric", lambda: admin_metric(
            admin, "digest_gate_pending_upgrade_findings", plan_namespace=operators,
            reason="unpullable_after_upgrade") == 1, timeout=60)
        answer = review_approval(serve, incident.get("installplan", name, operators))
        assert answer["allowed"] is True, answer
        assert "digest-gate: approving InstallPlan pf-mirror-operators/install-mirrored promotes 1 digest that " \
               "will not pull" in answer["warnings"], answer
    finally:
        serve.stop()
        incident.delete_namespace(operators)


def test_once_the_objects_are_updated_it_is_safe_to_approve(incident):
    for kind, name in (("servingruntime", "ovms"), ("deployment", "modelmesh-serving-ovms")):
        o = incident.get(kind, name, MODELS)
        spec = o["spec"]["template"]["spec"] if kind == "deployment" else o["spec"]
        spec["containers"][0]["image"] = PROMOTED_IMAGE
        if kind == "deployment":
            # No kubelet makes the new Pod ready, so a rolling update would
            # keep the old one (stale, and reported so): recreate instead.
            o["spec"]["strategy"] = {"type": "Recreate"}
        incident.apply({k: o[k] for k in ("apiVersion", "kind", "metadata", "spec")})
    cm = incident.get("configmap", "servingruntimes-config", APPS)
    stale_digest = INCIDENT_IMAGE.split("@")[1]
    (key,) = [k for k, v in cm["data"].items() if stale_digest in v]
    cm["data"][key] = cm["data"][key].replace(stale_digest, PROMOTED_DIGEST)
    incident.apply({k: cm[k] for k in ("apiVersion", "kind", "metadata", "data")})
    # The controller-manager rolls the Deployment: the old ReplicaSet's Pod
    # goes (no kubelet holds it), a new one on the promoted digest comes.
    answers = []

    def safe() -> bool:
        # The old ReplicaSet, scaled to 0, still templates the old digest (a
        # rollback runs it, so it is reported): the controller deletes it
        # once the rollout completes, which no kubelet does here.
        for rs in incident.get("replicasets", namespace=MODELS)["items"]:
            if rs["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE_1_20_1 \
                    and rs["spec"]["replicas"] == 0:
                incident.kubectl("delete", "replicaset", rs["metadata"]["name"], "-n", MODELS)
        answers.append(preflight(incident, "--installplan", f"{OPERATORS}/install-gzip"))
        return answers[-1][0] == 0

    try:
        wait_until("the rollout to the promoted digest", safe, timeout=90, interval=1)
    except AssertionError as e:
        raise AssertionError(answers[-1]) from e
    code, out, err = answers[-1]
    assert "verdict: rhods-operator.1.21.0: safe to approve" in out, out + err
    assert "stale" not in out, out
    # Already on the new release's digest, they comply only once it is
    # approved: said, and no reason to wait.
    assert f"fixed_by_upgrade: {MODELS}/ServingRuntime/ovms: {PROMOTED_IMAGE} is promoted once it is approved" \
        in out, out


def review_approval(replica, old: dict) -> dict:
    """The AdmissionReview the apiserver sends when `old` is approved, posted
    to one replica's webhook port directly."""
    import http.client
    import ssl
    new = json.loads(json.dumps(old))
    new["spec"]["approved"] = True
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "approval-1", "kind": {"group": "operators.coreos.com", "version": "v1alpha1", "kind": "InstallPlan"},
        "resource": {"group": "operators.coreos.com", "version": "v1alpha1", "resource": "installplans"},
        "name": old["metadata"]["name"], "namespace": old["metadata"]["namespace"], "operation": "UPDATE",
        "userInfo": {"username": "admin"}, "object": new, "oldObject": old}})
    context = ssl.create_default_context(cafile=str(replica.ca))
    connection = http.client.HTTPSConnection("localhost", replica.port, context=context, timeout=10)
    connection.request("POST", "/validate-approval", body, {"Content-Type": "application/json"})
    answer = connection.getresponse()
    assert answer.status == 200, answer.status
    return json.loads(answer.read())["response"]


def test_the_background_round_survives_a_hostile_bundle_at_the_charts_limit(incident, tmp_path):
    """Issue 57: `serve --audit-preflight` in a memory cgroup at the chart's
    128 MiB (where the machine lets a test make one), a waiting plan whose
    bundle inflates to 120 MiB. The build before was OOM-killed about a
    second after start, and so was each replica that took the Lease next;
    now the release is "not judged", counted, and the replica answers."""
    from cluster import serve_dev
    from test_cluster_faults import lease_for
    cgroup = pathlib.Path("/sys/fs/cgroup/memory") / f"digest-gate-e2e-{tmp_path.name}"
    wrapper = tmp_path / "in-cgroup.sh"
    try:
        cgroup.mkdir()
        (cgroup / "memory.limit_in_bytes").write_text(str(128 << 20))
        wrapper.write_text(f'#!/bin/sh\necho $$ > "{cgroup}/cgroup.procs" && exec "{binary()}" "$@"\n')
    except OSError:
        cgroup = None
        wrapper.write_text(f'#!/bin/sh\nexec "{binary()}" "$@"\n')
    wrapper.chmod(0o755)
    with hostile_bundle(incident, "bomb-bg"):
        serve, admin = serve_dev(incident, tmp_path / "serve", "--audit-interval", "1h",
                                 "--audit-lease", lease_for(incident, "pf-bomb"), "--audit-preflight",
                                 "--allowlist-csv", OPERATORS, "--audit-namespace-selector", SELECTOR,
                                 program=wrapper)
        try:
            def counted() -> bool:
                serve.check_alive()
                return admin_metric(admin, "digest_gate_pending_upgrade_findings", reason="not_judged",
                                    plan_namespace=OPERATORS) >= 1
            wait_until("the hostile bundle's release counted as not judged", counted, timeout=90)
            serve.check_alive()
            assert admin_metric(admin, "digest_gate_pending_upgrade_unjudged", reason="too_large",
                                plan_namespace=OPERATORS) >= 1
            stored = incident.get("installplan", "install-bomb-bg", OPERATORS)
            assert "allowed" in review_approval(serve, stored)
            assert "bundle too large or too complex" in serve.tail(200), serve.tail()
        finally:
            serve.stop()
            if cgroup is not None:
                cgroup.rmdir()


def test_two_replicas_answer_an_approval_alike_and_the_next_round_clears_it(incident, tmp_path):
    """Two `serve` replicas on one Lease: the leader judges, both answer the
    approval the same from the plan, and once the object is updated the next
    round's judgement lets the approval through on either. Last in the file:
    it changes what an object runs."""
    from cluster import serve_dev
    from test_cluster_faults import lease_for
    # Only this namespace is read: the judgement is this runtime's alone,
    # whatever the tests before left elsewhere.
    models, selector = "pf-replicas", "digest-gate-e2e/replicas=yes"
    incident.namespace(models, dict([selector.split("=")]))
    runtime = incident_runtime(models)
    runtime["metadata"]["name"] = "ovms-replicas"
    runtime["spec"]["containers"][0]["image"] = IMAGE_1_20_1
    incident.apply(runtime)
    name = "install-replicas"
    incident.apply(plan(name, [csv_step(NEW, reference("bundle-plain"))], [lookup(NEW)]))
    lease = lease_for(incident, "pf-preflight")
    args = ("--audit-interval", "3s", "--audit-lease", lease, "--audit-preflight", "--allowlist-csv", OPERATORS,
            "--audit-namespace-selector", selector, "--kind-mode", "InstallPlan=enforce")
    replicas = [serve_dev(incident, tmp_path / n, *args, name=n) for n in ("replica-a", "replica-b")]
    try:
        def judged() -> dict | None:
            return judgement_on(incident, OPERATORS, name)
        first = wait_until("the leader's judgement on the plan", judged, timeout=90)
        assert f"{models}/ServingRuntime/ovms-replicas" in first["named"], first
        leaders = [admin_metric(admin, "digest_gate_audit_leader") for _, admin in replicas]
        assert sorted(leaders) == [0, 1], leaders
        # Only the leader exports what it found.
        follower = replicas[leaders.index(0)][1]
        assert admin_metric(follower, "digest_gate_pending_upgrade_findings") == 0
        # The same review to each: the plan as read once (every round
        # rewrites the judgement's time).
        stored = incident.get("installplan", name, OPERATORS)
        answers = [review_approval(serve, stored) for serve, _ in replicas]
        assert answers[0]["allowed"] is False and answers[0]["status"]["code"] == 403, answers[0]
        assert [{k: v for k, v in a.items() if k != "uid"} for a in answers] == \
            [{k: v for k, v in answers[0].items() if k != "uid"}] * 2, answers
        # Updated to the new release's digest: the next round says so, and
        # either replica lets the approval through.
        runtime = incident.get("servingruntime", "ovms-replicas", models)
        runtime["spec"]["containers"][0]["image"] = PROMOTED_IMAGE
        incident.apply({k: runtime[k] for k in ("apiVersion", "kind", "metadata", "spec")})
        def cleared() -> bool:
            now = judged()
            return now is not None and now["staleAfterUpgrade"] == 0
        wait_until("the next round's judgement", cleared, timeout=60)
        stored = incident.get("installplan", name, OPERATORS)
        for serve, _ in replicas:
            answer = review_approval(serve, stored)
            assert answer["allowed"] is True, answer
    finally:
        for serve, _ in replicas:
            serve.stop()
        incident.kubectl("-n", OPERATORS, "delete", "installplan", name)
        incident.delete_namespace(models)

