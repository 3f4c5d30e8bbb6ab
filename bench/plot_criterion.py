#!/usr/bin/env python3
"""Summarises the criterion run (`cargo bench --bench admission`) from
target/criterion: a table of medians and ratios, and an SVG of decision cost
against allowlist size, with the Rego evaluation of the same policy beside it.

    python3 bench/plot_criterion.py [--out bench/results]
"""

from __future__ import annotations

import argparse
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
CRITERION = ROOT / "target" / "criterion"


def estimate(group: str, bench: str) -> dict | None:
    path = CRITERION / group / bench / "new" / "estimates.json"
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    median = data["median"]
    return {"ns": median["point_estimate"], "low": median["confidence_interval"]["lower_bound"],
            "high": median["confidence_interval"]["upper_bound"]}


def bars_svg(rows: list[tuple[str, float, str]], title: str, path: pathlib.Path):
    """Horizontal bars on a log scale (the Rego bars are far longer)."""
    import math
    w, left, right, top, bar, gap = 720, 230, 90, 40, 22, 10
    h = top + len(rows) * (bar + gap) + 30
    vmax = max(v for _, v, _ in rows)
    vmin = min(v for _, v, _ in rows)
    lo, hi = math.log10(vmin) - 0.3, math.log10(vmax) + 0.1
    x = lambda v: left + (w - left - right) * (math.log10(v) - lo) / (hi - lo)  # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
             f'<text x="10" y="20" font-size="14">{title}</text>']
    for i, (label, value, color) in enumerate(rows):
        y = top + i * (bar + gap)
        parts.append(f'<text x="{left - 8}" y="{y + 15}" text-anchor="end">{label}</text>')
        parts.append(f'<rect x="{left}" y="{y}" width="{x(value) - left:.1f}" height="{bar}" fill="{color}"/>')
        text = f"{value / 1000:.1f} µs" if value >= 1000 else f"{value:.0f} ns"
        parts.append(f'<text x="{x(value) + 6:.1f}" y="{y + 15}">{text}</text>')
    parts.append(f'<text x="{left}" y="{h - 8}" fill="#555">log scale; median of criterion samples</text>')
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    out = pathlib.Path(ap.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    groups = {
        "reference_parse": ["digest", "tag_and_digest", "tag", "short"],
        "decide_pod_containers": ["1", "10", "50"],
        "decide_allowlist_size": ["10", "1000", "100000"],
        "review_response": ["modelmesh_pod_allow", "modelmesh_pod_rewrite", "servingruntime_allow",
                            "servingruntime_rewrite", "json_floor_modelmesh_pod"],
        "rego_vs_native": ["native/10", "rego/10", "native/1000", "rego/1000"],
    }
    results = {g: {b: estimate(g, b) for b in bs} for g, bs in groups.items()}
    lines = ["| benchmark | median | 95% interval |", "|---|---|---|"]
    for g, bs in results.items():
        for b, e in bs.items():
            if e:
                lines.append(f"| {g}/{b} | {e['ns'] / 1000:.2f} µs | {e['low'] / 1000:.2f} – {e['high'] / 1000:.2f} µs |")
    size = results["decide_allowlist_size"]
    rego = results["rego_vs_native"]
    ratios = {}
    if size["10"] and size["100000"]:
        ratios["allowlist_100000_vs_10"] = size["100000"]["ns"] / size["10"]["ns"]
    for n in ["10", "1000"]:
        if rego[f"native/{n}"] and rego[f"rego/{n}"]:
            ratios[f"rego_over_native_{n}"] = rego[f"rego/{n}"]["ns"] / rego[f"native/{n}"]["ns"]
    resp = results["review_response"]
    if resp["modelmesh_pod_allow"] and resp["json_floor_modelmesh_pod"]:
        ratios["review_over_json_floor"] = resp["modelmesh_pod_allow"]["ns"] / resp["json_floor_modelmesh_pod"]["ns"]
    lines.append("")
    lines += [f"- {k}: {v:.2f}" for k, v in ratios.items()]
    (out / "criterion.md").write_text("\n".join(lines) + "\n")
    (out / "criterion.json").write_text(json.dumps({"results": results, "ratios": ratios}, indent=2) + "\n")
    rows = []
    for n in ["10", "1000", "100000"]:
        if size[n]:
            rows.append((f"digest-gate, {int(n):,} repositories", size[n]["ns"], "#1f77b4"))
    for n in ["10", "1000"]:
        if rego[f"rego/{n}"]:
            rows.append((f"Rego (regorus), {int(n):,} repositories", rego[f"rego/{n}"]["ns"], "#d62728"))
    if rows:
        bars_svg(rows, "Decision for a 5-container ModelMesh pod vs allowlist size", out / "decision-cost.svg")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
