"""image/assemble.py on the debug binary, with the Debian packages this
machine's archive offers (downloaded once into the cache `make image` uses):
one binary at one archive state is one digest whatever else differs; the
image holds what the binary needs and nothing to run besides it; the lock
file, the dpkg records and the SBOM say what is inside, and the SBOM is
valid SPDX 2.3 (spdx-tools). The release image itself is built, pushed and
run by the e2e suite (tests/e2e/test_image.py)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "image"))
import assemble  # noqa: E402 (needs the path above)
from support import ROOT, binary  # noqa: E402

CACHE = pathlib.Path(os.environ.get("DIGEST_GATE_IMAGE_CACHE", pathlib.Path.home() / ".cache" / "digest-gate-image"))


def run_assembler(binary_path: pathlib.Path, out: pathlib.Path, *, cwd: pathlib.Path = ROOT,
                  env: dict | None = None, cache: pathlib.Path = CACHE) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "image" / "assemble.py"), "--binary", str(binary_path),
                           "--out", str(out), "--cache", str(cache)], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=600)


class Image:
    def __init__(self, out: pathlib.Path):
        self.out = out
        (self.entry,) = json.loads((out / "index.json").read_text())["manifests"]
        self.manifest = json.loads(self.blob(self.entry["digest"]))
        self.config = json.loads(self.blob(self.manifest["config"]["digest"]))
        self.lock = json.loads(out.with_name(out.name + ".lock.json").read_text())
        self.sbom = json.loads(out.with_name(out.name + ".spdx.json").read_text())

    def blob(self, digest: str) -> bytes:
        data = (self.out / "blobs" / "sha256" / digest.split(":")[1]).read_bytes()
        assert "sha256:" + hashlib.sha256(data).hexdigest() == digest, "a blob is not what its name says"
        return data

    def layers(self) -> list[dict[str, tuple[tarfile.TarInfo, bytes]]]:
        out = []
        for layer, diff_id in zip(self.manifest["layers"], self.config["rootfs"]["diff_ids"]):
            raw = gzip.decompress(self.blob(layer["digest"]))
            assert "sha256:" + hashlib.sha256(raw).hexdigest() == diff_id
            with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
                out.append({m.name: (m, tar.extractfile(m).read() if m.isfile() else b"") for m in tar})
        return out

    def files(self) -> dict[str, tuple[tarfile.TarInfo, bytes]]:
        merged: dict = {}
        for layer in self.layers():
            merged.update(layer)
        return merged


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> Image:
    out = tmp_path_factory.mktemp("first") / "image"
    done = run_assembler(binary(), out)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{out}: digest-gate linux/amd64 sha256:"), done.stdout
    return Image(out)


def test_one_binary_at_one_archive_state_is_one_digest(image, tmp_path):
    """Assembled again from a copy of the binary with another path, another
    mtime, another umask, time zone and working directory: the same bytes."""
    copy = tmp_path / "elsewhere" / "digest-gate"
    copy.parent.mkdir()
    shutil.copyfile(binary(), copy)
    os.utime(copy, (1_000_000_000, 1_000_000_000))
    again = tmp_path / "second" / "image"
    old = os.umask(0o077)
    try:
        done = run_assembler(copy, again, cwd=tmp_path, env={"TZ": "Pacific/Kiritimati"})
    finally:
        os.umask(old)
    assert done.returncode == 0, done.stderr
    assert (again / "index.json").read_bytes() == (image.out / "index.json").read_bytes()
    first = sorted((p.name, p.read_bytes()) for p in (image.out / "blobs" / "sha256").iterdir())
    assert sorted((p.name, p.read_bytes()) for p in (again / "blobs" / "sha256").iterdir()) == first
    for suffix in (".lock.json", ".spdx.json"):
        assert again.with_name("image" + suffix).read_bytes() == image.out.with_name("image" + suffix).read_bytes()


def test_timestamps_are_the_commits_or_source_date_epoch(image, tmp_path):
    commit_time = int(subprocess.run(["git", "log", "-1", "--format=%ct"], cwd=ROOT, capture_output=True,
                                     text=True, check=True).stdout)
    created = assemble.Source.read(ROOT).created
    assert image.config["created"] == created
    assert image.manifest["annotations"]["org.opencontainers.image.created"] == created
    assert {m.mtime for layer in image.layers() for m, _ in layer.values()} == {commit_time}
    assert image.sbom["creationInfo"]["created"] == created
    out = tmp_path / "image"
    done = run_assembler(binary(), out, env={"SOURCE_DATE_EPOCH": "1700000000"})
    assert done.returncode == 0, done.stderr
    assert Image(out).config["created"] == "2023-11-14T22:13:20Z"
    assert Image(out).entry["digest"] != image.entry["digest"]


def test_config_says_what_the_chart_and_the_dockerfile_rely_on(image):
    config = image.config["config"]
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["/usr/local/bin/digest-gate"]
    assert sorted(config["ExposedPorts"]) == ["8080/tcp", "8443/tcp"]
    assert (image.config["os"], image.config["architecture"]) == ("linux", "amd64")
    assert image.entry["platform"] == {"architecture": "amd64", "os": "linux"}
    assert image.entry["annotations"]["org.opencontainers.image.ref.name"] == assemble.Source.read(ROOT).version
    annotations = image.manifest["annotations"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert annotations["org.opencontainers.image.revision"] in (head, head + "-dirty")
    assert annotations["org.opencontainers.image.source"] == "https://github.com/digest-gate/digest-gate"
    assert config["Labels"] == annotations


def test_the_image_holds_the_binary_its_libraries_and_nothing_to_run_besides(image, tmp_path):
    files = image.files()
    runtime, app = image.layers()
    assert list(app) == ["usr", "usr/local", "usr/local/bin", "usr/local/bin/digest-gate"]
    member, program = app["usr/local/bin/digest-gate"]
    assert member.mode == 0o755 and program[:4] == b"\x7fELF"
    (tmp_path / "program").write_bytes(program)
    sections = subprocess.run(["readelf", "--section-headers", "--wide", str(tmp_path / "program")],
                              capture_output=True, text=True, check=True).stdout
    assert ".text" in sections and not re.search(r"\.symtab|\.debug_(info|line|abbrev|str)", sections), \
        "the binary is stripped"
    # What the binary links is there: the loader and each NEEDED library.
    interp, needed = assemble.needs(program)
    assert interp == "/lib64/ld-linux-x86-64.so.2"
    assert set(needed) <= {"libc.so.6", "libm.so.6", "libgcc_s.so.1", "ld-linux-x86-64.so.2"} and "libc.so.6" in needed
    for lib in needed:
        assert f"lib/x86_64-linux-gnu/{lib}" in files, lib
    assert files["lib64/ld-linux-x86-64.so.2"][0].linkname == "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
    # No shell, no package manager, no other program.
    executables = [name for name, (m, data) in files.items() if m.isfile() and data[:4] == b"\x7fELF"
                   and not re.search(r"\.so(\.\d+)*$", name.rsplit("/", 1)[-1])]
    assert executables == ["usr/local/bin/digest-gate"]
    assert not any(n.startswith(("bin/", "sbin/", "usr/bin/", "usr/sbin/")) for n in files)
    # Fixed owners: root, but the user's home.
    assert {(m.uid, m.gid) for m, _ in files.values() if m.name != "home/nonroot"} == {(0, 0)}
    assert (files["home/nonroot"][0].uid, files["home/nonroot"][0].mode) == (65532, 0o700)
    assert files["tmp"][0].mode == 0o1777
    assert files["etc/passwd"][1].decode().splitlines()[1].startswith("nonroot:x:65532:65532:")
    # Not glibc's iconv modules: Rust never calls iconv.
    assert not any("gconv" in n for n in files)


def test_the_ca_bundle_is_the_mozilla_roots_the_package_ships(image, tmp_path):
    files = image.files()
    bundle = files["etc/ssl/certs/ca-certificates.crt"][1]
    (ca_deb,) = [p for p in image.lock["packages"] if p["name"] == "ca-certificates"]
    deb = CACHE / ca_deb["filename"]
    shipped = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    count = len(re.findall(r"usr/share/ca-certificates/mozilla/\S+\.crt", shipped))
    assert count > 100 and bundle.count(b"-----BEGIN CERTIFICATE-----") == count == \
        image.lock["ca_bundle"]["certificates"]
    # openssl reads the whole bundle, and a root from it verifies against it.
    (tmp_path / "bundle.crt").write_bytes(bundle)
    first = bundle[:bundle.index(b"-----END CERTIFICATE-----") + 25] + b"\n"
    (tmp_path / "root.crt").write_bytes(first)
    check = subprocess.run(["openssl", "verify", "-CAfile", str(tmp_path / "bundle.crt"), str(tmp_path / "root.crt")],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    assert image.config["config"]["Env"] == ["PATH=/usr/local/bin:/usr/bin:/bin",
                                             "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"]


def test_the_lock_file_and_dpkg_records_name_each_package_with_its_files(image):
    files = image.files()
    names = [p["name"] for p in image.lock["packages"]]
    assert names == sorted(names) and set(names) >= {"libc6", "libgcc-s1", "ca-certificates"}
    assert any(re.fullmatch(r"gcc-\d+-base", n) for n in names)
    for package in image.lock["packages"]:
        deb = CACHE / package["filename"]
        assert hashlib.sha256(deb.read_bytes()).hexdigest() == package["sha256"]
        record = files[f"var/lib/dpkg/status.d/{package['name']}"][1].decode()
        assert f"Package: {package['name']}\nStatus: install ok installed\n" in record
        assert f"\nVersion: {package['version']}\n" in record
        sums = files[f"var/lib/dpkg/status.d/{package['name']}.md5sums"][1].decode().splitlines()
        assert sums, package["name"]
        for line in sums:
            digest, path = line.split("  ", 1)
            assert hashlib.md5(files[path][1]).hexdigest() == digest, path
        # Each package's copyright travels with it (libgcc-s1's through its
        # base package's directory, as Debian ships it).
        doc = f"usr/share/doc/{package['name']}"
        target = files[doc][0].linkname if files[doc][0].issym() else package["name"]
        assert f"usr/share/doc/{target}/copyright" in files, package["name"]


def test_the_sbom_is_valid_spdx_and_lists_what_is_linked(image):
    from spdx_tools.spdx.parser.parse_anything import parse_file
    from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document

    path = image.out.with_name("image.spdx.json")
    assert validate_full_spdx_document(parse_file(str(path))) == []
    packages = {p["SPDXID"]: p for p in image.sbom["packages"]}
    assert packages["SPDXRef-image"]["checksums"][0]["checksumValue"] == image.entry["digest"][7:]
    crates = {(p["name"], p["versionInfo"]) for i, p in packages.items() if i.startswith("SPDXRef-crate-")}
    # Every crate whose source the binary names (panic locations) is listed.
    seen = re.findall(rb"registry/src/[^/]+/([A-Za-z0-9_.+-]+?)-(\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?)/",
                      binary().read_bytes())
    assert {(n.decode(), v.decode()) for n, v in seen} <= crates
    names = {n for n, _ in crates}
    # Not dev-dependencies, not proc macros or what only they use.
    for absent in ("criterion", "proptest", "serde_derive", "thiserror-impl", "darling_core"):
        assert absent not in names, absent
    for present in ("rustls", "ring", "hyper", "kube-client", "oci-client"):
        assert present in names, present
    debs = {p["name"] for i, p in packages.items() if i.startswith("SPDXRef-deb-")}
    assert debs == {p["name"] for p in image.lock["packages"]}
    linked = {r["relatedSpdxElement"] for r in image.sbom["relationships"]
              if r["spdxElementId"] == "SPDXRef-digest-gate" and r["relationshipType"] == "STATIC_LINK"}
    assert len(linked) == len(crates)


def test_a_binary_that_needs_a_library_the_image_lacks_is_refused(tmp_path):
    openssl = pathlib.Path(shutil.which("openssl"))
    done = run_assembler(openssl, tmp_path / "image")
    assert done.returncode == 1
    assert "needs libssl.so.3" in done.stderr and "which no package in the image provides" in done.stderr
    assert not (tmp_path / "image").exists()


def test_a_corrupt_cached_package_is_fetched_again(image, tmp_path):
    cache = tmp_path / "cache"
    shutil.copytree(CACHE, cache)
    (libc,) = [p for p in image.lock["packages"] if p["name"] == "libc6"]
    (cache / libc["filename"]).write_bytes(b"not a package")
    done = run_assembler(binary(), tmp_path / "image", cache=cache)
    assert done.returncode == 0, done.stderr
    assert hashlib.sha256((cache / libc["filename"]).read_bytes()).hexdigest() == libc["sha256"]
    assert Image(tmp_path / "image").entry["digest"] == image.entry["digest"]


def test_the_docs_image_commands_are_the_makefiles_and_the_charts():
    """The install section's commands: the make targets exist with the
    variables they are given, the helm values are the chart's (the e2e suite
    runs the same targets, and installs with the same values)."""
    readme = (ROOT / "docs" / "install.md").read_text()
    section = readme[readme.index("## The webhook's own image, pinned by digest"):]
    block = section[section.index("```sh\n") + 6:section.index("\n```", section.index("```sh\n"))]
    makefile = (ROOT / "Makefile").read_text()
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.startswith("make ")]
    assert commands == ["make image", "make image-push IMAGE=registry.example.com/platform/digest-gate"]
    assert re.search(r"^image: release\n", makefile, re.M) and re.search(r"^image-push:", makefile, re.M)
    assert "docker://$(IMAGE):$(VERSION)" in makefile and "$(SKOPEO_FLAGS)" in makefile
    values = (ROOT / "charts" / "digest-gate" / "values.yaml").read_text()
    for key in re.findall(r"--set image\.(\w+)=", block):
        assert re.search(rf"^  {key}:", values, re.M), key
    assert re.findall(r"--set image\.(\w+)=", block) == ["repository", "digest"]
