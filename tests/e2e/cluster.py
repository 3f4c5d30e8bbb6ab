"""A real Kubernetes control plane on loopback, and the kubelet's part for
digest-gate's pod.

ControlPlane runs etcd, kube-apiserver and kube-controller-manager (built by
control-plane.sh from Debian's packages) on free 127.0.0.1 ports. There is no
kubelet or scheduler: Pods are admitted and stored, never run, which is all
admission needs.

WebhookPod plays the kubelet for the chart's Deployment: it reads the stored
Deployment, writes its Secret and ConfigMap volumes to disk in the kubelet's
`..data` symlink layout, and starts the container's own args, only the
listen addresses moved to loopback ports: on the debug binary, or with a
node's runtime (runtime.py) as a container of the image the Deployment
names. The apiserver reaches it through an ExternalName Service pointing at
localhost; TLS still verifies the certificate as <service>.<namespace>.svc.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import pathlib
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from support import ROOT, BackgroundServer, QuietHandler, binary, free_port, send_json  # noqa: E402 (needs the path above)
from runtime import SERVICE_ACCOUNT_DIR, Container, Runtime  # noqa: E402

# Re-exported for the tests.
__all__ = ["ROOT", "BackgroundServer", "QuietHandler", "free_port", "send_json"]

# Every wait below is bounded; these are generous for a loaded 2-core machine.
START_TIMEOUT = 90.0
WAIT_TIMEOUT = 60.0


def binaries() -> pathlib.Path:
    """The control plane's bin directory: DIGEST_GATE_E2E_BIN (set by
    `make e2e`), else whatever control-plane.sh builds or finds cached."""
    given = os.environ.get("DIGEST_GATE_E2E_BIN")
    if given:
        return pathlib.Path(given)
    out = subprocess.run(["sh", str(HERE / "control-plane.sh")], check=True, stdout=subprocess.PIPE, text=True)
    return pathlib.Path(out.stdout.strip().splitlines()[-1])


def wait_until(what: str, probe, timeout: float = WAIT_TIMEOUT, interval: float = 0.2):
    """Calls probe() until it returns something truthy; fails naming `what`."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = probe()
            if last:
                return last
        except Exception as e:  # noqa: BLE001 (a probe may fail until ready)
            last = e
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


class Process:
    """A child process with its output in a log file, stopped on close."""

    def __init__(self, name: str, argv: list[str], log: pathlib.Path, env: dict[str, str] | None = None):
        self.name = name
        self.log = log
        self.handle = open(log, "ab")
        self.proc = subprocess.Popen(argv, stdout=self.handle, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def check_alive(self):
        assert self.alive(), f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}"

    def stop(self, timeout: float = 20.0) -> int:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.handle.close()
        return self.proc.returncode


def openssl(*args: str, cwd: pathlib.Path):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def service_certificate(out: pathlib.Path, service: str, namespace: str) -> pathlib.Path:
    """A CA and a serving certificate for <service>.<namespace>.svc (and
    localhost), made by the project's own certs/gen-certs.sh."""
    subprocess.run(["sh", str(ROOT / "certs" / "gen-certs.sh"), "--service", service, "--namespace", namespace,
                    "--out", str(out), "--days", "30"], check=True, capture_output=True)
    return out


AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  # Controllers' and Helm's reads and the lease heartbeats are noise here.
  - level: None
    verbs: ["get", "list", "watch"]
  - level: None
    resources:
      - group: coordination.k8s.io
        resources: ["leases"]
      - group: ""
        resources: ["events"]
  # Request level keeps the mutating webhooks' patch annotations.
  - level: Request
