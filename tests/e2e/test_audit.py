"""`digest-gate audit` on a real apiserver: what was stored before any
webhook existed (the incident's stale ConfigMap, a runtime pinned to the
never-promoted digest and the Deployment, ReplicaSet and Pod made from it) is
found, with owner chains, in check's JSON schema; and every way the audit
cannot read the cluster is a clear exit 2, never a pass."""

from __future__ import annotations

import base64
import json
import pathlib
import subprocess
import time

import pytest

from cluster import ROOT, ControlPlane, free_port, wait_until
from harness import (FIXTURES, FULLNAME, INCIDENT_IMAGE, PROMOTED_IMAGE, RELEASE, RELEASE_NAMESPACE,
                     incident_runtime, load_yaml, previous_build)
from support import binary

ALLOWLIST = ROOT / "examples" / "allowlist.yaml"
APPS = "redhat-ods-applications"
MODELS = "models-audit"
SELECTOR = "digest-gate-e2e/audit=yes"
INCIDENT_CM = FIXTURES / "servingruntimes" / "01_rhods-1.21_odh-dashboard_servingruntimes-config.cm.yaml"


def against(kubeconfig: pathlib.Path, command: str, *args: str) -> subprocess.CompletedProcess:
    """`digest-gate COMMAND` against the cluster of `kubeconfig`, in an
    environment that holds no other kubeconfig."""
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "NO_PROXY": "127.0.0.1,localhost"}
    return subprocess.run([str(binary()), command, "--kubeconfig", str(kubeconfig), "--cluster-timeout", "10s",
                           *args], capture_output=True, text=True, timeout=120, env=env)


def audit(kubeconfig: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    return against(kubeconfig, "audit", "--allowlist", str(ALLOWLIST), *args)


def cleanup(kubeconfig: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    return against(kubeconfig, "cleanup", *args)


def check_json(path: pathlib.Path) -> dict:
    r = subprocess.run([str(binary()), "check", "--allowlist", str(ALLOWLIST), "-f", str(path), "-o", "json"],
                       capture_output=True, text=True, timeout=60)
    return json.loads(r.stdout)


def deployment(namespace: str, name: str, image: str, owner: dict | None = None) -> dict:
    labels = {"app": name}
    metadata = {"name": name, "namespace": namespace, "labels": labels}
    if owner:
        metadata["ownerReferences"] = [{
            "apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata,
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "ovms", "image": image}]}}}}


@pytest.fixture(scope="module")
def stale(cluster: ControlPlane):
    """The cluster as an upgrade left it, before digest-gate was installed:
    stale objects beside compliant ones, in two labelled namespaces."""
    label = dict([SELECTOR.split("=")])
    cluster.namespace(APPS, label)
    cluster.namespace(MODELS, {"modelmesh-enabled": "true", **label})
    (cm,) = load_yaml(INCIDENT_CM)
    cluster.apply(cm, namespace=APPS)
    cluster.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plain", "namespace": APPS},
                   "data": {"key": "no runtime here"}})
    cluster.apply(incident_runtime(MODELS))
    good = incident_runtime(MODELS)
    good["metadata"]["name"] = "ovms-promoted"
    good["spec"]["containers"][0]["image"] = PROMOTED_IMAGE
    cluster.apply(good)
    runtime = cluster.get("servingruntime", "ovms", MODELS)
    # ModelMesh's controller makes this Deployment, owned by the runtime.
    cluster.apply(deployment(MODELS, "modelmesh-serving-ovms", INCIDENT_IMAGE, owner=runtime))
    cluster.apply(deployment(MODELS, "fine", PROMOTED_IMAGE))
    wait_until("the ReplicaSet controller's Pods",
               lambda: len(cluster.get("pods", namespace=MODELS)["items"]) == 2)
    yield cluster
    for ns in (APPS, MODELS):
        cluster.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=90s", timeout=120)


def findings(report: dict) -> set[tuple[str, str, str]]:
    return {(r["namespace"], r["kind"], r["name"]) for r in report["results"] if r["verdict"] != "allow"}


def test_audit_finds_exactly_the_stale_objects_with_owner_chains(stale):
    r = audit(stale.kubeconfig, "--namespace-selector", SELECTOR, "-o", "json")
    assert r.returncode == 1, r.stderr
    report = json.loads(r.stdout)
    assert findings(report) == {
        (APPS, "ConfigMap", "servingruntimes-config"),
        (MODELS, "ServingRuntime", "ovms"),
        (MODELS, "Deployment", "modelmesh-serving-ovms"),
        (MODELS, "ReplicaSet", next(r["name"] for r in report["results"] if r["kind"] == "ReplicaSet"
                                    and r["name"].startswith("modelmesh-serving-ovms-"))),
        (MODELS, "Pod", next(r["name"] for r in report["results"] if r["kind"] == "Pod"
                             and r["name"].startswith("modelmesh-serving-ovms-"))),
    }
    # Everything else read in those namespaces complies.
    kinds = {(r["kind"], r["name"]) for r in report["results"] if r["verdict"] == "allow"}
    assert {("ServingRuntime", "ovms-promoted"), ("Deployment", "fine"), ("ConfigMap", "plain")} <= kinds
    assert all(r["namespace"] in (APPS, MODELS) for r in report["results"] if r["namespace"])

    (pod,) = [r for r in report["results"] if r["kind"] == "Pod" and r["verdict"] != "allow"]
    assert [o["kind"] for o in pod["owners"]] == ["ReplicaSet", "Deployment", "ServingRuntime"]
    assert [o["name"] for o in pod["owners"]][1:] == ["modelmesh-serving-ovms", "ovms"]
    (image,) = pod["images"]
    assert (image["image"], image["rewrite"], image["code"]) == (INCIDENT_IMAGE, PROMOTED_IMAGE,
                                                                 "digest_not_promoted")

    # check's schema, from the same report type: the same keys, and a
    # cluster's object has no file position.
    (cm,) = [r for r in report["results"] if r["kind"] == "ConfigMap" and r["verdict"] != "allow"]
    (from_file,) = check_json(INCIDENT_CM)["results"]
    assert cm.keys() == from_file.keys()
    assert cm["images"][0].keys() == from_file["images"][0].keys()
    assert (cm["source"], cm["document"], cm["item"], cm["line"]) == ("cluster:e2e", None, None, None)
    assert cm["images"][0]["line"] is None
    assert {k: v for k, v in cm["images"][0].items() if k != "line"} == \
        {k: v for k, v in from_file["images"][0].items() if k != "line"}
    assert report["summary"]["rewrite"] == 5 and report["summary"]["deny"] == 0


