"""`digest-gate audit` over several clusters at once, on two real control
planes: the incident's fleet table (the stale runtime on one cluster, the
promoted one on the other) printed by one run, a cluster that cannot be read
named with exit 2 while the other is still reported, PolicyReports written
into each, progress on a terminal; and the background audit's
`digest_gate_audit_images` scraped from a real server."""

from __future__ import annotations

import json
import pathlib
import shlex
import subprocess

import pytest

from cluster import ROOT, ControlPlane, admin_metric, binaries, free_port, serve_dev, wait_until
from harness import FIXTURES, INCIDENT_IMAGE, PROMOTED_IMAGE, PROMOTED_TAG, incident_runtime, permissive_crd
from support import binary, docs_sample

ALLOWLIST = ROOT / "examples" / "allowlist.yaml"
NS = "fleet-models"
SELECTOR = "digest-gate-e2e/fleet=yes"
REPO = INCIDENT_IMAGE.split("@")[0]
STALE, PROMOTED = INCIDENT_IMAGE.split("@")[1], PROMOTED_IMAGE.split("@")[1]
POLICY_REPORT_CRDS = ROOT / "charts" / "digest-gate" / "files" / "policyreport"
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "NO_PROXY": "127.0.0.1,localhost", "TERM": "xterm"}


def short(digest: str) -> str:
    return digest[:19] + "…"


def pod(name: str, image: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
            "spec": {"containers": [{"name": "ovms", "image": image}]}}


def ran(cluster: ControlPlane, name: str, image_id: str):
    """What a kubelet writes once the container runs: the digest its node
    resolved the image to (there is no kubelet here)."""
    status = {"status": {"containerStatuses": [{
        "name": "ovms", "image": PROMOTED_TAG, "imageID": image_id, "ready": True, "restartCount": 0,
        "state": {"running": {"startedAt": "2026-12-07T00:00:00Z"}}}]}}
    code, body = cluster.request("PATCH", f"/api/v1/namespaces/{NS}/pods/{name}/status", status,
                                 content_type="application/merge-patch+json")
    assert code == 200, body


