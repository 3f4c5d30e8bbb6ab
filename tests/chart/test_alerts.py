"""The chart's alerting rules and Grafana dashboard, against what the binary
really exposes: a server is scraped after real reviews and a failed
certificate reload, every metric, label and label value the rules and the
dashboard's queries name must be in that scrape, and promtool runs every
alert on series that carry the scraped names and labels."""

from __future__ import annotations

import calendar
import http.client
import json
import pathlib
import re
import shutil
import socket
import ssl
import subprocess
import time

import pytest
import yaml

from conftest import ROOT, find, render, serving
from test_certs_script import SCRIPT

PROMTOOL = shutil.which("promtool")
# What Prometheus adds to every series it scrapes through the ServiceMonitor.
TARGET = {"namespace": "digest-gate", "job": "dg-digest-gate-metrics", "pod": "dg-digest-gate-7d9c-x2x4k",
          "instance": "10.128.2.17:8080"}
# Series the rules read that Prometheus or kube-state-metrics export.
FOREIGN = {"up", "kube_deployment_status_replicas_available"}
# Families with series only once the background audit ran against a cluster,
# and their labels: tests/e2e/test_audit.py reads them there by these labels.
# (An empty family is not exposed at all.)
AUDITED = {"digest_gate_audit_findings": {"kind", "verdict"},
           "digest_gate_pending_upgrade_findings": {"plan_namespace", "package", "reason"},
           "digest_gate_pending_upgrade_unjudged": {"plan_namespace", "reason"},
           "digest_gate_audit_images": {"repository", "digest", "verdict", "seen"}}
# The dashboard's variable naming the label a fleet's Prometheus puts on each
# cluster's series (federation, Thanos): the user's, not the binary's.
USER_LABELS = {"$cluster_label"}
RULE_VALUES = {"metrics": {"serviceMonitor": {"enabled": True},
                           "prometheusRule": {"enabled": True, "allowlistMaxAgeHours": 24, "kubeStateMetrics": True}},
               "allowlist": {"verifyRegistry": {"enabled": True},
                             "fromInstalledOperators": [{"namespace": "redhat-ods-operator"}]},
               "audit": {"enabled": True, "preflight": {"enabled": True}}}

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
SELECTOR = re.compile(r'\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}|\b(digest_gate_[a-z_]+)\b')
GROUPING = re.compile(r'\b(?:by|on)\s*\(([^)]*)\)')


def parse_exposition(text: str) -> list[tuple[str, dict[str, str], float]]:
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        samples.append((m[1], dict(LABEL.findall(m[2] or "")), float(m[3])))
    return samples


def review(port: int, ca: pathlib.Path, body: dict) -> dict:
    ctx = ssl.create_default_context(cafile=str(ca))
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    conn = http.client.HTTPConnection("digest-gate.demo.svc")
    conn.sock = ctx.wrap_socket(raw, server_hostname="digest-gate.demo.svc")
    conn.request("POST", "/validate", json.dumps(body), {"Content-Type": "application/json"})
    answer = conn.getresponse()
    assert answer.status == 200
    out = json.loads(answer.read())
    conn.close()
    return out


def admin_get(admin: int, path: str) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", admin, timeout=5)
    conn.request("GET", path)
    return conn.getresponse().read().decode()


@pytest.fixture(scope="module")
def scrape(tmp_path_factory):
    """Samples of a server in enforce mode that allowed one review, denied
    one, closed a pending handshake to make room, failed one certificate
    reload, and verifies registries but cannot read its CA (so it asks no
    registry: every promoted digest is unverifiable, one setup error); and
    the certificates' folder."""
    out = tmp_path_factory.mktemp("alerts")
    subprocess.run(["sh", str(SCRIPT), "--namespace", "demo", "--out", str(out)], capture_output=True, check=True)
    denied = json.loads((ROOT / "examples" / "review.json").read_text())
    allowed = json.loads(json.dumps(denied))
    allowed["request"]["uid"] = "3b0e1ac6-8f4c-4a55-9d5b-1f1c2a7de002"
    allowed["request"]["object"]["spec"]["containers"][0]["image"] = (
        "registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8"
        "@sha256:8af20e48bb480a7ba1ee1268a3cf0a507e05b256c5fcf988f8e4a3de8b87edc6")
    with serving(out, "--mode", "enforce", "--reload-interval", "100ms", "--max-pending-handshakes", "1",
                 "--verify-registry", "--registry-ca", str(out / "no-such-ca.pem"),
                 admin_port=True) as (port, admin):
        assert review(port, out / "ca.crt", denied)["response"]["allowed"] is False
        assert review(port, out / "ca.crt", allowed)["response"]["allowed"] is True
        # Two connections that never say hello: the first is closed for the second.
        idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(2)]
        expiry = parse_exposition(admin_get(admin, "/metrics"))
        good = (out / "tls.crt").read_bytes()
        (out / "tls.crt").write_text("not a certificate\n")
        deadline = time.monotonic() + 10
        while True:
            text = admin_get(admin, "/metrics")
            if ('source="certificate",result="failure"' in text and "connections_evicted_total{" in text
                    and 'verification_errors_total{reason="setup"} 1' in text):
                break
            assert time.monotonic() < deadline, "the failed reload or the eviction was not counted"
            time.sleep(0.1)
        (out / "tls.crt").write_bytes(good)
        for sock in idle:
            sock.close()
    samples = parse_exposition(text)
    # The last good certificate still serves, so its expiry stays.
    assert [s for s in samples if s[0].endswith("expiry_timestamp_seconds")] == \
        [s for s in expiry if s[0].endswith("expiry_timestamp_seconds")]
    return samples, out


