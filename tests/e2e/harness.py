"""What the e2e tests share: the incident's images, the chart's names, and a
digest-gate release installed with real Helm (helm-python-sdk)."""

from __future__ import annotations

import copy
import os
import pathlib
import shutil
import subprocess
from dataclasses import dataclass

import helm_python as helm
import yaml

from cluster import ROOT, ControlPlane, HookJobs, WebhookPod, external_name_service, free_port
from runtime import Runtime

CHART = ROOT / "charts" / "digest-gate"
FIXTURES = ROOT / "tests" / "fixtures" / "upstream"
RELEASE = "dg"
RELEASE_NAMESPACE = "digest-gate"
FULLNAME = f"{RELEASE}-digest-gate"
MODEL_LABEL = {"modelmesh-enabled": "true"}

# The incident's digests (examples/allowlist.yaml promotes the second).
INCIDENT_IMAGE = ("registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8@sha256:"
                  "7ef272bc7be866257b8126620e139d6e915ee962304d3eceba9c9d50d4e79767")
PROMOTED_IMAGE = ("registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8@sha256:"
                  "8af20e48bb480a7ba1ee1268a3cf0a507e05b256c5fcf988f8e4a3de8b87edc6")
PROMOTED_TAG = "registry.redhat.io/rhods/odh-openvino-servingruntime-rhel8:v1.21.0-15"
PROMOTED_DIGEST = PROMOTED_IMAGE.split("@")[1]


