"""The Helm chart, rendered and linted by real Helm and checked against the
Kubernetes schemas."""

from __future__ import annotations

import base64
import re
import subprocess
import pathlib

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from conftest import (CHART, NAMESPACE, RELEASE, ROOT, FakeApiserver, args, binary, container, find, one, render)

CERT_MODES = {
    "selfSigned": {},
    "certManager": {"certs": {"mode": "certManager"}},
    "openshift": {"certs": {"mode": "openshift"}},
    "external": {"certs": {"mode": "external", "external": {"secretName": "my-webhook-tls",
                                                              "caBundle": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"}}},
}

# Every audit switch on.
AUDIT_ALL = {"enabled": True, "events": True, "policyReports": {"enabled": True, "installCRDs": True},
             "namespaceSelector": {"matchLabels": {"team": "ml"},
                                   "matchExpressions": [{"key": "stage", "operator": "NotIn", "values": ["dev", "test"]},
                                                        {"key": "serving", "operator": "Exists"},
                                                        {"key": "legacy", "operator": "DoesNotExist"}]}}

# Kinds that come from CRDs (cert-manager, Prometheus operator): not in the
# Kubernetes schemas.
CRD_KINDS = {"Certificate", "Issuer", "ServiceMonitor"}


def webhook_configs(objects):
    return one(objects, "MutatingWebhookConfiguration"), one(objects, "ValidatingWebhookConfiguration")


# === lint and schema ===

@pytest.mark.parametrize("kube_version", [None, "v1.20.0"])
def test_lint_strict_is_clean(kube_version):
    # Linted with Helm's default capabilities and with 1.20's (OpenShift 4.7,
    # the oldest supported; tests/e2e installs the chart on a real 1.20).
    # Lint does not enforce kubeVersion: the next test checks the floor.
    report = helm.lint(str(CHART), strict=True, namespace=NAMESPACE, kube_version=kube_version)
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not problems and not report["errors"], report


def test_chart_declares_kubernetes_1_20_and_later():
    import packaging.version
    constraint = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]
    # Helm's constraint grammar is not PEP 440: check the one shape we use.
    match = re.fullmatch(r">=(\d+\.\d+\.\d+)-0", constraint)
    assert match, constraint
    assert packaging.version.Version(match.group(1)) <= packaging.version.Version("1.20.0")


def test_pod_disruption_budget_uses_policy_v1_when_the_cluster_has_it():
    # Offline renders know policy/v1 (Helm's built-in API list); on a 1.20
    # cluster discovery lacks it and the chart renders policy/v1beta1, which
    # tests/e2e checks on the real apiserver.
    assert one(render(), "PodDisruptionBudget")["apiVersion"] == "policy/v1"


@pytest.mark.parametrize("values, key", [
    ({"certs": {"mode": "bogus"}}, "mode"),
    ({"replicaCount": "two"}, "replicaCount"),
    ({"replicaCount": 1.5}, "replicaCount"),
    ({"replicaCount": 0}, "replicaCount"),
    ({"mode": "strict"}, "mode"),
    ({"kindModes": {"ServingRuntime": "block"}}, "ServingRuntime"),
    # Issue 41: a key that names no kind digest-gate reads matched nothing.
    ({"kindModes": {"Bogus": "enforce"}}, "Bogus"),
    ({"kindModes": {"isvc": "enforce"}}, "isvc"),
    ({"unlisted": "maybe"}, "unlisted"),
    # The binary refuses a bare word that is not a level: the pod would not start.
    ({"logLevel": "verbose"}, "logLevel"),
    ({"webhook": {"failurePolicy": "Sometimes"}}, "failurePolicy"),
    ({"webhook": {"timeoutSeconds": 60}}, "timeoutSeconds"),
    ({"image": {"digest": "sha256:abc"}}, "digest"),
    ({"server": {"gracePeriod": "soon"}}, "gracePeriod"),
    ({"replicas": 3}, "replicas"),
    ({"audit": {"interval": "often"}}, "interval"),
    ({"audit": {"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Gt"}]}}}, "operator"),
    ({"audit": {"policyReports": True}}, "policyReports"),
    ({"allowlist": {"verifyRegistry": {"platforms": ["amd64"]}}}, "platforms"),
    ({"allowlist": {"verifyRegistry": {"interval": "daily"}}}, "interval"),
    # The binary refuses under a minute: the chart must not render a pod that crashes.
    ({"allowlist": {"verifyRegistry": {"interval": "30s"}}}, "interval"),
    ({"allowlist": {"verifyRegistry": {"pullSecret": "Pull_Secret"}}}, "pullSecret"),
    ({"networkPolicy": {"dns": {"ports": []}}}, "ports"),
])
def test_schema_rejects_bad_values(values, key):
    chart = helm.Chart.load(str(CHART))
    with pytest.raises(helm.HelmError) as err:
        chart.render(values, name=RELEASE, namespace=NAMESPACE)
    assert key in str(err.value)


# === every certificate mode renders valid objects ===

@pytest.mark.parametrize("mode", sorted(CERT_MODES))
@pytest.mark.parametrize("version", ["1.25", "1.27", kubernetes_validate.utils.latest_version()])
def test_objects_validate_against_kubernetes_schemas(mode, version):
    values = dict(CERT_MODES[mode])
    values.update({"metrics": {"service": {"enabled": True}, "serviceMonitor": {"enabled": True}},
                   "networkPolicy": {"enabled": True}, "webhook": {"inferenceServices": True, "workloads": True},
                   "audit": AUDIT_ALL, "allowlist": {"fromInstalledOperators": FROM_OPERATORS,
                                                     "verifyRegistry": VERIFY_ALL}})
    objects = render(values)
    checked = 0
    for obj in objects:
        if obj["kind"] in CRD_KINDS:
            continue
        if obj["kind"].endswith("WebhookConfiguration") and version in ("1.25", "1.27"):
            # Rendered for Helm's default (newest) Kubernetes; `helm install`
            # renders for the cluster's, and leaves matchConditions out before
            # 1.28 (the e2e suite installs on 1.20).
            for w in obj["webhooks"]:
                w.pop("matchConditions", None)
        kubernetes_validate.validate(obj, version, strict=True)
        checked += 1
    assert checked >= 16


@pytest.mark.parametrize("mode", sorted(CERT_MODES))
def test_webhook_invariants(mode):
    objects = render(CERT_MODES[mode])
    mutating, validating = webhook_configs(objects)
    service = find(objects, "Service", f"{RELEASE}-digest-gate")[0]
    deploy_ports = {p["name"]: p["containerPort"] for p in container(objects)["ports"]}
    for config, path in [(mutating, "/mutate"), (validating, "/validate")]:
        hook = config["webhooks"][0]
        # Every entry (the main one, ConfigMaps', Templates', allowlists') reaches the same service.
        for entry in config["webhooks"]:
            own_path = {"path": "/validate-allowlist"} if entry["name"] == "validate-allowlist.digest-gate.dev" else {}
            assert entry["clientConfig"] == hook["clientConfig"] | {
                "service": hook["clientConfig"]["service"] | own_path}
            assert entry["sideEffects"] == "None" and entry["admissionReviewVersions"] == ["v1"]
        assert hook["sideEffects"] == "None"
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["timeoutSeconds"] == 5
        assert hook["failurePolicy"] == "Fail"
        assert hook["matchPolicy"] == "Equivalent"
        svc = hook["clientConfig"]["service"]
        assert (svc["name"], svc["namespace"], svc["path"], svc["port"]) == (
            service["metadata"]["name"], NAMESPACE, path, service["spec"]["ports"][0]["port"])
        assert service["spec"]["ports"][0]["targetPort"] == "webhook"
        assert deploy_ports["webhook"] == 8443
        exclusion = [e for e in hook["namespaceSelector"]["matchExpressions"] if e["key"] == "kubernetes.io/metadata.name"]
        assert exclusion == [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [NAMESPACE, "kube-system"]}]
        assert {"key": "modelmesh-enabled", "operator": "In", "values": ["true"]} in hook["namespaceSelector"]["matchExpressions"]
        rules = {(tuple(r["apiGroups"]), tuple(r["resources"]), r["scope"]): r["operations"] for r in hook["rules"]}
        assert rules[(("",), ("pods",), "Namespaced")] == ["CREATE", "UPDATE"]
        assert rules[(("",), ("pods/ephemeralcontainers",), "Namespaced")] == ["UPDATE"]
        assert rules[(("serving.kserve.io",), ("servingruntimes",), "Namespaced")] == ["CREATE", "UPDATE"]
        # Cluster-scoped: namespaceSelector does not apply, so these always reach the webhook.
        assert rules[(("serving.kserve.io",), ("clusterservingruntimes",), "Cluster")] == ["CREATE", "UPDATE"]
        assert len(rules) == 4
    assert all(w["reinvocationPolicy"] == "IfNeeded" for w in mutating["webhooks"])
    assert not any("reinvocationPolicy" in w for w in validating["webhooks"])