"""


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager on loopback."""

    # The admin user's bearer token; the file never leaves the state dir.
    ADMIN_TOKEN = "e2e-admin-token"
    CONTROLLER_TOKEN = "e2e-controller-manager-token"

    def __init__(self, state: pathlib.Path, bin_dir: pathlib.Path):
        self.state = state
        self.bin = bin_dir
        self.processes: list[Process] = []
        self.etcd_port, self.etcd_peer_port, self.port = free_port(), free_port(), free_port()
        self.kubeconfig = state / "kubeconfig"
        self.audit_log = state / "audit.log"
        self.pki = state / "pki"

    # --- lifecycle ---------------------------------------------------------

    def start(self) -> "ControlPlane":
        self.state.mkdir(parents=True, exist_ok=True)
        self._pki()
        self._etcd()
        self._apiserver()
        self._controller_manager()
        return self

    def stop(self):
        for p in reversed(self.processes):
            p.stop()
        self.processes.clear()

    def check_alive(self):
        for p in self.processes:
            p.check_alive()

    def stop_apiserver(self):
        """Stops kube-apiserver, as a control-plane upgrade or a node reboot
        does; `start_apiserver` starts it again on the same port."""
        (old,) = [p for p in self.processes if p.name == "kube-apiserver"]
        old.stop()
        self.processes.remove(old)

    def start_apiserver(self) -> float:
        """Starts kube-apiserver again; returns `time.monotonic()` when it
        answers /readyz."""
        self._apiserver()
        return time.monotonic()

    def _pki(self):
        # The serving certificate names localhost and 127.0.0.1 (and the
        # in-cluster kubernetes.default.svc names).
        service_certificate(self.pki, "kubernetes", "default")
        openssl("genrsa", "-out", "sa.key", "2048", cwd=self.pki)
        openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=self.pki)
        # The controller-manager acts with its own identity in system:masters:
        # a test cluster's shortcut for what a real one does with one
        # ServiceAccount per controller (--use-service-account-credentials).
        (self.pki / "tokens.csv").write_text(
            f'{self.ADMIN_TOKEN},e2e-admin,e2e-admin,"system:masters"\n'
            f'{self.CONTROLLER_TOKEN},system:kube-controller-manager,e2e-cm,"system:masters"\n')
        (self.state / "audit-policy.yaml").write_text(AUDIT_POLICY)
        self._write_kubeconfig(self.kubeconfig, self.ADMIN_TOKEN)
        self._write_kubeconfig(self.state / "controller-manager.kubeconfig", self.CONTROLLER_TOKEN)

    def _write_kubeconfig(self, path: pathlib.Path, token: str):
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "e2e",
            "clusters": [{"name": "e2e", "cluster": {"server": self.url,
                                                     "certificate-authority": str(self.pki / "ca.crt")}}],
            "users": [{"name": "e2e", "user": {"token": token}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "e2e", "namespace": "default"}}],
        }
        path.write_text(json.dumps(config, indent=2))
        path.chmod(0o600)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def _spawn(self, name: str, argv: list[str]) -> Process:
        env = dict(os.environ)
        # The apiserver dials webhooks through ProxyFromEnvironment: a proxy
        # in the environment must never see loopback traffic.
        for key in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
            env.pop(key, None)
        env["NO_PROXY"] = env["no_proxy"] = "localhost,127.0.0.1,::1"
        proc = Process(name, argv, self.state / f"{name}.log", env=env)
        self.processes.append(proc)
        return proc

    def _etcd(self):
        etcd = self._spawn("etcd", [
            str(self.bin / "etcd"), "--name", "e2e", "--data-dir", str(self.state / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{self.etcd_port}",
            "--advertise-client-urls", f"http://127.0.0.1:{self.etcd_port}",
            "--listen-peer-urls", f"http://127.0.0.1:{self.etcd_peer_port}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.etcd_peer_port}",
            "--initial-cluster", f"e2e=http://127.0.0.1:{self.etcd_peer_port}",
            # A throwaway cluster: durability is not worth an fsync per write.
            "--unsafe-no-fsync",
        ])

        def healthy():
            etcd.check_alive()
            c = http.client.HTTPConnection("127.0.0.1", self.etcd_port, timeout=2)
            c.request("GET", "/health")
            return c.getresponse().status == 200
        wait_until("etcd /health", healthy, START_TIMEOUT)

    def _apiserver(self):
        pki = self.pki
        # The Service CIDR is a loopback range, so that even a ClusterIP the
        # apiserver dialled by mistake would stay on this machine.
        apiserver = self._spawn("kube-apiserver", [
            str(self.bin / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.port}",
            "--insecure-port=0",
            f"--tls-cert-file={pki / 'tls.crt'}", f"--tls-private-key-file={pki / 'tls.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--token-auth-file={pki / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-cluster-ip-range={self.service_cidr}",
            # 127.0.0.1 is not a valid Endpoints address for the kubernetes
            # Service, and nothing here needs that Service.
            "--endpoint-reconciler-type=none",
            f"--audit-policy-file={self.state / 'audit-policy.yaml'}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--profiling=false",
            "--v=1",
        ])

        def ready():
            apiserver.check_alive()
            return self._get("/readyz")[0] == 200
        wait_until("kube-apiserver /readyz", ready, START_TIMEOUT)

    service_cidr = os.environ.get("DIGEST_GATE_E2E_SERVICE_CIDR", "127.100.0.0/24")

    def _controller_manager(self):
        pki = self.pki
        self._spawn("kube-controller-manager", [
            str(self.bin / "kube-controller-manager"),
            f"--kubeconfig={self.state / 'controller-manager.kubeconfig'}",
            # What admission tests need: ServiceAccounts and their tokens (Pods
            # are refused without them), Deployments and ReplicaSets (they make
            # the Pods), namespace deletion and owner-reference cleanup.
            "--controllers=serviceaccount,serviceaccount-token,deployment,replicaset,namespace,garbagecollector",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            "--use-service-account-credentials=false",
            "--leader-elect=false",
            "--port=0", "--secure-port=0",
            "--concurrent-deployment-syncs=2", "--concurrent-replicaset-syncs=2",
            "--v=1",
        ])
        # The token controller has run once the default namespace's
        # ServiceAccount has its token Secret.
        wait_until("the default ServiceAccount's token", lambda: self.service_account_ready("default"),
                   START_TIMEOUT)

    def _get(self, path: str) -> tuple[int, bytes]:
        return self.request("GET", path)

    def request(self, method: str, path: str, body: dict | None = None,
                content_type: str = "application/json") -> tuple[int, bytes]:
        """One request as the admin, for what kubectl 1.20 cannot send (a
        status subresource patch)."""
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        c = http.client.HTTPSConnection("127.0.0.1", self.port, context=ctx, timeout=5)
        headers = {"Authorization": f"Bearer {self.ADMIN_TOKEN}"}
        if body is not None:
            headers["Content-Type"] = content_type
        c.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
        r = c.getresponse()
        return r.status, r.read()

    # --- kubectl -------------------------------------------------------------

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 60.0) -> subprocess.CompletedProcess:
        argv = [str(self.bin / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args]
        result = subprocess.run(argv, input=input, text=True, capture_output=True, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}):\n"
                                 f"{result.stdout}\n{result.stderr}")
        return result

    def get(self, kind: str, name: str | None = None, namespace: str | None = None) -> dict | None:
        """An object as JSON, or None when it does not exist."""
        args = ["get", kind] + ([name] if name else []) + ["-o", "json"]
        if namespace:
            args += ["-n", namespace]
        r = self.kubectl(*args, check=False)
        if r.returncode != 0:
            if "NotFound" in r.stderr or "not found" in r.stderr:
                return None
            raise AssertionError(f"kubectl {' '.join(args)}: {r.stderr}")
        return json.loads(r.stdout)

    def apply(self, manifest: dict | str, *extra: str, namespace: str | None = None,
              check: bool = True) -> subprocess.CompletedProcess:
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        args = ["apply", "-f", "-", *extra]
        if namespace:
            args += ["-n", namespace]
        return self.kubectl(*args, input=text, check=check)

    def service_account_ready(self, namespace: str) -> bool:
        sa = self.get("serviceaccount", "default", namespace)
        return bool(sa and sa.get("secrets"))

    def namespace(self, name: str, labels: dict[str, str] | None = None):
        """Creates (or relabels) a namespace and waits until Pods can be
        created in it. Kubernetes 1.20 sets no kubernetes.io/metadata.name
        label, so it is set here by hand, as the chart's docs tell 1.20
        users to do."""
        all_labels = {"kubernetes.io/metadata.name": name, **(labels or {})}
        self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": all_labels}})
        wait_until(f"namespace {name}'s ServiceAccount token", lambda: self.service_account_ready(name))

    def delete_namespace(self, name: str):
        self.kubectl("delete", "namespace", name, "--ignore-not-found", "--wait=false")

    # --- audit log -----------------------------------------------------------

    def audit_events(self, predicate=None) -> list[dict]:
        events = []
        if not self.audit_log.exists():
            return events
        for line in self.audit_log.read_text().splitlines():
            if not line.strip():
                continue
            event = json.loads(line)
            if predicate is None or predicate(event):
                events.append(event)
        return events