def test_a_run_says_what_it_read_and_judging_nothing_is_not_a_pass(stale):
    """Issue 60: `audit` without -n or -A read the context's namespace
    (`default`), said nothing of it, found nothing and exited 0: a cron job
    that forgot -A passed for ever."""
    r = audit(stale.kubeconfig)
    assert r.returncode == 2, r.stdout + r.stderr
    assert 'note: read namespace "default" (the context\'s namespace) only: -n names others, -A reads every ' \
        "namespace" in r.stdout, r.stdout
    assert 'error: namespace "default" (the context\'s namespace) holds no object of a kind digest-gate reads: ' \
        "nothing was judged (name namespaces with -n or -A; --allow-empty when none is expected)" in r.stderr, \
        r.stderr
    # An empty namespace meant to be empty, said so.
    r = audit(stale.kubeconfig, "--allow-empty", "-o", "json")
    assert r.returncode == 0 and json.loads(r.stdout)["summary"]["objects"] == 0, r.stdout + r.stderr
    # Named, no note; read, no error.
    r = audit(stale.kubeconfig, "-n", MODELS)
    assert r.returncode == 1 and "(the context's namespace)" not in r.stdout + r.stderr, r.stdout + r.stderr


def test_the_old_timeout_flag_still_works_with_one_warning(stale):
    # Before chart 0.8.0 the cluster timeout of audit and cleanup was
    # --request-timeout / DIGEST_GATE_REQUEST_TIMEOUT, which serve uses for
    # its webhook clients: the old spelling still reads the same, and says once
    # what to write instead.
    new = audit(stale.kubeconfig, "--namespace-selector", SELECTOR, "-o", "json")
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "NO_PROXY": "127.0.0.1,localhost"}
    for spelling, extra_env in ((["--request-timeout", "10s"], {}), ([], {"DIGEST_GATE_REQUEST_TIMEOUT": "10s"})):
        old = subprocess.run([str(binary()), "audit", "--kubeconfig", str(stale.kubeconfig), *spelling,
                              "--allowlist", str(ALLOWLIST), "--namespace-selector", SELECTOR, "-o", "json"],
                             capture_output=True, text=True, timeout=120, env={**env, **extra_env})
        assert old.returncode == new.returncode == 1, old.stderr
        assert findings(json.loads(old.stdout)) == findings(json.loads(new.stdout))
        assert old.stderr.count("deprecated") == 1 and "--cluster-timeout" in old.stderr, old.stderr
        assert "deprecated" not in new.stderr


def test_audit_text_names_each_object_and_what_owns_it(stale):
    r = audit(stale.kubeconfig, "-n", MODELS, "-n", APPS)
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    assert any(line.startswith(f"{APPS}/ConfigMap/servingruntimes-config: rewrite: container \"ovms\"")
               for line in lines), r.stdout
    (pod_line,) = [line for line in lines if line.startswith(f"{MODELS}/Pod/")]
    assert " ← Deployment modelmesh-serving-ovms ← ServingRuntime ovms): rewrite: " in pod_line
    assert "sha256:7ef272bc7be8 was never promoted" in pod_line
    # -n leaves cluster-scoped kinds out, and says so; what was read is named.
    assert "note: ClusterServingRuntimes are cluster-scoped: not read with -n" in r.stdout
    assert "note: the cluster does not serve Templates" in r.stdout
    (read,) = [line for line in lines if line.startswith("note: read from https://127.0.0.1:")]
    assert "Pod 2" in read and "ServingRuntime 2" in read
    assert lines[-1].endswith("5 to rewrite, 0 denied, 0 skipped")


def test_narrowing_to_compliant_objects_exits_0(stale):
    r = audit(stale.kubeconfig, "-n", MODELS, "-l", "app=fine", "--kinds", "Deployment,ReplicaSet,Pod")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "3 objects checked: 3 allowed" in r.stdout


