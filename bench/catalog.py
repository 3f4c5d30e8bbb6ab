#!/usr/bin/env python3
"""A file-based catalog of --mib MiB filtered to one package: digest-gate
against `jq -c 'select(.package=="rhods-operator")'` over the same file, in
the same run.

    python3 bench/catalog.py [--mib 200] [--runs 3] [--binary PATH]

The catalog is generated as opm renders one (JSON objects one after another,
indented): the real rhods-operator fragment of tests/fixtures/olm (its
package, 20 channels and 4 bundles, converted to JSON) and, around it, other
packages shaped like it: channels with replaces/skips/skipRange, bundles with
~90 digest-pinned relatedImages and olm.bundle.object properties of base64
(the CSV and CRDs a real bundle embeds, which make up most of a catalog's
bytes). Measured by the kernel's accounting (bench/rss.py): digest-gate
`allowlist lint --catalog-package rhods-operator` (what `convert` and
`serve` load the same way), the same without the filter (every package
kept), and jq. Writes target/bench-catalog/report.md.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import pathlib
import random
import shutil
import statistics
import subprocess
import sys

import yaml

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from rss import ROOT, binary_argument, built, measure, write_report  # noqa: E402

OUT = ROOT / "target" / "bench-catalog"
FIXTURES = ROOT / "tests" / "fixtures" / "olm" / "rhods"


def digest(*parts: object) -> str:
    return "sha256:" + hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()


def package(name: str, releases: int, rnd: random.Random) -> list[dict]:
    """One package as opm renders it: the package, a channel, its bundles."""
    versions = [f"1.{i}.0" for i in range(releases)]
    entries = []
    for i, v in enumerate(versions):
        entry = {"name": f"{name}.v{v}"}
        if i:
            entry["replaces"] = f"{name}.v{versions[i - 1]}"
            entry["skipRange"] = f">=1.{i - 1}.0 <{v}"
        entries.append(entry)
    blobs = [{"schema": "olm.package", "name": name, "defaultChannel": "stable"},
             {"schema": "olm.channel", "package": name, "name": "stable", "entries": entries}]
    for v in versions:
        related = [{"name": f"image-{j}", "image": f"registry.example.com/{name}/image-{j}@{digest(name, v, j)}"}
                   for j in range(90)]
        # The embedded CSV and CRDs: incompressible text, as base64 of
        # manifests is to a parser.
        objects = [{"type": "olm.bundle.object",
                    "value": {"data": base64.b64encode(rnd.randbytes(rnd.randint(20_000, 120_000))).decode()}}
                   for _ in range(4)]
        blobs.append({
            "schema": "olm.bundle", "package": name, "name": f"{name}.v{v}",
            "image": f"registry.example.com/{name}/bundle@{digest(name, v, 'bundle')}",
            "properties": [{"type": "olm.package", "value": {"packageName": name, "version": v}},
                           {"type": "olm.gvk", "value": {"group": "example.com", "kind": "Thing", "version": "v1"}},
                           *objects],
            "relatedImages": related,
        })
    return blobs


def generate(path: pathlib.Path, mib: int) -> int:
    """Writes the catalog; returns its size in bytes."""
    rnd = random.Random(20261206)
    real = []
    for name in ("package-and-channels.yaml", "bundles-fast-3.x.yaml"):
        real.extend(d for d in yaml.safe_load_all((FIXTURES / name).read_text()) if d)
    target = mib * 1024 * 1024
    with path.open("w") as out:
        written, n, placed = 0, 0, False
        while written < target or not placed:
            # The real package in the middle of the file, as one of many,
            # whatever the size asked for.
            middle = not placed and written >= target // 2
            placed = placed or middle
            blobs = real if middle else package(f"operator-{n:04d}", 8, rnd)
            for blob in blobs:
                text = json.dumps(blob, indent=4) + "\n"
                out.write(text)
                written += len(text)
            n += 1
    return path.stat().st_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3)
    binary_argument(ap)
    args = ap.parse_args()
    binary = built(args.binary)
    jq = shutil.which("jq")
    assert jq, "jq is not installed (apt-get install jq)"
    OUT.mkdir(parents=True, exist_ok=True)
    catalog = OUT / "catalog.json"
    size = generate(catalog, args.mib)
    sink = OUT / "out.txt"

    commands = {
        "digest-gate lint --catalog-package rhods-operator": [binary, "allowlist", "lint", "--catalog-package",
                                                              "rhods-operator", str(catalog)],
        "digest-gate lint (every package)": [binary, "allowlist", "lint", str(catalog)],
        "jq -c 'select(.package==\"rhods-operator\")'": [jq, "-c", 'select(.package=="rhods-operator")',
                                                         str(catalog)],
    }
    results = {}
    for name, argv in commands.items():
        runs = [measure(argv, sink) for _ in range(args.runs)]
        assert all(code == 0 for _, _, code in runs), (name, runs)
        results[name] = (statistics.median(r[0] for r in runs), max(r[1] for r in runs))
        if "--catalog-package" in argv:
            lint = sink.read_text()
            assert "catalog package rhods-operator: 4 bundle(s) read, 4 promoted" in lint, lint[:2000]
    base_s, base_mib = results["jq -c 'select(.package==\"rhods-operator\")'"]
    lines = [f"# A {size / 2**20:.0f} MiB file-based catalog filtered to one package",
             "", f"Median of {args.runs} runs, peak RSS the largest; ratios against jq in the same run.", "",
             "| command | seconds | × jq | peak RSS MiB | × jq |", "|---|---|---|---|---|"]
    for name, (s, mib) in results.items():
        lines.append(f"| `{name}` | {s:.2f} | {s / base_s:.2f} | {mib:.1f} | {mib / base_mib:.2f} |")
    write_report(OUT, lines)
    catalog.unlink()


if __name__ == "__main__":
    main()
