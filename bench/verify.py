#!/usr/bin/env python3
"""`digest-gate allowlist verify` of an N-digest allowlist against a local
registry, against `skopeo inspect --raw` once per digest, in the same run.

    python3 bench/verify.py [--digests 1000] [--runs 3] [--binary PATH]

Starts Debian's docker-registry on loopback with TLS from a test CA (the
harness of tests/registry; `make registry-tools` installs it and skopeo),
puts N distinct image manifests in ten repositories through the
distribution API (one shared config and layer, each manifest with an
annotation of its own), and writes them as a plain allowlist. Then it
measures, by the kernel's accounting (bench/rss.py): `verify` without and
with `--platform linux/amd64` (median of --runs), and one `skopeo inspect
--raw` per digest in sequence (its wall time summed, its peak the largest
of any one process). Only 127.0.0.1. Writes target/bench-verify/report.md.
"""

from __future__ import annotations

import argparse
import http.client
import json
import pathlib
import ssl
import statistics
import subprocess
import sys
import time
import urllib.parse

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "registry"))
from rss import ROOT, binary_argument, built, measure, write_report  # noqa: E402
import registries as reg  # noqa: E402

OUT = ROOT / "target" / "bench-verify"


def upload(conn: http.client.HTTPSConnection, repo: str, data: bytes, media_type: str) -> dict:
    """A monolithic blob upload (POST then PUT ?digest=)."""
    conn.request("POST", f"/v2/{repo}/blobs/uploads/", headers={"Content-Length": "0"})
    answer = conn.getresponse()
    answer.read()
    location = answer.getheader("Location")
    digest = reg.digest(data)
    url = urllib.parse.urlsplit(location)
    query = f"{url.query}&digest={digest}" if url.query else f"digest={digest}"
    conn.request("PUT", f"{url.path}?{query}", body=data,
                 headers={"Content-Type": "application/octet-stream", "Content-Length": str(len(data))})
    answer = conn.getresponse()
    answer.read()
    assert answer.status == 201, (answer.status, location)
    return {"mediaType": media_type, "digest": digest, "size": len(data)}


def populate(registry: reg.Registry, n: int) -> list[str]:
    """N image manifests in ten repositories; their `repo@digest` names."""
    context = ssl.create_default_context(cafile=str(registry.certs / "ca.crt"))
    conn = http.client.HTTPSConnection("127.0.0.1", registry.port, context=context, timeout=30)
    layout = reg.Layout(OUT / "layout")
    layer = layout.layer("bench")
    layer_bytes = (layout.path / "blobs" / "sha256" / layer["digest"][7:]).read_bytes()
    config_bytes = reg.canonical({"architecture": "amd64", "os": "linux",
                                  "rootfs": {"type": "layers", "diff_ids": []}, "config": {}})
    names = []
    repos = [f"bench/r{i}" for i in range(10)]
    shared = {}
    for repo in repos:
        shared[repo] = (upload(conn, repo, config_bytes, "application/vnd.oci.image.config.v1+json"),
                        upload(conn, repo, layer_bytes, layer["mediaType"]))
    for i in range(n):
        repo = repos[i % len(repos)]
        config, layer_d = shared[repo]
        manifest = reg.canonical({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                                  "config": config, "layers": [layer_d],
                                  "annotations": {"org.opencontainers.image.revision": str(i)}})
        digest = reg.digest(manifest)
        conn.request("PUT", f"/v2/{repo}/manifests/{digest}", body=manifest,
                     headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"})
        answer = conn.getresponse()
        answer.read()
        assert answer.status == 201, answer.status
        names.append(f"{registry.host}/{repo}@{digest}")
    conn.close()
    return names


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--digests", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=3)
    binary_argument(ap)
    args = ap.parse_args()
    binary = built(args.binary)
    OUT.mkdir(parents=True, exist_ok=True)
    certs = OUT / "certs"
    reg.make_ca(certs)
    with reg.Registry(OUT, certs, "registry") as registry:
        started = time.perf_counter()
        names = populate(registry, args.digests)
        pushed = time.perf_counter() - started
        allowlist = OUT / "promoted.txt"
        allowlist.write_text("\n".join(names) + "\n")
        verify = [binary, "allowlist", "verify", "--quiet", "-o", "json", "--registry-ca", str(certs / "ca.crt"),
                  "--registry-auth", str(reg.auth_file(OUT / "auth.json", {})), str(allowlist)]
        results = {}
        for label, extra in [("verify", []), ("verify --platform linux/amd64", ["--platform", "linux/amd64"])]:
            runs = []
            for _ in range(args.runs):
                seconds, peak, code = measure(verify + extra, OUT / "verify.json")
                report = json.loads((OUT / "verify.json").read_text())
                if code != 0 or report["summary"]["ok"] != args.digests:
                    sys.exit(f"{label} exited {code}: {report['summary']}")
                runs.append((seconds, peak, report["summary"]["requests"]))
            results[label] = (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs), runs[0][2])
        skopeo_seconds, skopeo_peak = 0.0, 0.0
        for name in names:
            seconds, peak, code = measure([reg.skopeo(), "inspect", "--raw", f"--cert-dir={registry.skopeo_certs()}",
                                           f"docker://{name}"], OUT / "skopeo.json")
            if code != 0:
                sys.exit(f"skopeo inspect {name} exited {code}")
            skopeo_seconds += seconds
            skopeo_peak = max(skopeo_peak, peak)
    base = skopeo_seconds
    lines = [
        f"# `allowlist verify` of {args.digests:,} digests against a local registry",
        "",
        f"`{' '.join(sys.argv)}`: docker-registry 2.8 on loopback with TLS, {args.digests:,} image manifests in ten "
        f"repositories (put in {pushed:.1f} s). digest-gate: median of {args.runs} runs, release build, default "
        f"concurrency (8 in flight, 4 per host). skopeo: one `inspect --raw` per digest in sequence, in the same run.",
        "",
        "| command | wall time | × skopeo | peak RSS | registry requests |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, (seconds, peak, requests) in results.items():
        lines.append(f"| `digest-gate allowlist {label}` | {seconds:.2f} s | {seconds / base:.3f} | {peak:.1f} MiB "
                     f"| {requests:,} |")
    lines.append(f"| `skopeo inspect --raw` × {args.digests:,} | {skopeo_seconds:.2f} s | 1.000 | "
                 f"{skopeo_peak:.1f} MiB (largest process) | {args.digests:,}+ |")
    write_report(OUT, lines)


if __name__ == "__main__":
    main()