def test_an_allowlist_that_promotes_nothing_gets_checks_answer(stale, tmp_path):
    # Issue 41: one answer, in check's words, on a real cluster: refused
    # where it would deny every listed image, a warning in audit mode.
    empty = tmp_path / "empty.txt"
    empty.write_text("# emptied by mistake\n")
    refused = "error: the allowlist promotes no repository, so every image would be denied"
    r = against(stale.kubeconfig, "audit", "--allowlist", str(empty), "-n", MODELS)
    assert r.returncode == 2, r.stdout + r.stderr
    assert refused in r.stderr and r.stdout == "", r.stderr
    check = subprocess.run([str(binary()), "check", "--allowlist", str(empty), "-f", str(INCIDENT_CM)],
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 2 and refused in check.stderr, check.stderr
    r = against(stale.kubeconfig, "audit", "--allowlist", str(empty), "-n", MODELS, "--mode", "audit")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "warning: the allowlist promotes no repository: every image is reported" in r.stderr


# --- what the audit cannot read is exit 2, and says why ---------------------

def kubeconfig_with(cluster: ControlPlane, path: pathlib.Path, *, server: str | None = None,
                    token: str | None = None) -> pathlib.Path:
    config = json.loads(cluster.kubeconfig.read_text())
    if server:
        config["clusters"][0]["cluster"]["server"] = server
    if token:
        config["users"][0]["user"]["token"] = token
    path.write_text(json.dumps(config))
    return path


def test_an_unreachable_server_is_named(stale, tmp_path):
    server = f"https://127.0.0.1:{free_port()}"
    r = audit(kubeconfig_with(stale, tmp_path / "kc", server=server), "-A")
    assert r.returncode == 2
    assert f"error: cannot reach the cluster at {server} (context \"e2e\")" in r.stderr, r.stderr
    assert "onnection refused" in r.stderr
    assert r.stdout == ""


def test_a_missing_context_and_a_missing_namespace(stale):
    r = audit(stale.kubeconfig, "--context", "prod")
    assert r.returncode == 2
    assert r.stderr.strip().endswith('no context "prod" (contexts: e2e)'), r.stderr
    r = audit(stale.kubeconfig, "-n", "no-such-namespace")
    assert r.returncode == 2
    assert 'error: namespace "no-such-namespace" does not exist' in r.stderr, r.stdout + r.stderr


def service_account_token(cluster: ControlPlane, namespace: str, name: str, *, expires_in: int) -> str:
    """A bound service-account token as the apiserver's TokenRequest would
    mint it, signed with the control plane's key, expiring in `expires_in`
    seconds (negative: already expired)."""
    sa = cluster.get("serviceaccount", name, namespace)
    now = int(time.time())
    issuer = "https://kubernetes.default.svc.cluster.local"
    claims = {"iss": issuer, "aud": [issuer], "sub": f"system:serviceaccount:{namespace}:{name}",
              "iat": now - 3600, "nbf": now - 3600, "exp": now + expires_in,
              "kubernetes.io": {"namespace": namespace,
                                "serviceaccount": {"name": name, "uid": sa["metadata"]["uid"]}}}

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
    signing_input = b64(json.dumps({"alg": "RS256", "typ": "JWT"}).encode()) + "." + b64(json.dumps(claims).encode())
    signature = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(cluster.pki / "sa.key")],
                               input=signing_input.encode(), capture_output=True, check=True).stdout
    return signing_input + "." + b64(signature)


@pytest.fixture(scope="module")
def auditor(stale):
    """A ServiceAccount that may list Pods in the models namespace, and
    nothing else."""
    stale.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "auditor", "namespace": MODELS}})
    stale.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                 "metadata": {"name": "pod-reader", "namespace": MODELS},
                 "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]})
    stale.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                 "metadata": {"name": "auditor", "namespace": MODELS},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
                 "subjects": [{"kind": "ServiceAccount", "name": "auditor", "namespace": MODELS}]})
    return "auditor"


def test_rbac_that_forbids_a_kind_is_exit_2_naming_the_kind(stale, auditor, tmp_path):
    token = service_account_token(stale, MODELS, auditor, expires_in=600)
    kc = kubeconfig_with(stale, tmp_path / "kc", token=token)
    # What it may read, it reads: the stale Pod is found.
    r = audit(kc, "-n", MODELS, "--kinds", "Pod")
    assert r.returncode == 1, r.stdout + r.stderr
    # Everything else is refused: each kind it could not read is named, with
    # the apiserver's reason, and the run does not pass.
    r = audit(kc, "-n", MODELS)
    assert r.returncode == 2, r.stdout
    assert (f'error: cannot list ServingRuntimes (serving.kserve.io/v1alpha1) in namespace "{MODELS}": '
            f'servingruntimes.serving.kserve.io is forbidden: User "system:serviceaccount:{MODELS}:auditor" '
            f'cannot list resource "servingruntimes" in API group "serving.kserve.io" in the namespace '
            f'"{MODELS}" (403 Forbidden)') in r.stderr, r.stdout + r.stderr
    assert "cannot list Deployments (apps/v1)" in r.stderr


def test_an_expired_token_is_refused_with_a_hint(stale, auditor, tmp_path):
    token = service_account_token(stale, MODELS, auditor, expires_in=-60)
    r = audit(kubeconfig_with(stale, tmp_path / "kc", token=token), "-n", MODELS, "--kinds", "Pod")
    assert r.returncode == 2
    assert "refused the credentials (401 Unauthorized" in r.stderr, r.stderr
    assert "the token may have expired" in r.stderr


# --- the webhook's background audit ------------------------------------------

