"""The chart's life on a real 1.20 apiserver with real Helm: install with
every object the apiserver accepts, upgrade, rollback, uninstall, and the
upgrade from the previous release."""

from __future__ import annotations

import base64
import calendar
import json
import subprocess
import time

import helm_python as helm
import pytest
import yaml

from cluster import wait_until

from harness import (CHART, FULLNAME, INCIDENT_IMAGE, PROMOTED_DIGEST, PROMOTED_IMAGE, RELEASE, RELEASE_NAMESPACE,
                     edited, incident_runtime, previous_chart)


def manifest_objects(rel: dict) -> list[dict]:
    return [d for d in yaml.safe_load_all(rel["manifest"]) if d]


def unversioned(value):
    """Rendered objects without what names the chart's and the app's
    versions: the labels that carry them and the image tag."""
    if isinstance(value, dict):
        return {k: unversioned(v) for k, v in value.items()
                if k not in ("helm.sh/chart", "app.kubernetes.io/version")}
    if isinstance(value, list):
        return [unversioned(v) for v in value]
    if isinstance(value, str) and value.startswith("quay.io/digest-gate/digest-gate:"):
        return "quay.io/digest-gate/digest-gate:<appVersion>"
    return value


def without_0_6_0_additions(objects: list[dict]) -> list[dict]:
    """Rendered objects without their versions and without what 0.6.0 changes
    by default: the connection-phase flags (pending handshake caps and the
    handshake timeout the chart now passes), the hard spread over nodes, and
    the break-glass label's exclusion in every entry's namespaceSelector."""
    objects = unversioned(objects)
    added = ("--max-pending-handshakes=", "--max-pending-per-peer=", "--handshake-timeout=",
             "--audit-break-glass-label=")
    for o in objects:
        if o["kind"].endswith("WebhookConfiguration"):
            for w in o["webhooks"]:
                selector = w.get("namespaceSelector", {})
                selector["matchExpressions"] = [e for e in selector.get("matchExpressions", [])
                                                if e["key"] != "digest-gate.dev/break-glass"]
        if o["kind"] == "Deployment":
            pod = o["spec"]["template"]["spec"]
            c = pod["containers"][0]
            c["args"] = [a for a in c["args"] if not a.startswith(added)]
            for spread in pod.get("topologySpreadConstraints", []):
                spread.pop("whenUnsatisfiable", None)
    return objects


def without_0_5_0_additions(objects: list[dict]) -> list[dict]:
    """Rendered objects without their versions and without what 0.5.0 adds
    by default: the validate-allowlist entry and the label it selects the
    allowlist ConfigMap by, and the emptyDir the last good allowlist is kept
    in (--state-dir); and see without_0_6_0_additions."""
    objects = without_0_6_0_additions(objects)
    for o in objects:
        if o["kind"] == "ValidatingWebhookConfiguration":
            o["webhooks"] = [w for w in o["webhooks"] if w["name"] != "validate-allowlist.digest-gate.dev"]
        if o["kind"] == "ConfigMap":
            o["metadata"].get("labels", {}).pop("digest-gate.dev/allowlist", None)
        if o["kind"] == "Deployment":
            pod = o["spec"]["template"]["spec"]
            c = pod["containers"][0]
            c["args"] = [a for a in c["args"] if not a.startswith("--state-dir=")]
            c["volumeMounts"] = [m for m in c["volumeMounts"] if m["name"] != "state"]
            pod["volumes"] = [v for v in pod["volumes"] if v["name"] != "state"]
    return objects


def without_0_4_0_additions(objects: list[dict]) -> list[dict]:
    """Rendered objects without their versions and without what 0.4.0 and
    0.5.0 add by default: the ConfigMap and Template webhook entries and the
    server's --configmap-names, and see without_0_5_0_additions."""
    objects = without_0_5_0_additions(objects)
    for o in objects:
        if o["kind"].endswith("WebhookConfiguration"):
            o["webhooks"] = [w for w in o["webhooks"]
                             if "-configmaps." not in w["name"] and "-templates." not in w["name"]]
        if o["kind"] == "Deployment":
            c = o["spec"]["template"]["spec"]["containers"][0]
            c["args"] = [a for a in c["args"] if not a.startswith("--configmap-names=")]
    return objects