def family(name: str) -> set[str]:
    """Sample names a metric named in PromQL may stand for."""
    return {name} | {name + suffix for suffix in ("_total", "_bucket", "_sum", "_count")}


def check_query(expr: str, samples: list[tuple[str, dict, float]], where: str) -> set[str]:
    """Every series `expr` selects exists in `samples` with the labels and
    label values it matches on, and every label it groups by is on one of
    its series; returns the metric names it reads."""
    names = set()
    carried = set(TARGET) | {"le"} | USER_LABELS
    for m in SELECTOR.finditer(expr):
        name = m[1] or m[3]
        if name in ("by", "on", "without", "ignoring") or (m[1] and name.startswith("__")):
            continue
        if name in FOREIGN:
            continue
        names.add(name)
        if name in AUDITED:
            carried |= AUDITED[name]
            continue
        series = [labels for n, labels, _ in samples if n in family(name)]
        assert series, f"{where}: {name} is not among the metrics the binary exposes"
        for label, op, value in MATCHER.findall(m[2] or ""):
            if label in TARGET:
                continue
            assert any(label in s for s in series), f"{where}: {name} has no label {label}"
            if op == "=":
                assert any(s.get(label) == value for s in series), f"{where}: no {name}{{{label}=\"{value}\"}}"
        for s in series:
            carried |= set(s)
    for m in GROUPING.finditer(expr):
        for label in filter(None, (x.strip() for x in m[1].split(","))):
            assert label in carried, f"{where}: groups by {label}, which none of its series carries"
    return names


def rules(values: dict = RULE_VALUES) -> list[dict]:
    (rule,) = find(render(values), "PrometheusRule")
    assert rule["metadata"]["namespace"] == "digest-gate"
    return rule["spec"]["groups"]