AUDITOR = "digest-gate-audit"  # the chart's ClusterRole, Lease and owner: <fullname>-audit


def can_i(cluster: ControlPlane, verb: str, resource: str, namespace: str | None = None) -> bool:
    who = f"system:serviceaccount:{RELEASE_NAMESPACE}:{FULLNAME}"
    r = cluster.kubectl("auth", "can-i", verb, resource, f"--as={who}",
                        *(["-n", namespace] if namespace else ["--all-namespaces"]), check=False)
    assert r.stdout.strip() in ("yes", "no"), r.stdout + r.stderr
    return r.stdout.strip() == "yes"


def owned_by_release(cluster: ControlPlane) -> dict[str, list[str]]:
    """What the audit wrote (it carries the audit's label), by resource."""
    out = {}
    for kind in (POLICY_REPORT, "events"):
        listing = cluster.kubectl("get", kind, "-A", "-l", "app.kubernetes.io/managed-by=digest-gate", "-o", "json")
        out[kind] = [o["metadata"]["name"] for o in json.loads(listing.stdout)["items"]]
    return out


# In the chart's own image, run as a container (test_image.py): in-cluster
# config from the mounted token, reloads through the read-only mounts.
@pytest.mark.parametrize("release", ["container"], indirect=True)
def test_the_webhooks_background_audit_finds_the_same_and_leaves_with_the_release(report_crds, release, tmp_path):
    cluster = report_crds
    # installCRDs with the CRDs already there (as Kyverno leaves them): the
    # chart must not try to take them over.
    release.install({"audit": {"enabled": True, "interval": "1h", "events": True,
                               "policyReports": {"enabled": True, "installCRDs": True},
                               "namespaceSelector": {"matchLabels": dict([SELECTOR.split("=")])}}})
    crd = cluster.get("crd", "policyreports.wgpolicyk8s.io")
    assert "meta.helm.sh/release-name" not in crd["metadata"].get("annotations", {})
    pod = release.pod
    wait_until("the background audit's first run",
               lambda: pod.metric("digest_gate_audit_duration_seconds_count") >= 1)
    log = pod.log_path.read_text()
    assert pod.metric("digest_gate_audit_errors_total") == 0, log
    assert pod.metric("digest_gate_audit_leader") == 1
    assert pod.metric("digest_gate_audit_last_success_timestamp_seconds") > time.time() - 300

    # The metrics count what the CLI finds, kind by kind.
    cli = json.loads(audit(cluster.kubeconfig, "--namespace-selector", SELECTOR, "-o", "json").stdout)
    expected: dict[str, int] = {}
    for r in cli["results"]:
        if r["verdict"] != "allow":
            expected[r["kind"]] = expected.get(r["kind"], 0) + 1
    assert expected == {"ConfigMap": 1, "ServingRuntime": 1, "Deployment": 1, "ReplicaSet": 1, "Pod": 1}
    for kind, n in expected.items():
        assert pod.metric("digest_gate_audit_findings", kind=kind, verdict="rewrite") == n, kind
    assert pod.metric("digest_gate_audit_findings", verdict="deny") == 0

    # An allowlist change (the ConfigMap edited, the kubelet's update) is an
    # audit of its own, long before the interval: promoting the stale digest
    # leaves nothing to find.
    runs = pod.metric("digest_gate_audit_duration_seconds_count")
    allowlist_cm = f"{FULLNAME}-allowlist"
    original = cluster.get("configmap", allowlist_cm, RELEASE_NAMESPACE)["data"]
    cluster.kubectl("patch", "configmap", allowlist_cm, "-n", RELEASE_NAMESPACE, "--type=merge",
                    "-p", json.dumps({"data": {"stale.txt": INCIDENT_IMAGE + "\n"}}))
    pod.sync_volumes()
    wait_until("the audit after the reload", lambda: pod.metric("digest_gate_audit_duration_seconds_count") > runs)
    assert pod.metric("digest_gate_audit_findings", verdict="rewrite") == 0
    # ... and withdrawing it again brings the findings back.
    cluster.kubectl("patch", "configmap", allowlist_cm, "-n", RELEASE_NAMESPACE, "--type=merge",
                    "-p", json.dumps({"data": {"stale.txt": None}}))
    assert cluster.get("configmap", allowlist_cm, RELEASE_NAMESPACE)["data"] == original
    pod.sync_volumes()
    wait_until("the audit after the second reload",
               lambda: pod.metric("digest_gate_audit_findings", verdict="rewrite") == sum(expected.values()))
    assert pod.metric("digest_gate_audit_errors_total") == 0, pod.log_path.read_text()

    # It holds the Lease, and what it wrote is owned by its ClusterRole.
    lease = cluster.get("lease", f"{RELEASE}-{AUDITOR}", RELEASE_NAMESPACE)
    assert lease["spec"]["holderIdentity"] == pod.pod_name
    role = cluster.get("clusterrole", f"{RELEASE}-{AUDITOR}")
    report = cluster.get(POLICY_REPORT, "digest-gate", MODELS)
    assert [o["uid"] for o in report["metadata"]["ownerReferences"]] == [role["metadata"]["uid"]]
    assert report["summary"]["fail"] == 4
    events = our_events(cluster, MODELS)
    assert len(events) == 4 and all(e["metadata"]["ownerReferences"][0]["kind"] == "ClusterRole" for e in events)

    # Its rights, both ways, as the apiserver decides them.
    for verb, resource in [("list", "pods"), ("list", "configmaps"), ("list", "servingruntimes.serving.kserve.io"),
                           ("list", "clusterservingruntimes.serving.kserve.io"), ("list", "deployments.apps"),
                           ("list", "cronjobs.batch"), ("create", "events"),
                           ("create", "policyreports.wgpolicyk8s.io"), ("patch", "policyreports.wgpolicyk8s.io")]:
        assert can_i(cluster, verb, resource), (verb, resource)
    for verb, resource in [("get", "secrets"), ("list", "secrets"), ("watch", "pods"), ("get", "pods"),
                           ("create", "pods"), ("delete", "pods"), ("patch", "servingruntimes.serving.kserve.io"),
                           ("update", "configmaps"), ("delete", "policyreports.wgpolicyk8s.io"),
                           ("delete", "events"), ("create", "leases.coordination.k8s.io"),
                           ("get", "clusterroles.rbac.authorization.k8s.io")]:
        assert not can_i(cluster, verb, resource), (verb, resource)
    assert can_i(cluster, "patch", f"leases.coordination.k8s.io/{RELEASE}-{AUDITOR}", RELEASE_NAMESPACE)
    assert not can_i(cluster, "patch", "leases.coordination.k8s.io/other", RELEASE_NAMESPACE)
    # ... and enough for a whole audit: every kind served could be listed.
    token = pod._service_account_kubeconfig(FULLNAME)
    r = audit(token, "-A")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "error:" not in r.stdout

    # Uninstalled, the release takes its reports, Events and Lease along: the
    # pre-delete hook deletes what the audit role owns before Helm deletes
    # anything (the garbage collector ignores Events from 1.25 on, so it
    # cannot be relied on for them); the CRDs stay.
    written = owned_by_release(cluster)
    assert sorted(written[POLICY_REPORT]) == ["digest-gate", "digest-gate"] and len(written["events"]) == 5
    release.uninstall()
    (hook,) = release.hook_runs
    cleanup = f"{RELEASE}-{AUDITOR}-cleanup"
    assert hook[:3] == (cleanup, ["cleanup", f"--owner={RELEASE}-{AUDITOR}"], 0), hook
    assert hook[3].startswith(f'deleted 2 policy reports and 5 events owned by ClusterRole "{RELEASE}-{AUDITOR}"'), \
        hook[3]
    assert owned_by_release(cluster) == {POLICY_REPORT: [], "events": []}
    assert cluster.get("lease", f"{RELEASE}-{AUDITOR}", RELEASE_NAMESPACE) is None
    assert cluster.get("crd", "policyreports.wgpolicyk8s.io") is not None
    # The hook's own account, rights and Job went with it.
    for kind, namespace in (("job", RELEASE_NAMESPACE), ("serviceaccount", RELEASE_NAMESPACE),
                            ("clusterrole", None), ("clusterrolebinding", None)):
        assert cluster.get(kind, cleanup, namespace) is None, kind