def upgraded_from(version: str, release, tmp_path) -> tuple[list[dict], list[dict]]:
    """Installs the chart as released at `version` with the suite's values,
    upgrades it to this one with the same values, and returns both renders."""
    old = previous_chart(version, tmp_path / "old")
    before = release.install(release.values(), chart=old, raw=True)
    after = release.upgrade()
    assert after["chart_version"] == yaml.safe_load((CHART / "Chart.yaml").read_text())["version"] != version
    return manifest_objects(before), manifest_objects(after)


def test_chart_installs_on_kubernetes_1_20_with_every_object_it_renders(cluster, release):
    version = json.loads(cluster.kubectl("version", "-o", "json").stdout)["serverVersion"]
    assert (version["major"], version["minor"]) == ("1", "20")
    # The defaults (audit mode, empty allowlist, PDB) plus every optional
    # object that needs no CRD.
    rel = release.install({"service": {"port": release.port}, "networkPolicy": {"enabled": True},
                           "metrics": {"service": {"enabled": True}}}, raw=True)

    objects = manifest_objects(rel)
    kinds = {o["kind"] for o in objects}
    assert kinds >= {"ServiceAccount", "Secret", "ConfigMap", "Service", "Deployment", "PodDisruptionBudget",
                     "NetworkPolicy", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}, kinds
    for o in objects:
        if o["kind"] == "Service" and o["metadata"]["name"] == FULLNAME:
            continue  # swapped for the loopback ExternalName Service
        # kubectl resolves kind names itself.
        stored = cluster.get(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace"))
        assert stored is not None, f"{o['kind']} {o['metadata']['name']} was not stored"
    # Rendered for the cluster's version: no matchConditions before 1.28 (the
    # chart tests check them on Helm's default, newer, capabilities).
    hooks = [w for o in objects if o["kind"].endswith("WebhookConfiguration") for w in o["webhooks"]]
    assert hooks and not [w["name"] for w in hooks if "matchConditions" in w]
    # 1.20 serves no policy/v1: the chart picked v1beta1 from the cluster's APIs.
    (pdb,) = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    assert pdb["apiVersion"] == "policy/v1beta1"
    notes = rel["notes"]
    # The default image is a tag: the notes say to pin it by digest.
    assert "WARNING: the webhook's own image is pulled by tag, quay.io/digest-gate/digest-gate:" in notes
    # NOTES tell a 1.20 user to label the namespaces the exclusion names.
    assert f"kubectl label namespace {RELEASE_NAMESPACE} kubernetes.io/metadata.name={RELEASE_NAMESPACE}" in notes
    assert "kubectl label namespace kube-system kubernetes.io/metadata.name=kube-system" in notes
    # And the application namespaces the ConfigMap and Template entries select.
    for ns in ("redhat-ods-applications", "opendatahub"):
        assert f"kubectl label namespace {ns} kubernetes.io/metadata.name={ns}" in notes, notes
    # The default audit-mode release with its empty allowlist serves.
    assert release.pod.arg("--mode") == "audit"


def test_helm_upgrade_keeps_the_ca_bundle(cluster, release, models):
    release.install()
    bundles = release.ca_bundles()
    # Seven entries (main, ConfigMaps, Templates in each configuration, and the
    # allowlist check), one CA.
    assert len(bundles) == 7 and len(set(bundles.values())) == 1
    secret = cluster.get("secret", f"{FULLNAME}-tls", RELEASE_NAMESPACE)["data"]

    release.upgrade({"mode": "enforce"})
    assert release.ca_bundles() == bundles
    assert cluster.get("secret", f"{FULLNAME}-tls", RELEASE_NAMESPACE)["data"] == secret
    # The apiserver still verifies the webhook's certificate with that bundle:
    # the upgraded (enforce) webhook answers.
    denied = cluster.apply(incident_runtime(models), check=False)
    assert 'admission webhook "mutate.digest-gate.dev" denied the request' in denied.stderr, denied.stderr


def test_helm_rollback_restores_the_previous_mode(cluster, release, models):
    release.install({"mode": "rewrite"})
    release.upgrade({"mode": "enforce"})
    assert release.pod.arg("--mode") == "enforce"

    release.rollback()
    history = release.helm.history(RELEASE)
    assert [(h["revision"], h["status"]) for h in history][-1] == (3, "deployed")
    # The stored Deployment has the first revision's args again, and the pod
    # restarted with them rewrites instead of denying.
    assert release.pod.arg("--mode") == "rewrite"
    cluster.apply(incident_runtime(models))
    assert cluster.get("servingruntime", "ovms", models)["spec"]["containers"][0]["image"] == PROMOTED_IMAGE


def test_helm_uninstall_leaves_no_webhook_configuration_behind(cluster, release, models):
    release.install()
    names = {o["metadata"]["name"] for o in release.webhook_configurations()}
    assert names == {FULLNAME}
    release.uninstall()

    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        assert cluster.get(kind, FULLNAME) is None
    assert cluster.get("secret", f"{FULLNAME}-tls", RELEASE_NAMESPACE) is None
    # With the webhook process gone too, nothing blocks the model namespace:
    # a leftover Fail webhook would refuse this.
    cluster.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "after", "namespace": models},
                   "spec": {"containers": [{"name": "c", "image": INCIDENT_IMAGE}]}})
    assert cluster.get("pod", "after", models)["spec"]["containers"][0]["image"] == INCIDENT_IMAGE