def established(cluster: ControlPlane, crd: str) -> bool:
    conditions = ((cluster.get("customresourcedefinition", crd) or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def prepare(cluster: ControlPlane, image: str):
    for crd in sorted(POLICY_REPORT_CRDS.glob("*.yaml")):
        cluster.kubectl("apply", "-f", str(crd))
    cluster.kubectl("apply", "-f", str(FIXTURES / "crds" / "modelmesh-serving_serving.kserve.io_servingruntimes.yaml"))
    for crd in ("servingruntimes.serving.kserve.io", "policyreports.wgpolicyk8s.io"):
        # kubectl 1.20's wait fails, not waits, on a CRD whose status has no
        # conditions yet (one just created on a fresh apiserver).
        wait_until(f"CRD {crd} established", lambda crd=crd: established(cluster, crd))
    cluster.namespace(NS, dict([SELECTOR.split("=")]))
    runtime = incident_runtime(NS)
    runtime["spec"]["containers"][0]["image"] = image
    cluster.apply(runtime)


@pytest.fixture(scope="module")
def fleet(cluster, tmp_path_factory):
    """Two clusters: the session's ("ukce", upgraded: the stale runtime,
    and a Pod whose tag its node resolved to the stale digest) and one of
    this module's own ("frkq", fresh: the promoted runtime and Pod)."""
    other = ControlPlane(tmp_path_factory.mktemp("fleet-frkq"), binaries())
    try:
        other.start()
        prepare(cluster, INCIDENT_IMAGE)
        prepare(other, PROMOTED_IMAGE)
        cluster.apply(pod("ovms-tagged", PROMOTED_TAG))
        ran(cluster, "ovms-tagged", f"docker-pullable://{INCIDENT_IMAGE}")
        other.apply(pod("ovms-pinned", PROMOTED_IMAGE))
        ran(other, "ovms-pinned", PROMOTED_IMAGE)
        yield {"ukce": cluster, "frkq": other}
    finally:
        other.stop()
        cluster.delete_namespace(NS)


def kubeconfig(path: pathlib.Path, contexts: dict[str, ControlPlane]) -> pathlib.Path:
    """One kubeconfig file naming `contexts`, each with a cluster and user
    of its own name, as a person's merged kubeconfig has them."""
    config = {"apiVersion": "v1", "kind": "Config", "current-context": next(iter(contexts)),
              "clusters": [], "users": [], "contexts": []}
    for name, cp in contexts.items():
        config["clusters"].append({"name": name, "cluster": {"server": cp.url,
                                                               "certificate-authority": str(cp.pki / "ca.crt")}})
        config["users"].append({"name": name, "user": {"token": cp.ADMIN_TOKEN}})
        config["contexts"].append({"name": name, "context": {"cluster": name, "user": name}})
    path.write_text(json.dumps(config))
    return path


def audit(*args: str, kubeconfig_env: str | None = None) -> subprocess.CompletedProcess:
    env = dict(ENV, **({"KUBECONFIG": kubeconfig_env} if kubeconfig_env else {}))
    return subprocess.run([str(binary()), "audit", "--allowlist", str(ALLOWLIST), "--cluster-timeout", "10s",
                           *args], capture_output=True, text=True, timeout=180, env=env)


@pytest.fixture(scope="module")
def merged(fleet, tmp_path_factory) -> pathlib.Path:
    """Both clusters, and the first again under a second name."""
    return kubeconfig(tmp_path_factory.mktemp("fleet") / "config",
                      {"ukce": fleet["ukce"], "frkq": fleet["frkq"], "ukce-admin": fleet["ukce"]})


def test_one_run_answers_which_clusters_run_which_digest(fleet, merged):
    r = audit("--kubeconfig", str(merged), "--context", "ukce", "--context", "frkq", "--context", "ukce-admin",
              "-n", NS)
    assert r.returncode == 1, r.stderr + r.stdout
    out = r.stdout
    assert (f"1 of 2 clusters runs {REPO}@{short(STALE)} (never promoted): ukce; "
            f"ukce runs @{short(STALE)} (its nodes resolved a tag to it); frkq runs the promoted @{short(PROMOTED)}"
            ) in out, out
    # Every object line names its cluster; the Pod's line says what its node runs.
    assert f"ukce: {NS}/ServingRuntime/ovms: " in out, out
    assert f"ukce: {NS}/Pod/ovms-tagged: " in out and f"(its node runs {INCIDENT_IMAGE})" in out, out
    assert "frkq: " not in "".join(l for l in out.splitlines(True) if f"{NS}/" in l), out
    # The table: digest → clusters, per repository.
    assert f"    never promoted        @{STALE}  ukce\n" in out, out
    assert f"    promoted              @{PROMOTED}  frkq\n" in out, out
    # The contexts naming one server were read once, named together.
    assert f'cluster "ukce" ({fleet["ukce"].url}, also context ukce-admin): ok: ' in out, out
    assert f'cluster "frkq" ({fleet["frkq"].url}): ok: ' in out, out
    assert "2 clusters: 2 read wholly\n" in out, out

    j = audit("--kubeconfig", str(merged), "--context", "ukce", "--context", "frkq", "--context", "ukce-admin",
              "-n", NS, "-o", "json")
    assert j.returncode == 1, j.stderr
    report = json.loads(j.stdout)
    clusters = {c["context"]: c for c in report["clusters"]}
    assert set(clusters) == {"ukce", "frkq"}
    assert clusters["ukce"]["alsoContexts"] == ["ukce-admin"] and clusters["ukce"]["status"] == "ok"
    assert clusters["frkq"]["error"] is None and clusters["frkq"]["summary"]["deny"] == 0
    assert clusters["ukce"]["summary"]["objects"] + clusters["frkq"]["summary"]["objects"] == \
        report["summary"]["objects"]
    assert {r["source"] for r in report["results"]} == {"cluster:ukce", "cluster:frkq"}
    (repo,) = [i for i in report["images"] if i["repository"] == REPO]
    running = {(x["digest"] or x["tag"], x["seen"]): x for x in repo["running"]}
    assert running[(STALE, "spec")]["code"] == "digest_not_promoted"
    assert running[(STALE, "spec")]["clusters"] == ["ukce"]
    assert running[(STALE, "node")]["clusters"] == ["ukce"]
    assert running[(PROMOTED, "spec")]["clusters"] == ["frkq"]
    (tagged,) = [x for x in report["results"] if x["name"] == "ovms-tagged"]
    assert tagged["images"][0]["resolved"] == INCIDENT_IMAGE


def test_all_contexts_of_two_kubeconfig_files_merged(fleet, tmp_path):
    first = kubeconfig(tmp_path / "ukce", {"ukce": fleet["ukce"]})
    second = kubeconfig(tmp_path / "frkq", {"frkq": fleet["frkq"]})
    r = audit("--all-contexts", "-n", NS, "-o", "json", kubeconfig_env=f"{first}:{second}")
    assert r.returncode == 1, r.stderr
    report = json.loads(r.stdout)
    assert [c["context"] for c in report["clusters"]] == ["ukce", "frkq"]
    assert all(c["status"] == "ok" for c in report["clusters"])
    # Several contexts read every namespace unless -n says otherwise.
    elsewhere = incident_runtime("fleet-elsewhere")
    fleet["frkq"].namespace("fleet-elsewhere")
    fleet["frkq"].apply(elsewhere)
    everywhere = audit("--all-contexts", "--kinds", "ServingRuntime", "-o", "json",
                       kubeconfig_env=f"{first}:{second}")
    names = {(r["source"], r["namespace"]) for r in json.loads(everywhere.stdout)["results"]}
    assert {("cluster:frkq", NS), ("cluster:frkq", "fleet-elsewhere"), ("cluster:ukce", NS)} <= names, names


def installer_kubeconfig(path: pathlib.Path, cp: ControlPlane) -> pathlib.Path:
    """A kubeconfig as a cluster installer writes it: context, cluster and
    user all named `admin`, whichever cluster it is."""
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "admin",
              "clusters": [{"name": "admin", "cluster": {"server": cp.url,
                                                          "certificate-authority": str(cp.pki / "ca.crt")}}],
              "users": [{"name": "admin", "user": {"token": cp.ADMIN_TOKEN}}],
              "contexts": [{"name": "admin", "context": {"cluster": "admin", "user": "admin"}}]}
    path.write_text(json.dumps(config))
    return path


def test_two_installer_kubeconfigs_are_two_clusters_and_a_missing_file_is_skipped(fleet, tmp_path):
    """Issue 60: `KUBECONFIG=c1:c2`, both naming their context `admin`, was
    read as one cluster (`1 clusters: 1 read wholly`), and a missing file in
    $KUBECONFIG was fatal where kubectl skips it."""
    first = installer_kubeconfig(tmp_path / "ukce.kubeconfig", fleet["ukce"])
    second = installer_kubeconfig(tmp_path / "frkq.kubeconfig", fleet["frkq"])
    missing = tmp_path / "gone.kubeconfig"
    r = audit("--all-contexts", "-n", NS, "-o", "json", kubeconfig_env=f"{first}:{missing}:{second}")
    assert r.returncode == 1, r.stderr
    report = json.loads(r.stdout)
    assert [(c["context"], c["server"], c["status"]) for c in report["clusters"]] == \
        [("admin", fleet["ukce"].url, "ok"), (f"{second}:admin", fleet["frkq"].url, "ok")], report["clusters"]
    assert f"warning: $KUBECONFIG names {missing}, which does not exist: skipped" in r.stderr, r.stderr
    assert f'warning: context "admin" of {second} is not the one an earlier $KUBECONFIG file names so: ' \
        f'read as "{second}:admin"' in r.stderr, r.stderr
    # And named: the second cluster, with its own credentials.
    one = audit("--context", f"{second}:admin", "-n", NS, "-o", "json", kubeconfig_env=f"{first}:{second}")
    assert one.returncode == 0 and json.loads(one.stdout)["summary"]["deny"] == 0, one.stderr
    # A list variable splits on commas, as docs/check.md says.
    both = subprocess.run([str(binary()), "audit", "--allowlist", str(ALLOWLIST), "-n", NS, "-o", "json"],
                          capture_output=True, text=True, timeout=180,
                          env=dict(ENV, KUBECONFIG=f"{first}:{second}", DIGEST_GATE_CONTEXT=f"admin,{second}:admin"))
    assert [c["context"] for c in json.loads(both.stdout)["clusters"]] == ["admin", f"{second}:admin"], both.stderr


def test_a_cluster_that_cannot_be_read_is_exit_2_and_the_other_still_reported(fleet, merged):
    fleet["frkq"].stop_apiserver()
    try:
        r = audit("--kubeconfig", str(merged), "--context", "ukce", "--context", "frkq", "-n", NS, "-o", "json")
    finally:
        fleet["frkq"].start_apiserver()
    assert r.returncode == 2, r.stderr
    report = json.loads(r.stdout)
    clusters = {c["context"]: c for c in report["clusters"]}
    assert clusters["frkq"]["status"] == "unreachable", clusters["frkq"]
    assert "cannot reach the cluster" in clusters["frkq"]["error"]
    assert clusters["ukce"]["status"] == "ok"
    assert any(e.startswith(f'cluster "frkq" ({fleet["frkq"].url}) not read (unreachable): ')
               for e in report["errors"]), report["errors"]
    assert {r["source"] for r in report["results"]} == {"cluster:ukce"}
    assert report["summary"]["rewrite"] >= 1

    # A context the kubeconfig does not have is one cluster not read, not the end of the run.
    typo = audit("--kubeconfig", str(merged), "--context", "ukce", "--context", "ukec", "-n", NS, "-o", "json")
    assert typo.returncode == 2, typo.stderr
    clusters = {c["context"]: c for c in json.loads(typo.stdout)["clusters"]}
    assert clusters["ukec"]["status"] == "config" and 'no context "ukec"' in clusters["ukec"]["error"]
    assert clusters["ukce"]["status"] == "ok"

    late = audit("--kubeconfig", str(merged), "--context", "ukce", "--context", "frkq", "-n", NS,
                 "--cluster-deadline", "1ms")
    assert late.returncode == 2, late.stdout
    assert 'cluster "frkq" (' in late.stdout and "): deadline: not read within --cluster-deadline 1ms\n" in late.stdout, \
        late.stdout
    assert "2 clusters: 0 read wholly, 2 not: ukce, frkq\n" in late.stdout, late.stdout
    # One context with a deadline: the document still ends, with why.
    alone = audit("--kubeconfig", str(merged), "--context", "ukce", "-n", NS, "--cluster-deadline", "1ms",
                  "-o", "json")
    assert alone.returncode == 2, alone.stdout
    assert json.loads(alone.stdout)["errors"] == ["not read within --cluster-deadline 1ms"]


def test_policy_reports_are_written_into_each_cluster(fleet, merged):
    r = audit("--kubeconfig", str(merged), "--context", "ukce", "--context", "frkq", "-n", NS, "--policy-reports")
    assert r.returncode == 1, r.stderr + r.stdout
    # Each cluster wrote its own; a note both give is said once, naming both.
    assert "note: ukce, frkq: policy reports: 1 created, 0 updated, 0 unchanged\n" in r.stdout, r.stdout
    summaries = {}
    for name, cp in fleet.items():
        report = json.loads(cp.kubectl("get", "policyreport", "digest-gate", "-n", NS, "-o", "json").stdout)
        summaries[name] = report["summary"]
        assert {x["resources"][0]["name"] for x in report.get("results", [])} <= {"ovms", "ovms-tagged"}
    assert summaries["ukce"]["fail"] >= 1 and summaries["frkq"]["fail"] == 0, summaries
    again = audit("--kubeconfig", str(merged), "--context", "ukce", "--context", "frkq", "-n", NS,
                  "--policy-reports")
    assert "note: ukce, frkq: policy reports: 0 created, 0 updated, 1 unchanged\n" in again.stdout, again.stdout


def test_events_are_written_into_the_cluster_whose_objects_need_a_change(fleet, merged):
    r = audit("--kubeconfig", str(merged), "--context", "ukce", "--context", "frkq", "-n", NS, "--events")
    assert r.returncode == 1, r.stderr + r.stdout
    events = {name: [e for e in cp.get("events", namespace=NS)["items"] if e["reason"] == "UnpromotedImage"]
              for name, cp in fleet.items()}
    # ukce's runtime and tagged Pod need a change; frkq runs what is promoted.
    assert {e["involvedObject"]["name"] for e in events["ukce"]} == {"ovms", "ovms-tagged"}, events["ukce"]
    assert events["frkq"] == [], events["frkq"]
    assert "note: ukce: events: 2 created" in r.stdout, r.stdout


def test_sarif_names_each_results_cluster_and_carries_the_fleet(fleet, merged):
    r = audit("--kubeconfig", str(merged), "--context", "ukce", "--context", "frkq", "-n", NS, "-o", "sarif")
    assert r.returncode == 1, r.stderr
    (run,) = json.loads(r.stdout)["runs"]
    # Cluster objects have no file to point into: each result names its cluster.
    assert run["results"] and {x["properties"]["cluster"] for x in run["results"]} == {"ukce"}, run["results"]
    assert [c["context"] for c in run["properties"]["clusters"]] == ["ukce", "frkq"]
    assert any(i["repository"] == REPO for i in run["properties"]["images"])


def on_a_terminal(argv: list[str], out: pathlib.Path, code: int) -> dict[bool, str]:
    """What a terminal was sent (script(1) gives the command one; bars are
    cleared at the end, so they show there, not on the screen left), without
    and with --quiet, standard output to `out`."""
    shown = {}
    for quiet in (False, True):
        command = f"{shlex.join(argv + (['--quiet'] if quiet else []))} > {shlex.quote(str(out))}"
        tty = subprocess.run(["script", "-qec", command, "/dev/null"], capture_output=True, text=True,
                             timeout=120, env=ENV)
        assert tty.returncode == code, tty.stdout[-2000:]
        shown[quiet] = tty.stdout
    return shown


def test_progress_is_drawn_per_cluster_on_a_terminal_only(fleet, merged, tmp_path):
    both = ["--context", "ukce", "--context", "frkq"]
    for contexts in (both, both[:2]):
        argv = [str(binary()), "audit", "--allowlist", str(ALLOWLIST), "--kubeconfig", str(merged), *contexts,
                "-n", NS, "-o", "json"]
        shown = on_a_terminal(argv, tmp_path / "out.json", 1)
        assert json.loads((tmp_path / "out.json").read_text())["summary"]["objects"] >= 2
        assert "objects read and judged" in shown[False], shown[False][-2000:]
        assert ("ukce: " in shown[False]) == (contexts == both), shown[False][-2000:]
        assert "objects read and judged" not in shown[True], shown[True][-2000:]
        piped = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=ENV)
        assert piped.returncode == 1 and "objects read and judged" not in piped.stderr, piped.stderr


