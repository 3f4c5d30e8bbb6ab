"""The Dockerfile: hadolint clean at warning level, consistent with what the
build needs, and with the image `make image` assembles (image/assemble.py),
for users who have an engine. No Docker engine runs here, so the Dockerfile
itself is not built; the assembled image is, and runs in the e2e suite."""

from __future__ import annotations

import json
import pathlib
import re
import shutil
import subprocess
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "image"))
import assemble  # noqa: E402 (needs the path above)

DOCKERFILE = ROOT / "Dockerfile"


def hadolint() -> str:
    found = shutil.which("hadolint") or str(pathlib.Path(sys.executable).parent / "hadolint")
    return found


def test_hadolint_passes_at_warning_level():
    run = subprocess.run([hadolint(), "--failure-threshold", "warning", str(DOCKERFILE)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_hadolint_would_catch_a_regression(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text(DOCKERFILE.read_text().replace("USER 65532:65532", "USER root").replace(
        "FROM gcr.io/distroless/cc-debian12:nonroot", "FROM gcr.io/distroless/cc-debian12:latest"))
    run = subprocess.run([hadolint(), "--failure-threshold", "warning", str(bad)], capture_output=True, text=True)
    assert run.returncode != 0


def stages(text: str) -> list[list[str]]:
    out: list[list[str]] = []
    logical = re.sub(r"\\\n", " ", text)
    for line in logical.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            out.append([])
        out[-1].append(line)
    return out


def test_build_copies_everything_the_crate_embeds():
    text = DOCKERFILE.read_text()
    copied = [line.split()[1:-1] for stage in stages(text) for line in stage if line.startswith("COPY ") and "--from" not in line]
    sources = {src for group in copied for src in group}
    assert {"Cargo.toml", "Cargo.lock", "src"} <= sources
    assert "--locked" in text
    for path in (ROOT / "src").rglob("*.rs"):
        for included in re.findall(r'include_(?:str|bytes)!\("([^"]+)"\)', path.read_text()):
            target = (path.parent / included).resolve().relative_to(ROOT)
            assert any(str(target) == s or str(target).startswith(s.rstrip("/") + "/") for s in sources), \
                f"{path.relative_to(ROOT)} embeds {target}, which the Dockerfile does not copy"
    assert not (ROOT / "build.rs").exists(), "a build script would need copying too"


def test_cargo_accepts_what_the_build_stage_copies(tmp_path):
    """Replays the build stage's COPY steps into a scratch directory and asks
    cargo to resolve the locked dependency set there (offline, from the cache
    `make test` filled): a target the manifest declares but the image lacks,
    or a missing lock file, fails here instead of in `docker build`."""
    workdir = tmp_path / "src-root"
    workdir.mkdir()

    def copy(line):
        *sources, dest = line.split()[1:]
        for src in sources:
            origin = ROOT / src
            target = workdir / dest / origin.name if dest.endswith("/") else workdir / dest
            target.parent.mkdir(parents=True, exist_ok=True)
            if origin.is_dir():
                shutil.copytree(origin, target, dirs_exist_ok=True)
            else:
                shutil.copy(origin, target)

    def cargo_fetch():
        run = subprocess.run(["cargo", "fetch", "--locked", "--offline"], cwd=workdir, capture_output=True, text=True)
        assert run.returncode == 0, run.stderr

    build = [line for line in stages(DOCKERFILE.read_text())[0] if line.startswith(("COPY ", "RUN "))]
    first_run = next(i for i, line in enumerate(build) if line.startswith("RUN "))
    # The dependency step: what is copied before it, plus the stubs it writes.
    for line in build[:first_run]:
        copy(line)
    (workdir / "src").mkdir(exist_ok=True)
    (workdir / "src" / "main.rs").write_text("fn main() {}\n")
    (workdir / "src" / "lib.rs").write_text("\n")
    cargo_fetch()
    # The full build: everything the stage copies.
    shutil.rmtree(workdir / "src")
    for line in build[first_run:]:
        if line.startswith("COPY "):
            copy(line)
    cargo_fetch()


def test_runtime_stage_is_minimal_and_non_root():
    final = stages(DOCKERFILE.read_text())[-1]
    base = final[0].split()[1]
    assert base.startswith("gcr.io/distroless/cc") and ":latest" not in base
    user = next(line for line in final if line.startswith("USER ")).split()[1]
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "a numeric non-root user lets runAsNonRoot verify it"
    assert "EXPOSE 8443 8080" in final
    assert any(line.startswith('ENTRYPOINT ["/usr/local/bin/digest-gate"]') for line in final)
    for stage in stages(DOCKERFILE.read_text()):
        image = stage[0].split()[1]
        assert ":" in image.split("/")[-1] and not image.endswith(":latest"), f"{image} must be pinned"


def test_the_dockerfile_makes_the_image_make_image_assembles():
    """Same binary path, user, entrypoint, default command and ports: a
    user who builds either gets the container the chart expects."""
    final = stages(DOCKERFILE.read_text())[-1]

    def instruction(name: str) -> str:
        (line,) = [line for line in final if line.startswith(name + " ")]
        return line[len(name) + 1:].strip()
    copied = instruction("COPY").split()
    assert copied[-1] == assemble.BINARY and copied[-2].endswith("/digest-gate")
    assert instruction("USER") == assemble.USER
    assert json.loads(instruction("ENTRYPOINT")) == assemble.ENTRYPOINT
    assert json.loads(instruction("CMD")) == assemble.CMD
    assert sorted(f"{p}/tcp" for p in instruction("EXPOSE").split()) == sorted(assemble.PORTS)