def test_upgrade_from_0_1_0_with_its_values_succeeds(cluster, release, models, tmp_path):
    old = previous_chart("0.1.0", tmp_path / "old")
    chart_yaml = old / "Chart.yaml"
    meta = yaml.safe_load(chart_yaml.read_text())
    assert meta["version"] == "0.1.0"

    # 0.1.0 as released refuses this cluster: the defect this release fixes.
    with pytest.raises(helm.HelmError, match="kubeVersion"):
        release.helm.install(helm.Chart.load(str(old)), RELEASE, release.values(), namespace=RELEASE_NAMESPACE)
    # So the test installs it with only that constraint lifted, and with its
    # PodDisruptionBudget off: 0.1.0 renders policy/v1, which 1.20 lacks.
    chart_yaml.write_text(chart_yaml.read_text().replace(meta["kubeVersion"], ">=1.20.0-0"))
    old_values = release.values({"podDisruptionBudget": {"enabled": False},
                                 # 0.1.0's shapes, as a user's values file would have them.
                                 "webhook": {"configMaps": False, "workloads": False, "inferenceServices": False}})
    release.install(old_values, chart=old, raw=True)
    bundles = release.ca_bundles()

    rel = release.upgrade(old_values, raw=True)
    assert rel["chart_version"] == yaml.safe_load((CHART / "Chart.yaml").read_text())["version"] != "0.1.0"
    # The same CA for the entries 0.1.0 had and for the Templates' entries the
    # defaults add; `configMaps: false` keeps ConfigMaps out, as it did.
    after = release.ca_bundles()
    assert set(after.values()) == set(bundles.values()) and set(bundles) <= set(after)
    assert not [name for name in after if "-configmaps." in name]
    assert "--configmap-names" not in " ".join(release.pod.args)
    cluster.apply(incident_runtime(models))
    assert cluster.get("servingruntime", "ovms", models)["spec"]["containers"][0]["image"] == PROMOTED_IMAGE


def test_upgrade_from_0_2_0_turns_the_audit_on_and_a_rollback_off(cluster, release, models, tmp_path):
    old = previous_chart("0.2.0", tmp_path / "old")
    before = release.install(release.values(), chart=old, raw=True)
    audit_role = f"{FULLNAME}-audit"
    # The old values upgrade as they are: nothing of the audit appears, and
    # nothing changes but the image and the chart's labels.
    after = release.upgrade()
    assert without_0_4_0_additions(manifest_objects(after)) == without_0_4_0_additions(manifest_objects(before))
    assert cluster.get("clusterrole", audit_role) is None
    assert not release.pod.metric("digest_gate_audit_leader")

    release.upgrade({"audit": {"enabled": True, "interval": "1h"}})
    wait_until("the background audit's first run",
               lambda: release.pod.metric("digest_gate_audit_duration_seconds_count") >= 1)
    assert release.pod.metric("digest_gate_audit_leader") == 1
    assert release.pod.metric("digest_gate_audit_errors_total") == 0, release.pod.log_path.read_text()
    assert cluster.get("lease", audit_role, RELEASE_NAMESPACE)["spec"]["holderIdentity"] == release.pod.pod_name

    release.rollback(2)
    for kind, namespace in (("clusterrole", None), ("clusterrolebinding", None), ("lease", RELEASE_NAMESPACE),
                            ("role", RELEASE_NAMESPACE)):
        assert cluster.get(kind, audit_role, namespace) is None, kind
    assert not release.pod.metric("digest_gate_audit_leader")
    cluster.apply(incident_runtime(models))
    assert cluster.get("servingruntime", "ovms", models)["spec"]["containers"][0]["image"] == PROMOTED_IMAGE