def test_check_shows_progress_on_big_inputs(tmp_path):
    big = tmp_path / "pods.yaml"
    big.write_text("".join(f"---\n{json.dumps(pod(f'p{i}', PROMOTED_IMAGE))}\n" for i in range(3000)))
    argv = [str(binary()), "check", "--allowlist", str(ALLOWLIST), "-f", str(big), "-o", "json"]
    shown = on_a_terminal(argv, tmp_path / "out.json", 0)
    assert "objects judged, reading" in shown[False], shown[False][-2000:]
    assert "objects judged" not in shown[True], shown[True][-2000:]


def test_preflight_reads_each_cluster_and_refuses_one_plan_for_several(fleet, merged):
    both = ["preflight", "--allowlist", str(ALLOWLIST), "--kubeconfig", str(merged),
            "--context", "ukce", "--context", "frkq"]
    one = subprocess.run([str(binary()), *both, "--installplan", "ns/plan"], capture_output=True, text=True,
                         timeout=60, env=ENV)
    assert one.returncode == 2 and "one --installplan cannot name a plan on several clusters" in one.stderr
    typo = subprocess.run([str(binary()), *both, "--context", "ukec", "--all-pending", "-o", "json"],
                          capture_output=True, text=True, timeout=120, env=ENV)
    assert typo.returncode == 2 and 'cluster "ukec" () not read (config)' in typo.stderr, typo.stderr
    assert [c["status"] for c in json.loads(typo.stdout)["clusters"]][-1] == "config"
    r = subprocess.run([str(binary()), *both, "--all-pending", "-o", "json"], capture_output=True, text=True,
                       timeout=120, env=ENV)
    report = json.loads(r.stdout)
    assert [c["context"] for c in report["clusters"]] == ["ukce", "frkq"], report
    # The same answer each cluster alone gives.
    for c in report["clusters"]:
        alone = subprocess.run([str(binary()), *both[:5], "--context", c["context"], "--all-pending", "-o", "json"],
                               capture_output=True, text=True, timeout=120, env=ENV)
        assert c["preflight"]["summary"] == json.loads(alone.stdout)["summary"], c