def admin_get(port: int, path: str) -> tuple[int, str]:
    """A GET on a digest-gate admin port: the status and the body."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", path)
    r = c.getresponse()
    return r.status, r.read().decode()


def admin_metric(port: int, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include `labels`, as the
    admin port at `port` exposes them."""
    status, text = admin_get(port, "/metrics")
    assert status == 200
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        series, _, value = line.rpartition(" ")
        metric, _, rest = series.partition("{")
        if metric != name:
            continue
        pairs = dict(p.split("=", 1) for p in rest.rstrip("}").split(",") if "=" in p)
        pairs = {k: v.strip('"') for k, v in pairs.items()}
        if all(pairs.get(k) == v for k, v in labels.items()):
            total += float(value)
    return total


def serve_dev(cluster: ControlPlane, state: pathlib.Path, *args: str, name: str = "digest-gate",
              kubeconfig: str | None = None, program: pathlib.Path | None = None) -> tuple[Process, int]:
    """`digest-gate serve --dev` (JSON logs, in `state`) against `cluster`, on
    loopback ports, as the process `name` (also its POD_NAME, the identity
    of an audit Lease); the process and its admin port."""
    port, admin = free_port(), free_port()
    state.mkdir(parents=True, exist_ok=True)
    serve = Process(name, [
        str(program or binary()), "serve", "--dev", "--dev-dir", str(state / "dev"),
        "--kubeconfig", kubeconfig or str(cluster.kubeconfig),
        "--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{admin}", "--log-format", "json", *args],
        state / "serve.log", env={**os.environ, "POD_NAME": name})
    # The webhook's port and CA, for a test that reviews through it directly.
    serve.port, serve.ca = port, state / "dev" / "ca.crt"
    return serve, admin