def test_upgrade_from_0_3_0_changes_only_versions_and_messages(cluster, release, models, tmp_path):
    before, after = upgraded_from("0.3.0", release, tmp_path)
    # 0.4.0 adds the ConfigMap and Template webhook entries (on by default)
    # and the server's --configmap-names; nothing else changes.
    assert without_0_4_0_additions(after) == without_0_4_0_additions(before)
    hooks = [w["name"] for o in after if o["kind"] == "MutatingWebhookConfiguration"
             for w in o["webhooks"]]
    assert hooks == ["mutate.digest-gate.dev", "mutate-configmaps.digest-gate.dev", "mutate-templates.digest-gate.dev"]
    # What changed, as a developer meets it: a placeholder is named as one.
    draft = incident_runtime(models)
    draft["metadata"]["name"] = "ovms-draft"
    draft["spec"]["containers"][0]["image"] = "ovms-1:replace"
    denied = cluster.apply(draft, check=False)
    assert denied.returncode != 0
    assert ("image 'ovms-1:replace' is an unsubstituted placeholder (the tag ':replace', which a build step "
            "replaces)") in denied.stderr, denied.stderr
    assert release.pod.metric("digest_gate_images_total", verdict="deny", reason="placeholder") == 1


def test_upgrade_from_0_4_0_adds_the_allowlist_check_and_the_last_good_copy(cluster, release, models, tmp_path):
    before, after = upgraded_from("0.4.0", release, tmp_path)
    assert without_0_5_0_additions(after) == without_0_5_0_additions(before)
    hooks = [w["name"] for o in after if o["kind"] == "ValidatingWebhookConfiguration"
             for w in o["webhooks"]]
    assert hooks[-1] == "validate-allowlist.digest-gate.dev"
    cluster.apply(incident_runtime(models))
    assert cluster.get("servingruntime", "ovms", models)["spec"]["containers"][0]["image"] == PROMOTED_IMAGE
    # The upgraded pod keeps what it loaded for a restart.
    assert (release.pod.state / "volumes" / "state" / "last-good-allowlist").exists()


def test_upgrade_from_0_5_0_adds_the_connection_flags_the_node_spread_and_break_glass(cluster, release, models,
                                                                                     tmp_path):
    before, after = upgraded_from("0.5.0", release, tmp_path)
    assert without_0_6_0_additions(after) == without_0_6_0_additions(before)
    args = next(o for o in after if o["kind"] == "Deployment")["spec"]["template"]["spec"][
        "containers"][0]["args"]
    assert "--handshake-timeout=3s" in args and "--max-pending-per-peer=64" in args
    spreads = next(o for o in after if o["kind"] == "Deployment")["spec"]["template"]["spec"][
        "topologySpreadConstraints"]
    assert [s["whenUnsatisfiable"] for s in spreads] == ["DoNotSchedule", "ScheduleAnyway"]
    cluster.apply(incident_runtime(models))
    assert cluster.get("servingruntime", "ovms", models)["spec"]["containers"][0]["image"] == PROMOTED_IMAGE


def test_upgrade_from_0_6_0_changes_only_versions_and_adds_the_dashboard_on_request(cluster, release, models,
                                                                                    tmp_path):
    before, after = upgraded_from("0.6.0", release, tmp_path)
    # The rules and the dashboard are opt-in: nothing else changes.
    assert unversioned(after) == unversioned(before)
    cluster.apply(incident_runtime(models))
    assert cluster.get("servingruntime", "ovms", models)["spec"]["containers"][0]["image"] == PROMOTED_IMAGE

    release.upgrade({"metrics": {"grafanaDashboard": {"enabled": True}}})
    dashboard = cluster.get("configmap", f"{FULLNAME}-dashboard", RELEASE_NAMESPACE)
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["digest-gate.json"])["uid"] == "digest-gate"
    # The certificate's expiry is exported: the Secret's certificate's notAfter.
    pem = base64.b64decode(cluster.get("secret", f"{FULLNAME}-tls", RELEASE_NAMESPACE)["data"]["tls.crt"])
    end = subprocess.run(["openssl", "x509", "-noout", "-enddate", "-dateopt", "iso_8601"], input=pem,
                         capture_output=True, check=True).stdout.decode().strip().split("=", 1)[1]
    expiry = calendar.timegm(time.strptime(end, "%Y-%m-%d %H:%M:%SZ"))
    assert release.pod.metric("digest_gate_certificate_expiry_timestamp_seconds") == expiry


