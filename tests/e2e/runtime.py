"""The node's part for digest-gate's own image: pull it as the kubelet would,
run it as a container runtime would.

`Runtime.pull` fetches the reference the pod spec names (the chart renders
`repository@sha256:…`) with Debian's skopeo, using the pod's
imagePullSecrets and the registry CA the node trusts, once per digest (as
imagePullPolicy IfNotPresent). `Container` unpacks it into an OCI runtime
bundle with Debian's umoci and runs it with Debian's runc under the pod's
securityContext translated into the runtime config the way containerd and
CRI-O translate it: the image's user (runAsNonRoot refused for uid 0), a
read-only root, the capability set after `drop`/`add`, no new privileges,
RuntimeDefault seccomp (the containers-common profile CRI-O uses, which
skopeo's package installs), the resources as cgroup limits, each volume a
bind mount (read-only where the pod says so), the service account's token
where in-cluster config looks for it, and the kubelet's /etc/hosts,
/etc/hostname, /etc/resolv.conf and /dev/termination-log.

One difference from a node, the same as for the host binary: the container
shares the host's network namespace (no CNI here), so the listen addresses
move to loopback ports. `crun` does not work on this host's cgroup layout;
runc does.
"""

from __future__ import annotations

import base64
import json
import os
import pathlib
import platform
import re
import resource
import shutil
import subprocess
import time

# containerd's and CRI-O's default capability set, before the pod's drop/add.
DEFAULT_CAPABILITIES = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
                        "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
                        "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"]
SECCOMP_PROFILE = pathlib.Path(os.environ.get("DIGEST_GATE_SECCOMP_PROFILE", "/usr/share/containers/seccomp.json"))
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


class ContainerError(AssertionError):
    """The container could not be made or started; the message says why."""


def tool(name: str) -> str:
    found = shutil.which(name) or (f"/usr/sbin/{name}" if os.path.exists(f"/usr/sbin/{name}") else None)
    if not found:
        raise ContainerError(f"{name} is not installed: run `make container-tools` (make e2e does)")
    return found


def sh(argv: list[str], what: str, **kwargs) -> subprocess.CompletedProcess:
    run = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    if run.returncode != 0:
        raise ContainerError(f"{what} failed ({run.returncode}): {' '.join(argv)}\n{run.stdout}{run.stderr}")
    return run


# --- quantities -------------------------------------------------------------------

SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def quantity(text: str | int | float) -> float:
    """A Kubernetes resource quantity as a number (bytes, or cores)."""
    text = str(text)
    m = re.fullmatch(r"([0-9.]+)(m|Ki|Mi|Gi|Ti|k|M|G|T)?", text)
    if not m:
        raise ContainerError(f"resource quantity {text!r} is not one this runtime reads")
    value, suffix = float(m.group(1)), m.group(2)
    if suffix == "m":
        return value / 1000
    return value * SUFFIXES.get(suffix or "", 1)


# --- pulling ----------------------------------------------------------------------------

class Runtime:
    """Pulls images once per digest into `cache` and makes containers."""

    def __init__(self, cache: pathlib.Path, cert_dir: pathlib.Path):
        self.cache = cache
        # The registry CAs this node trusts (skopeo's --src-cert-dir; a
        # containerd node has them in certs.d/<host>/).
        self.cert_dir = cert_dir
        self.pulled: dict[str, pathlib.Path] = {}
        self.pulls = 0

    def pull(self, reference: str, pull_secrets: list[dict]) -> pathlib.Path:
        """The image `reference` names, as an OCI layout (tag `image`)."""
        if "@sha256:" not in reference:
            raise ContainerError(f"{reference} is not pinned by digest: the chart renders repository@digest "
                                 "when image.digest is set")
        if reference in self.pulled:
            return self.pulled[reference]
        digest = reference.split("@", 1)[1]
        layout = self.cache / digest.split(":", 1)[1]
        shutil.rmtree(layout, ignore_errors=True)
        self.cache.mkdir(parents=True, exist_ok=True)
        authfile = self.cache / f"{digest[7:19]}-auth.json"
        auths: dict = {}
        for secret in pull_secrets:
            auths.update(json.loads(base64.b64decode(secret["data"][".dockerconfigjson"]))["auths"])
        authfile.write_text(json.dumps({"auths": auths}))
        authfile.chmod(0o600)
        sh([tool("skopeo"), "copy", "--quiet", "--src-authfile", str(authfile), "--src-cert-dir", str(self.cert_dir),
            f"docker://{reference}", f"oci:{layout}:image"], f"pulling {reference}", timeout=120)
        (entry,) = json.loads((layout / "index.json").read_text())["manifests"]
        # skopeo checks the manifest against the digest it asked for; this
        # says so here, where a reader of the test looks.
        if entry["digest"] != digest:
            raise ContainerError(f"pulled {reference} and got {entry['digest']}")
        self.pulled[reference] = layout
        self.pulls += 1
        return layout


