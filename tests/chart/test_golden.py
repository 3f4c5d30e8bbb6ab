"""The chart as it renders, pinned: four value sets, each for Kubernetes
1.20 (the oldest supported, no matchConditions) and 1.28, compared with
files under tests/golden/chart/. A change to what the chart renders must
change a golden in the same commit, on purpose.

Set DIGEST_GATE_UPDATE_GOLDEN=1 to write the files instead of comparing.
"""

from __future__ import annotations

import json
import os
import re

import helm_python as helm
import pytest
from helm_python import _native

from conftest import CHART, NAMESPACE, RELEASE, ROOT

GOLDEN = ROOT / "tests" / "golden" / "chart"

VALUE_SETS = {
    "defaults": {},
    "audit": {"audit": {"enabled": True, "events": True,
                        "policyReports": {"enabled": True, "installCRDs": True}}},
    "certmanager-installed-operators": {
        "certs": {"mode": "certManager"},
        "allowlist": {"fromInstalledOperators": [
            {"namespace": "redhat-ods-operator", "namePrefixes": ["rhods-operator"]},
            {"namespace": "openshift-operators"}]}},
    "networkpolicy-monitoring": {
        "networkPolicy": {"enabled": True},
        "metrics": {"serviceMonitor": {"enabled": True},
                    "prometheusRule": {"enabled": True},
                    "grafanaDashboard": {"enabled": True}}},
    "verify-registry": {
        "allowlist": {"verifyRegistry": {"enabled": True, "pullSecret": "registry-pull",
                                         "caConfigMap": {"name": "trusted-ca"}, "platforms": ["linux/amd64"]}},
        "networkPolicy": {"enabled": True},
        "metrics": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}},
}

KUBE_VERSIONS = ["v1.20.0", "v1.28.0"]

# What selfSigned mode generates anew on every render.
GENERATED = re.compile(r"^(\s*(?:ca\.crt|tls\.crt|tls\.key|caBundle):\s*).+$", re.M)


def rendered(values: dict, kube_version: str) -> str:
    """Every manifest of one render, in template order, generated key
    material masked. Python's helm-python-sdk takes no Kubernetes version
    for a render; its native library does (`kube_version`, the option
    `helm template --kube-version` sets)."""
    chart = helm.Chart.load(str(CHART))
    opts = {"name": RELEASE, "namespace": NAMESPACE, "kube_version": kube_version}
    manifests = json.loads(_native.call_string("helm_render", chart._raw(), json.dumps(values), json.dumps(opts)))
    out = []
    for name in sorted(manifests):
        text = manifests[name].strip()
        if not text:
            continue
        masked = GENERATED.sub(r"\1<generated>", text)
        out.append(f"# === {name} ===\n{masked}\n")
    return "".join(out)


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_chart_renders_as_pinned(name, kube_version):
    text = rendered(VALUE_SETS[name], kube_version)
    path = GOLDEN / f"{name}.{kube_version.lstrip('v').rsplit('.', 1)[0]}.yaml"
    if os.environ.get("DIGEST_GATE_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} is missing: run with DIGEST_GATE_UPDATE_GOLDEN=1 to write it"
    assert text == path.read_text(), f"the chart no longer renders as {path} pins"


def test_the_versions_differ_where_kubernetes_does():
    # The pin would mean little if both versions rendered alike.
    old, new = (rendered({}, v) for v in KUBE_VERSIONS)
    assert "matchConditions" in new and "matchConditions" not in old