def test_upgrade_from_0_7_0_changes_only_versions_and_a_restart_on_a_broken_edit_serves_the_kept_copy(
        cluster, release, models, tmp_path):
    before, after = upgraded_from("0.7.0", release, tmp_path)
    assert unversioned(after) == unversioned(before)
    # 0.7.1 keeps the last good allowlist in a layout of its own: a line
    # naming the files, then their text (written and read a chunk at a time).
    kept = release.pod.state / "volumes" / "state" / "last-good-allowlist"
    head, _, text = kept.read_bytes().partition(b"\n")
    files = json.loads(head)["files"]
    configmap = cluster.get("configmap", f"{FULLNAME}-allowlist", RELEASE_NAMESPACE)
    keys = sorted(configmap["data"])
    assert json.loads(head)["format"] == 1 and [f["name"].rsplit("/", 1)[1] for f in files] == keys
    assert text.decode() == "".join(configmap["data"][k] for k in keys)

    # A broken edit gets in while the webhook is down (its allowlist entry
    # fails open), and the container restarts on it, as after an OOM kill.
    release.pod.stop()
    cluster.apply(edited(configmap, configmap["data"]["source.yaml"].replace(PROMOTED_DIGEST, "sha256:abc")))
    release.pod.restart_container()
    # It serves the copy it kept: ready, stale, and still rewriting.
    assert release.pod.metric("digest_gate_allowlist_stale") == 1
    assert "serving the last good copy" in release.pod.log_path.read_text()
    cluster.apply(incident_runtime(models))
    assert cluster.get("servingruntime", "ovms", models)["spec"]["containers"][0]["image"] == PROMOTED_IMAGE


def test_upgrade_from_0_7_1_changes_only_versions_and_then_reads_the_platform_images_of_an_index(
        cluster, release, models, tmp_path):
    before, after = upgraded_from("0.7.1", release, tmp_path)
    assert unversioned(after) == unversioned(before)
    # 0.8.0 reads an index's images by platform (as `allowlist verify
    # --write-platforms` writes them): the release's /validate-allowlist
    # webhook takes the new field, the server reloads it...
    configmap = cluster.get("configmap", f"{FULLNAME}-allowlist", RELEASE_NAMESPACE)
    text = configmap["data"]["source.yaml"]
    tags = '          tags: ["v1.21.0-15"]\n'
    assert text.count(tags) == 1
    arm64 = "sha256:" + "a6" * 32
    cluster.apply(edited(configmap, text.replace(
        tags, tags + f"          platforms: [{{platform: linux/arm64, digest: {arm64}}}]\n")))
    reloads = release.pod.metric("digest_gate_reloads_total", source="allowlist", result="success")
    release.pod.sync_volumes()
    wait_until("the allowlist reload", lambda: release.pod.metric(
        "digest_gate_reloads_total", source="allowlist", result="success") > reloads)
    # ...and a runtime pinned to the arm64 image of the promoted index is
    # admitted as written, where 0.7.1 would have rewritten it to the index.
    runtime = incident_runtime(models)
    child = PROMOTED_IMAGE.split("@")[0] + "@" + arm64
    runtime["spec"]["containers"][0]["image"] = child
    cluster.apply(runtime)
    assert cluster.get("servingruntime", "ovms", models)["spec"]["containers"][0]["image"] == child
    assert release.pod.metric("digest_gate_images_total", verdict="allow", reason="promoted_platform") >= 1


def test_release_secret_is_the_certificate_the_webhook_serves(cluster, release):
    """The loopback pod serves exactly the chart's Secret; the apiserver's
    view of the CA is the bundle in the webhook configurations."""
    release.install()
    secret = cluster.get("secret", f"{FULLNAME}-tls", RELEASE_NAMESPACE)["data"]
    served = (release.pod.state / "volumes" / "tls" / "tls.crt").read_bytes()
    assert served == base64.b64decode(secret["tls.crt"])
    assert set(release.ca_bundles().values()) == {secret["ca.crt"]}
