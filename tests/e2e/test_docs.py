"""The docs' loopback samples, run as a reader runs them (tests/docs.rs holds
every shell sample of README.md and docs/ to a kind; these are the ones that
need a cluster or a server).

Each step of a sample runs in a shell in a scratch directory that has the
repository's `examples/` and `charts/`, with the control plane's kubectl and
the debug `digest-gate` on PATH and KUBECONFIG set, and must exit 0
(`check` and `audit` may exit 1: findings, never 2); `# prints:` lines must
appear in what it printed. What a reader's machine has and this one has not
is played, and said here:
- `helm install` and `helm upgrade` lines are read (release, chart,
  namespace, -f, --set, --set-file, --reuse-values) and performed with real
  Helm through helm-python-sdk, which has no command line; the harness then
  plays the pod and routes the Service to it on loopback (harness.Release),
  whose port it adds to the values;
- `kubectl logs` needs a kubelet, which this control plane has not: the
  played pod's log is read instead.
"""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import subprocess
import time

import yaml

from cluster import ROOT, binary, wait_until
from harness import (INCIDENT_IMAGE, PROMOTED_IMAGE, RELEASE_NAMESPACE, Release, deep_merge, incident_runtime,
                     install_csv, serve_csvs)
from support import docs_sample

OPERATORS = "redhat-ods-operator"
CSV = ROOT / "tests" / "data" / "allowlists" / "rhods-operator.csv.yaml"


def set_path(values: dict, dotted: str, value) -> dict:
    keys = dotted.split(".")
    node = values
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    return values


class Reader:
    """A reader's shell against the e2e control plane."""

    def __init__(self, cluster, workdir: pathlib.Path, release: Release | None = None):
        self.cluster = cluster
        self.workdir = workdir
        self.release = release
        for name in ("examples", "charts"):
            (workdir / name).symlink_to(ROOT / name)
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith("DIGEST_GATE_")},
                    "PATH": f"{cluster.bin}:{binary().parent}:{os.environ['PATH']}",
                    "KUBECONFIG": str(cluster.kubeconfig)}
        self.outputs: list[str] = []

    def run(self, sample_id: str, played: dict | None = None, fill: dict | None = None):
        """Runs a sample's steps; `fill` replaces the placeholders a reader
        fills in (their registry, their digest)."""
        for step in docs_sample(sample_id):
            for placeholder, value in (fill or {}).items():
                step.command = step.command.replace(placeholder, value)
            if step.command.startswith("helm "):
                out = self.helm(step.command)
            elif played and step.command in played:
                out = played[step.command]()
            else:
                out = self.shell(step.command)
            self.outputs.append(out)
            for line in step.prints:
                assert line in out, f"{sample_id}: `{step.command}` should print {line!r}:\n{out}"

    def shell(self, command: str) -> str:
        done = subprocess.run(["bash", "-c", command], cwd=self.workdir, env=self.env, capture_output=True,
                              text=True, timeout=120)
        allowed = (0, 1) if re.match(r"digest-gate (check|audit)\b", command) else (0,)
        assert done.returncode in allowed, f"`{command}` exited {done.returncode}:\n{done.stdout}{done.stderr}"
        return done.stdout + done.stderr

    def helm(self, command: str) -> str:
        argv = shlex.split(command)
        action, name, chart = argv[1], argv[2], argv[3]
        assert action in ("install", "upgrade") and chart == "charts/digest-gate", command
        assert self.release and name == self.release.name, (name, command)
        values: dict = {}
        reuse = False
        rest = argv[4:]
        while rest:
            flag = rest.pop(0)
            if flag in ("-n", "--namespace"):
                assert rest.pop(0) == RELEASE_NAMESPACE
            elif flag == "--create-namespace":
                pass  # the suite's release namespace exists
            elif flag in ("-f", "--values"):
                values = deep_merge(values, yaml.safe_load((self.workdir / rest.pop(0)).read_text()))
            elif flag == "--set-file":
                key, _, path = rest.pop(0).partition("=")
                set_path(values, key, (self.workdir / path).read_text())
            elif flag == "--set":
                key, _, value = rest.pop(0).partition("=")
                set_path(values, key, value)
            elif flag == "--reuse-values":
                reuse = True
            else:
                raise AssertionError(f"helm flag {flag} is not played: {command}")
        # The harness's loopback: the Service's port is the played pod's.
        values = deep_merge(values, {"service": {"port": self.release.port},
                                     "server": {"drainDelay": "0s", "gracePeriod": "5s"}})
        if action == "install":
            rel = self.release.install(values, raw=True)
        else:
            rel = self.release.upgrade(values, raw=True, reuse_values=reuse)
        return rel.get("notes", "")


def readme_values() -> str:
    """The README's values.yaml block."""
    text = (ROOT / "README.md").read_text()
    return re.search(r"```yaml\n(# values\.yaml\n.*?)```", text, re.S).group(1)


