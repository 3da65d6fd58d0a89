"""Bundles from hand-made run outputs: canaries never get in, tampering never goes unnoticed."""

import json
import tarfile

import pytest

from dd_accept.base.results import SCHEMA
from dd_accept.reports.audit import audit
from dd_accept.reports.bundle import RunContext, write_bundle
from dd_accept.reports.sanitize import Sanitizer
from dd_accept.reports.verify import verify
from tests.helpers import run_cli

CANARIES = {
    "openai_key": "sk-ddcanary0123456789abcdefXYZ",
    "ngc_key": "nvapi-ddcanary0123456789abcdef",
    "huggingface_token": "hf_ddcanary0123456789abcdefghij",
    "aws_access_key": "AKIADDCANARY01234567",
    "github_token": "ghp_ddcanary0123456789abcdefghijklmnopqr",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJkZGNhbmFyeSI6MX0.ddcanarysignature0123",
}
HEADER_SECRET = "ddcanary-header-value-31337"
USER, HOST = "ddcanaryuser", "ddcanary-host"


@pytest.fixture
def sanitizer(tmp_path):
    return Sanitizer(path_roots={str(tmp_path): "<run>"}, user_names=[USER], host_name=HOST, home=f"/home/{USER}")


def _results(verdict="pass"):
    return {
        "schema": SCHEMA,
        "verdict": verdict,
        "allow_unsupported": False,
        "sut": {
            "spec": "x==1",
            "profile": "p",
            "wheels": [{"file": "x-1-py3-none-any.whl", "sha256": "ab" * 32, "size": 3}],
            "wheelhouse_digest": "cd" * 32,
        },
        "scenarios": [
            {
                "name": "overload",
                "verdict": verdict,
                "started": 1.0,
                "ended": 2.0,
                "error": None,
                "checks": [
                    {
                        "id": "overload.total.attempts",
                        "verdict": verdict,
                        "expected": "3",
                        "observed": "3",
                        "detail": "",
                        "metrics": {"attempts": 3},
                    }
                ],
            }
        ],
    }


def _raw(tmp_path, verdict="pass"):
    raw = tmp_path / "raw"
    (raw / "runs" / "run-1" / "replicas").mkdir(parents=True)
    (raw / "results.json").write_text(json.dumps(_results(verdict)))
    env_line = f"OPENAI_API_KEY={CANARIES['openai_key']} NGC={CANARIES['ngc_key']}"
    (raw / "runs" / "run-1" / "proxy.log").write_text(
        f"slurm_proxy_request {{}}\n{env_line}\nAuthorization: Bearer {HEADER_SECRET}\n"
        f"user {USER} on {HOST} wrote {tmp_path}/raw/x and /home/{USER}/.ssh/id\n"
        + "\n".join(CANARIES.values())
        + "\n-----BEGIN RSA PRIVATE KEY-----\nMIIddcanary\n-----END RSA PRIVATE KEY-----\n"
    )
    (raw / "runs" / "run-1" / "client.jsonl").write_text(
        json.dumps({"kind": "request", "headers": {"x-api-key": HEADER_SECRET}, "peer": "10.213.4.2"}) + "\n"
    )
    (raw / "commands.jsonl").write_text(json.dumps({"argv": ["srun", f"--api-key={CANARIES['ngc_key']}"]}) + "\n")
    return raw


def _context():
    return RunContext(
        command_line=["dd-accept", "run", "overload"],
        started=0.0,
        ended=1.0,
        harness_source_digest="0" * 64,
        runtime_source_digest="1" * 64,
        runtime_files=["proxy.py"],
        host_lock=["a==1"],
        node_lock=["b==2"],
    )


def _bundle(tmp_path, sanitizer, verdict="pass"):
    out = tmp_path / "bundle"
    out.mkdir()
    write_bundle(_raw(tmp_path, verdict), out, _context(), sanitizer)
    return out


def test_no_canary_reaches_the_bundle_and_redactions_are_counted(tmp_path, sanitizer):
    out = _bundle(tmp_path, sanitizer)
    secrets = [*CANARIES.values(), HEADER_SECRET, USER, HOST, str(tmp_path), "MIIddcanary", "10.213.4.2"]
    planted = "".join(p.read_text() for p in (tmp_path / "raw").rglob("*") if p.is_file())
    assert all(secret in planted for secret in secrets), "the run outputs must really carry every canary"
    everything = "".join(p.read_text() for p in out.rglob("*") if p.is_file())
    for secret in secrets:
        assert secret not in everything, f"{secret[:12]}… leaked"
    redactions = {r["rule"]: r["count"] for r in json.loads((out / "redactions.json").read_text())["by_rule"]}
    for rule in [*CANARIES, "secret_name", "host_user", "host_name", "private_key", "private_ip", "host_path"]:
        assert redactions.get(rule, 0) >= 1, rule
    assert "ddcanary" not in (out / "redactions.json").read_text(), "counts only, never the text"
    assert audit([out], sanitizer) == []
    assert verify(out, []).problems == []


def test_the_audit_finds_every_planted_canary_and_never_prints_it(tmp_path, sanitizer):
    planted = tmp_path / "planted"
    planted.mkdir()
    for rule, secret in CANARIES.items():
        (planted / f"{rule}.txt").write_text(f"line one\nvalue {secret}\n")
    (planted / "header.txt").write_text(f"Cookie: {HEADER_SECRET}\n")
    (planted / "who.txt").write_text(f"{USER}@{HOST}:/home/{USER}/x\n")
    with tarfile.open(tmp_path / "planted.tar.gz", "w:gz") as archive:
        archive.add(planted, arcname="planted")
    for target in (planted, tmp_path / "planted.tar.gz"):
        found = audit([target], sanitizer)
        rules = {f.rule for f in found}
        assert set(CANARIES) | {"secret_name", "host_user", "host_name", "home_directory"} <= rules
        shown = "\n".join(map(str, found))
        assert all(secret not in shown for secret in [*CANARIES.values(), HEADER_SECRET])
        assert any(f.location.endswith("openai_key.txt:2") for f in found)