# The build before issue 29 restructured serve (chart 0.7.1 as released).
PREVIOUS_BUILD = "2e31678"


def written_by_audit(cluster: ControlPlane) -> dict[tuple[str, str, str], tuple[str, dict]]:
    """What the audit wrote, by (resource, namespace, name): its
    resourceVersion and what a reader sees of it."""
    out = {}
    for kind in (POLICY_REPORT, "events"):
        listing = cluster.kubectl("get", kind, "-A", "-l", "app.kubernetes.io/managed-by=digest-gate", "-o", "json")
        for o in json.loads(listing.stdout)["items"]:
            meta = o["metadata"]
            seen = ({"results": o["results"], "summary": o["summary"], "scope": o.get("scope")}
                    if kind == POLICY_REPORT else
                    {k: o.get(k) for k in ("involvedObject", "reason", "message", "count", "type")})
            out[(kind, meta["namespace"], meta["name"])] = (meta["resourceVersion"], seen)
    return out


def audited_by_previous_build(cluster: ControlPlane, release, commit: str, **values) -> dict:
    """The release's background audit run by the build at `commit`: what it
    wrote (two PolicyReports and five Events here)."""
    release.pod.binary = previous_build(commit)
    release.install({**values, "audit": {"enabled": True, "interval": "1h", "events": True,
                                         "policyReports": {"enabled": True, "installCRDs": True},
                                         "namespaceSelector": {"matchLabels": dict([SELECTOR.split("=")])}}})
    pod = release.pod
    wait_until(f"{commit}'s audit", lambda: pod.metric("digest_gate_audit_duration_seconds_count") >= 1)
    assert pod.metric("digest_gate_audit_errors_total") == 0, pod.log_path.read_text()
    before = written_by_audit(cluster)
    assert sum(1 for k in before if k[0] == POLICY_REPORT) == 2 and sum(1 for k in before if k[0] == "events") == 5
    return before


def this_build_audits(cluster: ControlPlane, pod) -> dict:
    """The same pod restarted on this build, after its first audit: what
    the audits have written by then."""
    pod.binary = None
    pod.restart_container()
    wait_until("this build's audit", lambda: pod.metric("digest_gate_audit_duration_seconds_count") >= 1)
    assert pod.metric("digest_gate_audit_errors_total") == 0, pod.log_path.read_text()
    return written_by_audit(cluster)


