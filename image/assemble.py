#!/usr/bin/env python3
"""digest-gate's container image, assembled with no container engine and no
base-image pull: `make image` runs this.

The image is the stripped binary on the runtime files of four Debian
packages, fetched with `apt-get download` and unpacked with `dpkg-deb`:
libc6 and libgcc-s1 (what the binary links), the gcc base package that holds
libgcc-s1's copyright, and ca-certificates (the Mozilla roots, for registry
TLS). Each package's copyright file and dpkg record go in with it, as
distroless images carry them, so image scanners see what is inside. No
shell, no package manager.

For --out DIR it writes:
  DIR/            an OCI image layout: one linux image, tagged with the version
  DIR.lock.json   the Debian packages inside: versions, sha256, archive URLs
  DIR.spdx.json   an SPDX 2.3 SBOM: the image, the binary, the Debian
                  packages and the crates linked into the binary

Reproducible: every timestamp is the commit's (or SOURCE_DATE_EPOCH), tar
entries are sorted with fixed owners, gzip carries no time, so one binary at
one state of the Debian archive gives one digest. Superseded package
versions leave the archive and no snapshot archive is reachable here, so the
versions are whatever the archive offers; the lock file records them.
Standard library only, plus dpkg-deb, apt-get, strip, readelf and cargo.
"""

from __future__ import annotations

import argparse
import datetime
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
import tempfile
import tomllib
from dataclasses import dataclass, field

ROOT = pathlib.Path(__file__).resolve().parents[1]

# What the image is. The Dockerfile says the same (tests/chart/test_dockerfile.py
# holds them together), and the chart's runAsNonRoot relies on a numeric USER.
BINARY = "/usr/local/bin/digest-gate"
USER = "65532:65532"
USER_NAME = "nonroot"
ENTRYPOINT = [BINARY]
CMD = ["serve", "--help"]
PORTS = ["8443/tcp", "8080/tcp"]
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
ENV = ["PATH=/usr/local/bin:/usr/bin:/bin", f"SSL_CERT_FILE={CA_BUNDLE}"]

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"

# ELF e_machine → the OCI architecture and Rust's target triple.
MACHINES = {62: ("amd64", "x86_64-unknown-linux-gnu"), 183: ("arm64", "aarch64-unknown-linux-gnu")}


class AssemblyError(Exception):
    """Something the image cannot be made without; the message says what."""


def run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, check=True, capture_output=True, **kwargs)
    except FileNotFoundError:
        raise AssemblyError(f"{argv[0]} is not installed") from None
    except subprocess.CalledProcessError as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr
        raise AssemblyError(f"{' '.join(argv)} failed ({e.returncode}): {err.strip()}") from None


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


# --- the source ---------------------------------------------------------------