class WebhookPod:
    """Runs the chart's digest-gate container as a kubelet would, on loopback."""

    def __init__(self, cluster: ControlPlane, namespace: str, deployment: str, state: pathlib.Path, port: int,
                 runtime: Runtime | None = None):
        self.cluster = cluster
        # None: the host binary; else the node's runtime, which runs the
        # image the Deployment names (runtime.Runtime).
        self.runtime = runtime
        self.image: pathlib.Path | None = None
        self._spec: dict = {}
        self.namespace = namespace
        self.deployment = deployment
        self.state = state
        self.port = port
        self.admin_port = free_port()
        self.process: Process | None = None
        # The digest-gate build the pod runs: this checkout's unless a test
        # plays an older release (harness.previous_build).
        self.binary: pathlib.Path | None = None
        self.args: list[str] = []
        self.env: dict[str, str] = {}
        # The mounted volumes by name, as the Deployment declares them.
        self.volumes: dict[str, dict] = {}

    def _volume_files(self, volume: dict) -> dict[str, bytes]:
        """The files of a Secret or ConfigMap volume. One marked optional
        that does not exist is an empty directory, as the kubelet mounts it;
        any other missing one would keep the pod from starting."""
        if "secret" in volume:
            secret = self.cluster.get("secret", volume["secret"]["secretName"], self.namespace)
            if not secret and volume["secret"].get("optional"):
                return {}
            assert secret, f"Secret {volume['secret']['secretName']} is missing"
            return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
        if "configMap" in volume:
            cm = self.cluster.get("configmap", volume["configMap"]["name"], self.namespace)
            if not cm and volume["configMap"].get("optional"):
                return {}
            assert cm, f"ConfigMap {volume['configMap']['name']} is missing"
            return {k: v.encode() for k, v in (cm.get("data") or {}).items()}
        raise AssertionError(f"volume kind not emulated: {volume}")

    def _empty_dir(self, name: str) -> pathlib.Path:
        """An emptyDir: a directory that lives as long as the pod (across
        restarts of its container)."""
        path = self.state / "volumes" / name
        path.mkdir(parents=True, exist_ok=True)
        # World-writable, as the kubelet makes an emptyDir: the container's
        # user (65532) must be able to write it.
        path.chmod(0o777)
        return path

    def _mount(self, directory: pathlib.Path, files: dict[str, bytes]):
        """The kubelet's atomic writer, for the first write and every update:
        the content in a new timestamped directory, `..data` pointed at it in
        one rename (the swap digest-gate's reload watches for), one symlink
        per key through `..data`, and the previous content removed."""
        stamp = directory / f"..{time.time_ns()}"
        stamp.mkdir(parents=True)
        for key, data in files.items():
            (stamp / key).write_bytes(data)
        data = directory / "..data"
        old = os.readlink(data) if data.is_symlink() else None
        (directory / "..data_tmp").symlink_to(stamp.name)
        os.rename(directory / "..data_tmp", data)
        for entry in directory.iterdir():
            if not entry.name.startswith("..") and entry.name not in files:
                entry.unlink()
        for key in files:
            if not (directory / key).is_symlink():
                (directory / key).symlink_to(f"..data/{key}")
        if old:
            shutil.rmtree(directory / old)

    def sync_volumes(self):
        """What the kubelet does when a mounted ConfigMap or Secret changed."""
        for name, volume in self.volumes.items():
            self._mount(self.state / "volumes" / name, self._volume_files(volume))

    def start(self, timeout: float = WAIT_TIMEOUT, *, ready: bool = True) -> "WebhookPod":
        """Starts the container, and unless `ready` is False waits for /readyz."""
        deployment = self.cluster.get("deployment", self.deployment, self.namespace)
        assert deployment, f"Deployment {self.namespace}/{self.deployment} is missing"
        pod = deployment["spec"]["template"]["spec"]
        container = pod["containers"][0]
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        # mountPath → (the directory on this machine, read-only).
        mounts: dict[str, tuple[pathlib.Path, bool]] = {}
        self.volumes = {}
        if self.state.exists():
            shutil.rmtree(self.state)
        for m in container.get("volumeMounts", []):
            volume = volumes[m["name"]]
            if "emptyDir" in volume:
                mounts[m["mountPath"]] = (self._empty_dir(m["name"]), bool(m.get("readOnly")))
                continue
            local = self.state / "volumes" / m["name"]
            self._mount(local, self._volume_files(volume))
            mounts[m["mountPath"]] = (local, bool(m.get("readOnly")))
            self.volumes[m["name"]] = volume

        chart_args = []
        for arg in container.get("args", []):
            flag, eq, value = arg.partition("=")
            if flag == "--listen":
                value = f"127.0.0.1:{self.port}"
            elif flag == "--admin-listen":
                value = f"127.0.0.1:{self.admin_port}"
            chart_args.append(flag + eq + value if eq else arg)
        chart_env = {}
        for var in container.get("env", []):
            if "value" in var:
                chart_env[var["name"]] = var["value"]
            elif var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name":
                chart_env[var["name"]] = self.pod_name
            else:
                raise AssertionError(f"env source not emulated: {var}")
        if self.runtime is not None:
            return self._in_container(pod, container, chart_args, chart_env, mounts, timeout, ready)

        def local_path(value: str) -> str:
            for mount, (local, _) in mounts.items():
                if value == mount or value.startswith(mount + "/"):
                    return str(local) + value[len(mount):]
            return value

        self.args = [a.partition("=")[0] + "=" + local_path(a.partition("=")[2]) if "=" in a else a
                     for a in chart_args]
        env = container_env()
        env.update(chart_env)
        if pod.get("automountServiceAccountToken"):
            env["KUBECONFIG"] = str(self._service_account_kubeconfig(pod["serviceAccountName"]))
        self.env = env
        return self._run(timeout, ready)

    def _in_container(self, pod: dict, container: dict, args: list[str], env: dict[str, str],
                      mounts: dict[str, tuple[pathlib.Path, bool]], timeout: float, ready: bool) -> "WebhookPod":
        """The container as a node runs it: the image pulled by the reference
        the pod names, the kubelet's files and the service account's token
        mounted where a pod has them, in-cluster config from the kubelet's
        KUBERNETES_SERVICE_* variables."""
        secrets = [self.cluster.get("secret", s["name"], self.namespace) for s in pod.get("imagePullSecrets", [])]
        assert all(secrets), f"an imagePullSecret of {pod.get('imagePullSecrets')} is missing"
        self.image = self.runtime.pull(container["image"], secrets)
        kubelet = self.state / "kubelet"
        kubelet.mkdir(parents=True)
        for name, text in (("hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"),
                           ("hostname", self.pod_name + "\n"), ("resolv.conf", "nameserver 127.0.0.1\n"),
                           ("termination-log", "")):
            (kubelet / name).write_text(text)
        mounts = dict(mounts)
        for name, path in (("hosts", "/etc/hosts"), ("hostname", "/etc/hostname"), ("resolv.conf", "/etc/resolv.conf"),
                           ("termination-log", "/dev/termination-log")):
            mounts[path] = (kubelet / name, False)
        env = {**env, "HOSTNAME": self.pod_name}
        if pod.get("automountServiceAccountToken"):
            token = service_account_secret(self.cluster, self.namespace, pod["serviceAccountName"])
            local = self.state / "volumes" / "kube-api-access"
            self._mount(local, {k: base64.b64decode(v) for k, v in token["data"].items()})
            mounts[SERVICE_ACCOUNT_DIR] = (local, True)
            # What the kubelet sets for the kubernetes Service, here the
            # apiserver on loopback (its certificate names 127.0.0.1).
            env.update(KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=str(self.cluster.port))
        self.args = args
        self.env = env
        self._spec = {"pod": pod, "container": container, "args": args, "env": env, "mounts": mounts,
                      "hostname": self.pod_name}
        return self._run(timeout, ready)

    def restart_container(self, timeout: float = WAIT_TIMEOUT, *, ready: bool = True) -> "WebhookPod":
        """The kubelet restarting the container in the same pod (a crash, an
        OOM kill, a liveness failure): the same arguments, the mounted
        ConfigMaps and Secrets as they are now, and the emptyDirs as the
        last run left them."""
        self.stop()
        self.sync_volumes()
        return self._run(timeout, ready)

    def _run(self, timeout: float, ready: bool) -> "WebhookPod":
        if self.runtime is not None:
            self.process = Container("digest-gate", self.image, self.state.parent / f"{self.state.name}.bundle",
                                     self.log_path, self._spec)
        else:
            self.process = Process("digest-gate", [str(self.binary or binary()), *self.args], self.log_path,
                                   env=self.env)

        def is_ready():
            self.process.check_alive()
            return self.admin("/readyz")[0] == 200
        if ready:
            wait_until("digest-gate /readyz", is_ready, timeout)
        else:
            wait_until("digest-gate's admin port", lambda: self.admin("/healthz")[0] == 200, timeout)
        return self

    @property
    def pod_name(self) -> str:
        return f"{self.deployment}-emulated-{self.port}"

    def _service_account_kubeconfig(self, account: str) -> pathlib.Path:
        return service_account_kubeconfig(self.cluster, self.namespace, account,
                                          self.state / "serviceaccount.kubeconfig")

    def arg(self, flag: str) -> str | None:
        for a in self.args:
            if a.startswith(flag + "="):
                return a.split("=", 1)[1]
        return None

    def admin(self, path: str) -> tuple[int, str]:
        return admin_get(self.admin_port, path)

    def metric(self, name: str, **labels: str) -> float:
        """The sum of a metric's samples whose labels include `labels`."""
        return admin_metric(self.admin_port, name, **labels)

    def stop(self) -> int | None:
        if self.process is None:
            return None
        code = self.process.stop()
        self.process = None
        return code

    @property
    def log_path(self) -> pathlib.Path:
        # Beside the volumes, not in them: start() clears the state directory.
        return self.state.parent / f"{self.state.name}.log"