def test_namespace_selector_is_overridable_but_exclusions_are_not():
    values = {"webhook": {"namespaceSelector": {"matchExpressions": [
        {"key": "opendatahub.io/dashboard", "operator": "In", "values": ["true"]}]},
        "excludeNamespaces": ["redhat-ods-operator"]}}
    for config in webhook_configs(render(values, namespace="models-system")):
        exprs = config["webhooks"][0]["namespaceSelector"]["matchExpressions"]
        assert exprs == [
            {"key": "opendatahub.io/dashboard", "operator": "In", "values": ["true"]},
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
             "values": ["models-system", "kube-system", "redhat-ods-operator"]},
            {"key": "digest-gate.dev/break-glass", "operator": "DoesNotExist"},
        ]


def test_break_glass_label_is_excluded_by_every_reviewing_entry_and_named_to_the_audit():
    def reviewing(objects):
        return [w for config in webhook_configs(objects) for w in config["webhooks"]
                if w["name"] != "validate-allowlist.digest-gate.dev"]
    for w in reviewing(render({"webhook": {"configMaps": {"enabled": True}, "templates": {"enabled": True}}})):
        assert w["namespaceSelector"]["matchExpressions"][-1] == {
            "key": "digest-gate.dev/break-glass", "operator": "DoesNotExist"}, w["name"]
    custom = render({"webhook": {"breakGlassLabel": "example.com/emergency"}, "audit": AUDIT_ALL})
    for w in reviewing(custom):
        assert w["namespaceSelector"]["matchExpressions"][-1]["key"] == "example.com/emergency"
    assert "--audit-break-glass-label=example.com/emergency" in args(custom)
    # Off: no exclusion, and the audit does not look for one.
    off = render({"webhook": {"breakGlassLabel": ""}, "audit": AUDIT_ALL})
    for w in reviewing(off):
        assert all(e["operator"] != "DoesNotExist" for e in w["namespaceSelector"]["matchExpressions"])
    assert "--audit-break-glass-label=" in args(off)
    with pytest.raises(helm.HelmError):
        render({"webhook": {"breakGlassLabel": "not a label"}})


def test_configmaps_and_templates_have_entries_of_their_own(default_objects):
    for config in webhook_configs(default_objects):
        prefix = "mutate" if config["kind"].startswith("Mutating") else "validate"
        assert [w["name"] for w in config["webhooks"]] == [
            f"{prefix}.digest-gate.dev", f"{prefix}-configmaps.digest-gate.dev", f"{prefix}-templates.digest-gate.dev"
        ] + (["validate-allowlist.digest-gate.dev"] if prefix == "validate" else [])
        main, configmaps, templates = config["webhooks"][:3]
        # Pods in the application namespaces are not sent for the ConfigMap's sake.
        assert "configmaps" not in {r for rule in main["rules"] for r in rule["resources"]}
        assert configmaps["rules"] == [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"],
                                        "resources": ["configmaps"], "scope": "Namespaced"}]
        assert templates["rules"][0]["apiGroups"] == ["template.openshift.io"]
        for entry in (configmaps, templates):
            assert entry["failurePolicy"] == "Ignore" and main["failurePolicy"] == "Fail"
            assert entry["clientConfig"]["service"]["path"] == f"/{prefix}"
            assert entry["namespaceSelector"]["matchExpressions"] == [
                {"key": "kubernetes.io/metadata.name", "operator": "In",
                 "values": ["redhat-ods-applications", "opendatahub"]},
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [NAMESPACE, "kube-system"]},
                {"key": "digest-gate.dev/break-glass", "operator": "DoesNotExist"},
            ]
        # Helm's default capabilities are a Kubernetes of 1.28 or later.
        assert configmaps["matchConditions"][1:] == [
            {"name": "named-configmaps", "expression": 'request.name in ["servingruntimes-config"]'}]
        assert [c["name"] for c in templates["matchConditions"]] == ["not-being-deleted"]
    assert "--configmap-names=servingruntimes-config" in args(default_objects)


def test_allowlist_configmaps_are_checked_by_an_entry_of_their_own(default_objects):
    _, validating = webhook_configs(default_objects)
    (entry,) = [w for w in validating["webhooks"] if w["name"] == "validate-allowlist.digest-gate.dev"]
    # The release namespace only, labelled ConfigMaps only, never blocking when down.
    assert entry["namespaceSelector"] == {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [NAMESPACE]}]}
    assert entry["objectSelector"] == {"matchExpressions": [{"key": "digest-gate.dev/allowlist", "operator": "Exists"}]}
    assert entry["failurePolicy"] == "Ignore"
    assert entry["rules"] == [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"],
                               "resources": ["configmaps"], "scope": "Namespaced"}]
    assert entry["clientConfig"]["service"]["path"] == "/validate-allowlist"
    # The chart's own allowlist carries the label; every other entry excludes the namespace.
    (cm,) = [o for o in find(default_objects, "ConfigMap") if "allowlist" in o["metadata"]["name"]]
    assert cm["metadata"]["labels"]["digest-gate.dev/allowlist"] == "true"
    for config in webhook_configs(default_objects):
        for w in config["webhooks"]:
            if w is not entry:
                assert {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                        "values": [NAMESPACE, "kube-system"]} in w["namespaceSelector"]["matchExpressions"]
    off = render({"webhook": {"checkAllowlists": False}})
    assert all(w["name"] != entry["name"] for c in webhook_configs(off) for w in c["webhooks"])


def test_the_last_good_allowlist_is_kept_in_an_empty_dir(default_objects):
    pod = one(default_objects, "Deployment")["spec"]["template"]["spec"]
    (state,) = [v for v in pod["volumes"] if v["name"] == "state"]
    assert "emptyDir" in state, state
    (mount,) = [m for m in container(default_objects)["volumeMounts"] if m["name"] == "state"]
    assert not mount.get("readOnly") and f"--state-dir={mount['mountPath']}" in args(default_objects)
    # The root filesystem stays read-only: the emptyDir is the one writable path.
    assert container(default_objects)["securityContext"]["readOnlyRootFilesystem"] is True


def test_the_configmap_switch_of_0_3_0_still_works():
    def reviewing(config):
        """The entries that review images (not the allowlist check's)."""
        return [w for w in config["webhooks"] if w["name"] != "validate-allowlist.digest-gate.dev"]
    on = render({"webhook": {"configMaps": True, "templates": {"enabled": False}}})
    for config in webhook_configs(on):
        (main,) = reviewing(config)
        assert "configmaps" in {r for rule in main["rules"] for r in rule["resources"]}
    assert not [a for a in args(on) if a.startswith("--configmap-names")]
    off = render({"webhook": {"configMaps": False}})
    for config in webhook_configs(off):
        assert [w["name"].split(".")[0].split("-")[-1] for w in reviewing(config)][1:] == ["templates"]
        assert "configmaps" not in {r for w in reviewing(config) for rule in w["rules"] for r in rule["resources"]}
    names = render({"webhook": {"configMaps": {"names": ["a", "b"]}}})
    assert "--configmap-names=a,b" in args(names)
    entry = webhook_configs(names)[0]["webhooks"][1]
    assert entry["matchConditions"][1]["expression"] == 'request.name in ["a","b"]'