def image_config(layout: pathlib.Path) -> dict:
    (entry,) = json.loads((layout / "index.json").read_text())["manifests"]
    blob = layout / "blobs" / "sha256"
    manifest = json.loads((blob / entry["digest"].split(":")[1]).read_text())
    return json.loads((blob / manifest["config"]["digest"].split(":")[1]).read_text())


# --- the runtime config ---------------------------------------------------------------

def seccomp_runtime_default(capabilities: list[str]) -> dict:
    """The containers-common profile as an OCI runtime spec seccomp section,
    for this machine's architecture and the container's capabilities."""
    profile = json.loads(SECCOMP_PROFILE.read_text())
    # The profile names architectures as Go does.
    arch, goarch = {"x86_64": ("SCMP_ARCH_X86_64", "amd64"), "aarch64": ("SCMP_ARCH_AARCH64", "arm64")}[
        platform.machine()]
    (native,) = [a for a in profile["archMap"] if a["architecture"] == arch]
    kernel = tuple(int(x) for x in re.findall(r"\d+", platform.release())[:2])
    syscalls = []
    for rule in profile["syscalls"]:
        inc, exc = rule.get("includes") or {}, rule.get("excludes") or {}
        if inc.get("caps") and not set(inc["caps"]) <= set(capabilities):
            continue
        if exc.get("caps") and set(exc["caps"]) & set(capabilities):
            continue
        if inc.get("arches") and goarch not in inc["arches"]:
            continue
        if goarch in (exc.get("arches") or []):
            continue
        if inc.get("minKernel") and kernel < tuple(int(x) for x in inc["minKernel"].split(".")[:2]):
            continue
        entry = {"names": rule["names"], "action": rule["action"]}
        if rule.get("args"):
            entry["args"] = [{k: a[k] for k in ("index", "value", "valueTwo", "op")} for a in rule["args"]]
        if "errnoRet" in rule:
            entry["errnoRet"] = rule["errnoRet"]
        syscalls.append(entry)
    out = {"defaultAction": profile["defaultAction"], "architectures": [arch, *native["subArchitectures"]],
           "syscalls": syscalls}
    if "defaultErrnoRet" in profile:
        out["defaultErrnoRet"] = profile["defaultErrnoRet"]
    return out


def capabilities(security: dict) -> list[str]:
    caps = security.get("capabilities") or {}
    drop = {f"CAP_{c}" for c in caps.get("drop") or []}
    kept = [] if "CAP_ALL" in drop else [c for c in DEFAULT_CAPABILITIES if c not in drop]
    return kept + [f"CAP_{c}" for c in caps.get("add") or [] if f"CAP_{c}" not in kept]


def user(pod: dict, container: dict, config: dict) -> tuple[int, int]:
    """The uid and gid the container runs as, and the kubelet's runAsNonRoot
    check: a user it cannot prove is not root is refused."""
    security = {**(pod.get("securityContext") or {}), **(container.get("securityContext") or {})}
    image_user = (config.get("config") or {}).get("User", "")
    name, _, group = image_user.partition(":")
    uid = security.get("runAsUser", int(name) if name.isdigit() else None)
    gid = security.get("runAsGroup", int(group) if group.isdigit() else (uid if name.isdigit() else 0))
    if security.get("runAsNonRoot"):
        if uid is None:
            raise ContainerError(f"container has runAsNonRoot and image has non-numeric user ({image_user}), "
                                 "cannot verify user is non-root")
        if uid == 0:
            raise ContainerError("container has runAsNonRoot and image will run as root")
    return (uid or 0), gid


def resources(container: dict) -> dict:
    limits = (container.get("resources") or {}).get("limits") or {}
    requests = (container.get("resources") or {}).get("requests") or {}
    out: dict = {}
    if "memory" in limits:
        out["memory"] = {"limit": int(quantity(limits["memory"]))}
    cpu = {}
    if "cpu" in limits:
        cpu.update(period=100000, quota=int(quantity(limits["cpu"]) * 100000))
    if "cpu" in requests:
        cpu["shares"] = max(2, int(quantity(requests["cpu"]) * 1024))
    if cpu:
        out["cpu"] = cpu
    return out