def test_the_readme_installs_in_audit_mode_shows_the_first_finding_then_enforces(cluster, tmp_path):
    """A newcomer with only the README: the promoted list from the installed
    CSVs, the chart in audit mode reading them, the incident's runtime
    admitted with the warning, the audit finding it, then rewrite mode."""
    serve_csvs(cluster, OPERATORS)
    install_csv(cluster, OPERATORS, CSV)
    release = Release(cluster, tmp_path / "release", name="digest-gate")
    workdir = tmp_path / "reader"
    workdir.mkdir()
    reader = Reader(cluster, workdir, release)
    try:
        reader.run("readme-promoted")
        assert "ClusterServiceVersion rhods-operator.1.21.0" in reader.outputs[-1]
        (workdir / "values.yaml").write_text(readme_values())
        reader.run("install-label-namespaces")
        # The played pod runs the host binary; the values must still be
        # what the chart's schema takes.
        reader.run("readme-install", fill={"PRINTED_DIGEST": "0" * 64})
        assert release.pod.arg("--mode") == "audit"
        deployment = cluster.get("deployment", "digest-gate", RELEASE_NAMESPACE)
        assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == \
            "registry.example.com/platform/digest-gate@sha256:" + "0" * 64
        assert release.pod.arg("--allowlist-csv") == f"{OPERATORS}/rhods-operator"

        reader.run("readme-first-finding",
                   played={"kubectl -n digest-gate logs deploy/digest-gate": lambda: release.pod.log_path.read_text()})
        stored = cluster.get("servingruntime", "ovms", "demo-models")
        assert stored["spec"]["containers"][0]["image"] == INCIDENT_IMAGE, "audit mode changes nothing"
        logs, audit = reader.outputs[-2], reader.outputs[-1]
        assert '"kind":"ServingRuntime","name":"ovms"' in logs
        # What enforce would have blocked, read as docs/webhook.md reads it
        # (the played pod's log file standing for `kubectl logs`).
        reader.run("webhook-audit-log",
                   fill={"kubectl -n digest-gate logs deploy/digest-gate": f"cat {release.pod.log_path}"})
        would = reader.outputs[-1]
        assert '"kind":"ServingRuntime","name":"ovms"' in would and "would be rewritten to sha256:8af20e48" in would, would
        assert "demo-models/ServingRuntime/ovms: rewrite" in audit and "sha256:8af20e48" in audit
        reader.run("audit-all-namespaces")
        assert "demo-models/ServingRuntime/ovms: rewrite" in reader.outputs[-1]

        reader.run("readme-enforce")
        assert release.pod.arg("--mode") == "rewrite"
        again = incident_runtime("demo-models")
        again["metadata"]["name"] = "ovms-after-enforce"
        cluster.apply(again)
        stored = cluster.get("servingruntime", "ovms-after-enforce", "demo-models")
        assert stored["spec"]["containers"][0]["image"] == PROMOTED_IMAGE
    finally:
        if release.installed:
            release.uninstall()
        cluster.delete_namespace("demo-models")
        cluster.delete_namespace(OPERATORS)
        wait_until("the namespaces gone", lambda: cluster.get("namespace", OPERATORS) is None, 120)


def test_the_install_page_installs_with_the_operators_csv_as_a_file(cluster, tmp_path, models):
    release = Release(cluster, tmp_path / "release", name="digest-gate")
    workdir = tmp_path / "reader"
    workdir.mkdir()
    (workdir / "rhods-operator.clusterserviceversion.yaml").write_text(CSV.read_text())
    reader = Reader(cluster, workdir, release)
    try:
        reader.run("install-csv-file")
        assert release.pod.arg("--mode") == "rewrite"
        cluster.apply(incident_runtime(models))
        stored = cluster.get("servingruntime", "ovms", models)
        assert stored["spec"]["containers"][0]["image"] == PROMOTED_IMAGE
    finally:
        if release.installed:
            release.uninstall()


def test_the_dev_server_answers_the_webhook_pages_curl(cluster, tmp_path):
    """`digest-gate serve --dev` (its defaults: /tmp/digest-gate-dev, port
    8443), then the page's curl, from the repository root as the page says."""
    serve = subprocess.Popen([str(binary()), "serve", "--dev"], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        printed = ""
        while "try: curl" not in printed:
            assert time.monotonic() < deadline and serve.poll() is None, printed
            printed += serve.stdout.readline()
        reader = Reader(cluster, tmp_path, None)
        reader.workdir = ROOT
        reader.run("webhook-dev-curl")
        answer = reader.outputs[-1]
        assert '"allowed":true' in answer and '"patchType":"JSONPatch"' in answer, answer
        # The page's curl is the one the server prints.
        (step,) = docs_sample("webhook-dev-curl")
        assert step.command in " ".join(printed.split()), printed
    finally:
        serve.terminate()
        serve.wait(timeout=20)