@pytest.mark.parametrize("tamper", ["edit", "delete", "add", "digest", "result", "subject"])
def test_tampering_makes_verify_fail_and_name_it(tmp_path, sanitizer, tamper):
    out = _bundle(tmp_path, sanitizer)
    manifest = json.loads((out / "manifest.json").read_text())
    if tamper == "edit":
        (out / "results.json").write_text((out / "results.json").read_text().replace("pass", "fail"))
        expected = "modified: results.json"
    elif tamper == "delete":
        (out / "summary.md").unlink()
        expected = "missing: summary.md"
    elif tamper == "add":
        (out / "extra.txt").write_text("x")
        expected = "unlisted: extra.txt"
    elif tamper == "digest":
        manifest["files"][0]["sha256"] = "0" * 64
        (out / "manifest.json").write_text(json.dumps(manifest))
        expected = f"modified: {manifest['files'][0]['path']}"
    elif tamper == "result":
        statement = json.loads((out / "provenance.json").read_text())
        statement["predicate"]["result"] = "FAILED"
        (out / "provenance.json").write_text(json.dumps(statement))
        expected = "provenance.json: result FAILED but results.json says PASSED"
    else:
        statement = json.loads((out / "provenance.json").read_text())
        statement["subject"][0]["digest"]["sha256"] = "ef" * 32
        (out / "provenance.json").write_text(json.dumps(statement))
        expected = "provenance.json: subjects differ"
    problems = verify(out, []).problems
    assert any(p.startswith(expected) for p in problems), problems


def test_verify_checks_wheels_against_the_subjects(tmp_path, sanitizer):
    out = _bundle(tmp_path, sanitizer)
    wheel = tmp_path / "x-1-py3-none-any.whl"
    wheel.write_bytes(b"not the tested wheel")
    assert verify(out, [wheel]).problems == ["wheel x-1-py3-none-any.whl: sha256 differs from the provenance subject"]


def test_the_tarball_verifies_like_the_directory(tmp_path, sanitizer):
    out = _bundle(tmp_path, sanitizer)
    assert verify(out.with_name("bundle.tar.gz"), []).problems == []


def test_provenance_is_an_in_toto_test_result_statement(tmp_path, sanitizer):
    out = _bundle(tmp_path, sanitizer, verdict="fail")
    statement = json.loads((out / "provenance.json").read_text())
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == "https://in-toto.io/attestation/test-result/v0.1"
    assert statement["subject"] == [{"name": "x-1-py3-none-any.whl", "digest": {"sha256": "ab" * 32}}]
    predicate = statement["predicate"]
    assert predicate["result"] == "FAILED" and predicate["failedTests"] == ["overload.total.attempts"]
    names = {c["name"] for c in predicate["configuration"]}
    assert {"dd-accept", "sut-runtime-source", "dependency-lock:harness", "dependency-lock:node-sut"} <= names


def test_a_run_started_from_the_root_directory_keeps_its_documents_intact():
    """Found on a login node (cwd "/"): the root as a path root once put a placeholder at every
    slash and word boundary, and the bundle's JSON no longer parsed."""
    document = json.dumps({"sut": {"spec": "data-designer-slurm==1.0.0rc1", "node_image": None}, "path": "/a/b"})
    sanitized = Sanitizer(path_roots={"/": "<cwd>", "/work/run": "<run>"}, user_names=[], host_name="x").text(
        document, "results.json"
    )
    assert json.loads(sanitized) == json.loads(document)


def test_verify_policy_exits_1_unless_the_evidence_shows_it(tmp_path, sanitizer):
    """in-toto-style policies on a whole bundle: the run passed, a named check passed, the
    judged wheels are the named SUT; each failure names the policy and what the evidence has."""
    (tmp_path / "p").mkdir()
    (tmp_path / "f").mkdir()
    passing = _bundle(tmp_path / "p", sanitizer)
    failing = _bundle(tmp_path / "f", sanitizer, verdict="fail")
    attempts = "overload.total.attempts"
    ok = run_cli("verify", str(passing), "--require-pass", "--require-check", attempts, "--require-sut", "x==1")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    cases = [
        ((failing, "--require-pass"), f"policy --require-pass: the run's verdict is fail (not passing: {attempts})"),
        ((failing, "--require-check", attempts), f"policy --require-check {attempts}: fail"),
        ((passing, "--require-check", "drain.allowance"), "policy --require-check drain.allowance: not in the results"),
        ((passing, "--require-sut", "x==2"), "policy --require-sut x==2: the judged wheels have x 1"),
        ((passing, "--require-sut", "y>=1"), "policy --require-sut y>=1: the judged wheels have no y wheel"),
    ]
    for (bundle, *policy), line in cases:
        result = run_cli("verify", str(bundle), *policy)
        assert result.returncode == 1 and line in result.stdout.splitlines(), (policy, result.stdout)
        assert "whole but does not meet the policy" in result.stderr
    bad = run_cli("verify", str(passing), "--require-sut", "not a requirement!")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "is not NAME==VERSION" in bad.stderr
