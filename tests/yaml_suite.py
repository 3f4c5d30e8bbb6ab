"""PyYAML's figures on the YAML test suite, for src/yaml/conformance.md.

Run with the project's venv (PyYAML is pinned in tests/chart/requirements.txt):
    .venv/bin/python tests/yaml_suite.py
Counts what `tests/yaml_suite.rs` counts for saphyr-parser and our reader:
valid cases accepted, invalid cases refused, and valid cases with an
in.json that read as it (numbers compared by value).
"""

import json
import pathlib
import sys

import yaml

ROOT = pathlib.Path(__file__).parent / "fixtures" / "yaml-test-suite"


def cases():
    for d in sorted(ROOT.iterdir()):
        if not d.is_dir():
            continue
        if (d / "in.yaml").exists():
            yield d
        for sub in sorted(d.iterdir()):
            if sub.is_dir() and (sub / "in.yaml").exists():
                yield sub


def same(a, b):
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


def main():
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    valid = invalid = accepted = refused = with_json = as_json = 0
    for case in cases():
        text = (case / "in.yaml").read_bytes()
        try:
            docs = list(yaml.load_all(text, Loader=loader))
            ok = True
        except Exception:  # any refusal counts, as for a CLI
            ok = False
        if (case / "error").exists():
            invalid += 1
            refused += not ok
            continue
        valid += 1
        accepted += ok
        if not (case / "in.json").exists():
            continue
        with_json += 1
        if not ok:
            continue
        raw = (case / "in.json").read_text()
        decoder, want, at = json.JSONDecoder(), [], 0
        while raw[at:].strip():
            at += len(raw[at:]) - len(raw[at:].lstrip())
            value, at = decoder.raw_decode(raw, at)
            want.append(value)
        got = docs if len(docs) == len(want) else [d for d in docs if d is not None]
        try:
            as_json += len(got) == len(want) and all(same(a, b) for a, b in zip(got, want))
        except TypeError:
            pass
    print(f"PyYAML {yaml.__version__} ({loader.__name__})")
    print(f"valid accepted:   {accepted}/{valid}")
    print(f"invalid refused:  {refused}/{invalid}")
    print(f"read as in.json:  {as_json}/{with_json} (valid cases that have one)")


if __name__ == "__main__":
    sys.exit(main())