@dataclass(frozen=True)
class Source:
    """What the image says about where it comes from."""
    version: str
    description: str
    license: str
    url: str
    revision: str
    epoch: int

    @property
    def created(self) -> str:
        return datetime.datetime.fromtimestamp(self.epoch, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    @staticmethod
    def read(root: pathlib.Path) -> "Source":
        package = tomllib.loads((root / "Cargo.toml").read_text())["package"]
        home = re.search(r"^home:\s*(\S+)", (root / "charts" / "digest-gate" / "Chart.yaml").read_text(), re.M)
        if not home:
            raise AssemblyError("charts/digest-gate/Chart.yaml has no `home:` to name the image's source")
        revision, commit_time = "unknown", None
        try:
            out = run(["git", "-C", str(root), "log", "-1", "--format=%H %ct"], text=True).stdout.split()
            revision, commit_time = out[0], int(out[1])
            dirty = run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"], text=True).stdout
            if dirty.strip():
                # The image is not that commit: say so rather than lend it its name.
                revision += "-dirty"
        except AssemblyError:
            pass
        # SOURCE_DATE_EPOCH (reproducible-builds.org) wins, as for any build.
        given = os.environ.get("SOURCE_DATE_EPOCH")
        if given is not None:
            if not given.isdigit():
                raise AssemblyError(f"SOURCE_DATE_EPOCH={given!r} is not a number of seconds")
            commit_time = int(given)
        if commit_time is None:
            raise AssemblyError("not a git checkout: set SOURCE_DATE_EPOCH for the image's timestamps")
        return Source(package["version"], package.get("description", ""), package.get("license", "NOASSERTION"),
                      home.group(1), revision, commit_time)

    def annotations(self) -> dict[str, str]:
        return {
            "org.opencontainers.image.created": self.created,
            "org.opencontainers.image.description": self.description,
            "org.opencontainers.image.licenses": self.license,
            "org.opencontainers.image.revision": self.revision,
            "org.opencontainers.image.source": self.url,
            "org.opencontainers.image.title": "digest-gate",
            "org.opencontainers.image.version": self.version,
        }


# --- Debian packages --------------------------------------------------------------

@dataclass
class Deb:
    name: str
    version: str
    architecture: str
    url: str
    filename: str
    sha256: str
    path: pathlib.Path
    fields: dict[str, str] = field(default_factory=dict)
    control: str = ""
    md5sums: dict[str, str] = field(default_factory=dict)

    def members(self) -> list[tuple[tarfile.TarInfo, bytes]]:
        """The package's files, from its data archive."""
        data = run(["dpkg-deb", "--fsys-tarfile", str(self.path)]).stdout
        out = []
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for member in tar:
                content = tar.extractfile(member).read() if member.isfile() else b""
                out.append((member, content))
        return out

    def purl(self, distro: str) -> str:
        version = self.version.replace("%", "%25").replace("+", "%2B").replace(":", "%3A")
        return f"pkg:deb/debian/{self.name}@{version}?arch={self.architecture}&distro={distro}"


def parse_control(text: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    key = None
    for line in text.splitlines():
        if line.startswith((" ", "\t")) and key:
            fields[key] += "\n" + line
        elif ":" in line:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields


class Archive:
    """`apt-get download` into a cache directory, each file checked against
    the sha256 the package lists give."""

    def __init__(self, cache: pathlib.Path):
        self.cache = cache
        self.updated = False

    def uris(self, names: list[str]) -> dict[str, tuple[str, str, str]]:
        """(url, filename, sha256) of the version the archive offers, by
        package name (apt prints them in an order of its own)."""
        out = run(["apt-get", "download", "--print-uris", *names], text=True).stdout
        found = {}
        for line in out.splitlines():
            m = re.match(r"'([^']+)' (\S+) \d+ SHA256:([0-9a-f]{64})$", line.strip())
            if m:
                found[m.group(2).split("_", 1)[0]] = m.groups()
        if sorted(found) != sorted(names):
            raise AssemblyError(f"apt-get download --print-uris {' '.join(names)} named {sorted(found)} "
                                f"with a SHA256:\n{out}")
        return found

    def fetch(self, names: list[str]) -> list[Deb]:
        try:
            return self._fetch(names)
        except AssemblyError:
            if self.updated:
                raise
            # Stale package lists name versions the archive no longer has.
            self.updated = True
            run(["apt-get", "update", "-qq"])
            return self._fetch(names)

    def _fetch(self, names: list[str]) -> list[Deb]:
        self.cache.mkdir(parents=True, exist_ok=True)
        debs = []
        uris = self.uris(names)
        for name in names:
            url, filename, digest = uris[name]
            path = self.cache / filename
            if not (path.exists() and sha256(path.read_bytes()) == digest):
                path.unlink(missing_ok=True)
                # apt writes the file into the working directory.
                run(["apt-get", "download", "-qq", name], cwd=self.cache)
                if not path.exists() or sha256(path.read_bytes()) != digest:
                    raise AssemblyError(f"{filename}: the download does not have sha256 {digest}")
            control = run(["dpkg-deb", "-f", str(path)], text=True).stdout
            fields = parse_control(control)
            md5sums_text = run(["dpkg-deb", "-I", str(path), "md5sums"], text=True).stdout
            md5sums = {}
            for line in md5sums_text.splitlines():
                digest_md5, _, file = line.partition("  ")
                md5sums[file] = digest_md5
            debs.append(Deb(fields["Package"], fields["Version"], fields["Architecture"], url, filename, digest,
                            path, fields, control, md5sums))
        return debs


@dataclass(frozen=True)
class Take:
    """What of one Debian package goes into the image: the files under these
    paths (a path ending in / is a directory), and why."""
    package: str
    keep: tuple[str, ...]
    why: str


def takes(gcc_base: str) -> list[Take]:
    return [
        # Every shared library of glibc (the binary needs libc, libm and the
        # loader; the rest is a few hundred KB and what scanners expect to
        # find). Not the gconv modules: Rust never calls iconv.
        Take("libc6", ("lib/", "lib64/", "etc/ld.so.conf.d/", "usr/share/doc/libc6/copyright"),
             "the C library and the dynamic loader"),
        Take("libgcc-s1", ("lib/", "usr/share/doc/libgcc-s1"), "unwinding (panics)"),
        Take(gcc_base, (f"usr/share/doc/{gcc_base}/copyright",), "libgcc-s1's copyright"),
        # The bundle is built below: the package ships the certificates and
        # leaves the bundle to its postinst.
        Take("ca-certificates", ("usr/share/doc/ca-certificates/copyright",), "registry TLS"),
    ]


def kept(path: str, keep: tuple[str, ...]) -> bool:
    return any(path.startswith(k) if k.endswith("/") else path == k for k in keep)


# --- file trees and layers -----------------------------------------------------------

@dataclass
class Entry:
    kind: str  # "dir", "file" or "symlink"
    mode: int
    data: bytes = b""
    target: str = ""
    uid: int = 0
    gid: int = 0


class Tree:
    """A layer's files by path (relative, no leading slash). Parents are
    added as root-owned 0755 directories unless given."""

    def __init__(self):
        self.entries: dict[str, Entry] = {}

    def _parents(self, path: str):
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            self.entries.setdefault("/".join(parts[:i]), Entry("dir", 0o755))

    def dir(self, path: str, mode: int = 0o755, uid: int = 0, gid: int = 0):
        self._parents(path)
        self.entries[path] = Entry("dir", mode, uid=uid, gid=gid)

    def file(self, path: str, data: bytes, mode: int = 0o644):
        self._parents(path)
        self.entries[path] = Entry("file", mode, data)

    def symlink(self, path: str, target: str):
        self._parents(path)
        self.entries[path] = Entry("symlink", 0o777, target=target)

    def resolves(self, path: str, depth: int = 0) -> bool:
        """Whether an absolute path exists in the tree, following symlinks."""
        entry = self.entries.get(path.lstrip("/"))
        if entry is None or depth > 8:
            return False
        if entry.kind != "symlink":
            return True
        target = entry.target if entry.target.startswith("/") else \
            os.path.normpath(os.path.join("/" + os.path.dirname(path.lstrip("/")), entry.target))
        return self.resolves(target, depth + 1)

    def tar(self, epoch: int) -> bytes:
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted(self.entries):
                e = self.entries[path]
                info = tarfile.TarInfo(path)
                info.mtime, info.mode, info.uid, info.gid = epoch, e.mode, e.uid, e.gid
                info.uname = info.gname = ""
                if e.kind == "dir":
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                elif e.kind == "symlink":
                    info.type, info.linkname = tarfile.SYMTYPE, e.target
                    tar.addfile(info)
                else:
                    info.size = len(e.data)
                    tar.addfile(info, io.BytesIO(e.data))
        return raw.getvalue()


@dataclass
class Layer:
    tree: Tree
    created_by: str
    blob: bytes = b""
    diff_id: str = ""

    def seal(self, epoch: int) -> "Layer":
        raw = self.tree.tar(epoch)
        self.diff_id = "sha256:" + sha256(raw)
        # mtime 0: gzip would otherwise write the time of compression.
        self.blob = gzip.compress(raw, compresslevel=9, mtime=0)
        return self


def debian_release() -> dict[str, str]:
    fields = {}
    for line in pathlib.Path("/etc/os-release").read_text().splitlines():
        key, _, value = line.partition("=")
        fields[key] = value.strip('"')
    if fields.get("ID") != "debian":
        raise AssemblyError(f"the packages come from this machine's archive, and it is not Debian "
                            f"(/etc/os-release ID={fields.get('ID')})")
    return fields


def runtime_tree(debs: list[Deb], chosen: list[Take], source: Source, release: dict[str, str]) -> Tree:
    tree = Tree()
    by_name = {d.name: d for d in debs}
    for take in chosen:
        deb = by_name[take.package]
        shipped = {}
        for member, content in deb.members():
            path = member.name.removeprefix("./").rstrip("/")
            if not path or member.isdir() or not kept(path, take.keep):
                continue
            if member.issym():
                tree.symlink(path, member.linkname)
            elif member.isfile():
                tree.file(path, content, member.mode & 0o7777)
                shipped[path] = deb.md5sums.get(path) or hashlib.md5(content).hexdigest()
            else:
                raise AssemblyError(f"{deb.filename}: {path} is neither a file nor a symlink")
        # The dpkg record scanners read (distroless's layout): the control
        # fields as `dpkg -s` shows them, and the sums of the files shipped.
        record = deb.control.rstrip("\n").replace("\n", "\nStatus: install ok installed\n", 1) + "\n"
        tree.file(f"var/lib/dpkg/status.d/{deb.name}", record.encode())
        sums = "".join(f"{shipped[p]}  {p}\n" for p in sorted(shipped))
        tree.file(f"var/lib/dpkg/status.d/{deb.name}.md5sums", sums.encode())
    tree.file(CA_BUNDLE.lstrip("/"), ca_bundle(by_name["ca-certificates"]))
    uid, gid = (int(x) for x in USER.split(":"))
    tree.file("etc/passwd", f"root:x:0:0:root:/root:/sbin/nologin\n"
                            f"{USER_NAME}:x:{uid}:{gid}:{USER_NAME}:/home/{USER_NAME}:/sbin/nologin\n".encode())
    tree.file("etc/group", f"root:x:0:\n{USER_NAME}:x:{gid}:\n".encode())
    tree.file("etc/nsswitch.conf", b"passwd: files\ngroup: files\nhosts: files dns\nnetworks: files\n"
                                   b"protocols: files\nservices: files\n")
    tree.file("etc/os-release", (
        f'PRETTY_NAME="digest-gate {source.version} on Debian runtime files ({release.get("PRETTY_NAME", "")})"\n'
        f'NAME="{release.get("NAME", "Debian GNU/Linux")}"\nID=debian\n'
        f'VERSION_ID="{release.get("VERSION_ID", "")}"\nVERSION_CODENAME={release.get("VERSION_CODENAME", "")}\n'
        f'HOME_URL="{source.url}"\n').encode())
    version = pathlib.Path("/etc/debian_version")
    if version.exists():
        tree.file("etc/debian_version", version.read_bytes())
    tree.dir("root", 0o700)
    tree.dir(f"home/{USER_NAME}", 0o700, uid, gid)
    tree.dir("tmp", 0o1777)
    return tree


def ca_bundle(deb: Deb) -> bytes:
    """What update-ca-certificates builds on install: the Mozilla roots the
    package ships, concatenated in sorted order."""
    certs = sorted((m.name, content) for m, content in deb.members()
                   if m.isfile() and m.name.startswith("./usr/share/ca-certificates/mozilla/")
                   and m.name.endswith(".crt"))
    if not certs:
        raise AssemblyError(f"{deb.filename} ships no Mozilla certificates")
    return b"".join(c if c.endswith(b"\n") else c + b"\n" for _, c in certs)


# --- the binary ----------------------------------------------------------------

def elf_machine(data: bytes) -> tuple[str, str]:
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise AssemblyError("the binary is not a 64-bit little-endian ELF executable")
    machine = int.from_bytes(data[18:20], "little")
    if machine not in MACHINES:
        raise AssemblyError(f"the binary's ELF machine {machine} is not one digest-gate builds for")
    return MACHINES[machine]


def stripped(binary: pathlib.Path) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "digest-gate"
        run(["strip", "--strip-all", "-o", str(out), str(binary)])
        return out.read_bytes()


def needs(data: bytes) -> tuple[str, list[str]]:
    """The binary's program interpreter and the libraries it names."""
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "bin"
        path.write_bytes(data)
        headers = run(["readelf", "--program-headers", "--dynamic", "--wide", str(path)], text=True).stdout
    interp = re.search(r"Requesting program interpreter: ([^\]]+)\]", headers)
    if not interp:
        raise AssemblyError("the binary names no program interpreter (a static binary needs no runtime files)")
    return interp.group(1), re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", headers)


def check_runtime(data: bytes, tree: Tree, multiarch: str):
    interp, libraries = needs(data)
    missing = [interp] if not tree.resolves(interp) else []
    missing += [lib for lib in libraries if not tree.resolves(f"/lib/{multiarch}/{lib}")]
    if missing:
        raise AssemblyError(f"the binary needs {', '.join(missing)}, which no package in the image provides")


# --- the layout -----------------------------------------------------------------

def descriptor(media_type: str, data: bytes, **extra) -> dict:
    return {"mediaType": media_type, "digest": "sha256:" + sha256(data), "size": len(data), **extra}


def image_config(layers: list[Layer], arch: str, source: Source) -> bytes:
    return canonical({
        "created": source.created,
        "architecture": arch,
        "os": "linux",
        "config": {"User": USER, "Env": ENV, "Entrypoint": ENTRYPOINT, "Cmd": CMD,
                   "ExposedPorts": {p: {} for p in PORTS}, "WorkingDir": "/", "Labels": source.annotations()},
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
        "history": [{"created": source.created, "created_by": layer.created_by} for layer in layers],
    })


def write_layout(out: pathlib.Path, layers: list[Layer], config: bytes, arch: str, source: Source) -> dict:
    """Writes the layout next to `out` and moves it into place whole, so an
    interrupted run never leaves a layout that looks complete."""
    manifest = canonical({
        "schemaVersion": 2, "mediaType": MANIFEST,
        "config": descriptor(CONFIG, config),
        "layers": [descriptor(LAYER, layer.blob) for layer in layers],
        "annotations": source.annotations(),
    })
    blobs = [config, manifest] + [layer.blob for layer in layers]
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    (partial / "blobs" / "sha256").mkdir(parents=True)
    for blob in blobs:
        (partial / "blobs" / "sha256" / sha256(blob)).write_bytes(blob)
    (partial / "oci-layout").write_bytes(canonical({"imageLayoutVersion": "1.0.0"}))
    entry = descriptor(MANIFEST, manifest, platform={"architecture": arch, "os": "linux"},
                       annotations={"org.opencontainers.image.ref.name": source.version})
    (partial / "index.json").write_bytes(canonical({"schemaVersion": 2, "mediaType": INDEX, "manifests": [entry]}))
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    return entry


# --- the lock file and the SBOM ----------------------------------------------------

def lock(debs: list[Deb], chosen: list[Take], image: dict, arch: str, release: dict[str, str],
         bundle: bytes) -> dict:
    why = {t.package: t.why for t in chosen}
    return {
        "image": image["digest"],
        "architecture": arch,
        "debian": {"id": release.get("ID"), "version": release.get("VERSION_ID"),
                   "codename": release.get("VERSION_CODENAME")},
        "packages": [{"name": d.name, "version": d.version, "architecture": d.architecture,
                      "source": d.fields.get("Source", d.name), "filename": d.filename, "sha256": d.sha256,
                      "url": d.url, "why": why[d.name]} for d in sorted(debs, key=lambda d: d.name)],
        "ca_bundle": {"path": CA_BUNDLE, "certificates": bundle.count(b"-----BEGIN CERTIFICATE-----"),
                      "sha256": sha256(bundle)},
    }


def linked_crates(root: pathlib.Path, triple: str) -> list[dict]:
    """The crates linked into the binary for `triple`: cargo's resolve for
    that platform, walked from digest-gate along normal dependencies only
    (not dev or build ones), without proc macros (they run in the compiler)."""
    meta = json.loads(run(["cargo", "metadata", "--format-version", "1", "--locked", "--offline",
                           "--filter-platform", triple, "--manifest-path", str(root / "Cargo.toml")],
                          text=True).stdout)
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    root_id = meta["resolve"]["root"]

    def proc_macro(package: dict) -> bool:
        return any("proc-macro" in t["kind"] for t in package["targets"])
    seen, todo = set(), [root_id]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        for dep in nodes[current]["deps"]:
            # A proc macro and what it depends on run in the compiler.
            if any(k["kind"] is None for k in dep["dep_kinds"]) and not proc_macro(packages[dep["pkg"]]):
                todo.append(dep["pkg"])
    seen.discard(root_id)
    return sorted((packages[i] for i in seen), key=lambda p: (p["name"], p["version"]))


def spdx_license(expression: str | None) -> str:
    if not expression:
        return "NOASSERTION"
    # The old crates.io shorthand "MIT/Apache-2.0" means either.
    return re.sub(r"\s*/\s*", " OR ", expression.strip())


def spdx_id(*parts: str) -> str:
    return "SPDXRef-" + "-".join(re.sub(r"[^A-Za-z0-9.]+", "-", p) for p in parts)


def sbom(root: pathlib.Path, source: Source, image: dict, arch: str, triple: str, binary: bytes,
         debs: list[Deb], release: dict[str, str]) -> dict:
    checksums = {(p["name"], p["version"]): p.get("checksum")
                 for p in tomllib.loads((root / "Cargo.lock").read_text())["package"]}
    hexdigest = image["digest"].split(":", 1)[1]
    image_id, binary_id = "SPDXRef-image", "SPDXRef-digest-gate"
    distro = f"debian-{release.get('VERSION_ID', '')}"
    packages = [
        {"SPDXID": image_id, "name": "digest-gate", "versionInfo": source.version,
         "primaryPackagePurpose": "CONTAINER", "downloadLocation": "NOASSERTION", "filesAnalyzed": False,
         "supplier": "NOASSERTION", "licenseConcluded": "NOASSERTION", "licenseDeclared": "NOASSERTION",
         "copyrightText": "NOASSERTION", "checksums": [{"algorithm": "SHA256", "checksumValue": hexdigest}],
         "externalRefs": [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                           "referenceLocator": f"pkg:oci/digest-gate@sha256%3A{hexdigest}"
                                               f"?arch={arch}&tag={source.version}"}]},
        {"SPDXID": binary_id, "name": "digest-gate", "versionInfo": source.version,
         "primaryPackagePurpose": "APPLICATION", "downloadLocation": f"git+{source.url}@{source.revision}",
         "filesAnalyzed": False, "supplier": "NOASSERTION", "licenseConcluded": "NOASSERTION",
         "licenseDeclared": spdx_license(source.license), "copyrightText": "NOASSERTION",
         "checksums": [{"algorithm": "SHA256", "checksumValue": sha256(binary)}],
         "comment": f"{BINARY}, stripped"},
    ]
    relationships = [{"spdxElementId": "SPDXRef-DOCUMENT", "relationshipType": "DESCRIBES",
                      "relatedSpdxElement": image_id},
                     {"spdxElementId": image_id, "relationshipType": "CONTAINS", "relatedSpdxElement": binary_id}]
    for deb in sorted(debs, key=lambda d: d.name):
        deb_id = spdx_id("deb", deb.name)
        packages.append({
            "SPDXID": deb_id, "name": deb.name, "versionInfo": deb.version, "downloadLocation": deb.url,
            "filesAnalyzed": False, "supplier": f"Organization: {deb.fields.get('Maintainer', 'Debian')}",
            "sourceInfo": f"built package from: {deb.fields.get('Source', deb.name)}",
            "licenseConcluded": "NOASSERTION", "licenseDeclared": "NOASSERTION", "copyrightText": "NOASSERTION",
            "checksums": [{"algorithm": "SHA256", "checksumValue": deb.sha256}],
            "externalRefs": [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                              "referenceLocator": deb.purl(distro)}]})
        relationships.append({"spdxElementId": image_id, "relationshipType": "CONTAINS",
                              "relatedSpdxElement": deb_id})
        if deb.name in ("libc6", "libgcc-s1"):
            relationships.append({"spdxElementId": binary_id, "relationshipType": "DYNAMIC_LINK",
                                  "relatedSpdxElement": deb_id})
    for crate in linked_crates(root, triple):
        crate_id = spdx_id("crate", crate["name"], crate["version"])
        entry = {"SPDXID": crate_id, "name": crate["name"], "versionInfo": crate["version"],
                 "downloadLocation": "NOASSERTION", "filesAnalyzed": False, "supplier": "NOASSERTION",
                 "licenseConcluded": "NOASSERTION", "licenseDeclared": spdx_license(crate.get("license")),
                 "copyrightText": "NOASSERTION",
                 "externalRefs": [{"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
                                   "referenceLocator": f"pkg:cargo/{crate['name']}@{crate['version']}"}]}
        checksum = checksums.get((crate["name"], crate["version"]))
        if checksum and (crate.get("source") or "").startswith("registry+"):
            entry["downloadLocation"] = f"https://crates.io/api/v1/crates/{crate['name']}/{crate['version']}/download"
            entry["checksums"] = [{"algorithm": "SHA256", "checksumValue": checksum}]
        packages.append(entry)
        relationships.append({"spdxElementId": binary_id, "relationshipType": "STATIC_LINK",
                              "relatedSpdxElement": crate_id})
    return {
        "spdxVersion": "SPDX-2.3", "dataLicense": "CC0-1.0", "SPDXID": "SPDXRef-DOCUMENT",
        "name": f"digest-gate-{source.version}-image",
        "documentNamespace": f"{source.url}/spdx/image/{source.version}/{hexdigest}",
        "creationInfo": {"created": source.created, "creators": ["Tool: digest-gate-image-assemble"]},
        "packages": packages, "relationships": relationships,
    }