def test_a_rerun_by_this_build_updates_the_previous_builds_reports_cleanly(report_crds, release):
    cluster = report_crds
    before = audited_by_previous_build(cluster, release, PREVIOUS_BUILD)
    pod = release.pod
    # The previous build listed a pass for every compliant image.
    assert any(r["result"] == "pass" for (kind, ns, _), (_, seen) in before.items()
               if kind == POLICY_REPORT and ns == MODELS for r in seen["results"])

    after = this_build_audits(cluster, pod)
    expected = {"ConfigMap": 1, "ServingRuntime": 1, "Deployment": 1, "ReplicaSet": 1, "Pod": 1}
    for kind, n in expected.items():
        assert pod.metric("digest_gate_audit_findings", kind=kind, verdict="rewrite") == n, kind
    assert after.keys() == before.keys()
    for key, (version, seen) in before.items():
        if key[0] == "events":
            assert after[key] == (version, seen), key
            continue
        # The same summary and the same findings, first seen when they were
        # first seen; the passes are counted, no longer listed. A report
        # that listed no pass is left as it was.
        new_version, new = after[key]
        findings = [r for r in seen["results"] if r["result"] not in ("pass", "skip")]
        assert new == {**seen, "results": findings}, key
        assert (new_version == version) == (findings == seen["results"]), key
    # Once updated, this build's next run changes nothing.
    assert this_build_audits(cluster, pod) == after
    release.uninstall()
    assert owned_by_release(cluster) == {POLICY_REPORT: [], "events": []}


# Main before issue 46 moved what an audit writes onto kube's typed API (the
# end of issue 45): the rearrangement promised the same objects, byte for byte.
BEFORE_TYPED_WRITES = "cb93881"


def test_a_rerun_over_what_main_wrote_before_the_typed_writes_changes_nothing(report_crds, release):
    cluster = report_crds
    # The background audit logs what it wrote at debug.
    before = audited_by_previous_build(cluster, release, BEFORE_TYPED_WRITES, logLevel="info,digest_gate=debug")
    pod = release.pod
    # The same resourceVersions: nothing was written, not even the same again.
    assert this_build_audits(cluster, pod) == before
    log = pod.log_path.read_text()
    assert "policy reports: 0 created, 0 updated, 2 unchanged" in log, log
    assert "events: 0 created, 0 updated, 5 unchanged" in log, log
    # This build's cleanup (the chart's pre-delete hook) finds what main wrote.
    release.uninstall()
    assert owned_by_release(cluster) == {POLICY_REPORT: [], "events": []}


# --- what --policy-reports and --events write --------------------------------
# Last in the file: these add and change objects the tests above count.

POLICY_REPORT_CRDS = ROOT / "charts" / "digest-gate" / "files" / "policyreport"
# What was written, in the version written (kubectl prefers v1beta1).
POLICY_REPORT = "policyreports.v1alpha2.wgpolicyk8s.io"


@pytest.fixture(scope="module")
def report_crds(stale):
    """The wgpolicyk8s.io CRDs the chart ships (Kyverno installs the same)."""
    for crd in sorted(POLICY_REPORT_CRDS.glob("*.yaml")):
        stale.kubectl("apply", "-f", str(crd))
    for crd in ("policyreports.wgpolicyk8s.io", "clusterpolicyreports.wgpolicyk8s.io"):
        stale.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
    return stale


def results_by_object(report: dict) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for r in report["results"]:
        (res,) = r["resources"]
        assert r["policy"] == "digest-gate" and res["uid"], r
        out.setdefault((res["kind"], res["name"]), set()).add(r["result"])
    return out


def our_events(cluster: ControlPlane, namespace: str) -> list[dict]:
    return [e for e in cluster.get("events", namespace=namespace)["items"] if e["reason"] == "UnpromotedImage"]


def written(stdout: str, what: str) -> str:
    (line,) = [line for line in stdout.splitlines() if line.startswith(f"note: {what}: ")]
    return line.removeprefix(f"note: {what}: ")


