"""results.json follows the published JSON Schema (docs/schema/results-v3.json): what dd-accept
writes validates, and every reader refuses a document that does not, naming where. Bundles
written under v1 (before `cluster`) are still read, held to v1."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest

from dd_accept.base.errors import UsageError
from dd_accept.base.results import (
    READABLE_SCHEMAS,
    SCHEMA,
    CheckResult,
    ScenarioResult,
    parse_results,
    schema_problem,
    write_results,
)
from tests.helpers import run_cli, sealed

PUBLISHED = Path(__file__).parents[2] / "docs" / "schema"
SHA = "ab" * 32


def _document(tmp_path: Path) -> dict:
    checks = [
        CheckResult.judge("overload.recovery", True, "all complete", "40/40", metrics={"records": 40, "p99_s": 0.5}),
        CheckResult.unsupported("health.unresponsive.attempt_failed", "fails", "no monitor"),
    ]
    scenarios = [ScenarioResult("overload", checks, 1.0, 2.0), ScenarioResult("drain", error="WaitTimeout: x")]
    sut = {
        "spec": "data-designer-slurm==1.0.0rc1",
        "profile": "data-designer-slurm-1.0",
        "wheels": [{"file": "a-1-py3-none-any.whl", "sha256": SHA, "size": 10}],
        "wheelhouse_digest": SHA,
        "wheel_count": 1,
        "node_image": None,
        "cluster": "existing",
    }
    return write_results(tmp_path / "results.json", scenarios, sut, allow_unsupported=True)


@pytest.mark.parametrize("version", sorted(READABLE_SCHEMAS))
def test_the_published_schemas_are_the_ones_dd_accept_validates_against(version):
    published = (PUBLISHED / READABLE_SCHEMAS[version]).read_text()
    packaged = Path(__file__).parents[2] / "src" / "dd_accept" / "base" / "schemas" / READABLE_SCHEMAS[version]
    assert published == packaged.read_text()
    schema = json.loads(published)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$id"] == version and schema["properties"]["schema"]["const"] == version


def test_a_v1_bundle_is_still_read_and_held_to_v1(tmp_path):
    """Bundles written before results carried `cluster` stay verifiable; a document that
    names v1 and carries v2's field is refused, so nothing is read as a version it is not."""
    document = copy.deepcopy(_document(tmp_path))
    document["schema"] = "dd-accept/results/v1"
    assert parse_results(json.dumps(document)) == document
    document["cluster"] = {"kind": "docker", "slurm_release": "22.05", "proctrack": "linuxproc"}
    with pytest.raises(UsageError, match=r"does not follow dd-accept/results/v1 \(at the top level"):
        parse_results(json.dumps(document))
    document["schema"] = SCHEMA
    assert parse_results(json.dumps(document)) == document


def test_what_dd_accept_writes_follows_the_schema(tmp_path):
    document = _document(tmp_path)
    assert schema_problem(document) is None
    assert parse_results((tmp_path / "results.json").read_text()) == document


@pytest.mark.parametrize(
    ("mutate", "where"),
    [
        (lambda d: d["scenarios"][1]["checks"][0].update(verdict="passed"), "scenarios/1/checks/0/verdict"),
        (lambda d: d["scenarios"][1]["checks"][0].pop("metrics"), "scenarios/1/checks/0"),
        (lambda d: d["scenarios"][1]["checks"][0]["metrics"].update(records="40"), "metrics/records"),
        (lambda d: d["scenarios"][1]["checks"][0].update(id="Overload recovery"), "scenarios/1/checks/0/id"),
        (lambda d: d["sut"]["wheels"][0].update(sha256="deadbeef"), "sut/wheels/0/sha256"),
        (lambda d: d.update(schema="dd-accept/results/v9"), "at schema"),
        (lambda d: d.update(verdict="unsupported"), "at verdict"),
        (lambda d: d.update(signed_by="someone"), "the top level"),
        (lambda d: d.pop("scenarios"), "the top level"),
    ],
)
def test_a_document_off_the_schema_is_refused_where_it_departs(tmp_path, mutate, where):
    document = copy.deepcopy(_document(tmp_path))
    mutate(document)
    with pytest.raises(UsageError, match=f"does not follow {SCHEMA}") as refused:
        parse_results(json.dumps(document))
    assert where in str(refused.value)


def test_the_writer_refuses_to_write_off_the_schema(tmp_path):
    bad = ScenarioResult("overload", [CheckResult("overload.recovery", "pass", "x", "y", metrics={"n": "many"})])
    with pytest.raises(AssertionError, match="would not follow"):
        write_results(tmp_path / "results.json", [bad], {}, False)
    assert not (tmp_path / "results.json").exists()


def test_report_and_compare_refuse_a_forged_results_file_in_one_line(tmp_path):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    document = _document(bundle)
    sealed(bundle)  # a bundle as a run leaves it, then forged: off its schema is said before the digests
    document["scenarios"][1]["checks"][0]["verdict"] = "PASS"
    (bundle / "results.json").write_text(json.dumps(document))
    for args in (["report", str(bundle), "--format", "md"], ["compare", str(bundle), str(bundle)]):
        result = run_cli(*args)
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1 and f"does not follow {SCHEMA}" in result.stderr
        assert "Traceback" not in result.stderr


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1" + "0" * 400])
def test_a_number_no_measurement_can_be_is_refused(tmp_path, number):
    """Python's JSON reader takes NaN, Infinity and integers no float holds; a results.json
    carrying one would break every reader after verify passed it."""
    text = json.dumps(_document(tmp_path)).replace('"records": 40', f'"records": {number}')
    with pytest.raises(UsageError, match=r"not JSON|too large to be a measurement"):
        parse_results(text)
