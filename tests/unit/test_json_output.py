"""`--json`: each command prints one document on stdout that follows its published schema,
with the exit status it exits with; everything a person reads goes to stderr. The schemas
under docs/schema/ are the ones dd-accept validates against."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import jsonschema
import pytest

from dd_accept.base import documents
from dd_accept.base.documents import SCHEMA_FILES
from dd_accept.base.results import SCHEMA, load_results
from dd_accept.harness.cli import JSON_COMMANDS
from dd_accept.harness.runner import run_summary
from dd_accept.reports.audit import Finding
from tests.helpers import run_cli
from tests.reports.test_bundle import _bundle, sanitizer  # noqa: F401 - the fixture the bundle needs

PUBLISHED = Path(__file__).parents[2] / "docs" / "schema"
PACKAGED = Path(__file__).parents[2] / "src" / "dd_accept" / "base" / "schemas"


def document_of(result, schema_id: str) -> dict:
    """stdout as the one JSON document a consumer reads, held to `schema_id`."""
    document = json.loads(result.stdout)
    assert document["schema"] == schema_id, document
    problem = documents.problem(document, schema_id)
    assert problem is None, problem
    assert document.get("exit_status", result.returncode) == result.returncode
    return document


@pytest.mark.parametrize("schema_id", sorted(SCHEMA_FILES))
def test_each_published_schema_is_the_packaged_one_and_valid(schema_id):
    published = (PUBLISHED / SCHEMA_FILES[schema_id]).read_text()
    assert published == (PACKAGED / SCHEMA_FILES[schema_id]).read_text()
    schema = json.loads(published)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$id"] == schema_id and schema["properties"]["schema"]["const"] == schema_id
    assert sorted(p.name for p in PUBLISHED.glob("*.json")) == sorted(SCHEMA_FILES.values())


def test_a_document_that_departs_from_its_schema_is_dd_accepts_fault_and_stops_it():
    with pytest.raises(AssertionError, match="does not follow its schema"):
        documents.checked({"schema": "dd-accept/audit/v1", "clean": True})
    with pytest.raises(AssertionError, match="naming no published schema"):
        documents.checked({"schema": "dd-accept/nothing/v9"})


def test_verify_audit_and_report_print_their_documents(tmp_path, sanitizer):  # noqa: F811
    bundle = _bundle(tmp_path, sanitizer)
    verified = run_cli("verify", str(bundle), "--json", "--require-check", "drain.allowance")
    document = document_of(verified, "dd-accept/verify/v2")
    assert verified.returncode == 1 and document["verified"] and not document["policy_met"]
    assert document["unmet"] == ["policy --require-check drain.allowance: not in the results"]
    assert document["signature"] == "absent" and not document["signed_by_key"]
    assert "signature: absent" in verified.stderr  # the person's lines, out of the consumer's way
    tampered = bundle / "results.json"
    tampered.write_text(tampered.read_text().replace('"pass"', '"fail"', 1))
    broken = document_of(run_cli("--json", "verify", str(bundle)), "dd-accept/verify/v2")
    assert not broken["verified"] and broken["exit_status"] == 1
    assert any("results.json" in problem for problem in broken["problems"]), broken["problems"]

    clean = tmp_path / "clean.txt"
    clean.write_text("nothing to find here\n")
    planted = tmp_path / "planted.txt"
    planted.write_text("x\nkey = AKIAIOSFODNN7EXAMPLE\n")
    audited = document_of(run_cli("audit", str(clean), str(planted), "--json"), "dd-accept/audit/v1")
    assert audited["paths"] == 2 and not audited["clean"] and audited["exit_status"] == 1
    assert audited["findings"] and all(f["location"].startswith("planted.txt:2") for f in audited["findings"])
    assert "AKIA" not in json.dumps(audited)

    (tmp_path / "again").mkdir()
    results = run_cli("report", str(_bundle(tmp_path / "again", sanitizer)), "--format", "json")
    assert results.returncode == 0
    assert document_of(results, SCHEMA)["verdict"] == "pass"


def test_doctor_and_cluster_status_print_their_documents():
    doctor = run_cli("doctor", "--json")
    document = document_of(doctor, "dd-accept/doctor/v1")
    assert doctor.returncode in (0, 2) and document["ok"] == (doctor.returncode == 0)
    assert {"python", "docker engine"} <= {finding["name"] for finding in document["findings"]}
    status = run_cli("--json", "cluster", "status", "--name", "dd-accept-json-test-absent")
    # No engine (exit 2) or no such cluster (exit 2): either way one error document, one line on stderr.
    error = document_of(status, "dd-accept/error/v1")
    assert status.returncode == 2 and error["command"] == "cluster status" and status.stderr.count("\n") == 1


def test_a_command_that_cannot_start_prints_the_error_document():
    result = run_cli("verify", "/nonexistent-bundle", "--json")
    document = document_of(result, "dd-accept/error/v1")
    assert result.returncode == 2 and document["command"] == "verify"
    assert document["error"] == result.stderr.strip().removeprefix("dd-accept: error: ")


@pytest.mark.parametrize(
    "argv",
    [("cluster", "exec", "--json", "--", "true"), ("--json", "sanitize", "x", "--out", "y"),
     ("run", "overload", "--dry-run", "--json")],
)  # fmt: skip
def test_json_where_a_command_has_no_document_is_a_usage_error(argv):
    result = run_cli(*argv)
    assert result.returncode == 2 and result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
    assert ", ".join(JSON_COMMANDS) in result.stderr


def test_a_run_summary_of_a_real_bundle_follows_its_schema(tmp_path, sanitizer):  # noqa: F811
    """The run document refers to the results' and the audit's definitions by reference: a
    reference that does not resolve would stop every `run`, so it is resolved here."""
    bundle = _bundle(tmp_path, sanitizer)
    if not bundle.with_name("bundle.tar.gz").is_file():
        with tarfile.open(bundle.with_name("bundle.tar.gz"), "w:gz") as archive:
            archive.add(bundle, arcname="bundle")
    results = load_results(bundle / "results.json")
    summary = run_summary(results, bundle, [Finding("logs/x.log:3", "aws_key")], 12.5, 1)
    assert documents.checked(summary)["bundle"]["manifest_sha256"]
    assert summary["audit_findings"] == [{"location": "logs/x.log:3", "rule": "aws_key"}]
    broken = {**summary, "sut": {"wheels": [{"file": "x.whl", "sha256": "not-a-digest", "size": 1}]}}
    assert documents.problem(broken, "dd-accept/run/v1") is not None