def test_policy_reports_and_events_are_written_once_and_follow_the_cluster(report_crds):
    cluster = report_crds
    late = incident_runtime(MODELS)
    late["metadata"]["name"] = "ovms-late"
    cluster.apply(late)
    run = ("--namespace-selector", SELECTOR, "--policy-reports", "--events")

    r = audit(cluster.kubeconfig, *run)
    assert r.returncode == 1, r.stdout + r.stderr
    assert written(r.stdout, "policy reports") == "2 created, 0 updated, 0 unchanged", r.stdout
    models = cluster.get(POLICY_REPORT, "digest-gate", MODELS)
    assert models["apiVersion"] == "wgpolicyk8s.io/v1alpha2"
    assert models["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "digest-gate"
    by_object = results_by_object(models)
    stale_names = {name for (kind, name), results in by_object.items() if results == {"fail"}}
    assert {"ovms", "ovms-late", "modelmesh-serving-ovms"} <= stale_names
    # What needs action is listed; the passes are counted.
    assert all(results == {"fail"} for results in by_object.values()), by_object
    assert models["summary"]["fail"] == 5 and models["summary"]["pass"] >= 4, models["summary"]
    (fail,) = [x for x in models["results"] if x["resources"][0]["name"] == "ovms-late"]
    assert (fail["rule"], fail["properties"]["image"], fail["properties"]["promoted"]) == \
        ("digest_not_promoted", INCIDENT_IMAGE, PROMOTED_IMAGE)
    apps = cluster.get(POLICY_REPORT, "digest-gate", APPS)
    assert results_by_object(apps)[("ConfigMap", "servingruntimes-config")] == {"fail"}
    # No cluster-scoped object was found, so no ClusterPolicyReport either.
    assert cluster.get("clusterpolicyreports.v1alpha2.wgpolicyk8s.io", "digest-gate") is None

    events = our_events(cluster, MODELS)
    assert sorted(e["involvedObject"]["name"] for e in events if e["involvedObject"]["kind"] != "ReplicaSet"
                  and e["involvedObject"]["kind"] != "Pod") == ["modelmesh-serving-ovms", "ovms", "ovms-late"]
    assert len(events) == 5 and all(e["type"] == "Warning" for e in events)
    assert all("sha256:7ef272bc7be8" in e["message"] for e in events), events
    assert written(r.stdout, "events") == "6 created, 0 updated, 0 unchanged"  # 5 here, 1 on the ConfigMap

    # A second run finds the same and changes nothing.
    versions = {ns: cluster.get(POLICY_REPORT, "digest-gate", ns)["metadata"]["resourceVersion"]
                for ns in (MODELS, APPS)}
    r = audit(cluster.kubeconfig, *run)
    assert r.returncode == 1
    assert written(r.stdout, "policy reports") == "0 created, 0 updated, 2 unchanged", r.stdout
    assert written(r.stdout, "events") == "0 created, 0 updated, 6 unchanged"
    assert {ns: cluster.get(POLICY_REPORT, "digest-gate", ns)["metadata"]["resourceVersion"]
            for ns in (MODELS, APPS)} == versions
    assert len(our_events(cluster, MODELS)) == 5

    # --policy-reports-passes lists the passes too, with the same summary;
    # a run without it takes them out again.
    summary = models["summary"]
    r = audit(cluster.kubeconfig, *run, "--policy-reports-passes")
    assert r.returncode == 1, r.stdout + r.stderr
    assert written(r.stdout, "policy reports") == "0 created, 1 updated, 1 unchanged", r.stdout
    with_passes = cluster.get(POLICY_REPORT, "digest-gate", MODELS)
    assert with_passes["summary"] == summary
    assert results_by_object(with_passes)[("ServingRuntime", "ovms-promoted")] == {"pass"}
    assert results_by_object(with_passes)[("Deployment", "fine")] == {"pass"}
    r = audit(cluster.kubeconfig, *run)
    assert written(r.stdout, "policy reports") == "0 created, 1 updated, 1 unchanged", r.stdout
    assert cluster.get(POLICY_REPORT, "digest-gate", MODELS)["results"] == models["results"]

    # A fixed object passes; a deleted one leaves the report.
    late["spec"]["containers"][0]["image"] = PROMOTED_IMAGE
    cluster.apply(late)
    r = audit(cluster.kubeconfig, *run)
    assert written(r.stdout, "policy reports") == "0 created, 1 updated, 1 unchanged", r.stdout
    fixed = cluster.get(POLICY_REPORT, "digest-gate", MODELS)
    assert ("ServingRuntime", "ovms-late") not in results_by_object(fixed)
    assert (fixed["summary"]["fail"], fixed["summary"]["pass"]) == (summary["fail"] - 1, summary["pass"] + 1)
    cluster.kubectl("delete", "servingruntime", "ovms-late", "-n", MODELS)
    r = audit(cluster.kubeconfig, *run)
    assert written(r.stdout, "policy reports") == "0 created, 1 updated, 1 unchanged", r.stdout
    models = cluster.get(POLICY_REPORT, "digest-gate", MODELS)
    assert ("ServingRuntime", "ovms-late") not in results_by_object(models)
    assert models["summary"]["fail"] == 4

    # `cleanup` takes back what the audits wrote, and nothing else: another
    # tool's Event stays; an owner that does not exist is an error.
    cluster.apply({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "someone-elses", "namespace": MODELS},
                   "involvedObject": {"kind": "ServingRuntime", "name": "ovms", "namespace": MODELS},
                   "reason": "Pulled", "message": "not digest-gate's", "type": "Normal"})
    r = cleanup(cluster.kubeconfig, "--owner", "no-such-role")
    assert r.returncode == 2 and 'cannot get ClusterRole "no-such-role"' in r.stderr, r.stderr
    assert len(our_events(cluster, MODELS)) == 5
    r = cleanup(cluster.kubeconfig)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("deleted 2 policy reports and 6 events from "), r.stdout
    assert owned_by_release(cluster) == {POLICY_REPORT: [], "events": []}
    assert cluster.get("event", "someone-elses", MODELS) is not None
    r = cleanup(cluster.kubeconfig)
    assert (r.returncode, r.stdout.split(" from ")[0]) == (0, "deleted 0 policy reports and 0 events")


def test_policy_reports_speak_for_whole_namespaces(stale):
    r = audit(stale.kubeconfig, "-n", MODELS, "--kinds", "Pod", "--policy-reports")
    assert r.returncode == 2
    assert "cannot be used with" in r.stderr, r.stderr


REGISTRY_NS = "registry-audit"
NEVER_PUSHED = "sha256:" + "7ef272bc" * 8


