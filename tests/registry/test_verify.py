"""`digest-gate allowlist verify` against real registries on loopback.

Two distribution registries (htpasswd auth on the source, none on the
mirror), TLS from a test CA, images pushed by skopeo from OCI layouts built
in registries.py: every state, the mirror order, NeverContactSource, a
moved tag, refused credentials, a CA that cannot be read, plain HTTP.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from support import binary  # noqa: E402

from registries import Layout, Registry, artifact, auth_file, cosign_attestation, cosign_signature, make_ca  # noqa: E402

USER, PASSWORD = "puller", "s3cret"
NEVER_PUSHED = "sha256:" + "7ef272bc" * 8


class World:
    """The registries, what was pushed, and the files a test points at."""

    def __init__(self, work: pathlib.Path):
        self.work = work
        self.certs = work / "certs"
        make_ca(self.certs)
        self.ca = self.certs / "ca.crt"
        self.auth = auth_file(work / "auth.json", {})
        self.layout = Layout(work / "layout")
        lay = self.layout
        self.amd64 = lay.image("linux", "amd64")
        self.arm64 = lay.image("linux", "arm64", "v8")
        self.multi = lay.index([self.amd64, self.arm64])
        lay.tag(self.multi, "multi")
        self.single = lay.index([lay.image("linux", "amd64", text="single")])
        lay.tag(self.single, "single")
        self.plain = lay.image("linux", "amd64", text="plain")
        lay.tag(self.plain, "plain")
        self.sig = cosign_signature(lay, self.multi["digest"])
        lay.tag(self.sig, "sig")
        self.att = cosign_attestation(lay, self.multi["digest"])
        lay.tag(self.att, "att")
        self.sbom = artifact(lay)
        lay.tag(self.sbom, "sbom")
        self.moved_from = lay.image("linux", "amd64", text="first")
        lay.tag(self.moved_from, "first")
        self.moved_to = lay.image("linux", "amd64", text="second")
        lay.tag(self.moved_to, "second")

    def allowlist(self, name: str, repos: list[tuple[str, str, list[str]]], mirrors: list[dict] | None = None):
        lines = ["apiVersion: digest-gate.dev/v1alpha1", "kind: Allowlist", f"metadata: {{name: {name}}}", "spec:",
                 "  repositories:"]
        for repo, digest, tags in repos:
            lines += [f"    - name: {repo}", "      digests:", f"        - digest: {digest}"]
            if tags:
                lines.append(f"          tags: {json.dumps(tags)}")
        if mirrors:
            lines.append("  mirrors:")
            for m in mirrors:
                lines.append(f"    - source: {m['source']}")
                lines.append(f"      mirrors: {json.dumps(m['mirrors'])}")
                if "policy" in m:
                    lines.append(f"      mirrorSourcePolicy: {m['policy']}")
        path = self.work / f"{name}.yaml"
        path.write_text("\n".join(lines) + "\n")
        return path


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = World(tmp_path_factory.mktemp("registries"))
    with Registry(w.work, w.certs, "source", users={USER: PASSWORD}) as source, \
            Registry(w.work, w.certs, "mirror") as mirror:
        w.source, w.mirror = source, mirror
        w.auth = auth_file(w.work / "auth.json", {source.host: (USER, PASSWORD)})
        for tag in ("multi", "single", "plain", "sig", "att", "sbom"):
            source.push(w.layout, tag, f"models/{tag}")
        source.push(w.layout, "first", "models/moving", dest_tag="v1")
        source.push(w.layout, "second", "models/moving", dest_tag="v1")
        # The mirror has the index, but not the arm64 image's config: a
        # sparse copy, as oc-mirror's platform filtering leaves.
        mirror.push(w.layout, "multi", "mirrored/multi")
        arm64_config = json.loads((w.layout.path / "blobs" / "sha256" / w.arm64["digest"][7:]).read_text())["config"]
        mirror.delete_blob("mirrored/multi", arm64_config["digest"])
        yield w


def verify(world: World, *args: str, auth: pathlib.Path | None = None, ca: pathlib.Path | None = None,
           output: str = "json") -> tuple[int, dict | str, str]:
    argv = [str(binary()), "allowlist", "verify", "--quiet", "-o", output,
            "--registry-ca", str(ca or world.ca), "--registry-auth", str(auth or world.auth),
            "--registry-timeout", "5s", *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGEST_GATE_") and "PROXY" not in k.upper()}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    out = json.loads(done.stdout) if output == "json" and done.stdout.startswith("{") else done.stdout
    return done.returncode, out, done.stderr


def states(report: dict) -> dict[str, str]:
    return {i["repository"].split("/", 1)[1]: i["state"] for i in report["images"]}


def test_each_state_with_why_and_where(world):
    s = world.source.host
    path = world.allowlist("states", [
        (f"{s}/models/multi", world.multi["digest"], ["multi"]),
        (f"{s}/models/plain", world.plain["digest"], []),
        (f"{s}/models/gone", NEVER_PUSHED, []),
        (f"{s}/models/sig", world.sig["digest"], []),
        (f"{s}/models/att", world.att["digest"], []),
        (f"{s}/models/sbom", world.sbom["digest"], []),
        (f"{s}/models/single", world.single["digest"], []),
    ])
    code, report, _ = verify(world, str(path), "--platform", "linux/amd64", "--platform", "linux/arm64")
    assert code == 1, report
    assert states(report) == {
        "models/multi": "ok", "models/plain": "platform-missing", "models/gone": "missing",
        "models/sig": "not-runnable", "models/att": "not-runnable", "models/sbom": "not-runnable",
        "models/single": "platform-missing"}
    by = {i["repository"].split("/", 1)[1]: i for i in report["images"]}
    assert "MANIFEST_UNKNOWN" in by["models/gone"]["detail"]
    assert "cosign signature" in by["models/sig"]["detail"]
    assert "cosign attestation" in by["models/att"]["detail"]
    assert "application/spdx+json" in by["models/sbom"]["detail"]
    assert "no linux/arm64 image" in by["models/single"]["detail"]
    assert "single linux/amd64 image" in by["models/plain"]["detail"]
    multi = by["models/multi"]
    assert multi["location"] == f"{s}/models/multi"
    assert [(p["platform"], p["digest"], p["state"]) for p in multi["platforms"]] == [
        ("linux/amd64", world.amd64["digest"], "ok"), ("linux/arm64", world.arm64["digest"], "ok")]
    assert multi["tags"] == [{"tag": "multi", "state": "ok"}]
    assert multi["promotions"][0]["file"].endswith("states.yaml")
    assert multi["promotions"][0]["promotedBy"] == "Allowlist states"
    assert report["summary"] == {**report["summary"], "digests": 7, "ok": 1, "missing": 1, "notRunnable": 3,
                                 "platformMissing": 2, "unverifiable": 0}

    code, text, _ = verify(world, str(path), "--platform", "linux/amd64", output="text")
    assert code == 1
    line = next(n for n, text_line in enumerate(path.read_text().splitlines(), 1) if NEVER_PUSHED in text_line)
    gone = [out_line for out_line in text.splitlines() if "models/gone" in out_line]
    assert gone == [f"{path}:{line}: {s}/models/gone@{NEVER_PUSHED}: missing: {s} does not have this manifest "
                    f"(MANIFEST_UNKNOWN) (promoted by Allowlist states; checked at every location a node pulls from)"]
    assert text.splitlines()[-1].startswith(
        "verified 7 promoted digest(s): 3 ok, 1 missing, 3 not runnable, 0 platform missing, 0 unverifiable")


def test_without_platforms_an_image_or_an_index_of_images_is_ok(world):
    s = world.source.host
    path = world.allowlist("plain", [(f"{s}/models/plain", world.plain["digest"], []),
                                     (f"{s}/models/single", world.single["digest"], [])])
    code, report, _ = verify(world, str(path))
    assert (code, states(report)) == (0, {"models/plain": "ok", "models/single": "ok"}), report


def test_the_first_mirror_that_serves_the_manifest_is_where_every_check_is_made(world):
    s, m = world.source.host, world.mirror.host
    rule = {"source": f"{s}/models", "mirrors": [f"{m}/mirrored"]}
    path = world.allowlist("mirrored", [(f"{s}/models/multi", world.multi["digest"], [])], [rule])
    # The mirror serves the index but lacks the arm64 config; the complete
    # source after it does not rescue it: the node pulls from the mirror.
    code, report, _ = verify(world, str(path), "--platform", "linux/arm64")
    image = report["images"][0]
    assert (code, image["state"], image["location"]) == (1, "platform-missing", f"{m}/mirrored/multi"), report
    assert "config blob" in image["detail"] and "BLOB_UNKNOWN" in image["detail"]
    code, report, _ = verify(world, str(path), "--platform", "linux/amd64")
    assert (code, report["images"][0]["state"]) == (0, "ok")
    # Where the mirror does not have it, the node falls back to the source...
    path = world.allowlist("fallback", [(f"{s}/models/plain", world.plain["digest"], [])], [rule])
    code, report, _ = verify(world, str(path))
    assert (code, report["images"][0]["location"]) == (0, f"{s}/models/plain"), report
    # ...unless it never contacts the source.
    never = world.allowlist("never", [(f"{s}/models/plain", world.plain["digest"], [])],
                            [{**rule, "policy": "NeverContactSource"}])
    for args in ([str(never)], [str(path), "--mirrors-only"]):
        code, report, _ = verify(world, *args)
        image = report["images"][0]
        assert (code, image["state"], image["location"]) == (1, "missing", None), report
        assert image["detail"] == f"{m} does not have this manifest (MANIFEST_UNKNOWN)", image


def test_a_moved_tag_is_reported_and_does_not_change_the_digest_state(world):
    s = world.source.host
    path = world.allowlist("moved", [(f"{s}/models/moving", world.moved_from["digest"], ["v1", "v9"])])
    code, report, _ = verify(world, str(path))
    image = report["images"][0]
    assert (code, image["state"]) == (0, "ok"), report
    assert image["tags"][0] == {"tag": "v1", "state": "moved", "digest": world.moved_to["digest"]}
    assert image["tags"][1]["state"] == "missing" and "MANIFEST_UNKNOWN" in image["tags"][1]["detail"]
    code, text, _ = verify(world, str(path), output="text")
    assert f"{s}/models/moving:v1: tag moved: it names {world.moved_to['digest']} now" in text


def test_refused_credentials_are_unverifiable_never_missing(world):
    s = world.source.host
    path = world.allowlist("refused", [(f"{s}/models/multi", world.multi["digest"], []),
                                       (f"{s}/models/gone", NEVER_PUSHED, [])])
    wrong = auth_file(world.work / "wrong.json", {s: (USER, "wrong")})
    for auth in (wrong, auth_file(world.work / "none.json", {})):
        code, report, _ = verify(world, str(path), auth=auth)
        assert code == 2, report
        assert {i["state"] for i in report["images"]} == {"unverifiable"}
        assert all("401" in i["detail"] or "UNAUTHORIZED" in i["detail"] for i in report["images"]), report


def test_credentials_are_found_where_podman_looks(world, tmp_path):
    s = world.source.host
    path = world.allowlist("found", [(f"{s}/models/plain", world.plain["digest"], [])])
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGEST_GATE_")}
    env.update(REGISTRY_AUTH_FILE=str(world.auth), HOME=str(tmp_path), XDG_RUNTIME_DIR=str(tmp_path))
    done = subprocess.run([str(binary()), "allowlist", "verify", "-q", "-o", "json", "--registry-ca", str(world.ca),
                           str(path)], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    # With none anywhere, the registry is asked anonymously.
    env.pop("REGISTRY_AUTH_FILE")
    done = subprocess.run([str(binary()), "allowlist", "verify", "-q", "-o", "json", "--registry-ca", str(world.ca),
                           str(path)], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2 and "unverifiable" in done.stdout


def test_unusable_registry_options_exit_2_with_a_clear_error(world, tmp_path):
    path = world.allowlist("opts", [(f"{world.source.host}/models/plain", world.plain["digest"], [])])
    code, out, err = verify(world, str(path), ca=tmp_path / "absent.pem")
    assert code == 2 and f"--registry-ca {tmp_path / 'absent.pem'}: cannot read it" in err, err
    (tmp_path / "empty.pem").write_text("not a certificate\n")
    code, out, err = verify(world, str(path), ca=tmp_path / "empty.pem")
    assert code == 2 and "no PEM certificate" in err, err
    code, out, err = verify(world, str(path), auth=tmp_path / "absent.json")
    assert code == 2 and "cannot read the registry credentials" in err, err
    code, out, err = verify(world, str(path), "--platform", "linux")
    assert code == 2 and "OS/ARCH" in err, err


def test_an_untrusted_certificate_or_plain_http_is_unverifiable_and_says_why(world, tmp_path):
    other = tmp_path / "other"
    make_ca(other)
    path = world.allowlist("tls", [(f"{world.source.host}/models/plain", world.plain["digest"], [])])
    code, report, _ = verify(world, str(path), ca=other / "ca.crt")
    assert code == 2 and "not trusted" in report["images"][0]["detail"], report
    with Registry(world.work, world.certs, "plain-http", tls=False) as plain:
        path = world.allowlist("http", [(f"{plain.host}/models/plain", world.plain["digest"], [])])
        code, report, _ = verify(world, str(path))
        assert code == 2, report
        assert "does not speak TLS" in report["images"][0]["detail"], report


def test_token_auth_as_registry_redhat_io_and_quay_use_it(world):
    from registries import TokenIssuer
    from support import BackgroundServer

    issuer = TokenIssuer(world.certs, {USER: PASSWORD})
    with BackgroundServer(issuer.handler(), tls=issuer.tls()) as tokens, \
            Registry(world.work, world.certs, "token", users={USER: PASSWORD}, token=issuer.config(tokens.port)) as reg:
        reg.push(world.layout, "multi", "models/multi")
        path = world.allowlist("token", [(f"{reg.host}/models/multi", world.multi["digest"], ["multi"]),
                                         (f"{reg.host}/models/gone", NEVER_PUSHED, [])])
        auth = auth_file(world.work / "token-auth.json", {reg.host: (USER, PASSWORD)})
        before = issuer.requests
        code, report, _ = verify(world, str(path), "--platform", "linux/arm64", auth=auth)
        assert code == 1, report
        assert states(report) == {"models/multi": "ok", "models/gone": "missing"}, report
        assert report["images"][0]["tags"] == [{"tag": "multi", "state": "ok"}]
        assert issuer.requests > before
        # Refused by the token service: unverifiable, never missing.
        wrong = auth_file(world.work / "token-wrong.json", {reg.host: (USER, "wrong")})
        code, report, _ = verify(world, str(path), auth=wrong)
        assert code == 2 and set(states(report).values()) == {"unverifiable"}, report


def test_rate_limits_are_retried_with_backoff_then_unverifiable(world):
    from registries import RateLimiter
    from support import BackgroundServer

    limiter = RateLimiter(world.certs, world.mirror, limited=2)
    with BackgroundServer(limiter.handler(), tls=limiter.tls()) as proxy:
        host = f"127.0.0.1:{proxy.port}"
        path = world.allowlist("limited", [(f"{host}/mirrored/multi", world.multi["digest"], [])])
        code, report, _ = verify(world, str(path))
        assert (code, report["images"][0]["state"]) == (0, "ok"), report
        assert limiter.refused == 2 and report["summary"]["requests"] >= 3
        limiter.refused, limiter.limited = 0, 100
        code, report, _ = verify(world, str(path))
        image = report["images"][0]
        assert (code, image["state"]) == (2, "unverifiable"), report
        assert image["detail"] == f"{host} is rate limiting (TOOMANYREQUESTS) (4 tries)", image
        assert limiter.refused == 4


def review(port: int, ca: pathlib.Path, image: str, endpoint: str = "/mutate") -> dict:
    import http.client
    import ssl

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "models"},
           "spec": {"containers": [{"name": "server", "image": image}]}}
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": "models",
        "operation": "CREATE", "userInfo": {"username": "dev"}, "object": pod}}
    c = http.client.HTTPSConnection("127.0.0.1", port, context=ssl.create_default_context(cafile=str(ca)), timeout=10)
    c.request("POST", endpoint, body=json.dumps(body), headers={"Content-Type": "application/json"})
    return json.loads(c.getresponse().read())["response"]


def serve_review(world: World, allowlist: pathlib.Path, image: str) -> dict:
    """`digest-gate serve --allowlist ALLOWLIST` on loopback, one /validate
    review of a Pod running `image`: the AdmissionReview response."""
    from registries import make_leaf
    from support import serve

    make_leaf(world.certs, "webhook")
    with serve(world.certs / "webhook.crt", world.certs / "webhook.key", "--allowlist", str(allowlist)) as (port, _):
        return review(port, world.ca, image, "/validate")


def test_written_platforms_promote_each_image_of_an_index_for_its_platform(world, tmp_path):
    s = world.source.host
    release = world.allowlist("release", [(f"{s}/models/multi", world.multi["digest"], ["multi"]),
                                          (f"{s}/models/plain", world.plain["digest"], [])])
    written = tmp_path / "with-platforms.yaml"
    code, report, _ = verify(world, str(release), "--write-platforms", str(written))
    assert code == 0, report
    text = written.read_text()
    assert text.startswith("# Generated by `digest-gate allowlist verify --write-platforms` from:")
    assert (f"          platforms:\n            - {{platform: linux/amd64, digest: {world.amd64['digest']}}}\n"
            f"            - {{platform: linux/arm64/v8, digest: {world.arm64['digest']}}}\n") in text
    child = f"{s}/models/multi@{world.arm64['digest']}"
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(f"apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: models}}\n"
                        f"spec:\n  containers:\n    - name: server\n      image: {child}\n")
    # Alone or merged with its input, the written allowlist decides the same.
    for allowlists in ([written], [written, release]):
        args = [a for path in allowlists for a in ("--allowlist", str(path))]
        done = subprocess.run([str(binary()), "check", *args, "-o", "json", "-f", str(manifest)],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        image = json.loads(done.stdout)["results"][0]["images"][0]
        assert (image["verdict"], image["code"]) == ("allow", "promoted_platform"), image
        assert f"is the linux/arm64/v8 image of promoted index '{s}/models/multi@{world.multi['digest']}'" in \
            image["reason"], image
    # The input alone denies it, as before.
    done = subprocess.run([str(binary()), "check", "--allowlist", str(release), "-f", str(manifest)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stdout
    # --fix leaves it as it is.
    done = subprocess.run([str(binary()), "check", "--allowlist", str(written), "--fix", "-f", str(manifest)],
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, manifest.read_text()), done.stderr
    # lint shows the platform images.
    done = subprocess.run([str(binary()), "allowlist", "lint", str(written)], capture_output=True, text=True)
    assert f"{s}/models/multi@{world.multi['digest'][:19]} is an index; its images are promoted" in done.stdout
    # And the webhook allows it.
    answer = serve_review(world, written, child)
    assert answer["allowed"] is True, answer
    # The input alone: /validate refuses the child (rewrite mode rewrites on
    # /mutate; a review that reaches /validate unrewritten is denied).
    answer = serve_review(world, release, child)
    assert answer["allowed"] is False and "never promoted" in answer["status"]["message"], answer


def test_bytes_that_do_not_hash_to_the_digest_are_unverifiable_never_ok(world):
    from registries import RateLimiter
    from support import BackgroundServer

    tampering = RateLimiter(world.certs, world.mirror, limited=0, tamper=True)
    with BackgroundServer(tampering.handler(), tls=tampering.tls()) as proxy:
        host = f"127.0.0.1:{proxy.port}"
        path = world.allowlist("tampered", [(f"{host}/mirrored/multi", world.multi["digest"], [])])
        code, report, _ = verify(world, str(path))
        image = report["images"][0]
        assert (code, image["state"]) == (2, "unverifiable"), report
        assert "served bytes that are not the digest asked for" in image["detail"], image


def test_https_proxy_and_no_proxy_are_honoured(world):
    from registries import ConnectProxy
    from support import BackgroundServer

    s = world.source.host
    path = world.allowlist("proxied", [(f"{s}/models/plain", world.plain["digest"], [])])
    tunnels = ConnectProxy()
    with BackgroundServer(tunnels.handler()) as proxy:
        base = {k: v for k, v in os.environ.items() if not k.startswith("DIGEST_GATE_") and "PROXY" not in k.upper()}
        argv = [str(binary()), "allowlist", "verify", "-q", "-o", "json", "--registry-ca", str(world.ca),
                "--registry-auth", str(world.auth), str(path)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                              env={**base, "HTTPS_PROXY": f"http://127.0.0.1:{proxy.port}"})
        assert done.returncode == 0, done.stdout + done.stderr
        assert tunnels.tunnels and set(tunnels.tunnels) == {s}, tunnels.tunnels
        opened = len(tunnels.tunnels)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                              env={**base, "HTTPS_PROXY": f"http://127.0.0.1:{proxy.port}", "NO_PROXY": "127.0.0.1"})
        assert done.returncode == 0, done.stdout + done.stderr
        assert len(tunnels.tunnels) == opened


def test_progress_shows_on_a_terminal_unless_quiet(world, tmp_path):
    """`script` gives the command a terminal; its typescript is what the
    terminal showed (standard output goes to a file)."""
    import shlex

    path = world.allowlist("progress", [(f"{world.source.host}/models/plain", world.plain["digest"], [])])
    base = [str(binary()), "allowlist", "verify", "--registry-ca", str(world.ca), "--registry-auth",
            str(world.auth), str(path)]
    shown = {}
    for quiet in (False, True):
        argv = base + (["--quiet"] if quiet else [])
        typescript = tmp_path / f"typescript-{quiet}"
        command = f"{shlex.join(argv)} > {shlex.quote(str(tmp_path / 'out.txt'))}"
        done = subprocess.run(["script", "-q", "-e", "-c", command, str(typescript)], capture_output=True,
                              timeout=60)
        assert done.returncode == 0, done
        shown[quiet] = typescript.read_text(errors="replace")
        assert (tmp_path / "out.txt").read_text().startswith("verified 1 promoted digest(s): 1 ok")
    assert "1/1 verified" in shown[False], shown[False]
    assert "1/1 verified" not in shown[True], shown[True]


def check(world: World, allowlist: pathlib.Path, manifest: pathlib.Path, *args: str,
          auth: pathlib.Path | None = None) -> subprocess.CompletedProcess:
    argv = [str(binary()), "check", "--allowlist", str(allowlist), "-f", str(manifest), "--registry",
            "--registry-ca", str(world.ca), "--registry-auth", str(auth or world.auth), "--registry-timeout", "5s",
            *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGEST_GATE_") and "PROXY" not in k.upper()}
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)


def runtime(name: str, image: str) -> str:
    return (f"apiVersion: serving.kserve.io/v1alpha1\nkind: ServingRuntime\nmetadata: {{name: {name}, namespace: demo}}\n"
            f"spec:\n  containers:\n    - name: ovms\n      image: {image}\n")


def test_check_registry_says_which_workloads_will_not_start(world, tmp_path):
    s = world.source.host
    path = world.allowlist("incident", [(f"{s}/models/gone", NEVER_PUSHED, []),
                                        (f"{s}/models/att", world.att["digest"], []),
                                        (f"{s}/models/plain", world.plain["digest"], [])])
    other = "sha256:" + "8af20e48" * 8
    manifest = tmp_path / "runtimes.yaml"
    manifest.write_text("---\n".join([
        runtime("promoted-but-unpushed", f"{s}/models/gone@{NEVER_PUSHED}"),
        runtime("rewrite-to-unpushed", f"{s}/models/gone@{other}"),
        runtime("attestation", f"{s}/models/att@{world.att['digest']}"),
        runtime("fine", f"{s}/models/plain@{world.plain['digest']}"),
    ]))
    done = check(world, path, manifest)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert (f"{manifest}:7: ServingRuntime demo/promoted-but-unpushed: missing: {s}/models/gone@{NEVER_PUSHED}: "
            f"{s} does not have this manifest (MANIFEST_UNKNOWN): its Pods will not start") in lines, done.stdout
    denied = [line for line in lines if "rewrite-to-unpushed" in line]
    assert len(denied) == 1 and ": deny: " in denied[0] and "but it is missing" in denied[0], denied
    assert any("demo/attestation: not-runnable:" in line and "cosign attestation" in line for line in lines), lines
    assert not any("demo/fine" in line for line in lines), lines

    done = check(world, path, manifest, "-o", "json")
    report = json.loads(done.stdout)
    images = {r["name"]: r["images"][0] for r in report["results"]}
    assert images["fine"]["registry"]["state"] == "ok" and images["fine"]["registry"]["checkedAt"].endswith("Z")
    assert images["rewrite-to-unpushed"]["code"] == "promoted_unpullable"
    assert images["rewrite-to-unpushed"]["registry"]["reference"] == f"{s}/models/gone@{NEVER_PUSHED}"
    assert report["summary"]["registry"] == {"ok": 1, "missing": 2, "notRunnable": 1, "platformMissing": 0,
                                             "unverifiable": 0}
    # Each distinct reference is asked once: gone, att and plain.
    done = check(world, path, manifest, "-o", "sarif")
    results = json.loads(done.stdout)["runs"][0]["results"]
    assert sorted(r["ruleId"] for r in results) == ["promoted_unpullable", "registry_missing",
                                                   "registry_not_runnable"], results
    # --fix leaves the denial; the exit code says so.
    done = check(world, path, manifest, "--fix")
    assert done.returncode == 1 and done.stdout == manifest.read_text(), done.stderr
    # Without --registry: as before (the unpushed digest is promoted; the other is rewritten).
    plain = subprocess.run([str(binary()), "check", "--allowlist", str(path), "-f", str(manifest), "-o", "json"],
                           capture_output=True, text=True, timeout=60)
    report = json.loads(plain.stdout)
    assert "registry" not in report["summary"] and all("registry" not in r["images"][0] for r in report["results"])
    assert {r["name"]: r["images"][0]["verdict"] for r in report["results"]}["rewrite-to-unpushed"] == "rewrite"


def test_check_registry_with_refused_credentials_exits_2(world, tmp_path):
    s = world.source.host
    path = world.allowlist("check-refused", [(f"{s}/models/plain", world.plain["digest"], [])])
    manifest = tmp_path / "r.yaml"
    manifest.write_text(runtime("fine", f"{s}/models/plain@{world.plain['digest']}"))
    wrong = auth_file(world.work / "check-wrong.json", {s: (USER, "wrong")})
    done = check(world, path, manifest, auth=wrong)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"demo/fine: unverifiable: {s}/models/plain@{world.plain['digest']}: " in done.stdout, done.stdout
    assert "not verified" in done.stdout
    # Standard input is read once and judged twice.
    done = subprocess.run([str(binary()), "check", "--allowlist", str(path), "-f", "-", "--registry",
                           "--registry-ca", str(world.ca), "--registry-auth", str(world.auth)],
                          input=manifest.read_text(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_serve_verify_registry_denies_a_rewrite_to_a_missing_digest_and_keeps_knowing(world, tmp_path):
    import time
    import urllib.request

    from registries import make_leaf
    from support import serve

    make_leaf(world.certs, "webhook")
    with Registry(world.work, world.certs, "going-down") as reg:
        reg.push(world.layout, "plain", "models/plain")
        path = world.allowlist("serve-verify", [(f"{reg.host}/models/gone", NEVER_PUSHED, []),
                                                (f"{reg.host}/models/plain", world.plain["digest"], [])])
        args = ["--allowlist", str(path), "--verify-registry", "--registry-ca", str(world.ca),
                "--registry-auth", str(auth_file(world.work / "anonymous.json", {}))]
        wrong = f"{reg.host}/models/gone@sha256:{'8af20e48' * 8}"
        with serve(world.certs / "webhook.crt", world.certs / "webhook.key", *args) as (port, admin):
            # Until verified, the allowlist decides: a rewrite. Within
            # seconds of start, the rewrite target is known missing: denied.
            deadline = time.monotonic() + 15
            while True:
                answer = review(port, world.ca, wrong)
                if not answer["allowed"] or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert answer["allowed"] is False, answer
            message = answer["status"]["message"]
            assert f"would be rewritten to '{reg.host}/models/gone@{NEVER_PUSHED}'" in message, message
            assert "promoted by Allowlist serve-verify" in message and "(MANIFEST_UNKNOWN)" in message, message
            # The promoted-but-missing digest as written is admitted, with a warning.
            answer = review(port, world.ca, f"{reg.host}/models/gone@{NEVER_PUSHED}")
            assert answer["allowed"] is True and "patch" not in answer, answer
            assert any("is promoted, but missing" in w for w in answer.get("warnings", [])), answer
            # A pullable one: no warning.
            answer = review(port, world.ca, f"{reg.host}/models/plain@{world.plain['digest']}")
            assert answer["allowed"] is True and not answer.get("warnings"), answer
            metrics = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5).read().decode()
            assert 'digest_gate_promoted_images{state="missing"} 1' in metrics, metrics
            assert 'digest_gate_promoted_images{state="ok"} 1' in metrics
            assert "digest_gate_registry_verification_duration_seconds_count 1" in metrics, metrics
            assert 'digest_gate_registry_verification_errors_total{reason="credentials"} 0' in metrics, metrics
            # The registry goes down: what was known stays known.
            reg.proc.terminate()
            reg.proc.wait(timeout=10)
            answer = review(port, world.ca, wrong)
            assert answer["allowed"] is False, answer


def metric(admin: int, name: str) -> float:
    import urllib.request
    text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5).read().decode()
    return next(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + " "))


def test_serve_reads_rotated_credentials_and_verifies_everything_again(world, tmp_path):
    import os
    import time

    from registries import make_leaf
    from support import serve

    make_leaf(world.certs, "webhook")
    s = world.source.host
    path = world.allowlist("serve-rotate", [(f"{s}/models/gone", NEVER_PUSHED, [])])
    auth = auth_file(tmp_path / "auth.json", {s: (USER, "wrong")})
    wrong = f"{s}/models/gone@sha256:{'8af20e48' * 8}"
    args = ["--allowlist", str(path), "--verify-registry", "--registry-ca", str(world.ca), "--registry-auth", str(auth),
            "--registry-timeout", "5s", "--reload-interval", "200ms"]
    with serve(world.certs / "webhook.crt", world.certs / "webhook.key", *args) as (port, admin):
        # Refused credentials: unverifiable, so the allowlist decides (a
        # rewrite), and the refusal is counted by its reason.
        deadline = time.monotonic() + 15
        while metric(admin, 'digest_gate_registry_verification_errors_total{reason="credentials"}') < 1:
            assert time.monotonic() < deadline, "the refused credentials were not counted"
            time.sleep(0.2)
        assert metric(admin, 'digest_gate_promoted_images{state="unverifiable"}') == 1
        answer = review(port, world.ca, wrong)
        assert answer["allowed"] is True and "patch" in answer, answer
        # The pull secret is rotated as the kubelet does it: a new file
        # renamed over the old. Everything is verified again.
        auth_file(tmp_path / "auth.json.new", {s: (USER, PASSWORD)})
        os.replace(tmp_path / "auth.json.new", auth)
        deadline = time.monotonic() + 15
        while review(port, world.ca, wrong)["allowed"]:
            assert time.monotonic() < deadline, "the rotated credentials were not used"
            time.sleep(0.2)
        assert metric(admin, 'digest_gate_promoted_images{state="missing"}') == 1
        assert metric(admin, 'digest_gate_promoted_images{state="unverifiable"}') == 0
        assert metric(admin, "digest_gate_registry_verification_duration_seconds_count") == 2