class Container:
    """One run of a container: started by `runc run` in the foreground (its
    output in `log`), stopped with `runc kill` as the kubelet stops one.
    It quacks like cluster.Process."""

    def __init__(self, name: str, layout: pathlib.Path, bundle: pathlib.Path, log: pathlib.Path, spec: dict,
                 start: bool = True):
        self.name = name
        self.bundle = bundle
        self.log = log
        self.root = bundle.parent / f"{bundle.name}.runc"
        self.id = f"{name}-{time.time_ns()}"
        self.config = image_config(layout)
        shutil.rmtree(bundle, ignore_errors=True)
        shutil.rmtree(self.root, ignore_errors=True)
        bundle.parent.mkdir(parents=True, exist_ok=True)
        sh([tool("umoci"), "unpack", "--image", f"{layout}:image", str(bundle)], "umoci unpack")
        runtime = json.loads((bundle / "config.json").read_text())
        (bundle / "config.json").write_text(json.dumps(self._runtime_config(runtime, spec), indent=1))
        self.proc: subprocess.Popen | None = None
        if start:
            self.start()

    def start(self):
        """`runc run` in the foreground: the container's output goes to the log."""
        self.handle = open(self.log, "ab")
        self.proc = subprocess.Popen([tool("runc"), "--root", str(self.root), "run", "--bundle", str(self.bundle),
                                      self.id], stdin=subprocess.DEVNULL, stdout=self.handle,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def _runtime_config(self, runtime: dict, spec: dict) -> dict:
        """`spec`: the pod spec, the container, its args, env and mounts
        ({path: (host dir, read_only)}), and the kubelet's files."""
        pod, container = spec["pod"], spec["container"]
        security = container.get("securityContext") or {}
        image = self.config.get("config") or {}
        uid, gid = user(pod, container, self.config)
        caps = capabilities(security)
        process = runtime["process"]
        # Kubernetes' rule: command replaces the entrypoint, args the cmd.
        command = container.get("command") or image.get("Entrypoint") or []
        args = spec["args"] if container.get("args") is not None or container.get("command") else image.get("Cmd", [])
        process.update(terminal=False, args=[*command, *args], cwd=image.get("WorkingDir") or "/",
                       user={"uid": uid, "gid": gid}, noNewPrivileges=security.get("allowPrivilegeEscalation") is False,
                       capabilities={k: list(caps) for k in ("bounding", "effective", "permitted", "inheritable")}
                       | {"ambient": []})
        env = [e for e in process["env"] if not e.startswith("TERM=")]
        env += [f"{k}={v}" for k, v in spec["env"].items()]
        process["env"] = env
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        # The runtime's own limit, as containerd and CRI-O pass theirs on.
        process["rlimits"] = [{"type": "RLIMIT_NOFILE", "soft": hard, "hard": hard}]
        runtime["root"]["readonly"] = bool(security.get("readOnlyRootFilesystem"))
        runtime["hostname"] = spec["hostname"]
        linux = runtime["linux"]
        linux["namespaces"] = [n for n in linux["namespaces"] if n["type"] != "network"]
        seccomp = {**(pod.get("securityContext") or {}), **security}.get("seccompProfile", {}).get("type")
        if seccomp == "RuntimeDefault":
            linux["seccomp"] = seccomp_runtime_default(caps)
        elif seccomp not in (None, "Unconfined"):
            raise ContainerError(f"seccompProfile {seccomp} is not one this runtime plays")
        linux["resources"] = {**linux.get("resources", {}), **resources(container)}
        for path, (source, read_only) in spec["mounts"].items():
            runtime["mounts"].append({"destination": path, "type": "bind", "source": str(source),
                                      "options": ["rbind", "ro" if read_only else "rw", "nosuid", "nodev"]})
        return runtime

    # --- cluster.Process's interface ---

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def check_alive(self):
        if not self.alive():
            raise ContainerError(f"container {self.name} (runc run {self.id}) exited with {self.proc.returncode}:\n"
                                 f"{self.tail()}")

    def state(self) -> dict:
        return json.loads(sh([tool("runc"), "--root", str(self.root), "state", self.id], "runc state").stdout)

    def kill(self, sig: str):
        sh([tool("runc"), "--root", str(self.root), "kill", self.id, sig], f"runc kill {sig}")

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM, then SIGKILL after `timeout` (the grace period), as the
        kubelet stops a container; the exit code."""
        if self.proc is None:
            shutil.rmtree(self.bundle, ignore_errors=True)
            return None
        if self.alive():
            try:
                self.kill("TERM")
            except ContainerError:
                pass  # it exited on its own meanwhile
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill("KILL")
                self.proc.wait(timeout=10)
        subprocess.run([tool("runc"), "--root", str(self.root), "delete", "--force", self.id], capture_output=True)
        self.handle.close()
        shutil.rmtree(self.bundle, ignore_errors=True)
        shutil.rmtree(self.root, ignore_errors=True)
        return self.proc.returncode
