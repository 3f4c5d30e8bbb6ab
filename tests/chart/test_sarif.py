"""`check --output sarif` against the SARIF 2.1.0 JSON schema (OASIS, as
serde-sarif 0.8.0 ships it: tests/data/sarif-schema-2.1.0.json), and where
its results point: the file, line and column of each image."""

from __future__ import annotations

import json
import subprocess

import jsonschema
import pytest

from conftest import ROOT, binary

SCHEMA = json.loads((ROOT / "tests" / "data" / "sarif-schema-2.1.0.json").read_text())
ALLOWLIST = ROOT / "examples" / "allowlist.yaml"


def sarif(*args: str, stdin: str | None = None) -> tuple[int, dict]:
    run = subprocess.run([str(binary()), "check", "--allowlist", str(ALLOWLIST), "-o", "sarif", *args],
                         input=stdin, capture_output=True, text=True, cwd=ROOT, timeout=60)
    document = json.loads(run.stdout)
    jsonschema.Draft7Validator(SCHEMA).validate(document)
    return run.returncode, document


def test_the_schema_would_catch_a_broken_document():
    _, document = sarif("-f", "examples/manifests")
    document["runs"][0]["results"][0]["level"] = "fatal"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(SCHEMA).validate(document)


def test_results_point_at_each_image_with_one_rule_per_reason_code():
    code, document = sarif("-f", "examples/manifests", "-f", "tests/fixtures/upstream/servingruntimes")
    assert code == 1
    run = document["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    ids = [r["id"] for r in rules]
    assert len(ids) == len(set(ids))
    assert {"digest_not_promoted", "tag_only", "placeholder", "short_name", "unlisted"} <= set(ids)
    assert "promoted" not in ids
    results = run["results"]
    assert results
    levels = set()
    for r in results:
        assert ids[r["ruleIndex"]] == r["ruleId"]
        levels.add(r["level"])
        location = r["locations"][0]["physicalLocation"]
        path = ROOT / location["artifactLocation"]["uri"]
        region = location["region"]
        line = path.read_text().splitlines()[region["startLine"] - 1]
        image = r["properties"]["image"]
        if "startColumn" in region:
            # Where the value starts, quoted or not.
            assert line[region["startColumn"] - 1:].lstrip("'\"").startswith(image), (image, line)
        else:
            # Inside a ConfigMap's embedded runtime only the line is known.
            assert image in line, (image, line)
        assert r["level"] == ("warning" if "rewrite" in r["properties"] else "error")
    assert levels == {"error", "warning"}
    assert run["invocations"][0]["executionSuccessful"] is True
    # kustomization.yaml is skipped, and said so.
    notes = [n["message"]["text"] for n in run["invocations"][0]["toolExecutionNotifications"]]
    assert any(n.startswith("skipped ") and "kustomization" in n for n in notes), notes


def test_unreadable_input_is_an_unsuccessful_invocation():
    code, document = sarif("-f", "-", stdin="kind: [\n")
    assert code == 2
    invocation = document["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is False
    assert invocation["toolExecutionNotifications"][0]["level"] == "error"
    assert document["runs"][0]["results"] == []


def test_standard_input_has_logical_locations_only():
    manifest = (ROOT / "examples" / "manifests" / "incident-servingruntime.yaml").read_text()
    code, document = sarif("-f", "-", stdin=manifest)
    assert code == 1
    [result] = document["runs"][0]["results"]
    assert result["ruleId"] == "digest_not_promoted"
    assert "physicalLocation" not in result["locations"][0]
    assert result["locations"][0]["logicalLocations"][0]["fullyQualifiedName"] == \
        "ServingRuntime demo-models/ovms: /spec/containers/0/image"


def test_audit_mode_findings_are_notes():
    code, document = sarif("-f", "examples/manifests", "--mode", "audit")
    assert code == 0
    results = document["runs"][0]["results"]
    assert {r["ruleId"] for r in results} == {"digest_not_promoted", "placeholder", "unknown_tag"}
    assert {r["level"] for r in results} == {"note"}
