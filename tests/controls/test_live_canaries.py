"""Canaries through a live run: secrets in the harness's environment and in a header the
client sends (which also lands in the recorded srun command line) never reach the bundle."""

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
        "--out",
        str(out),
        "--client-header",
        f"Authorization: Bearer {HEADER_CANARY}",
        env={"OPENAI_API_KEY": ENV_CANARY, "DD_CANARY_TOKEN": TOKEN_CANARY},
        timeout=900,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    commands = [json.loads(line) for line in (out / "commands.jsonl").read_text().splitlines()]
    assert any("--header" in record["argv"] for record in commands), "the header really was sent"
    everything = "".join(p.read_text(errors="replace") for p in out.rglob("*") if p.is_file())
    for canary in (ENV_CANARY, TOKEN_CANARY, HEADER_CANARY, str(tmp_path)):
        assert canary not in everything, f"{canary[:14]}… leaked into the bundle"
    redactions = json.loads((out / "redactions.json").read_text())
    assert any(row["file"] == "commands.jsonl" for row in redactions["by_file"]), "the argv was redacted"
    assert run_cli("verify", str(out)).returncode == 0
    assert run_cli("audit", str(out), str(tmp_path / "evidence.tar.gz")).returncode == 0