def container_env() -> dict[str, str]:
    """The environment a played container starts from: this one without the
    caller's digest-gate settings and kubeconfig, and no proxy for loopback."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGEST_GATE_") and k != "KUBECONFIG"}
    env["NO_PROXY"] = "127.0.0.1,localhost"
    return env


def service_account_secret(cluster: ControlPlane, namespace: str, account: str) -> dict:
    """The account's token Secret (made by the token controller): what 1.20's
    kubelet mounts for a pod (ca.crt, namespace, token)."""
    def token():
        sa = cluster.get("serviceaccount", account, namespace)
        return sa and sa.get("secrets") and sa["secrets"][0]["name"]
    return cluster.get("secret", wait_until(f"ServiceAccount {account}'s token", token), namespace)


def service_account_kubeconfig(cluster: ControlPlane, namespace: str, account: str,
                               path: pathlib.Path) -> pathlib.Path:
    """What the kubelet mounts for a pod's service account, as a kubeconfig:
    1.20 mounts the account's token Secret (made by the token controller),
    and in-cluster config reads a fixed path a process here cannot use, so
    the same token, CA and namespace go in a kubeconfig (a container gets
    the files themselves, runtime.Container)."""
    secret = service_account_secret(cluster, namespace, account)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "pod",
        "clusters": [{"name": "pod", "cluster": {"server": cluster.url,
                                                  "certificate-authority": str(cluster.pki / "ca.crt")}}],
        "users": [{"name": "pod", "user": {"token": base64.b64decode(secret["data"]["token"]).decode()}}],
        "contexts": [{"name": "pod", "context": {"cluster": "pod", "user": "pod", "namespace": namespace}}],
    }))
    return path


class HookJobs:
    """Plays the Job controller and the kubelet for Helm's hook Jobs while a
    Helm action runs (`with HookJobs(...)`): each Job that appears in
    `namespace` has its container's args run by the debug binary, on its
    service account's token, and is then marked Complete or Failed as the
    Job controller would, which is what Helm waits for. `runs` records each:
    (Job name, args, exit code, output)."""

    def __init__(self, cluster: ControlPlane, namespace: str, state: pathlib.Path):
        self.cluster = cluster
        self.namespace = namespace
        self.state = state
        self.runs: list[tuple[str, list[str], int, str]] = []
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> "HookJobs":
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=90)
        if self._error is not None and exc[0] is None:
            raise self._error

    def _watch(self):
        seen: set[str] = set()
        try:
            while not self._stop.wait(0.2):
                for job in (self.cluster.get("jobs", namespace=self.namespace) or {}).get("items", []):
                    uid = job["metadata"]["uid"]
                    if uid not in seen:
                        seen.add(uid)
                        self._run(job)
        except BaseException as e:  # noqa: BLE001 (reported on exit)
            self._error = e

    def _run(self, job: dict):
        name = job["metadata"]["name"]
        pod = job["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        env = container_env()
        env["KUBECONFIG"] = str(service_account_kubeconfig(self.cluster, self.namespace, pod["serviceAccountName"],
                                                           self.state / name / "kubeconfig"))
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        run = subprocess.run([str(binary()), *container.get("args", [])], env=env, capture_output=True,
                             text=True, timeout=60)
        self.runs.append((name, container.get("args", []), run.returncode, run.stdout + run.stderr))
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if run.returncode == 0:
            status = {"conditions": [{"type": "Complete", "status": "True", "lastProbeTime": now,
                                      "lastTransitionTime": now}],
                      "startTime": started, "completionTime": now, "succeeded": 1}
        else:
            status = {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                                      "lastProbeTime": now, "lastTransitionTime": now}],
                      "startTime": started, "failed": 1}
        code, body = self.cluster.request("PATCH", f"/apis/batch/v1/namespaces/{self.namespace}/jobs/{name}/status",
                                          {"status": status}, "application/merge-patch+json")
        assert code == 200, (code, body[:300])


def external_name_service(name: str, namespace: str, port: int) -> dict:
    """Routes the apiserver's webhook calls for <name>.<namespace>.svc to the
    loopback binary: the ClusterIP resolver turns ExternalName into
    https://localhost:<port>, and TLS still verifies the service name."""
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": {"e2e.digest-gate.dev/loopback": "true"}},
        "spec": {"type": "ExternalName", "externalName": "localhost",
                 "ports": [{"name": "webhook", "port": port, "protocol": "TCP"}]},
    }


def main() -> int:
    """`python tests/e2e/cluster.py [DIR]`: the suite's control plane by hand,
    for poking at a failure. Prints the kubeconfig and runs until Ctrl-C."""
    import argparse
    import tempfile
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("state", nargs="?", help="state directory (default: a new temporary one)")
    state = pathlib.Path(parser.parse_args().state or tempfile.mkdtemp(prefix="digest-gate-e2e-"))
    cp = ControlPlane(state, binaries())
    try:
        cp.start()
        print(f"export KUBECONFIG={cp.kubeconfig}\nkubectl is {cp.bin / 'kubectl'}\n"
              f"logs and the audit log are in {state}; Ctrl-C stops it", flush=True)
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        cp.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