# --- the whole ----------------------------------------------------------------------

@dataclass
class Assembled:
    out: pathlib.Path
    digest: str
    arch: str
    compressed: int
    uncompressed: int


def assemble(binary: pathlib.Path, out: pathlib.Path, cache: pathlib.Path, root: pathlib.Path = ROOT) -> Assembled:
    source = Source.read(root)
    raw = binary.read_bytes()
    arch, triple = elf_machine(raw)
    host_arch = run(["dpkg", "--print-architecture"], text=True).stdout.strip()
    if host_arch != arch:
        raise AssemblyError(f"the binary is {arch}, and this machine's archive serves {host_arch} packages")
    release = debian_release()
    archive = Archive(cache)
    debs = archive.fetch(["libc6", "libgcc-s1", "ca-certificates"])
    depends = next(d for d in debs if d.name == "libgcc-s1").fields.get("Depends", "")
    base = re.search(r"\b(gcc-\d+-base)\b", depends)
    if not base:
        raise AssemblyError(f"libgcc-s1 depends on no gcc-N-base package (Depends: {depends})")
    debs += archive.fetch([base.group(1)])
    chosen = takes(base.group(1))
    runtime = runtime_tree(debs, chosen, source, release)
    multiarch = run(["dpkg-architecture", "-qDEB_HOST_MULTIARCH"], text=True).stdout.strip() \
        if shutil.which("dpkg-architecture") else triple.replace("-unknown", "")
    program = stripped(binary)
    check_runtime(program, runtime, multiarch)
    app = Tree()
    app.file(BINARY.lstrip("/"), program, 0o755)
    names = ", ".join(f"{d.name} {d.version}" for d in debs)
    layers = [Layer(runtime, f"image/assemble.py: Debian runtime files ({names}), {USER_NAME} user").seal(source.epoch),
              Layer(app, f"image/assemble.py: {BINARY} (stripped)").seal(source.epoch)]
    config = image_config(layers, arch, source)
    entry = write_layout(out, layers, config, arch, source)
    bundle = runtime.entries[CA_BUNDLE.lstrip("/")].data
    out.with_name(out.name + ".lock.json").write_text(
        json.dumps(lock(debs, chosen, entry, arch, release, bundle), indent=2) + "\n")
    out.with_name(out.name + ".spdx.json").write_text(
        json.dumps(sbom(root, source, entry, arch, triple, program, debs, release), indent=2) + "\n")
    return Assembled(out, entry["digest"], arch, sum(len(layer.blob) for layer in layers),
                     sum(len(e.data) for layer in layers for e in layer.tree.entries.values()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Assemble digest-gate's OCI image (see the module's docstring).")
    parser.add_argument("--binary", type=pathlib.Path, required=True, help="the release binary")
    parser.add_argument("--out", type=pathlib.Path, required=True, help="the OCI layout directory to write")
    parser.add_argument("--cache", type=pathlib.Path,
                        default=pathlib.Path(os.environ.get("DIGEST_GATE_IMAGE_CACHE",
                                                            pathlib.Path.home() / ".cache" / "digest-gate-image")),
                        help="where downloaded Debian packages are kept (default ~/.cache/digest-gate-image)")
    args = parser.parse_args(argv)
    try:
        done = assemble(args.binary, args.out, args.cache)
    except (AssemblyError, OSError) as e:
        print(f"image/assemble.py: {e}", file=sys.stderr)
        return 1
    print(f"{done.out}: digest-gate linux/{done.arch} {done.digest} "
          f"({done.compressed / 1e6:.1f} MB compressed, {done.uncompressed / 1e6:.1f} MB of files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