@pytest.fixture(scope="module")
def pushed(stale, tmp_path_factory):
    """A registry on loopback (tests/registry's harness) with a
    two-platform and an amd64-only index, two Nodes (amd64, arm64: created
    by hand, there is no kubelet), and a namespace whose runtimes and
    Deployment run them, or a promoted digest never pushed."""
    import sys
    sys.path.insert(0, str(ROOT / "tests" / "registry"))
    import registries as reg

    work = tmp_path_factory.mktemp("registry")
    certs = work / "certs"
    reg.make_ca(certs)
    layout = reg.Layout(work / "layout")
    multi = layout.index([layout.image("linux", "amd64"), layout.image("linux", "arm64")])
    layout.tag(multi, "multi")
    single = layout.index([layout.image("linux", "amd64", text="single")])
    layout.tag(single, "single")
    with reg.Registry(work, certs, "source") as source:
        source.push(layout, "multi", "models/multi")
        source.push(layout, "single", "models/single")
        host = source.host
        images = {"gone": f"{host}/models/gone@{NEVER_PUSHED}", "multi": f"{host}/models/multi@{multi['digest']}",
                  "single": f"{host}/models/single@{single['digest']}"}
        allowlist = work / "allowlist.txt"
        allowlist.write_text("\n".join(images.values()) + "\n")
        for arch in ("amd64", "arm64"):
            stale.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"e2e-{arch}", "labels": {
                "kubernetes.io/os": "linux", "kubernetes.io/arch": arch}}})
        stale.namespace(REGISTRY_NS, {})
        for name, image in (("unpushed", images["gone"]), ("multi", images["multi"]),
                            ("amd64-only", images["single"])):
            sr = incident_runtime(REGISTRY_NS)
            sr["metadata"]["name"] = name
            sr["spec"]["containers"][0]["image"] = image
            stale.apply(sr)
        stale.apply(deployment(REGISTRY_NS, "unpushed", images["gone"]))
        wait_until("the ReplicaSet controller's Pod",
                   lambda: len(stale.get("pods", namespace=REGISTRY_NS)["items"]) == 1)
        yield {"allowlist": allowlist, "ca": certs / "ca.crt", "auth": reg.auth_file(work / "auth.json", {}),
               "host": host}
    stale.kubectl("delete", "namespace", REGISTRY_NS, "--wait=true", "--timeout=90s", timeout=120)
    for arch in ("amd64", "arm64"):
        stale.kubectl("delete", "node", f"e2e-{arch}")


def registry_audit(kubeconfig: pathlib.Path, pushed: dict, *args: str) -> subprocess.CompletedProcess:
    return against(kubeconfig, "audit", "--allowlist", str(pushed["allowlist"]), "--registry", "--registry-ca",
                   str(pushed["ca"]), "--registry-auth", str(pushed["auth"]), *args)


def test_audit_registry_names_what_will_not_start_on_the_nodes_platforms(stale, pushed):
    r = registry_audit(stale.kubeconfig, pushed, "-n", REGISTRY_NS, "-o", "json")
    assert r.returncode == 1, r.stdout + r.stderr
    report = json.loads(r.stdout)
    states = {(o["kind"], o["name"].split("-")[0] if o["kind"] in ("Pod", "ReplicaSet") else o["name"]):
              o["images"][0]["registry"]["state"] for o in report["results"] if o["images"]}
    assert states == {
        ("ServingRuntime", "unpushed"): "missing", ("Deployment", "unpushed"): "missing",
        ("ReplicaSet", "unpushed"): "missing", ("Pod", "unpushed"): "missing",
        ("ServingRuntime", "multi"): "ok",
        # The arm64 Node cannot run the amd64-only index.
        ("ServingRuntime", "amd64-only"): "platform-missing"}, states
    pod = next(o for o in report["results"] if o["kind"] == "Pod")
    assert [o["kind"] for o in pod["owners"]] == ["ReplicaSet", "Deployment"], pod["owners"]
    assert report["summary"]["registry"]["missing"] == 4
    # In text: the Pod, named with what owns it, will not start.
    r = registry_audit(stale.kubeconfig, pushed, "-n", REGISTRY_NS)
    line = next(line for line in r.stdout.splitlines() if "/Pod/unpushed-" in line)
    assert ("← Deployment unpushed" in line and f"missing: {pushed['host']}/models/gone@{NEVER_PUSHED}: "
            f"{pushed['host']} does not have this manifest (MANIFEST_UNKNOWN): its Pods will not start") in line, line
    # Named platforms replace the nodes': amd64 alone, the amd64 index is fine.
    r = registry_audit(stale.kubeconfig, pushed, "-n", REGISTRY_NS, "--platform", "linux/amd64", "-o", "json")
    report = json.loads(r.stdout)
    by_name = {o["name"]: o["images"][0]["registry"]["state"] for o in report["results"]
               if o["kind"] == "ServingRuntime"}
    assert by_name["amd64-only"] == "ok", by_name


def test_audit_registry_without_the_right_to_list_nodes_says_so(stale, auditor, pushed, tmp_path):
    token = service_account_token(stale, MODELS, auditor, expires_in=600)
    kc = kubeconfig_with(stale, tmp_path / "kc", token=token)
    r = registry_audit(kc, pushed, "-n", MODELS, "--kinds", "Pod")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "listing nodes is forbidden" in r.stderr and "list nodes" in r.stderr and "--platform" in r.stderr, r.stderr
    r = registry_audit(kc, pushed, "-n", MODELS, "--kinds", "Pod", "--platform", "linux/amd64")
    assert r.returncode in (0, 1), r.stdout + r.stderr
