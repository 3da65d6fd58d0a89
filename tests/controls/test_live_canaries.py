"""Canaries through a live run: secrets in the harness's environment and in a header the
client sends (which also lands in the recorded srun command line) never reach the bundle.

The run is on Slurm 26.05 (Debian sid, Python 3.14): the positive control of rc1 on the
newest release dd-accept builds, with its own wheelhouse and node image."""

import json

import pytest

from tests.helpers import run_cli

pytestmark = pytest.mark.cluster

ENV_CANARY = "sk-ddlivecanary0123456789abcdefABCD"
TOKEN_CANARY = "ddlivecanary-token-value-7731"
HEADER_CANARY = "nvapi-ddlivecanary0123456789abcdefgh"


def test_live_canaries_never_reach_the_bundle(tmp_path):
    out = tmp_path / "evidence"
    result = run_cli(
        "--quiet",
        "run",
        "streaming",
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
    redactions = json.loads((out / "redactions.json").read_text())
    assert any(row["file"] == "commands.jsonl" for row in redactions["by_file"]), "the argv was redacted"
    assert run_cli("verify", str(out)).returncode == 0
    assert run_cli("audit", str(out), str(tmp_path / "evidence.tar.gz")).returncode == 0