def test_rules_and_dashboard_read_only_metrics_and_labels_the_binary_exposes(scrape):
    samples, _ = scrape
    read = set()
    for group in rules():
        for rule in group["rules"]:
            read |= check_query(rule["expr"], samples, rule["alert"])
    # The checker saw what the rules are about (it did not match nothing).
    assert read >= {"digest_gate_allowlist_stale", "digest_gate_certificate_expiry_timestamp_seconds",
                    "digest_gate_admission_requests_total", "digest_gate_admission_duration_seconds_bucket",
                    "digest_gate_reloads_total", "digest_gate_last_successful_reload_timestamp_seconds",
                    "digest_gate_break_glass_namespaces", "digest_gate_allowlist_repositories",
                    "digest_gate_promoted_images", "digest_gate_registry_verification_errors_total"}, read

    (cm,) = find(render({"metrics": {"grafanaDashboard": {"enabled": True}}}), "ConfigMap", "dg-digest-gate-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(cm["data"]["digest-gate.json"])
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    shown = set()
    for panel in panels:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            shown |= check_query(target["expr"].replace("$__rate_interval", "5m"), samples, panel["title"])
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            check_query(variable["query"]["query"], samples, f"variable {variable['name']}")
    # What the issue asks the dashboard to show.
    assert shown >= {"digest_gate_admission_requests_total", "digest_gate_images_total",
                     "digest_gate_admission_duration_seconds_bucket", "digest_gate_reloads_total",
                     "digest_gate_certificate_expiry_timestamp_seconds", "digest_gate_promoted_images",
                     "digest_gate_registry_verification_errors_total",
                     "digest_gate_registry_verification_duration_seconds_sum",
                     "digest_gate_pending_upgrade_findings", "digest_gate_pending_upgrade_unjudged",
                     "digest_gate_audit_images"}, shown
    # Panels do not overlap on Grafana's 24-column grid.
    cells = set()
    for panel in dashboard["panels"]:
        g = panel["gridPos"]
        assert g["x"] + g["w"] <= 24, panel["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & mine, f"{panel['title']} overlaps another panel"
        cells |= mine


def test_the_expiry_exported_is_the_certificates(scrape):
    samples, out = scrape
    (expiry,) = [v for n, _, v in samples if n == "digest_gate_certificate_expiry_timestamp_seconds"]
    end = subprocess.run(["openssl", "x509", "-noout", "-enddate", "-dateopt", "iso_8601", "-in", str(out / "tls.crt")],
                         capture_output=True, text=True, check=True).stdout
    # notAfter=2027-12-05 17:00:00Z
    stamp = time.strptime(end.strip().split("=", 1)[1], "%Y-%m-%d %H:%M:%SZ")
    assert expiry == float(calendar.timegm(stamp))


def test_rules_are_refused_without_a_scrape_to_read():
    import helm_python as helm  # noqa: F401 (render raises Helm's error)
    with pytest.raises(Exception, match="metrics.prometheusRule reads the series the ServiceMonitor scrapes"):
        render({"metrics": {"prometheusRule": {"enabled": True}}})
    # Off by default; with a selector of one's own, no ServiceMonitor is needed.
    assert not find(render(), "PrometheusRule")
    groups = rules({"metrics": {"prometheusRule": {"enabled": True, "selector": 'job="dg"'}}})
    assert all('job="dg"' in r["expr"] for g in groups for r in g["rules"])


def series(samples, name: str, **labels: str) -> str:
    """A scraped series of `name` whose labels include `labels`, with the
    scrape's target labels, as promtool's input names it."""
    for n, have, _ in samples:
        if n == name and all(have.get(k) == v for k, v in labels.items()):
            both = {**have, **TARGET}
            return name + "{" + ", ".join(f'{k}="{v}"' for k, v in both.items()) + "}"
    raise AssertionError(f"the scrape has no {name} with {labels}")


def case(alert: str, at: str, inputs: list[tuple[str, str]], fired: list[dict]) -> dict:
    return {"interval": "1m", "input_series": [{"series": s, "values": v} for s, v in inputs],
            "alert_rule_test": [{"eval_time": at, "alertname": alert, "exp_alerts": [{"exp_labels": l} for l in fired]}]}


def test_every_alert_fires_when_it_should_and_not_otherwise(scrape, tmp_path):
    assert PROMTOOL, "promtool is not on PATH: `make promtool` installs it (from Debian's prometheus package)"
    samples, _ = scrape
    groups = rules()
    full = tmp_path / "full.yaml"
    full.write_text(yaml.safe_dump({"groups": groups}))
    check = subprocess.run([PROMTOOL, "check", "rules", str(full)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    # promtool compares annotations as well: they are checked here instead,
    # against the labels each alert carries.
    alerts = {}
    for group in groups:
        for rule in group["rules"]:
            alerts.setdefault(rule["alert"], []).append(rule)
            rule.pop("annotations")
    plain = tmp_path / "rules.yaml"
    plain.write_text(yaml.safe_dump({"groups": groups}))

    ns, pod = TARGET["namespace"], TARGET["pod"]
    per_pod = {"namespace": ns, "pod": pod}
    s = lambda name, **labels: series(samples, name, **labels)  # noqa: E731
    up = 'up{' + ", ".join(f'{k}="{v}"' for k, v in TARGET.items()) + '}'
    ksm = f'kube_deployment_status_replicas_available{{namespace="{ns}", deployment="dg-digest-gate"}}'
    stale = s("digest_gate_allowlist_stale")
    repos = s("digest_gate_allowlist_repositories")
    cert_failed = s("digest_gate_reloads_total", source="certificate", result="failure")
    expiry = s("digest_gate_certificate_expiry_timestamp_seconds")
    loaded = s("digest_gate_last_successful_reload_timestamp_seconds", source="allowlist")
    denials = s("digest_gate_admission_requests_total", verdict="deny")
    glass = s("digest_gate_break_glass_namespaces")
    unlabelled = s("digest_gate_namespaces_without_name_label")
    promoted = {state: s("digest_gate_promoted_images", state=state)
                for state in ("ok", "missing", "not-runnable", "platform-missing", "unverifiable")}
    setup = s("digest_gate_registry_verification_errors_total", reason="setup")
    csvs_down = s("digest_gate_installed_csvs_watch_down_since_timestamp_seconds")
    lease_missing = s("digest_gate_audit_lease_errors_total", reason="missing")

    def pending(reason: str) -> str:
        # Exposed only after a pre-flight against a cluster (AUDITED): named
        # with the target's labels as the e2e reads them.
        labels = {**TARGET, "plan_namespace": "redhat-ods-operator", "package": "rhods-operator", "reason": reason}
        return "digest_gate_pending_upgrade_findings{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"

    def unjudged(reason: str) -> str:
        labels = {**TARGET, "plan_namespace": "redhat-ods-operator", "reason": reason}
        return "digest_gate_pending_upgrade_unjudged{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
    buckets = [(n, labels) for n, labels, _ in samples if n == "digest_gate_admission_duration_seconds_bucket"
               and labels["endpoint"] == "validate"]
    assert {"1.0", "2.5", "+Inf"} <= {b[1]["le"] for b in buckets}, "the latency buckets cannot tell 1 s"
    bucket = lambda labels: series(samples, "digest_gate_admission_duration_seconds_bucket", **labels)  # noqa: E731
    day = 24 * 60

    tests = [
        # The only replica stops being scraped as up.
        case("DigestGateDown", "12m", [(up, "1 1 0x15"), (ksm, "1x15")],
             [{"severity": "critical", "namespace": ns}]),
        case("DigestGateDown", "12m", [(up, "1x15"), (ksm, "1x15")], []),
        # Scraped, but kube-state-metrics sees no available replica.
        case("DigestGateDown", "12m", [(up, "1x15"), (ksm, "1 0x15")], [{"severity": "critical", "namespace": ns}]),
        case("DigestGateAllowlistStale", "10m", [(stale, "0 0 1x20")], [{"severity": "warning", **per_pod}]),
        case("DigestGateAllowlistStale", "10m", [(stale, "0x20")], []),
        case("DigestGateAllowlistStaleTooLong", "10m", [(stale, "1x80")], []),
        case("DigestGateAllowlistStaleTooLong", "70m", [(stale, "1x80")], [{"severity": "critical", **per_pod}]),
        # Loaded at time 0, never since.
        case("DigestGateAllowlistNotUpdated", "60m", [(loaded, "0x1500")], []),
        case("DigestGateAllowlistNotUpdated", "1500m", [(loaded, "0x1500")], [{"severity": "warning", **per_pod}]),
        case("DigestGateAllowlistEmpty", "20m", [(repos, "0x30")], [{"severity": "info", **per_pod}]),
        case("DigestGateAllowlistEmpty", "20m", [(repos, "6x30")], []),
        # Down since promtool's minute 1: 14 minutes at 15m, 4 at 5m; 0 is working.
        case("DigestGateInstalledCsvsWatchDown", "15m", [(csvs_down, "0 60x20")],
             [{"severity": "warning", **per_pod}]),
        case("DigestGateInstalledCsvsWatchDown", "5m", [(csvs_down, "0 60x20")], []),
        case("DigestGateInstalledCsvsWatchDown", "15m", [(csvs_down, "0x20")], []),
        case("DigestGateCertificateReloadFailed", "5m", [(cert_failed, "0 0 1 1 1 1")],
             [{"severity": "warning", **per_pod}]),
        case("DigestGateCertificateReloadFailed", "25m", [(cert_failed, "1x30")], []),
        # The expiry, in seconds since promtool's time 0.
        case("DigestGateCertificateExpiresSoon", "1m", [(expiry, f"{10 * 86400}x5")],
             [{"severity": "warning", **per_pod}]),
        case("DigestGateCertificateExpiresSoon", "1m", [(expiry, f"{2 * 86400}x5")],
             [{"severity": "warning", **per_pod}, {"severity": "critical", **per_pod}]),
        case("DigestGateCertificateExpiresSoon", "1m", [(expiry, f"{30 * 86400}x5")], []),
        # A day at 0.1 denials a second, then 10 a second.
        case("DigestGateDenialSpike", f"{day + 20}m", [(denials, f"0+6x{day} {day * 6}+600x25")],
             [{"severity": "warning", "namespace": ns}]),
        case("DigestGateDenialSpike", f"{day + 20}m", [(denials, f"0+600x{day + 25}")], []),
        # Every review between 1 and 2.5 s, or every one in the first bucket.
        case("DigestGateSlowAdmission", "17m",
             [(bucket(l), "0+60x20" if l["le"] in ("2.5", "5.0", "+Inf") else "0x20") for _, l in buckets],
             [{"severity": "warning", "namespace": ns}]),
        case("DigestGateSlowAdmission", "17m", [(bucket(l), "0+60x20") for _, l in buckets], []),
        # One missing digest for 20 minutes, beside pullable ones.
        case("DigestGatePromotedImagesUnpullable", "20m",
             [(promoted["missing"], "0 0 1x30"), (promoted["ok"], "12x30"), (promoted["not-runnable"], "0x30")],
             [{"severity": "critical", "namespace": ns, "state": "missing"}]),
        case("DigestGatePromotedImagesUnpullable", "20m",
             [(promoted["missing"], "0x30"), (promoted["unverifiable"], "3x30"), (promoted["ok"], "12x30")], []),
        # Not yet for long enough: a digest promoted before its image was pushed.
        case("DigestGatePromotedImagesUnpullable", "10m", [(promoted["platform-missing"], "0 1x30")], []),
        case("DigestGatePromotedImagesUnverifiable", "70m", [(promoted["unverifiable"], "2x90")],
             [{"severity": "warning", "namespace": ns}]),
        case("DigestGatePromotedImagesUnverifiable", "30m", [(promoted["unverifiable"], "2x90")], []),
        case("DigestGateRegistryVerificationCannotStart", "5m", [(setup, "0 0 1 1 1 1")],
             [{"severity": "warning", **per_pod}]),
        case("DigestGateRegistryVerificationCannotStart", "40m", [(setup, "1x45")], []),
        # A failure every 30 s for the whole window, then none.
        case("DigestGateAuditLeaseUnusable", "30m", [(lease_missing, "0+2x40")], [{"severity": "warning", **per_pod}]),
        case("DigestGateAuditLeaseUnusable", "10m", [(lease_missing, "0+2x40")], []),
        case("DigestGateAuditLeaseUnusable", "30m", [(lease_missing, "3x40")], []),
        # A plan judged to leave 3 objects stale; one that breaks nothing.
        case("DigestGatePendingUpgradeWouldBreak", "2m", [(pending("stale_after_upgrade"), "3x5")],
             [{"severity": "warning", "plan_namespace": "redhat-ods-operator", "package": "rhods-operator",
               "reason": "stale_after_upgrade"}]),
        case("DigestGatePendingUpgradeWouldBreak", "2m",
             [(pending("stale_after_upgrade"), "0x5"), (pending("already_stale"), "2x5")], []),
        # A plan whose bundle cannot be read, for longer than OLM takes to
        # write one; one read a few minutes later; a judged plan.
        case("DigestGatePendingUpgradeNotJudged", "40m", [(unjudged("bundle_unreadable"), "1x45")],
             [{"severity": "warning", "plan_namespace": "redhat-ods-operator", "reason": "bundle_unreadable"}]),
        case("DigestGatePendingUpgradeNotJudged", "40m", [(unjudged("plan_unreadable"), "1x5 0x40")], []),
        case("DigestGatePendingUpgradeNotJudged", "40m", [(pending("stale_after_upgrade"), "1x45")], []),
        # A 1.20 cluster's operator namespace left unlabelled, then labelled.
        case("DigestGateNamespaceWithoutNameLabel", "20m", [(unlabelled, "1x30")],
             [{"severity": "warning", "namespace": ns}]),
        case("DigestGateNamespaceWithoutNameLabel", "20m", [(unlabelled, "1x5 0x25")], []),
        case("DigestGateBreakGlassInUse", "70m", [(glass, "1x90")], [{"severity": "warning", "namespace": ns}]),
        case("DigestGateBreakGlassInUse", "70m", [(glass, "0x90")], []),
    ]
    tested = {t["alert_rule_test"][0]["alertname"] for t in tests}
    assert tested == set(alerts), f"alerts without a test: {set(alerts) - tested}"
    spec = tmp_path / "tests.yaml"
    spec.write_text(yaml.safe_dump({"rule_files": [str(plain)], "evaluation_interval": "1m", "tests": tests}))
    run = subprocess.run([PROMTOOL, "test", "rules", str(spec)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr

    # Annotations name only labels their alert carries.
    for t in tests:
        name = t["alert_rule_test"][0]["alertname"]
        for fired in t["alert_rule_test"][0]["exp_alerts"]:
            for rule in (r for g in rules() for r in g["rules"] if r["alert"] == name):
                for text in rule["annotations"].values():
                    for label in re.findall(r"\$labels\.([a-zA-Z_]+)", text):
                        assert label in fired["exp_labels"], f"{name} annotations name {label}, which it lacks"
