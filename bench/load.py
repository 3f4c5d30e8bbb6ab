#!/usr/bin/env python3
"""Load benchmark: digest-gate against a null webhook on the same stack.

    make bench-load            # or: python3 bench/load.py [--runs 5] [--duration 10]

Builds release binaries, generates certificates (certs/gen-certs.sh) and a
10,000-repository allowlist, then drives `digest-gate serve` and the null
webhook (examples/null_webhook.rs: same TLS, HTTP and accept loop; decodes the
review and allows it) with oha over HTTP/1.1 keep-alive on loopback,
alternating A/B runs. Reports requests/s, p50/p99 latency and peak RSS for
both with min/median/max over the runs, the ratios, p99 at half of the
maximum throughput, one HTTP/2 run, and a latency-versus-concurrency sweep,
written to target/bench-load/ (results.json, report.md, latency.svg).

With --baseline OTHER_BINARY (another build of digest-gate, e.g. main's in a
git worktree) it joins the alternation and the ratios against it are reported;
--ab-only stops after the alternating runs.

Only 127.0.0.1 is used; every run is bounded in time.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[1]
UID_ONLY = "null, uid only"
BASELINE = "digest-gate, baseline"
OUT = ROOT / "target" / "bench-load"


def sh(*argv, **kw):
    return subprocess.run(argv, check=True, **kw)


def oha_path() -> str:
    found = os.environ.get("OHA") or shutil.which("oha")
    if found:
        return found
    root = ROOT / "target" / "bench-tools"
    path = root / "bin" / "oha"
    if not path.exists():
        print("installing oha (cargo install oha --locked) ...", file=sys.stderr)
        sh("cargo", "install", "oha", "--locked", "--root", str(root))
    return str(path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prepare(entries: int) -> dict:
    OUT.mkdir(parents=True, exist_ok=True)
    sh("cargo", "build", "--release", "--locked", "--bin", "digest-gate", "--example", "null_webhook", cwd=ROOT)
    certs = OUT / "certs"
    sh("sh", str(ROOT / "certs" / "gen-certs.sh"), "--out", str(certs), "--namespace", "bench",
       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # The pod's five images plus filler repositories, as a plain list.
    lines = [l for l in (ROOT / "bench" / "modelmesh-promoted.txt").read_text().splitlines() if l and not l.startswith("#")]
    for i in range(entries - len(lines)):
        digest = f"{(i * 0x9E3779B97F4A7C15) & ((1 << 256) - 1):064x}"
        lines.append(f"registry.example.com/team-{i % 97}/model-server-{i}:v{i}@sha256:{digest}")
    allowlist = OUT / "allowlist.txt"
    allowlist.write_text("\n".join(lines) + "\n")
    pod = json.loads((ROOT / "bench" / "modelmesh-pod.json").read_text())
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "0d9f0a47-3b1e-4c71-8a8e-5e0b9a7c2f11",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": "demo-models", "operation": "CREATE",
        "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller",
                     "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system"]},
        "object": pod, "oldObject": None, "dryRun": False,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}}}
    body = OUT / "review.json"
    body.write_text(json.dumps(review))
    return {"certs": certs, "allowlist": allowlist, "body": body, "lines": len(lines)}


class Server:
    # The other build --baseline names.
    baseline: str | None = None

    def __init__(self, name: str, files: dict):
        self.name = name
        self.port = free_port()
        self.admin = free_port()
        release = ROOT / "target" / "release"
        if name in ("digest-gate", BASELINE):
            binary = Server.baseline if name == BASELINE else str(release / "digest-gate")
            argv = [binary, "serve", "--tls-cert", str(files["certs"] / "tls.crt"),
                    "--tls-key", str(files["certs"] / "tls.key"), "--allowlist", str(files["allowlist"]),
                    "--listen", f"127.0.0.1:{self.port}", "--admin-listen", f"127.0.0.1:{self.admin}",
                    "--log-format", "json"]
        else:
            argv = [str(release / "examples" / "null_webhook"), "--tls-cert", str(files["certs"] / "tls.crt"),
                    "--tls-key", str(files["certs"] / "tls.key"), "--listen", f"127.0.0.1:{self.port}"]
            if name == UID_ONLY:
                argv.append("--uid-only")
        # Decision logs go to a file, as a cluster's log collector would take them.
        self.log = open(OUT / f"{name.replace(' ', '-').replace(',', '')}.log", "ab")
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    break
            except OSError:
                assert self.proc.poll() is None, f"{name} exited"
                assert time.monotonic() < deadline, f"{name} did not start"
                time.sleep(0.05)

    def peak_rss_mib(self) -> float:
        for line in pathlib.Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def oha(url: str, files: dict, *, seconds: float, connections: int, http2: bool = False, rate: float | None = None) -> dict:
    argv = [oha_path(), "-z", f"{seconds}s", "-c", str(connections), "--no-tui", "--output-format", "json",
            "--insecure", "-m", "POST", "-T", "application/json", "-D", str(files["body"])]
    argv += ["--http2", "-p", "1"] if http2 else ["--http-version", "1.1"]
    if rate:
        argv += ["-q", str(int(rate))]
    out = subprocess.run(argv + [url], check=True, capture_output=True, text=True).stdout
    data = json.loads(out)
    codes = data["statusCodeDistribution"]
    assert set(codes) == {"200"}, f"non-200 answers: {codes}"
    p = data["latencyPercentiles"]
    return {"rps": data["summary"]["requestsPerSec"], "p50_ms": p["p50"] * 1e3, "p99_ms": p["p99"] * 1e3,
            "requests": sum(codes.values())}


def run(name: str, files: dict, **kw) -> dict:
    server = Server(name, files)
    try:
        url = f"https://127.0.0.1:{server.port}/mutate"
        oha(url, files, seconds=2, connections=kw.get("connections", 32), http2=kw.get("http2", False))  # warm-up
        result = oha(url, files, **kw)
        result["peak_rss_mib"] = server.peak_rss_mib()
        if name in ("digest-gate", BASELINE):
            with urllib.request.urlopen(f"http://127.0.0.1:{server.admin}/metrics", timeout=5) as r:
                metrics = r.read().decode()
            result["allowlist_repositories"] = next(
                int(l.split()[1]) for l in metrics.splitlines() if l.startswith("digest_gate_allowlist_repositories "))
        return result
    finally:
        server.stop()


def spread(values: list[float]) -> dict:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def svg_plot(sweep: dict, path: pathlib.Path):
    """p50 and p99 latency against concurrency, both servers (log2 x axis)."""
    w, h, left, bottom, top, right = 640, 360, 60, 40, 30, 150
    conc = sorted({c for s in sweep.values() for c in s})
    ymax = max(r["p99_ms"] for s in sweep.values() for r in s.values()) * 1.1
    xs = {c: left + (w - left - right) * i / max(1, len(conc) - 1) for i, c in enumerate(conc)}
    y = lambda v: h - bottom - (h - bottom - top) * v / ymax  # noqa: E731
    colors = {"digest-gate": "#1f77b4", "null webhook": "#ff7f0e"}
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
             f'<text x="{left}" y="18" font-size="13">Latency vs concurrency (HTTP/1.1 keep-alive, loopback, 2 cores shared with the client)</text>',
             f'<line x1="{left}" y1="{h-bottom}" x2="{w-right}" y2="{h-bottom}" stroke="black"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h-bottom}" stroke="black"/>']
    for c in conc:
        parts.append(f'<text x="{xs[c]:.0f}" y="{h-bottom+15}" text-anchor="middle">{c}</text>')
    parts.append(f'<text x="{(left + w - right)/2:.0f}" y="{h-5}" text-anchor="middle">connections</text>')
    for i in range(5):
        v = ymax * i / 4
        parts.append(f'<text x="{left-5}" y="{y(v)+4:.0f}" text-anchor="end">{v:.1f}</text>')
        parts.append(f'<line x1="{left}" y1="{y(v):.0f}" x2="{w-right}" y2="{y(v):.0f}" stroke="#ddd"/>')
    parts.append(f'<text x="15" y="{(top + h - bottom)/2:.0f}" transform="rotate(-90 15 {(top + h - bottom)/2:.0f})" text-anchor="middle">ms</text>')
    legend = 0
    for name, series in sweep.items():
        for pct, dash in [("p50_ms", ""), ("p99_ms", ' stroke-dasharray="5,3"')]:
            pts = " ".join(f"{xs[c]:.0f},{y(series[c][pct]):.1f}" for c in conc if c in series)
            parts.append(f'<polyline fill="none" stroke="{colors[name]}" stroke-width="2"{dash} points="{pts}"/>')
            ly = top + 15 * legend
            parts.append(f'<line x1="{w-right+10}" y1="{ly}" x2="{w-right+35}" y2="{ly}" stroke="{colors[name]}" stroke-width="2"{dash}/>')
            parts.append(f'<text x="{w-right+40}" y="{ly+4}">{name} {pct[:3]}</text>')
            legend += 1
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="A/B runs per server (default 5)")
    ap.add_argument("--duration", type=float, default=10, help="seconds per measured run (default 10)")
    ap.add_argument("--connections", type=int, default=32, help="connections for the A/B runs (default 32)")
    ap.add_argument("--entries", type=int, default=10_000, help="allowlist repositories (default 10,000)")
    ap.add_argument("--sweep", default="1,2,4,8,16,32,64", help="connection counts for the latency sweep")
    ap.add_argument("--half-rate-connections", type=int, default=8,
                    help="connections for the run at half of the maximum throughput (default 8)")
    ap.add_argument("--baseline", help="another digest-gate binary to compare with, in the same alternation")
    ap.add_argument("--ab-only", action="store_true", help="stop after the alternating runs")
    args = ap.parse_args()
    files = prepare(args.entries)
    names = ["digest-gate", "null webhook"]
    ab_names = names + [UID_ONLY]
    if args.baseline:
        Server.baseline = args.baseline
        ab_names.append(BASELINE)
    results: dict = {"machine": {"cpus": os.cpu_count(), "uname": " ".join(os.uname())},
                     "allowlist_repositories": files["lines"], "runs": {n: [] for n in ab_names}}

    for i in range(args.runs):
        order = ab_names if i % 2 == 0 else ab_names[::-1]
        for name in order:
            r = run(name, files, seconds=args.duration, connections=args.connections)
            results["runs"][name].append(r)
            print(f"run {i+1} {name:13} {r['rps']:8.0f} req/s  p50 {r['p50_ms']:.2f} ms  p99 {r['p99_ms']:.2f} ms  "
                  f"peak RSS {r['peak_rss_mib']:.1f} MiB", file=sys.stderr)

    summary = {}
    for name in ab_names:
        runs = results["runs"][name]
        summary[name] = {k: spread([r[k] for r in runs]) for k in ["rps", "p50_ms", "p99_ms", "peak_rss_mib"]}
    dg, null = summary["digest-gate"], summary["null webhook"]
    floor = summary[UID_ONLY]
    ratios = {"throughput": dg["rps"]["median"] / null["rps"]["median"],
              "throughput_vs_uid_only": dg["rps"]["median"] / floor["rps"]["median"],
              "p50": dg["p50_ms"]["median"] / null["p50_ms"]["median"],
              "p99": dg["p99_ms"]["median"] / null["p99_ms"]["median"],
              "peak_rss": dg["peak_rss_mib"]["max"] / null["peak_rss_mib"]["max"]}
    if args.baseline:
        base = summary[BASELINE]
        ratios.update({"throughput_vs_baseline": dg["rps"]["median"] / base["rps"]["median"],
                       "p50_vs_baseline": dg["p50_ms"]["median"] / base["p50_ms"]["median"],
                       "p99_vs_baseline": dg["p99_ms"]["median"] / base["p99_ms"]["median"]})
    if args.ab_only:
        results.update({"summary": summary, "ratios": ratios})
        (OUT / "results.json").write_text(json.dumps(results, indent=2) + "\n")
        print(json.dumps({"summary": summary, "ratios": ratios}, indent=2))
        return
    # p99 at half of digest-gate's maximum throughput, by rate limiting.
    half = dg["rps"]["median"] / 2
    half_rate = {n: run(n, files, seconds=args.duration, connections=args.half_rate_connections, rate=half)
                 for n in names}
    http2 = {n: run(n, files, seconds=args.duration, connections=args.connections, http2=True) for n in names}
    sweep = {n: {} for n in names}
    for c in [int(x) for x in args.sweep.split(",")]:
        for n in names:
            sweep[n][c] = run(n, files, seconds=max(3.0, args.duration / 2), connections=c)
    results.update({"summary": summary, "ratios": ratios, "half_rate": {"rate": half, **half_rate},
                    "http2": http2, "sweep": sweep})
    (OUT / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    svg_plot(sweep, OUT / "latency.svg")

    def row(name, s):
        return (f"| {name} | {s['rps']['min']:.0f} / {s['rps']['median']:.0f} / {s['rps']['max']:.0f} "
                f"| {s['p50_ms']['min']:.2f} / {s['p50_ms']['median']:.2f} / {s['p50_ms']['max']:.2f} "
                f"| {s['p99_ms']['min']:.2f} / {s['p99_ms']['median']:.2f} / {s['p99_ms']['max']:.2f} "
                f"| {s['peak_rss_mib']['min']:.1f} / {s['peak_rss_mib']['median']:.1f} / {s['peak_rss_mib']['max']:.1f} |")
    lines = [
        f"HTTP/1.1 keep-alive, {args.connections} connections, {args.runs} alternating runs of {args.duration:.0f} s, "
        f"allowlist of {files['lines']} repositories; min / median / max",
        "",
        "| server | requests/s | p50 ms | p99 ms | peak RSS MiB |",
        "|---|---|---|---|---|",
        row("digest-gate", dg),
        row("null webhook", null),
        row(UID_ONLY, floor),
        *([row(BASELINE, summary[BASELINE])] if args.baseline else []),
        "",
        f"Ratios (digest-gate / null webhook, medians): throughput {ratios['throughput']:.3f}, "
        f"p50 {ratios['p50']:.3f}, p99 {ratios['p99']:.3f}, peak RSS {ratios['peak_rss']:.2f}; "
        f"throughput against the uid-only floor {ratios['throughput_vs_uid_only']:.3f}",
        *([f"Against the baseline build ({args.baseline}): throughput {ratios['throughput_vs_baseline']:.3f}, "
           f"p50 {ratios['p50_vs_baseline']:.3f}, p99 {ratios['p99_vs_baseline']:.3f}"] if args.baseline else []),
        "",
        f"At half of digest-gate's maximum ({half:.0f} req/s, {args.half_rate_connections} connections): "
        f"digest-gate p99 {half_rate['digest-gate']['p99_ms']:.2f} ms, "
        f"null webhook p99 {half_rate['null webhook']['p99_ms']:.2f} ms",
        "",
        f"HTTP/2 (one stream per connection): digest-gate {http2['digest-gate']['rps']:.0f} req/s, "
        f"p99 {http2['digest-gate']['p99_ms']:.2f} ms; null webhook {http2['null webhook']['rps']:.0f} req/s, "
        f"p99 {http2['null webhook']['p99_ms']:.2f} ms",
        "",
        "| connections | " + " | ".join(f"{c}" for c in sweep["digest-gate"]) + " |",
        "|---|" + "---|" * len(sweep["digest-gate"]),
    ]
    for n in names:
        lines.append(f"| {n} req/s | " + " | ".join(f"{r['rps']:.0f}" for r in sweep[n].values()) + " |")
        lines.append(f"| {n} p99 ms | " + " | ".join(f"{r['p99_ms']:.2f}" for r in sweep[n].values()) + " |")
    report = "\n".join(lines) + "\n"
    (OUT / "report.md").write_text(report)
    print(report)
    print(f"written: {OUT / 'results.json'}, {OUT / 'report.md'}, {OUT / 'latency.svg'}", file=sys.stderr)


if __name__ == "__main__":
    main()
