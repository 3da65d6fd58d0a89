"""`dd-accept gate` end to end on the dockerized cluster, with the real SUT.

Positive control: the example gate file, run exactly as the README shows, passes and leaves
a bundle that verifies. Negative control: a gate demanding no client-visible error while
more replicas are overloaded than the proxy has attempts fails on that threshold (exit 1);
run with two SUTs, it also writes the baseline/candidate comparison.
"""

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest

from tests.helpers import run_cli

EXAMPLE = Path(__file__).parents[2] / "docs" / "gate.example.toml"

pytestmark = pytest.mark.cluster


def test_the_readme_gate_command_passes_on_the_released_sut(tmp_path):
    config = tmp_path / "docs" / "gate.example.toml"
    config.parent.mkdir()
    shutil.copy(EXAMPLE, config)
    result = run_cli("--quiet", "gate", "--config", str(config), "--out", str(tmp_path / "gate"), timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    document = json.loads((tmp_path / "gate" / "gate.json").read_text())
    assert document["verdict"] == "pass"
    assert {c["id"]: c["verdict"] for c in document["checks"]} == {"gate.checks": "pass", "gate.max_error_rate": "pass"}
    assert "**PASS**" in (tmp_path / "gate" / "gate.md").read_text()
    verified = run_cli("verify", str(tmp_path / "gate" / "candidate"))
    assert verified.returncode == 0, verified.stdout
    _assert_the_dry_run_planned_what_the_run_did(tmp_path / "gate" / "candidate" / "commands.jsonl")


def _normalized(argv: list[str]) -> tuple[str, ...]:
    """A recorded command with what only a run knows (job id, node, run directory) as the plan writes it."""
    text = "\0".join(argv)
    text = re.sub(r"--jobid=\d+", "--jobid=$JOB", text)
    text = re.sub(r"\bnode1\b", "$NODE", text)
    text = re.sub(r"run-[0-9a-f]{8}", "run-<id>", text)
    return tuple(text.split("\0"))


def _assert_the_dry_run_planned_what_the_run_did(commands_file: Path) -> None:
    plan = run_cli("run", "overload", "--dry-run")
    assert plan.returncode == 0, plan.stderr
    planned = [shlex.split(line) for line in plan.stdout.splitlines() if not line.startswith("#")]
    planned = [tuple(c[c.index("srun") :]) if "srun" in c else tuple(c) for c in planned if c[0] != "scancel"]
    assert [c[0] for c in planned] == ["salloc", "srun", "srun", "srun", "srun"]  # replicas, proxy, two clients
    recorded = {_normalized(json.loads(line)["argv"]) for line in commands_file.read_text().splitlines()}
    missing = [" ".join(command) for command in planned if command not in recorded]
    assert not missing, "planned but never run:\n" + "\n".join(missing)


def test_a_gate_with_a_threshold_the_sut_misses_fails_and_compares_two_suts(tmp_path, sut_wheelhouse):
    (wheel,) = sut_wheelhouse.sut_wheels
    local = tmp_path / wheel.file
    shutil.copy(sut_wheelhouse.path / wheel.file, local)
    config = tmp_path / "strict.toml"
    config.write_text(
        "[gate]\n"
        'name = "strict"\n'
        'scenarios = ["overload"]\n'
        "[options]\n"
        "replicas = 4\n"
        "overloaded = 3\n"  # as many overloaded replicas as the proxy has attempts: 429s reach the client
        "records = 16\n"
        "[thresholds]\n"
        "max_error_rate = 0.0\n"
    )
    out = tmp_path / "gate"
    result = run_cli(
        "--quiet", "gate", "--config", str(config), "--sut", "data-designer-slurm==1.0.0rc1",
        "--sut", str(local), "--out", str(out), timeout=1200,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-2000:]
    document = json.loads((out / "gate.json").read_text())
    checks = {c["id"]: c for c in document["checks"]}
    assert checks["gate.max_error_rate"]["verdict"] == "fail"
    assert checks["gate.max_error_rate"]["metrics"]["client_error_rate"] > 0
    assert checks["gate.checks"]["verdict"] == "pass"  # the SUT behaves correctly; only the gate's demand fails
    assert sorted(document["bundles"]) == ["baseline", "candidate"]
    comparison = (out / "comparison.md").read_text()
    assert "data-designer-slurm==1.0.0rc1" in comparison and "| `overload.partial.completes` |" in comparison
    assert document["comparison"]["regressed"] == []
    assert "<table" in (out / "comparison.html").read_text()
    for role in ("baseline", "candidate"):
        assert run_cli("verify", str(out / role)).returncode == 0