def test_switches_add_rules():
    switches = {"inferenceServices": True, "workloads": True, "configMaps": True, "llmInferenceServices": True,
                "clusterStorageContainers": True}
    objects = render({"webhook": switches})
    rules = webhook_configs(objects)[0]["webhooks"][0]["rules"]
    resources = {res for r in rules for res in r["resources"]}
    assert {"inferenceservices", "deployments", "statefulsets", "daemonsets", "replicasets", "jobs", "cronjobs",
            "configmaps", "llminferenceservices", "llminferenceserviceconfigs", "clusterstoragecontainers"} <= resources
    llm = next(r for r in rules if "llminferenceservices" in r["resources"])
    assert llm["apiVersions"] == ["v1alpha1", "v1alpha2"]
    # Off by default: the kinds need CRDs most clusters do not have.
    default = {res for r in webhook_configs(render())[0]["webhooks"][0]["rules"] for res in r["resources"]}
    assert not default & {"llminferenceservices", "llminferenceserviceconfigs", "clusterstoragecontainers"}


# === certificates ===

def openssl(*argv: str, stdin: bytes | None = None) -> str:
    return subprocess.run(["openssl", *argv], input=stdin, capture_output=True, check=True).stdout.decode()


def test_self_signed_ca_bundle_signs_the_serving_certificate(tmp_path):
    objects = render()
    secret = one(objects, "Secret")
    assert secret["type"] == "kubernetes.io/tls"
    for config in webhook_configs(objects):
        assert config["webhooks"][0]["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    ca = tmp_path / "ca.crt"
    crt = tmp_path / "tls.crt"
    ca.write_bytes(base64.b64decode(secret["data"]["ca.crt"]))
    crt.write_bytes(base64.b64decode(secret["data"]["tls.crt"]))
    assert "OK" in openssl("verify", "-CAfile", str(ca), str(crt))
    sans = openssl("x509", "-in", str(crt), "-noout", "-ext", "subjectAltName")
    for name in [f"{RELEASE}-digest-gate.{NAMESPACE}.svc", f"{RELEASE}-digest-gate.{NAMESPACE}.svc.cluster.local"]:
        assert f"DNS:{name}" in sans
    volume = next(v for v in one(objects, "Deployment")["spec"]["template"]["spec"]["volumes"] if v["name"] == "tls")
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]


