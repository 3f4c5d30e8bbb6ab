"""digest-gate's own image, the artifact users deploy (`make image`): built
again it has the same digest, it is pushed and pulled back by the digest the
chart renders, it runs with runc under the chart's securityContext, it
drains on SIGTERM as a pod's PID 1, and digest-gate verifies it in the
registry like any promoted image. The incident scenario and the background
audit with its allowlist reloads also run in it (test_incident.py,
test_audit.py, parametrized with "container")."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import threading
import time

import pytest

from cluster import ROOT, binary, wait_until
from conftest import image_layout
from harness import FULLNAME, INCIDENT_IMAGE, RELEASE_NAMESPACE, incident_runtime, warnings

CONTAINER = pytest.mark.parametrize("release", ["container"], indirect=True)


def status_fields(pid: int) -> dict[str, str]:
    return dict(line.split(":\t", 1) for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines()
                if ":\t" in line)


def test_make_image_again_gives_the_same_digest_lock_and_sbom(tmp_path):
    """`make image` twice on one checkout: the release build is reused and
    the assembly from it, at the same state of the Debian archive, is
    byte for byte the same."""
    layout = image_layout()
    (entry,) = json.loads((layout / "index.json").read_text())["manifests"]
    manifest = json.loads((layout / "blobs" / "sha256" / entry["digest"][7:]).read_text())
    built_at = manifest["annotations"]["org.opencontainers.image.revision"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert built_at.removesuffix("-dirty") == head, \
        f"{layout} was built at {built_at}, this checkout is {head}: run `make image` (make e2e does)"
    again = tmp_path / "image"
    run = subprocess.run(["make", "--no-print-directory", "image", f"IMAGE_DIR={again}"], cwd=ROOT,
                         capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert (again / "index.json").read_bytes() == (layout / "index.json").read_bytes()
    assert sorted(p.name for p in (again / "blobs" / "sha256").iterdir()) == \
        sorted(p.name for p in (layout / "blobs" / "sha256").iterdir())
    for suffix in (".lock.json", ".spdx.json"):
        assert again.with_name("image" + suffix).read_bytes() == layout.with_name(layout.name + suffix).read_bytes()
    assert entry["digest"] in run.stdout


@CONTAINER
def test_the_container_runs_as_the_charts_security_context_says_and_reloads(cluster, release, models):
    rel = release.install()
    pod = release.pod
    # Pinned by digest, the notes have nothing to warn about the image.
    assert "pulled by tag" not in rel["notes"]
    # Pulled by the digest the chart renders, with the pull secret.
    deployment = cluster.get("deployment", FULLNAME, RELEASE_NAMESPACE)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"{release.image.repository}@{release.image.digest}"
    state = pod.process.state()
    assert state["status"] == "running"
    fields = status_fields(state["pid"])
    assert fields["Uid"].split() == ["65532"] * 4 and fields["Gid"].split() == ["65532"] * 4
    for caps in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(fields[caps], 16) == 0, (caps, fields[caps])
    assert fields["NoNewPrivs"] == "1"
    assert fields["Seccomp"] == "2", "RuntimeDefault is a seccomp filter"
    mounts = {line.split()[4]: line.split()[5].split(",") for line in
              pathlib.Path(f"/proc/{state['pid']}/mountinfo").read_text().splitlines()}
    assert "ro" in mounts["/"]
    assert "ro" in mounts["/etc/digest-gate/allowlist"] and "ro" in mounts["/etc/digest-gate/tls"]
    assert "rw" in mounts["/var/lib/digest-gate"]
    assert "/tmp" not in mounts, "the chart gives no /tmp, so the container has none to write"
    # No shell, no package manager: a binary, its libraries, certificates.
    rootfs = pod.process.bundle / "rootfs"
    assert not (rootfs / "bin" / "sh").exists() and not (rootfs / "usr" / "bin").exists()
    # The chart's memory limit is the container's cgroup limit.
    cgroups = dict(line.split(":", 2)[1:] for line in
                   pathlib.Path(f"/proc/{state['pid']}/cgroup").read_text().splitlines())
    memory = pathlib.Path("/sys/fs/cgroup/memory") / cgroups["memory"].lstrip("/") / "memory.limit_in_bytes"
    if memory.exists():
        assert int(memory.read_text()) == 128 * 2**20

    # And it works: the incident's runtime is stored with the promoted digest.
    applied = cluster.apply(incident_runtime(models))
    assert any(w.startswith("digest-gate") for w in warnings(applied.stderr))
    # The state volume is the one writable place: the last good allowlist.
    assert (pod.state / "volumes" / "state" / "last-good-allowlist").exists()

    # An allowlist edit reaches it through the read-only mount (the kubelet's
    # `..data` swap) and is in force without a restart: promoting the stale
    # digest too, the same runtime is stored as written.
    reloads = pod.metric("digest_gate_reloads_total", source="allowlist", result="success")
    cluster.kubectl("patch", "configmap", f"{FULLNAME}-allowlist", "-n", RELEASE_NAMESPACE, "--type=merge",
                    "-p", json.dumps({"data": {"stale.txt": INCIDENT_IMAGE + "\n"}}))
    pod.sync_volumes()
    wait_until("the allowlist reload", lambda: pod.metric(
        "digest_gate_reloads_total", source="allowlist", result="success") > reloads)
    runtime = incident_runtime(models)
    runtime["metadata"]["name"] = "ovms-stale-promoted"
    cluster.apply(runtime)
    stored = cluster.get("servingruntime", "ovms-stale-promoted", models)
    assert stored["spec"]["containers"][0]["image"] == INCIDENT_IMAGE
    assert pod.process.state()["pid"] == state["pid"], "reloaded in place, not restarted"


@CONTAINER
def test_sigterm_to_the_container_drains_and_exits_0(cluster, release, models):
    """The kubelet's stop: SIGTERM to PID 1 (a process with no handler would
    ignore it there), readiness 503 for the drain delay while reviews are
    still answered, then exit 0 well within the grace period."""
    release.install({"server": {"drainDelay": "3s", "gracePeriod": "5s"}})
    pod = release.pod
    container = pod.process
    assert container.state()["pid"] > 0
    answered: list[str] = []

    def apply_during_drain():
        r = cluster.apply(incident_runtime(models), "--dry-run=server", "-o", "json", check=False)
        answered.append(r.stdout if r.returncode == 0 else r.stderr)

    started = time.monotonic()
    container.kill("TERM")
    wait_until("readiness 503 during the drain", lambda: pod.admin("/readyz")[0] == 503, timeout=3)
    applying = threading.Thread(target=apply_during_drain)
    applying.start()
    applying.join(timeout=30)
    code = container.proc.wait(timeout=20)
    took = time.monotonic() - started
    assert code == 0, container.tail()
    assert took < 3 + 5 + 10, took
    (out,) = answered
    assert json.loads(out)["spec"]["containers"][0]["image"].endswith("8af20e48bb480a7ba1ee1268a3cf0a507e05b256c5fcf988f8e4a3de8b87edc6")
    log = pod.log_path.read_text()
    assert re.search(r"drain", log, re.I), log[-2000:]
    pod.process = None
    container.stop()


def test_digest_gate_verifies_its_own_image(webhook_image, tmp_path):
    """The pushed image promoted in an allowlist: `allowlist verify` finds
    it pullable for linux/amd64 and reports linux/arm64 missing (the image
    is single-platform; an arm64 build is out of CI's scope)."""
    from conftest import PULLER, PULLER_PASSWORD
    import registries

    repository, digest = webhook_image.repository, webhook_image.digest
    host = repository.split("/", 1)[0]
    allowlist = tmp_path / "self.txt"
    allowlist.write_text(f"{repository}@{digest}\n")
    auth = registries.auth_file(tmp_path / "auth.json", {host: (PULLER, PULLER_PASSWORD)})
    ca = webhook_image.runtime.cert_dir / "ca.crt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGEST_GATE_") and "PROXY" not in k.upper()}

    def verify(platform: str) -> tuple[int, dict]:
        done = subprocess.run([str(binary()), "allowlist", "verify", "-q", "-o", "json", "--registry-ca", str(ca),
                               "--registry-auth", str(auth), "--platform", platform, "--blobs", "all",
                               str(allowlist)], capture_output=True, text=True, timeout=120, env=env)
        return done.returncode, json.loads(done.stdout)

    code, report = verify("linux/amd64")
    assert code == 0, report
    (image,) = report["images"]
    assert image["digest"] == digest and image["state"] == "ok"
    code, report = verify("linux/arm64")
    assert code == 1
    (image,) = report["images"]
    assert image["state"] == "platform-missing", image