def test_preflight_over_a_fleet_with_nothing_pending_is_an_answer(fleet, merged):
    """Issue 60: a cluster where no InstallPlan waits (most clusters, most
    days) was an error, so a fleet's answer was always exit 2. Now each such
    cluster says so and is read wholly."""
    for cp in fleet.values():
        for kind, plural in (("InstallPlan", "installplans"), ("Subscription", "subscriptions")):
            cp.apply(permissive_crd(kind, plural, "Namespaced", ("v1alpha1",), group="operators.coreos.com"))
            wait_until(f"CRD {plural}", lambda cp=cp, plural=plural: established(cp, f"{plural}.operators.coreos.com"))
    r = subprocess.run([str(binary()), "preflight", "--allowlist", str(ALLOWLIST), "--kubeconfig", str(merged),
                        "--context", "ukce", "--context", "frkq", "--all-pending", "-o", "json"],
                       capture_output=True, text=True, timeout=120, env=ENV)
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert [(c["context"], c["status"]) for c in report["clusters"]] == [("ukce", "ok"), ("frkq", "ok")], report
    for c in report["clusters"]:
        assert "no InstallPlan waits for an approval" in c["preflight"]["notes"], c


def test_the_background_audit_exports_which_digests_its_pods_run(fleet, tmp_path):
    from test_cluster_faults import lease_for
    other = fleet["frkq"]
    serve, admin = serve_dev(other, tmp_path, "--mode", "audit", "--allowlist", str(ALLOWLIST),
                             "--audit-interval", "1h", "--audit-lease", lease_for(other, "fleet-images"),
                             "--audit-namespace-selector", SELECTOR)
    try:
        metric = "digest_gate_audit_images"
        wait_until("the audit's images", lambda: admin_metric(admin, metric) >= 1, 90)
        assert admin_metric(admin, metric, repository=REPO, digest=PROMOTED, verdict="allow") == 1
        assert admin_metric(admin, metric) == 1
        # Promoted on one, stale on the other: per cluster, the series a
        # fleet's Prometheus sums over its cluster label.
        other.apply(pod("ovms-stale", INCIDENT_IMAGE))
        serve.stop()
        serve, admin = serve_dev(other, tmp_path / "again", "--mode", "audit", "--allowlist", str(ALLOWLIST),
                                 "--audit-interval", "1h", "--audit-lease", lease_for(other, "fleet-images-2"),
                                 "--audit-namespace-selector", SELECTOR)
        wait_until("both digests", lambda: admin_metric(admin, metric) >= 2, 90)
        assert admin_metric(admin, metric, repository=REPO, digest=STALE, verdict="rewrite") == 1
        # Issue 60: a Pod naming a tag its node resolved to the stale digest
        # shows that digest too (seen="node"), not only "tag_only".
        other.apply(pod("ovms-tagged", PROMOTED_TAG))
        ran(other, "ovms-tagged", f"docker-pullable://{INCIDENT_IMAGE}")
        serve.stop()
        serve, admin = serve_dev(other, tmp_path / "tagged", "--mode", "audit", "--allowlist", str(ALLOWLIST),
                                 "--audit-interval", "1h", "--audit-lease", lease_for(other, "fleet-images-3"),
                                 "--audit-namespace-selector", SELECTOR)
        wait_until("the node's digest", lambda: admin_metric(admin, metric, digest=STALE, seen="node") >= 1, 90)
        assert admin_metric(admin, metric, repository=REPO, digest="tag_only", seen="spec") == 1
        # The spec's series still count each container once.
        assert admin_metric(admin, metric, seen="spec") == 3
    finally:
        serve.stop()
        other.kubectl("delete", "pod", "ovms-stale", "ovms-tagged", "-n", NS, "--ignore-not-found", "--wait=false")


def test_the_readme_fleet_sample_says_what_it_prints(fleet, merged, tmp_path):
    from test_docs import Reader
    # The contexts the samples name are the ones this module's kubeconfig has.
    for sample in ("readme-fleet", "audit-fleet-json"):
        (step,) = docs_sample(sample)
        assert "--context ukce --context frkq" in step.command, step.command
    reader = Reader(fleet["ukce"], tmp_path)
    reader.env["KUBECONFIG"] = str(merged)
    reader.run("readme-fleet", fill={"-n models": f"-n {NS}"})
    reader.run("audit-fleet-json", fill={"-n models": f"-n {NS}"})