def load_yaml(path: pathlib.Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


INCIDENT_SR = ROOT / "examples" / "manifests" / "incident-servingruntime.yaml"


def incident_runtime(namespace: str) -> dict:
    (sr,) = load_yaml(INCIDENT_SR)
    sr["metadata"]["namespace"] = namespace
    assert sr["spec"]["containers"][0]["image"] == INCIDENT_IMAGE
    return sr


def edited(configmap: dict, text: str) -> dict:
    """The chart's allowlist ConfigMap with `source.yaml` replaced, as a
    person would `kubectl apply` it."""
    out = copy.deepcopy(configmap)
    out["metadata"] = {k: v for k, v in out["metadata"].items()
                       if k in ("name", "namespace", "labels", "annotations")}
    out["data"]["source.yaml"] = text
    return out


def warnings(stderr: str) -> list[str]:
    """What kubectl printed as warnings (the apiserver's Warning headers)."""
    return [line[len("Warning: "):] for line in stderr.splitlines() if line.startswith("Warning: ")]


def permissive_crd(kind: str, plural: str, scope: str, versions: tuple[str, ...],
                   group: str = "serving.kserve.io") -> dict:
    """A CRD that accepts any spec, its last version stored: KServe's full
    CRDs do not validate on 1.20 (`default: null`, newer schema features),
    and the group/version/kind is what the webhook and the audit see."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group, "scope": scope,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "versions": [{"name": v, "served": True, "storage": v == versions[-1],
                          "schema": {"openAPIV3Schema": {"type": "object",
                                                         "x-kubernetes-preserve-unknown-fields": True}}}
                         for v in versions],
        },
    }


# ModelMesh ships no ClusterServingRuntime CRD; the KServe LLM kinds serve
# v1alpha1 and v1alpha2 and store v1alpha2, as their CRDs do.
PERMISSIVE_CRDS = [
    permissive_crd("ClusterServingRuntime", "clusterservingruntimes", "Cluster", ("v1alpha1",)),
    permissive_crd("LLMInferenceService", "llminferenceservices", "Namespaced", ("v1alpha1", "v1alpha2")),
    permissive_crd("LLMInferenceServiceConfig", "llminferenceserviceconfigs", "Namespaced", ("v1alpha1", "v1alpha2")),
    permissive_crd("ClusterStorageContainer", "clusterstoragecontainers", "Cluster", ("v1alpha1",)),
    # OLM's, for the installed operators' CSVs as an allowlist source.
    permissive_crd("ClusterServiceVersion", "clusterserviceversions", "Namespaced", ("v1alpha1",),
                   group="operators.coreos.com"),
]


def serve_csvs(cluster, namespace: str):
    """OLM's CSV kind (the permissive CRD) served by a control plane of a
    test's or a benchmark's own, and the operator namespace `namespace`."""
    (crd,) = [c for c in PERMISSIVE_CRDS if c["spec"]["group"] == "operators.coreos.com"]
    cluster.apply(crd)
    cluster.kubectl("wait", "--for=condition=Established", f"crd/{crd['metadata']['name']}", "--timeout=60s")
    cluster.namespace(namespace)


def install_csv(cluster, namespace: str, path: pathlib.Path):
    """The ClusterServiceVersion in `path`, installed in `namespace`."""
    (csv,) = load_yaml(path)
    csv["metadata"]["namespace"] = namespace
    cluster.apply(csv)


def deep_merge(base: dict, extra: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


@dataclass(frozen=True)
class WebhookImage:
    """digest-gate's own image as a registry serves it, and the node that
    pulls and runs it (conftest's `webhook_image`)."""
    repository: str
    digest: str
    pull_secret: dict
    runtime: Runtime

    def values(self) -> dict:
        return {"image": {"repository": self.repository, "digest": self.digest},
                "imagePullSecrets": [{"name": self.pull_secret["metadata"]["name"]}]}


class Release:
    """digest-gate installed by Helm, its pod played on loopback: the debug
    binary, or with `image` the chart's image run as a container.

    The chart's ClusterIP Service is swapped for an ExternalName Service of the
    same name after every install/upgrade/rollback (service.port is the
    loopback port, so the webhook configurations name it), and swapped back
    out before the next Helm action: the Service Helm applies would otherwise
    conflict on .spec.type."""

    def __init__(self, cluster: ControlPlane, state: pathlib.Path, image: WebhookImage | None = None,
                 name: str = RELEASE):
        self.cluster = cluster
        self.state = state
        self.port = free_port()
        self.image = image
        self.name = name
        # The chart's fullname: the release name alone when it holds the chart's.
        self.fullname = name if "digest-gate" in name else f"{name}-digest-gate"
        self.helm = helm.Config(kubeconfig_path=str(cluster.kubeconfig), namespace=RELEASE_NAMESPACE)
        self.pod = WebhookPod(cluster, RELEASE_NAMESPACE, self.fullname, state / "pod", self.port,
                              runtime=image.runtime if image else None)
        self.installed = False
        # What the last uninstall's hook Jobs ran: (name, args, exit code, output).
        self.hook_runs: list[tuple[str, list[str], int, str]] = []

    def values(self, extra: dict | None = None) -> dict:
        base = {
            "mode": "rewrite",
            "service": {"port": self.port},
            "allowlist": {"text": (ROOT / "examples" / "allowlist.yaml").read_text()},
            # A stop of the loopback pod should not wait out a real pod's
            # endpoint-removal delay.
            "server": {"drainDelay": "0s", "gracePeriod": "5s"},
        }
        if self.image:
            # Pinned by digest, pulled with the pull secret, as docs/install.md
            # tells users to install their own build.
            base = deep_merge(base, self.image.values())
        return deep_merge(base, extra or {})

    def _loopback(self):
        self.cluster.kubectl("-n", RELEASE_NAMESPACE, "delete", "service", self.fullname, "--ignore-not-found")
        self.cluster.apply(external_name_service(self.fullname, RELEASE_NAMESPACE, self.port))

    def _unloop(self):
        self.pod.stop()
        self.cluster.kubectl("-n", RELEASE_NAMESPACE, "delete", "service", self.fullname, "--ignore-not-found")

    def _started(self):
        self._loopback()
        self.pod.start()

    def _pull_secret(self):
        if self.image:
            self.cluster.apply(self.image.pull_secret)

    def install(self, values: dict | None = None, *, chart: pathlib.Path = CHART, raw: bool = False) -> dict:
        self._pull_secret()
        rel = self.helm.install(helm.Chart.load(str(chart)), self.name, values if raw else self.values(values),
                                namespace=RELEASE_NAMESPACE, timeout=120)
        self.installed = True
        self._started()
        return rel

    def upgrade(self, values: dict | None = None, *, chart: pathlib.Path = CHART, raw: bool = False,
                reuse_values: bool = False) -> dict:
        self._unloop()
        rel = self.helm.upgrade(helm.Chart.load(str(chart)), self.name, values if raw else self.values(values),
                                reuse_values=reuse_values,
                                namespace=RELEASE_NAMESPACE, timeout=120)
        self._started()
        return rel

    def rollback(self, version: int | None = None):
        self._unloop()
        self.helm.rollback(self.name, version=version, timeout=120)
        self._started()

    def uninstall(self):
        self._unloop()
        # The chart's pre-delete hook (with audit.enabled) is a Job: played
        # here, as the pod is.
        with HookJobs(self.cluster, RELEASE_NAMESPACE, self.state / "hooks") as hooks:
            self.helm.uninstall(self.name, timeout=120)
        self.hook_runs = hooks.runs
        self.installed = False

    def webhook_configurations(self) -> list[dict]:
        found = []
        for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            listing = self.cluster.get(kind)
            found += [o for o in listing["items"]
                      if o["metadata"].get("labels", {}).get("app.kubernetes.io/instance") == self.name]
        return found

    def ca_bundles(self) -> dict[str, str]:
        return {f"{o['kind']}/{w['name']}": w["clientConfig"]["caBundle"]
                for o in self.webhook_configurations() for w in o["webhooks"]}


def previous_build(commit: str) -> pathlib.Path:
    """digest-gate as built at `commit` (the binary alone, debug), from git
    history, cached by commit beside the control plane (a fresh machine
    builds it once, in about 2-3 minutes on 2 cores). Only the binary is
    kept: the build tree would hold 1.6 GB of a machine's disk."""
    cache = pathlib.Path(os.environ.get("DIGEST_GATE_E2E_CACHE",
                                        pathlib.Path.home() / ".cache" / "digest-gate-e2e")) / f"digest-gate-{commit}"
    kept = cache / "digest-gate"
    if kept.exists():
        return kept
    shutil.rmtree(cache, ignore_errors=True)
    source = cache / "source"
    source.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", commit], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive, check=True)
    try:
        subprocess.run(["cargo", "build", "--locked", "--quiet", "--bin", "digest-gate"], cwd=source, check=True,
                       env={**os.environ, "CARGO_TARGET_DIR": str(cache / "target"), "CARGO_INCREMENTAL": "0",
                            "CARGO_PROFILE_DEV_DEBUG": "false"})
        # Copied under a temporary name and renamed, so an interrupted
        # build never leaves a half-written binary that looks cached.
        shutil.copy2(cache / "target" / "debug" / "digest-gate", cache / "digest-gate.partial")
        (cache / "digest-gate.partial").rename(kept)
    finally:
        shutil.rmtree(cache / "target", ignore_errors=True)
        shutil.rmtree(source, ignore_errors=True)
    return kept


def previous_chart(version: str, into: pathlib.Path) -> pathlib.Path:
    """The chart as released at `version`, from git history: the last commit
    whose Chart.yaml says that version — the parent of the commit that moved
    it on, not the commit that first set it (the work of a release lands
    after its version bump)."""
    log = subprocess.run(["git", "log", "--first-parent", "--format=%H", "--", "charts/digest-gate/Chart.yaml"],
                         cwd=ROOT, check=True, capture_output=True, text=True).stdout.split()
    moved_on = None
    for commit in log:
        text = subprocess.run(["git", "show", f"{commit}:charts/digest-gate/Chart.yaml"], cwd=ROOT,
                              check=True, capture_output=True, text=True).stdout
        if yaml.safe_load(text).get("version") == version:
            released = f"{moved_on}^" if moved_on else "HEAD"
            archive = subprocess.run(["git", "archive", released, "charts/digest-gate"], cwd=ROOT, check=True,
                                     capture_output=True).stdout
            into.mkdir(parents=True, exist_ok=True)
            subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
            return into / "charts" / "digest-gate"
        moved_on = commit
    raise AssertionError(f"no commit in this clone's history has chart version {version} (shallow clone?)")
