"""Canaries through a live run: secrets in the harness's environment and in a header the
client sends (which also lands in the recorded srun command line) never reach the bundle, nor
the run's output; and the run, piped as in CI, prints what a CI log needs.

The run is on Slurm 26.05 (Debian sid, Python 3.14): the positive control of rc1 on the
newest release dd-accept builds, with its own wheelhouse and node image."""

import json

import pytest

from dd_accept.base.hashing import sha256_file
from tests.helpers import run_cli
from tests.unit.test_json_output import document_of

pytestmark = pytest.mark.cluster

ENV_CANARY = "sk-ddlivecanary0123456789abcdefABCD"
TOKEN_CANARY = "ddlivecanary-token-value-7731"
HEADER_CANARY = "nvapi-ddlivecanary0123456789abcdefgh"


def test_live_canaries_never_reach_the_bundle(tmp_path):
    out = tmp_path / "evidence"
    result = run_cli(
        "run",
        "streaming",
        "--json",
        "--slurm",
        "26.05",
        "--out",
        str(out),
        "--client-header",
        f"Authorization: Bearer {HEADER_CANARY}",
        env={"OPENAI_API_KEY": ENV_CANARY, "DD_CANARY_TOKEN": TOKEN_CANARY},
        timeout=900,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    summary = document_of(result, "dd-accept/run/v1")  # --json: the summary a CI job reads
    assert summary["verdict"] == "pass" and summary["cluster"]["slurm_release"] == "26.05"
    assert summary["bundle"]["manifest_sha256"] == sha256_file(out / "manifest.json")
    assert summary["bundle"]["archive_sha256"] == sha256_file(tmp_path / "evidence.tar.gz")
    verdicts = {c["id"]: c["verdict"] for s in summary["scenarios"] for c in s["checks"]}
    assert set(verdicts.values()) == {"pass"} and "streaming.integrity" in verdicts, verdicts
    assert summary["sut"]["wheels"][0]["sha256"] in result.stderr  # the person's digests, on stderr with --json
    # What a CI log shows of a run piped to a file: progress one step a line, then the tables
    # as plain lines (headers, then a row a line), no terminal escapes, nothing folded.
    log = result.stderr.splitlines()
    assert "\x1b[" not in result.stderr and sum(line.startswith("• streaming: ") for line in log) >= 4, log[:20]
    assert "check | verdict | expected | observed" in log
    assert any(line.startswith("streaming.connection_accounting | pass | ") for line in log)
    assert any(line.startswith("streaming | ") and line.endswith(" | 0.0% | 0.0%") for line in log), log[-12:]
    versions = json.loads((out / "provenance.json").read_text())["predicate"]["invocation"]["versions"]
    assert versions["slurm"].startswith("slurm-wlm 26.05.") and versions["slurm_release"] == "26.05", versions
    assert versions["node_python"].startswith("Python 3.14.") and versions["wheelhouse_python"] == "3.14", versions
    results = json.loads((out / "results.json").read_text())
    assert results["cluster"] == {"kind": "docker", "slurm_release": "26.05", "proctrack": "linuxproc"}
    commands = [json.loads(line) for line in (out / "commands.jsonl").read_text().splitlines()]
    assert any("--header" in record["argv"] for record in commands), "the header really was sent"
    everything = "".join(p.read_text(errors="replace") for p in out.rglob("*") if p.is_file())
    for canary in (ENV_CANARY, TOKEN_CANARY, HEADER_CANARY, str(tmp_path)):
        assert canary not in everything, f"{canary[:14]}… leaked into the bundle"
    for canary in (ENV_CANARY, TOKEN_CANARY, HEADER_CANARY):
        assert canary not in result.stdout + result.stderr, f"{canary[:14]}… reached the run's output"
    redactions = json.loads((out / "redactions.json").read_text())
    assert any(row["file"] == "commands.jsonl" for row in redactions["by_file"]), "the argv was redacted"
    verified = document_of(run_cli("verify", str(tmp_path / "evidence.tar.gz"), "--json"), "dd-accept/verify/v2")
    assert verified["verified"] and verified["exit_status"] == 0
    audited = document_of(run_cli("audit", str(out), str(tmp_path / "evidence.tar.gz"), "--json"), "dd-accept/audit/v1")
    assert audited["clean"] and audited["findings"] == []