def test_upgrade_reuses_the_certificate_through_lookup():
    first = render()
    secret = one(first, "Secret")
    stored = dict(secret, metadata=dict(secret["metadata"], uid="5f9c", resourceVersion="1"))
    with FakeApiserver({(NAMESPACE, secret["metadata"]["name"]): stored}) as api:
        config = helm.Config(kube_apiserver=api.url, namespace=NAMESPACE)
        second = render(config=config, is_upgrade=True)
        assert f"/api/v1/namespaces/{NAMESPACE}/secrets/{secret['metadata']['name']}" in api.requests
    assert one(second, "Secret")["data"] == secret["data"]
    for config in webhook_configs(second):
        assert config["webhooks"][0]["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    # Without the lookup answered, a new CA is generated: this is what the test guards against.
    with FakeApiserver({}) as api:
        fresh = render(config=helm.Config(kube_apiserver=api.url, namespace=NAMESPACE), is_upgrade=True)
    assert one(fresh, "Secret")["data"]["ca.crt"] != secret["data"]["ca.crt"]


def test_cert_manager_mode():
    objects = render(CERT_MODES["certManager"])
    assert not find(objects, "Secret")
    certs = {c["metadata"]["name"]: c for c in find(objects, "Certificate")}
    serving = certs[f"{RELEASE}-digest-gate"]
    assert serving["spec"]["secretName"] == f"{RELEASE}-digest-gate-tls"
    assert f"{RELEASE}-digest-gate.{NAMESPACE}.svc" in serving["spec"]["dnsNames"]
    assert certs[f"{RELEASE}-digest-gate-ca"]["spec"]["isCA"] is True
    issuers = {i["metadata"]["name"]: i for i in find(objects, "Issuer")}
    assert serving["spec"]["issuerRef"]["name"] in issuers
    assert "ca" in issuers[serving["spec"]["issuerRef"]["name"]]["spec"]
    for config in webhook_configs(objects):
        assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/{RELEASE}-digest-gate"
        assert "caBundle" not in config["webhooks"][0]["clientConfig"]
    # An existing issuer replaces the chart's CA chain.
    objects = render({"certs": {"mode": "certManager", "certManager": {"issuerRef": {"name": "corp", "kind": "ClusterIssuer"}}}})
    assert [c["metadata"]["name"] for c in find(objects, "Certificate")] == [f"{RELEASE}-digest-gate"]
    assert not find(objects, "Issuer")


def test_openshift_mode():
    objects = render(CERT_MODES["openshift"])
    assert not find(objects, "Secret")
    service = find(objects, "Service", f"{RELEASE}-digest-gate")[0]
    assert service["metadata"]["annotations"]["service.beta.openshift.io/serving-cert-secret-name"] == f"{RELEASE}-digest-gate-tls"
    for config in webhook_configs(objects):
        assert config["metadata"]["annotations"]["service.beta.openshift.io/inject-cabundle"] == "true"
        assert "caBundle" not in config["webhooks"][0]["clientConfig"]


def test_external_mode_accepts_pem_or_base64():
    pem = CERT_MODES["external"]["certs"]["external"]["caBundle"]
    encoded = base64.b64encode(pem.encode()).decode()
    for given in [pem, encoded]:
        objects = render({"certs": {"mode": "external", "external": {"secretName": "my-webhook-tls", "caBundle": given}}})
        assert not find(objects, "Secret")
        for config in webhook_configs(objects):
            assert config["webhooks"][0]["clientConfig"]["caBundle"] == encoded
        volume = next(v for v in one(objects, "Deployment")["spec"]["template"]["spec"]["volumes"] if v["name"] == "tls")
        assert volume["secret"]["secretName"] == "my-webhook-tls"
    with pytest.raises(helm.HelmError, match="secretName"):
        render({"certs": {"mode": "external", "external": {"caBundle": pem}}})


# === the Deployment ===

def test_deployment_is_hardened(default_objects):
    deploy = one(default_objects, "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    assert deploy["spec"]["replicas"] == 2
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert pod["automountServiceAccountToken"] is False
    c = container(default_objects)
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert c["resources"]["requests"] and c["resources"]["limits"]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "admin"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "admin"}
    assert all("subPath" not in m for m in c["volumeMounts"]), "subPath mounts never see updates"
    spreads = pod["topologySpreadConstraints"]
    assert spreads[0]["topologyKey"] == "kubernetes.io/hostname"
    pdb = one(default_objects, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"] == deploy["spec"]["selector"]
    # Drain delay + grace period fit in the termination grace period.
    assert pod["terminationGracePeriodSeconds"] >= 5 + 15


def placements(replicas: int, nodes: int, spread: dict) -> list[tuple[int, ...]]:
    """Every way the scheduler may place `replicas` one by one on `nodes`
    under one hard topology spread constraint (each placement keeps the
    skew, max minus min pods per node, within maxSkew)."""
    assert spread["whenUnsatisfiable"] == "DoNotSchedule"
    done: set[tuple[int, ...]] = set()

    def place(counts: tuple[int, ...], left: int):
        if not left:
            done.add(tuple(sorted(counts)))
            return
        for n in range(nodes):
            after = counts[:n] + (counts[n] + 1,) + counts[n + 1:]
            if max(after) - min(after) <= spread["maxSkew"]:
                place(after, left - 1)

    place((0,) * nodes, replicas)
    return sorted(done)


def test_two_replicas_on_two_nodes_survive_the_loss_of_one(default_objects):
    deploy = one(default_objects, "Deployment")
    pod = deploy["spec"]["template"]
    by_node = next(c for c in pod["spec"]["topologySpreadConstraints"]
                   if c["topologyKey"] == "kubernetes.io/hostname")
    # The constraint counts this Deployment's pods.
    assert by_node["labelSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    replicas = deploy["spec"]["replicas"]
    assert replicas == 2
    # Every placement the scheduler may choose puts one replica on each node:
    # whichever node is lost, one replica serves.
    assert placements(replicas, 2, by_node) == [(1, 1)]
    # One node: both still run (no skew in one domain).
    assert placements(replicas, 1, by_node) == [(2,)]
    # Zones are a preference, so clusters with one zone schedule.
    zones = next(c for c in pod["spec"]["topologySpreadConstraints"]
                 if c["topologyKey"] == "topology.kubernetes.io/zone")
    assert zones["whenUnsatisfiable"] == "ScheduleAnyway"
    # A drain takes one replica at a time.
    assert one(default_objects, "PodDisruptionBudget")["spec"]["minAvailable"] == 1


def test_objects_being_deleted_skip_the_webhook_where_match_conditions_exist(default_objects):
    # Helm's default capabilities are a Kubernetes of 1.28 or later; the e2e
    # suite checks that an install on 1.20 renders no matchConditions.
    for config in webhook_configs(default_objects):
        for entry in config["webhooks"]:
            found = [c["name"] for c in entry["matchConditions"]]
            # Finalizer removal during an outage is never held up.
            assert found[0] == "not-being-deleted", entry["name"]
            assert entry["matchConditions"][0]["expression"] == "!has(object.metadata.deletionTimestamp)"
            if "-configmaps." in entry["name"]:
                assert found == ["not-being-deleted", "named-configmaps"]


def test_workloads_register_every_kind_with_a_pod_template():
    rules = webhook_configs(render({"webhook": {"workloads": True}}))[0]["webhooks"][0]["rules"]
    registered = {(g, res) for r in rules for g in r["apiGroups"] for res in r["resources"]}
    readme = (CHART.parents[1] / "docs" / "webhook.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| Deployment, ReplicaSet"))
    plural = {"Deployment": ("apps", "deployments"), "ReplicaSet": ("apps", "replicasets"),
              "StatefulSet": ("apps", "statefulsets"), "DaemonSet": ("apps", "daemonsets"),
              "Job": ("batch", "jobs"), "CronJob": ("batch", "cronjobs"),
              "ReplicationController": ("", "replicationcontrollers"), "PodTemplate": ("", "podtemplates")}
    kinds = [k.strip() for k in row.split("|")[1].split(",")]
    for kind in kinds:
        assert plural[kind] in registered, kind
    assert ("batch", "cronjobs") in registered


def test_pod_settings_pass_through():
    values = {
        "priorityClassName": "system-cluster-critical",
        "nodeSelector": {"node-role.kubernetes.io/infra": ""},
        "tolerations": [{"key": "infra", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}},
        "podAnnotations": {"example.com/team": "platform"},
        "imagePullSecrets": [{"name": "quay-pull"}],
        "image": {"digest": "sha256:" + "a" * 64},
        "replicaCount": 3,
    }
    objects = render(values)
    pod = one(objects, "Deployment")["spec"]["template"]
    spec = pod["spec"]
    for key in ["priorityClassName", "nodeSelector", "tolerations", "affinity", "imagePullSecrets"]:
        assert spec[key] == values[key], key
    assert pod["metadata"]["annotations"] == values["podAnnotations"]
    assert container(objects)["image"] == "quay.io/digest-gate/digest-gate@sha256:" + "a" * 64
    assert one(objects, "Deployment")["spec"]["replicas"] == 3


def test_renders_are_stable_so_upgrades_only_roll_out_on_real_changes():
    a, b = render(), render()
    assert one(a, "Deployment") == one(b, "Deployment")
    # Allowlist content is hot-reloaded: changing it must not change the pod template.
    changed = render({"allowlist": {"text": "quay.io/x/y@sha256:" + "b" * 64 + "\n"}})
    assert one(changed, "Deployment")["spec"]["template"] == one(a, "Deployment")["spec"]["template"]
    assert one(changed, "ConfigMap")["data"] != one(a, "ConfigMap")["data"]
    # A server setting is read at start: it does change the template.
    assert one(render({"mode": "rewrite"}), "Deployment")["spec"]["template"] != one(a, "Deployment")["spec"]["template"]


def test_kind_modes_take_a_kind_or_its_resource_name_in_any_case_and_the_binary_agrees():
    values = {"kindModes": {"ServingRuntime": "enforce", "inferenceservices": "audit", "CONFIGMAP": "rewrite"}}
    argv = args(render(values))
    modes = [a for a in argv if a.startswith("--kind-mode=")]
    assert len(modes) == 3, argv
    # The binary reads what the schema lets through (check parses the same flag).
    r = subprocess.run([str(binary()), "check", "--allowlist", str(ROOT / "examples" / "allowlist.yaml"),
                        "-f", str(ROOT / "examples" / "manifests"), *modes], capture_output=True, text=True)
    assert r.returncode == 1, r.stderr


def test_server_settings_map_to_flags_the_binary_has():
    values = {"mode": "rewrite", "kindModes": {"ServingRuntime": "enforce", "ClusterServingRuntime": "enforce"},
              "unlisted": "allow", "logFormat": "text", "logLevel": "debug",
              "exemptImages": ["quay.io/platform/debug-*"], "audit": AUDIT_ALL,
              "server": {"maxPendingHandshakes": 100, "maxPendingPerPeer": 8, "handshakeTimeout": "2s"}}
    argv = args(render(values))
    for flag in ["--max-pending-handshakes=100", "--max-pending-per-peer=8", "--handshake-timeout=2s",
                 "--max-connections=1024", "--mode=rewrite", "--kind-mode=ClusterServingRuntime=enforce", "--kind-mode=ServingRuntime=enforce",
                 "--unlisted=allow", "--log-format=text", "--log-level=debug", "--exempt-image=quay.io/platform/debug-*",
                 "--allowlist=/etc/digest-gate/allowlist"]:
        assert flag in argv, flag
    assert argv[0] == "serve"
    help_text = subprocess.run([str(binary()), "serve", "--help"], capture_output=True, text=True, check=True).stdout
    for arg in argv[1:]:
        flag = arg.split("=", 1)[0]
        assert re.search(rf"\s{re.escape(flag)}[\s<=]", help_text), f"{flag} is not a serve flag"


def test_allowlist_sources(tmp_path):
    csv = (pathlib.Path(__file__).parents[1] / "data" / "allowlists" / "rhods-operator.csv.yaml").read_text()
    document = yaml.safe_load((pathlib.Path(__file__).parents[2] / "examples" / "allowlist.yaml").read_text())
    objects = render({"allowlist": {"document": document, "text": csv}})
    data = one(objects, "ConfigMap")["data"]
    assert set(data) == {"allowlist.yaml", "source.yaml"}
    # What the chart renders is what the binary loads.
    for key, text in data.items():
        (tmp_path / key).write_text(text)
    lint = subprocess.run([str(binary()), "allowlist", "lint", str(tmp_path)], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stderr
    assert "source.yaml: ClusterServiceVersion, 3 promoted image(s)" in lint.stdout
    assert "allowlist.yaml: Allowlist, 5 promoted image(s)" in lint.stdout

    objects = render({"allowlist": {"existingConfigMap": "promoted-digests"}})
    assert not find(objects, "ConfigMap")
    volume = next(v for v in one(objects, "Deployment")["spec"]["template"]["spec"]["volumes"] if v["name"] == "allowlist")
    assert volume["configMap"]["name"] == "promoted-digests"

    with pytest.raises(helm.HelmError, match="allowlist"):
        render({"allowlist": {"document": None, "text": ""}})


def test_optional_objects():
    objects = render({"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
                      "networkPolicy": {"enabled": True}})
    monitor = one(objects, "ServiceMonitor")
    metrics_service = find(objects, "Service", f"{RELEASE}-digest-gate-metrics")[0]
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["endpoints"][0]["port"] == metrics_service["spec"]["ports"][0]["name"]
    for k, v in monitor["spec"]["selector"]["matchLabels"].items():
        assert metrics_service["metadata"]["labels"][k] == v
    policy = one(objects, "NetworkPolicy")
    assert policy["spec"]["egress"] == [] and "Egress" in policy["spec"]["policyTypes"]
    assert {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]} == {"webhook", "admin"}
    # The webhook port is open to every address unless webhookFrom names the
    # apiserver's (it varies by platform).
    webhook_rule = next(r for r in policy["spec"]["ingress"] if r["ports"][0]["port"] == "webhook")
    assert "from" not in webhook_rule
    apiserver = [{"ipBlock": {"cidr": "10.0.0.10/32"}}]
    pinned = one(render({"networkPolicy": {"enabled": True, "webhookFrom": apiserver}}), "NetworkPolicy")
    webhook_rule = next(r for r in pinned["spec"]["ingress"] if r["ports"][0]["port"] == "webhook")
    assert webhook_rule["from"] == apiserver
    defaults = render()
    assert not find(defaults, "ServiceMonitor") and not find(defaults, "NetworkPolicy")
    assert not find(render({"replicaCount": 1}), "PodDisruptionBudget")


# === the background audit ===

AUDIT_ROLE = f"{RELEASE}-digest-gate-audit"
# The uninstall hook's ServiceAccount, ClusterRole, binding and Job.
CLEANUP = f"{AUDIT_ROLE}-cleanup"


def rules(objects, kind: str, name: str = AUDIT_ROLE) -> dict[tuple[str, str], set[str]]:
    """(apiGroup, resource) → verbs of the `kind` (ClusterRole or Role) named `name`."""
    out: dict[tuple[str, str], set[str]] = {}
    (role,) = find(objects, kind, name)
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def test_audit_is_off_by_default_and_then_calls_nothing():
    objects = render({"networkPolicy": {"enabled": True}})
    for kind in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Lease", "CustomResourceDefinition"):
        assert not find(objects, kind), kind
    assert not any("--audit" in a for a in args(objects))
    assert one(objects, "Deployment")["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_audit_may_list_every_kind_the_binary_reads():
    # The binary names the kinds it reads when --kinds names one it does not.
    run = subprocess.run([str(binary()), "audit", "--allowlist", "examples/allowlist.yaml", "--kinds", "none"],
                         cwd=CHART.parents[1], capture_output=True, text=True, timeout=30)
    assert run.returncode == 2
    kinds = run.stderr.split("it reads ", 1)[1].split(" (", 1)[0].strip().split(", ")
    assert "LLMInferenceService" in kinds
    listed = {resource for (_, resource), verbs in rules(render({"audit": {"enabled": True}}), "ClusterRole").items()
              if "list" in verbs}
    # Every kind's plural is its lower-case name and an s. An InstallPlan
    # holds no image: the webhook answers its approval, audit does not read it.
    assert {k.lower() + "s" for k in kinds if k != "InstallPlan"} <= listed
    assert "installplans" not in listed


def test_audit_rights_are_read_only_and_grow_only_with_what_it_writes():
    name = AUDIT_ROLE
    read = rules(render({"audit": {"enabled": True}}), "ClusterRole")
    # Lists only: never get, watch or any write, and never Secrets.
    assert all(verbs == {"list"} for key, verbs in read.items() if key[1] != "clusterroles"), read
    assert read[("rbac.authorization.k8s.io", "clusterroles")] == {"get"}
    assert not any("secret" in resource for _, resource in read)
    assert {("", "pods"), ("", "configmaps"), ("serving.kserve.io", "servingruntimes"),
            ("serving.kserve.io", "clusterservingruntimes"), ("apps", "deployments"),
            ("template.openshift.io", "templates"), ("", "namespaces")} <= set(read)
    (clusterroles,) = [r for r in find(render({"audit": {"enabled": True}}), "ClusterRole", name)[0]["rules"]
                       if r["resources"] == ["clusterroles"]]
    assert clusterroles["resourceNames"] == [name]

    writes = rules(render({"audit": AUDIT_ALL}), "ClusterRole")
    added = {k: v for k, v in writes.items() if read.get(k) != v}
    assert added == {("wgpolicyk8s.io", "policyreports"): {"list", "create", "patch"},
                     ("wgpolicyk8s.io", "clusterpolicyreports"): {"list", "create", "patch"},
                     ("", "events"): {"create"}}

    objects = render({"audit": {"enabled": True}})
    (lease_rule,) = one(objects, "Role")["rules"]
    assert lease_rule["resourceNames"] == [name] and lease_rule["resources"] == ["leases"]
    assert one(objects, "Lease")["metadata"]["name"] == name
    for binding in ("ClusterRoleBinding", "RoleBinding"):
        (subject,) = find(objects, binding, name)[0]["subjects"]
        assert (subject["name"], subject["namespace"]) == (f"{RELEASE}-digest-gate", NAMESPACE)


def test_uninstall_hook_deletes_what_the_audit_wrote_with_rights_of_its_own():
    assert not find(render(), "Job")
    objects = render({"audit": {"enabled": True}})
    hooks = [o for o in objects if "helm.sh/hook" in o["metadata"].get("annotations", {})]
    assert sorted((o["kind"], o["metadata"]["name"]) for o in hooks) == [
        ("ClusterRole", CLEANUP), ("ClusterRoleBinding", CLEANUP), ("Job", CLEANUP), ("ServiceAccount", CLEANUP)]
    weights = {}
    for o in hooks:
        annotations = o["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "pre-delete"
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
        weights[o["kind"]] = int(annotations["helm.sh/hook-weight"])
    # Its account and rights exist before the Job starts.
    assert max(w for kind, w in weights.items() if kind != "Job") < weights["Job"]
    assert rules(objects, "ClusterRole", CLEANUP) == {
        ("", "events"): {"list", "delete"},
        ("wgpolicyk8s.io", "policyreports"): {"list", "delete"},
        ("wgpolicyk8s.io", "clusterpolicyreports"): {"list", "delete"},
        ("rbac.authorization.k8s.io", "clusterroles"): {"get"}}
    (role_rule,) = [r for r in find(objects, "ClusterRole", CLEANUP)[0]["rules"] if r["resources"] == ["clusterroles"]]
    assert role_rule["resourceNames"] == [AUDIT_ROLE]
    (subject,) = find(objects, "ClusterRoleBinding", CLEANUP)[0]["subjects"]
    assert (subject["name"], subject["namespace"]) == (CLEANUP, NAMESPACE)

    pod = one(objects, "Job")["spec"]["template"]
    (job,) = pod["spec"]["containers"]
    assert job["args"] == ["cleanup", f"--owner={AUDIT_ROLE}"]
    assert job["image"] == container(objects)["image"]
    assert pod["spec"]["serviceAccountName"] == CLEANUP and pod["spec"]["restartPolicy"] == "Never"
    assert job["securityContext"] == container(objects)["securityContext"]
    # The webhook's Service never routes a review to the hook's pod.
    selector = one(objects, "Service")["spec"]["selector"]
    assert not selector.items() <= pod["metadata"]["labels"].items()
    # The webhook's own account never deletes anything.
    assert not any("delete" in verbs for verbs in rules(render({"audit": AUDIT_ALL}), "ClusterRole").values())


def test_audit_flags_token_and_egress():
    objects = render({"audit": AUDIT_ALL, "networkPolicy": {"enabled": True}})
    argv = args(objects)
    name = AUDIT_ROLE
    for flag in ["--audit-interval=10m", "--audit-policy-reports", "--audit-events", f"--audit-lease={name}",
                 f"--audit-owner={name}",
                 "--audit-namespace-selector=team=ml,stage notin (dev,test),serving,!legacy"]:
        assert flag in argv, (flag, argv)
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is True
    assert container(objects)["env"] == [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                                         {"name": "DIGEST_GATE_AUDIT_NAMED_NAMESPACES",
                                          "value": f"{NAMESPACE},kube-system,redhat-ods-applications,opendatahub"}]
    (egress,) = one(objects, "NetworkPolicy")["spec"]["egress"]
    assert {p["port"] for p in egress["ports"]} == {443, 6443} and "to" not in egress
    pinned = render({"audit": {"enabled": True, "apiServer": {"cidrs": ["10.0.0.1/32"], "ports": [6443]}},
                     "networkPolicy": {"enabled": True}})
    (egress,) = one(pinned, "NetworkPolicy")["spec"]["egress"]
    assert egress == {"ports": [{"port": 6443, "protocol": "TCP"}], "to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}]}
    # All namespaces by default: no selector flag.
    assert not any(a.startswith("--audit-namespace-selector") for a in args(render({"audit": {"enabled": True}})))
    # Reports list what needs action unless passes are asked for; the flag
    # goes with the reports (the binary refuses it alone).
    assert "--audit-policy-reports-passes" not in argv
    passes = {**AUDIT_ALL, "policyReports": {**AUDIT_ALL["policyReports"], "passes": True}}
    assert "--audit-policy-reports-passes" in args(render({"audit": passes}))
    alone = {"enabled": True, "policyReports": {"enabled": False, "passes": True}}
    assert "--audit-policy-reports-passes" not in args(render({"audit": alone}))


FROM_OPERATORS = [{"namespace": "redhat-ods-operator", "namePrefixes": ["rhods-operator"]},
                  {"namespace": "openshift-operators"},
                  {"namespace": "redhat-ods-operator", "namePrefixes": ["odh-model-controller", "other"]}]
CSV_ROLE = f"{RELEASE}-digest-gate-csvs"


def test_installed_operators_flags_role_token_and_egress():
    objects = render({"allowlist": {"fromInstalledOperators": FROM_OPERATORS}, "networkPolicy": {"enabled": True}})
    csv_flags = [a for a in args(objects) if a.startswith("--allowlist-csv")]
    assert csv_flags == ["--allowlist-csv=redhat-ods-operator/rhods-operator", "--allowlist-csv=openshift-operators",
                         "--allowlist-csv=redhat-ods-operator/odh-model-controller",
                         "--allowlist-csv=redhat-ods-operator/other"]
    # The files stay a source: the CSVs are merged with them.
    assert "--allowlist=/etc/digest-gate/allowlist" in args(objects)
    # One Role per namespace, list and watch of CSVs only, bound to the pod's account.
    roles = find(objects, "Role", CSV_ROLE)
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["openshift-operators", "redhat-ods-operator"]
    for role in roles:
        (rule,) = role["rules"]
        assert rule == {"apiGroups": ["operators.coreos.com"], "resources": ["clusterserviceversions"],
                        "verbs": ["list", "watch"]}
    bindings = find(objects, "RoleBinding", CSV_ROLE)
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["openshift-operators", "redhat-ods-operator"]
    for binding in bindings:
        assert binding["roleRef"]["name"] == CSV_ROLE
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": one(objects, "ServiceAccount")["metadata"]["name"],
                                        "namespace": NAMESPACE}]
    # The token the watch reads with, egress to the apiserver; and no audit rights.
    assert one(objects, "Deployment")["spec"]["template"]["spec"]["automountServiceAccountToken"] is True
    (egress,) = one(objects, "NetworkPolicy")["spec"]["egress"]
    assert {p["port"] for p in egress["ports"]} == {443, 6443}
    assert not find(objects, "ClusterRole")
    # Off by default: no flag, no Role.
    default = render({})
    assert not [a for a in args(default) if a.startswith("--allowlist-csv")] and not find(default, "Role", CSV_ROLE)


@pytest.mark.parametrize("entry", [{"namePrefixes": ["x"]}, {"namespace": "Bad_NS"},
                                   {"namespace": "ns", "namePrefixes": ["a/b"]}, {"namespace": "ns", "prefix": "x"}])
def test_installed_operators_entries_are_checked(entry):
    with pytest.raises(Exception) as err:
        render({"allowlist": {"fromInstalledOperators": [entry]}})
    assert "fromInstalledOperators" in str(err.value)


def test_policy_report_crds_are_opt_in_verbatim_and_kept():
    assert not find(render({"audit": {"enabled": True, "policyReports": {"enabled": True}}}),
                    "CustomResourceDefinition")
    crds = find(render({"audit": AUDIT_ALL}), "CustomResourceDefinition")
    assert sorted(c["metadata"]["name"] for c in crds) == ["clusterpolicyreports.wgpolicyk8s.io",
                                                           "policyreports.wgpolicyk8s.io"]
    for crd in crds:
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        shipped = next(d for d in yaml.safe_load_all((CHART / "files" / "policyreport" /
                                                      f"wgpolicyk8s.io_{crd['spec']['names']['plural']}.yaml").read_text()) if d)
        assert crd["spec"] == shipped["spec"]
        assert "v1alpha2" in [v["name"] for v in crd["spec"]["versions"] if v["served"]]


CA_PEM = """-----BEGIN CERTIFICATE-----
MIIBdzCCAR2gAwIBAgIUQ0FfUEVNX0ZPUl9SRU5ERVJfVEVTVFMwCgYIKoZIzj0EAwIw
-----END CERTIFICATE-----
"""
VERIFY_ALL = {"enabled": True, "pullSecret": "registry-pull", "caBundle": CA_PEM,
              "platforms": ["linux/amd64", "linux/arm64/v8"], "interval": "12h", "timeout": "20s", "concurrency": 4,
              "httpsProxy": "http://proxy.corp:3128", "noProxy": ".cluster.local,10.0.0.0/8",
              "egress": {"cidrs": ["10.20.0.0/16"], "ports": [443, 5000]}}


def test_registry_verification_flags_mounts_and_egress():
    objects = render({"allowlist": {"verifyRegistry": VERIFY_ALL}, "networkPolicy": {"enabled": True}})
    argv = args(objects)
    verify = [a for a in argv if a.startswith(("--verify", "--registry"))]
    assert verify == ["--verify-registry", "--verify-platform=linux/amd64", "--verify-platform=linux/arm64/v8",
                      "--verify-interval=12h", "--registry-timeout=20s", "--registry-concurrency=4",
                      "--registry-auth=/etc/digest-gate/registry-auth/.dockerconfigjson",
                      "--registry-ca=/etc/digest-gate/registry-ca/ca.crt"], verify
    # The pull secret and the CA are whole-volume mounts (rotations arrive),
    # optional (a missing one must not keep the webhook from starting).
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["registry-auth"]["secret"] == {"secretName": "registry-pull", "optional": True}
    assert volumes["registry-ca"]["configMap"] == {"name": f"{RELEASE}-digest-gate-registry-ca", "optional": True}
    mounts = {m["name"]: m for m in container(objects)["volumeMounts"]}
    assert mounts["registry-auth"] == {"name": "registry-auth", "mountPath": "/etc/digest-gate/registry-auth",
                                       "readOnly": True}
    assert "subPath" not in mounts["registry-ca"]
    (ca,) = find(objects, "ConfigMap", f"{RELEASE}-digest-gate-registry-ca")
    assert ca["data"]["ca.crt"] == CA_PEM
    assert container(objects)["env"] == [{"name": "HTTPS_PROXY", "value": "http://proxy.corp:3128"},
                                         {"name": "NO_PROXY", "value": ".cluster.local,10.0.0.0/8"}]
    # It calls no apiserver: no token.
    assert pod["automountServiceAccountToken"] is False
    # Egress to the registries' addresses and ports, and DNS (both
    # protocols, CoreDNS's and OpenShift's ports).
    registries, dns = one(objects, "NetworkPolicy")["spec"]["egress"]
    assert registries == {"ports": [{"port": 443, "protocol": "TCP"}, {"port": 5000, "protocol": "TCP"}],
                          "to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}]}
    assert dns == {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"},
                             {"port": 5353, "protocol": "UDP"}, {"port": 5353, "protocol": "TCP"}]}
    # With the audit too: the apiserver rule first, then these.
    both = render({"allowlist": {"verifyRegistry": {"enabled": True}}, "audit": {"enabled": True},
                   "networkPolicy": {"enabled": True, "dns": {"to": [{"namespaceSelector": {}}], "ports": [53]}}})
    api, registries, dns = one(both, "NetworkPolicy")["spec"]["egress"]
    assert {p["port"] for p in api["ports"]} == {443, 6443}
    assert registries == {"ports": [{"port": 443, "protocol": "TCP"}]}
    assert dns["to"] == [{"namespaceSelector": {}}]
    assert [e["name"] for e in container(both)["env"]] == ["POD_NAME", "DIGEST_GATE_AUDIT_NAMED_NAMESPACES"]
    # Defaults: anonymous, no CA, any platform; an existing CA ConfigMap
    # (OpenShift's injected trusted bundle).
    plain = render({"allowlist": {"verifyRegistry": {"enabled": True,
                                                     "caConfigMap": {"name": "trusted-ca"}}}})
    verify = [a for a in args(plain) if a.startswith(("--verify", "--registry"))]
    assert verify == ["--verify-registry", "--verify-interval=6h", "--registry-timeout=30s",
                      "--registry-concurrency=8", "--registry-ca=/etc/digest-gate/registry-ca/ca-bundle.crt"]
    assert {v["name"]: v for v in one(plain, "Deployment")["spec"]["template"]["spec"]["volumes"]}[
        "registry-ca"]["configMap"] == {"name": "trusted-ca", "optional": True}
    assert "env" not in container(plain) and not find(plain, "ConfigMap", f"{RELEASE}-digest-gate-registry-ca")
    # Every flag is one `serve` has.
    help_text = subprocess.run([str(binary()), "serve", "--help"], capture_output=True, text=True, check=True).stdout
    for arg in argv[1:]:
        flag = arg.split("=", 1)[0]
        assert re.search(rf"\s{re.escape(flag)}[\s<=]", help_text), f"{flag} is not a serve flag"
    # Off by default: nothing of it rendered.
    default = render({})
    assert not [a for a in args(default) if a.startswith(("--verify", "--registry"))]
    assert not [v for v in one(default, "Deployment")["spec"]["template"]["spec"]["volumes"]
                if v["name"].startswith("registry")]


@pytest.mark.parametrize("values, message", [
    ({"caBundle": CA_PEM, "caConfigMap": {"name": "trusted-ca"}}, "not both"),
    ({"caBundle": "not a certificate"}, "no PEM certificate"),
])
def test_registry_verification_ca_mistakes_are_refused(values, message):
    with pytest.raises(Exception, match=message):
        render({"allowlist": {"verifyRegistry": {"enabled": True, **values}}})


def test_a_catalog_mounted_beside_the_configmap_is_an_allowlist_path_with_its_filters():
    values = {"allowlist": {"extraPaths": ["/var/lib/catalog/configs"],
                            "catalog": {"packages": ["rhods-operator"], "channel": "stable-3.x"}},
              "extraVolumes": [{"name": "catalog", "persistentVolumeClaim": {"claimName": "operator-catalog"}}],
              "extraVolumeMounts": [{"name": "catalog", "mountPath": "/var/lib/catalog", "readOnly": True}]}
    objects = render(values)
    argv = args(objects)
    assert [a for a in argv if a.startswith(("--allowlist", "--catalog"))] == [
        "--allowlist=/etc/digest-gate/allowlist", "--allowlist=/var/lib/catalog/configs",
        "--catalog-package=rhods-operator", "--catalog-channel=stable-3.x"]
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert {"name": "catalog", "persistentVolumeClaim": {"claimName": "operator-catalog"}} in pod["volumes"]
    assert {"name": "catalog", "mountPath": "/var/lib/catalog", "readOnly": True} in container(objects)["volumeMounts"]
    for obj in objects:
        if obj["kind"] not in CRD_KINDS:
            kubernetes_validate.validate(obj, "1.27", strict=True)
    help_text = subprocess.run([str(binary()), "serve", "--help"], capture_output=True, text=True, check=True).stdout
    for flag in ("--catalog-package", "--catalog-channel"):
        assert re.search(rf"\s{flag}[\s<=]", help_text), flag
    # Relative paths would name the container's working directory: refused.
    with pytest.raises(Exception, match="extraPaths"):
        render({"allowlist": {"extraPaths": ["configs"]}})


def test_the_install_page_names_every_value():
    """docs/install.md's "Every value" table: every top-level key of
    values.yaml, with the keys of each map, so a value added to the chart
    is documented where users look for it."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    page = (CHART.parents[1] / "docs" / "install.md").read_text()
    table = page[page.index("## Every value"):]
    table = table[:table.index("\n## ")]
    rows = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]

    def names(cell: str) -> set[str]:
        return {k.strip("`") for k in cell.split("(")[0].replace(",", " ").split()}
    for key, value in values.items():
        (row,) = [r for r in rows if key in names(r)]
        if isinstance(value, dict) and value and key not in ("kindModes", "podAnnotations", "podLabels",
                                                               "nodeSelector", "affinity"):
            for sub in value:
                assert f"`{sub}`" in row, (key, sub)
    named = set().union(*(names(r) for r in rows))
    assert named <= set(values), named - set(values)


# === an operator upgrade's approval (issue 49) ===

def test_approvals_have_a_validating_entry_of_their_own_only_when_on(default_objects):
    def approvals(objects):
        return [w for c in webhook_configs(objects) for w in c["webhooks"] if "approvals" in w["name"]]
    assert approvals(default_objects) == []
    values = {"audit": {"preflight": {"enabled": True}}, "allowlist": {"fromInstalledOperators": FROM_OPERATORS}}
    objects = render(values)
    (entry,) = approvals(objects)
    assert entry["name"] == "validate-approvals.digest-gate.dev"
    kubernetes_validate.validate(webhook_configs(objects)[1], kubernetes_validate.utils.latest_version(), strict=True)
    assert entry["clientConfig"]["service"]["path"] == "/validate-approval"
    # An approval is never held up by the webhook being down.
    assert entry["failurePolicy"] == "Ignore"
    # CREATEs too: a plan created with a judgement on it (issue 59).
    assert entry["rules"] == [{"operations": ["CREATE", "UPDATE"], "apiGroups": ["operators.coreos.com"],
                               "apiVersions": ["v1alpha1"], "resources": ["installplans"], "scope": "Namespaced"}]
    # The installed operators' namespaces, each once.
    assert entry["namespaceSelector"] == {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In",
         "values": ["redhat-ods-operator", "openshift-operators"]}]}
    # Helm's default capabilities are a Kubernetes of 1.28 or later: only
    # approvals and changes of the judgement reach it (see the next test).
    # Before 1.28 the server tells them apart.
    assert entry["matchConditions"][1]["name"] == "approvals-and-judgements"
    # The server's own account may write the judgement, and those named.
    env = {e["name"]: e.get("value") for e in one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["DIGEST_GATE_JUDGEMENT_WRITERS"] == "system:serviceaccount:digest-gate:dg-digest-gate"
    named = render({**values, "audit": {"preflight": {"enabled": True, "judgementWriters": ["system:serviceaccount:ci:pf"]}}})
    env = {e["name"]: e.get("value") for e in one(named, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["DIGEST_GATE_JUDGEMENT_WRITERS"] == "system:serviceaccount:digest-gate:dg-digest-gate,system:serviceaccount:ci:pf"
    with pytest.raises(helm.HelmError):
        render({**values, "audit": {"preflight": {"enabled": True, "judgementWriters": ["a,b"]}}})
    from test_golden import rendered
    old = []
    for chunk in rendered(values, "v1.20.0").split("# === ")[1:]:
        name, _, body = chunk.partition(" ===\n")
        if name.endswith(".yaml"):
            old += [d for d in yaml.safe_load_all(body) if d]
    (entry,) = approvals(old)
    assert "matchConditions" not in entry
    with pytest.raises(helm.HelmError) as err:
        render({"audit": {"preflight": {"enabled": True}}})
    assert "allowlist.fromInstalledOperators" in str(err.value)
    with pytest.raises(helm.HelmError):
        render({"audit": {"preflight": {"enabled": "yes"}}})


def test_the_approval_entry_lets_through_exactly_approvals_and_judgement_writes():
    """Issue 59: on 1.28+ the entry's matchCondition decides what reaches the
    webhook. The e2e apiserver (1.20) predates matchConditions, so the
    expression the chart renders is evaluated here by a CEL implementation,
    on the cases the server's own rules distinguish."""
    import celpy
    values = {"audit": {"preflight": {"enabled": True}}, "allowlist": {"fromInstalledOperators": FROM_OPERATORS}}
    (entry,) = [w for c in webhook_configs(render(values)) for w in c["webhooks"] if "approvals" in w["name"]]
    (condition,) = [c for c in entry["matchConditions"] if c["name"] == "approvals-and-judgements"]
    env = celpy.Environment()
    program = env.program(env.compile(condition["expression"]))

    def plan(approved=None, **annotations):
        p = {"metadata": {"name": "install-x", "namespace": "ops"}, "spec": {"approval": "Manual"}}
        if annotations:
            p["metadata"]["annotations"] = {k.replace("_", "-").replace("judged", "digest-gate.dev/preflight"): v
                                            for k, v in annotations.items()}
        if approved is not None:
            p["spec"]["approved"] = approved
        return p

    def reaches(operation, new, old):
        activation = {"request": celpy.json_to_cel({"operation": operation}),
                      "object": celpy.json_to_cel(new), "oldObject": celpy.json_to_cel(old)}
        return bool(program.evaluate(activation))

    judged = '{"judgedAt": "2026-12-08T00:00:00Z", "targets": []}'
    assert reaches("UPDATE", plan(True), plan(False))
    assert reaches("UPDATE", plan(True), plan())
    assert not reaches("UPDATE", plan(True), plan(True))
    assert not reaches("UPDATE", plan(False), plan(True))
    assert reaches("UPDATE", plan(False, judged=judged), plan(False))
    assert reaches("UPDATE", plan(False), plan(False, judged=judged))
    assert reaches("UPDATE", plan(False, judged=judged), plan(False, judged="{}"))
    assert not reaches("UPDATE", plan(False, judged=judged, team="b"), plan(False, judged=judged))
    assert not reaches("UPDATE", plan(False, team="b"), plan(False))
    assert reaches("CREATE", plan(False, judged=judged), None)
    assert not reaches("CREATE", plan(False), None)
    # OLM creates an Automatic plan approved: not an approval to judge.
    assert not reaches("CREATE", plan(True), None)


def test_below_1_21_every_namespace_an_entry_names_is_labelled_and_checked():
    """Issue 58: on 1.20 the approval gate selects the operators' namespaces
    by a label nothing sets. The notes print the label command for every
    namespace an entry selects or excludes by name (the operators' too),
    and the background audit is told to check them."""
    from test_golden import rendered
    values = {"audit": {"enabled": True, "preflight": {"enabled": True}},
              "allowlist": {"fromInstalledOperators": FROM_OPERATORS},
              "webhook": {"excludeNamespaces": ["monitoring"]}}
    text = rendered(values, "v1.20.0")
    notes = text.split("/templates/NOTES.txt ===\n")[1].split("# === ")[0]
    named = [NAMESPACE, "kube-system", "monitoring", "redhat-ods-applications", "opendatahub",
             "redhat-ods-operator", "openshift-operators"]
    for ns in named:
        assert f"kubectl label namespace {ns} kubernetes.io/metadata.name={ns} --overwrite" in notes, (ns, notes)
    # Those that may not exist on this cluster are labelled only if they do.
    assert "kubectl get namespace opendatahub >/dev/null 2>&1 && kubectl label namespace opendatahub" in notes
    assert "DigestGateNamespaceWithoutNameLabel" in notes
    # As a variable, not a flag: an older image ignores it rather than
    # refusing to start.
    env = {v["name"]: v.get("value") for v in container(render(values))["env"]}
    assert env["DIGEST_GATE_AUDIT_NAMED_NAMESPACES"] == ",".join(named)
    # From 1.21 the label is Kubernetes' own: the notes say nothing of it.
    assert "kubectl label namespace" not in rendered(values, "v1.28.0").split("/templates/NOTES.txt ===\n")[1].split("# === ")[0]


def test_the_background_pre_flight_is_granted_what_it_reads_and_the_patch_it_writes():
    values = {"audit": {"enabled": True, "preflight": {"enabled": True}},
              "allowlist": {"fromInstalledOperators": FROM_OPERATORS}}
    objects = render(values)
    assert "--audit-preflight" in args(objects)
    for ns in ("redhat-ods-operator", "openshift-operators"):
        (role,) = [r for r in find(objects, "Role", CSV_ROLE) if r["metadata"]["namespace"] == ns]
        granted = {(res, verb) for rule in role["rules"] for res in rule["resources"] for verb in rule["verbs"]}
        assert granted == {("clusterserviceversions", "list"), ("clusterserviceversions", "watch"),
                           ("installplans", "list"), ("installplans", "watch"), ("subscriptions", "list"),
                           ("installplans", "patch"), ("events", "create"), ("events", "list"),
                           ("events", "delete")}, granted
    # Deleting a pre-flight's reports once its plan stops waiting, only
    # with the reports on.
    cluster_wide = {"audit": {"enabled": True, "preflight": {"enabled": True}, "policyReports": {"enabled": True}},
                    "allowlist": {"fromInstalledOperators": FROM_OPERATORS}}
    verbs = rules(render(cluster_wide), "ClusterRole")
    assert verbs[("wgpolicyk8s.io", "policyreports")] == {"list", "create", "patch", "delete"}
    assert "delete" not in rules(render({**cluster_wide, "audit": {**cluster_wide["audit"], "preflight": {
        "enabled": False}}}), "ClusterRole")[("wgpolicyk8s.io", "policyreports")]
    # The install notes say what is answered and what is granted.
    from test_golden import rendered
    notes = rendered(values, "v1.28.0")
    assert "an approval of an InstallPlan in\nredhat-ods-operator, openshift-operators\n" in notes, notes
    assert "patch InstallPlans (RBAC cannot narrow a patch\nto annotations)" in notes
    assert "nothing writes it but `digest-gate preflight --annotate`" in rendered(
        {**values, "audit": {"preflight": {"enabled": True}}}, "v1.28.0")
    # Without the background audit the approvals are answered from what
    # `preflight --annotate` wrote: nothing more is granted, nothing runs.
    alone = render({"audit": {"preflight": {"enabled": True}}, "allowlist": {"fromInstalledOperators": FROM_OPERATORS}})
    assert not [a for a in args(alone) if a.startswith("--audit")]
    for role in find(alone, "Role", CSV_ROLE):
        assert [r["resources"] for r in role["rules"]] == [["clusterserviceversions"]]


def test_the_memory_limit_holds_a_hostile_review():
    """Issue 57: the chart's memory limit is derived from SECURITY.md's
    worst case per review, which tests/bounds.rs holds the real binary to
    (in a cgroup at the same limit): the three cannot drift apart. A warm
    replica, one review's budget and a second review's body still arriving
    (the runtime judges one at a time on the chart's 1 CPU), with 30 %
    headroom, fit the limit."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    limit = values["resources"]["limits"]["memory"]
    assert limit.endswith("Mi"), limit
    limit_mib = int(limit[:-2])
    body_mib = values["server"]["maxBodyBytes"] / (1 << 20)
    security = (ROOT / "SECURITY.md").read_text()
    m = re.search(r"holds about (\d+) MiB; \*\*one review\s+costs at most (\d+) MiB over that", security)
    assert m, "SECURITY.md no longer states the warm replica and the budget per review"
    warm, budget = int(m.group(1)), int(m.group(2))
    bounds = (ROOT / "tests" / "bounds.rs").read_text()
    assert f"const CHART_LIMIT_MIB: u64 = {limit_mib};" in bounds
    assert f"const REVIEW_BUDGET_MIB: u64 = {budget};" in bounds
    assert (warm + budget + body_mib) * 1.3 <= limit_mib, (warm, budget, body_mib, limit_mib)
