"""`dd-accept gate` end to end on the dockerized cluster, with the real SUT.

Positive control: the example gate file, run exactly as the README shows, passes and leaves
a bundle that verifies. Negative control: a gate demanding no client-visible error while
more replicas are overloaded than the proxy has attempts fails on that threshold (exit 1);
run with two SUTs, it also writes the baseline/candidate comparison.
"""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from dd_accept.base import documents
from dd_accept.base.results import load_results
from tests.helpers import assert_the_dry_run_planned_what_the_run_did, every_event_parses, run_cli
from tests.unit.test_json_output import document_of

REPOSITORY = Path(__file__).parents[2]

pytestmark = pytest.mark.cluster


def _readme_gate_block() -> str:
    """The first shell block of the gate guide (docs/gates.md), exactly as written."""
    readme = (REPOSITORY / "docs" / "gates.md").read_text()
    section = readme.split("# Release gates", 1)[1]
    return section.split("```sh\n", 1)[1].split("```", 1)[0]


def test_the_readme_gate_section_works_as_written(tmp_path):
    """Positive control, and the README's promise: its gate commands, copied into a shell in
    the checkout, pass on the released SUT and leave a bundle that verifies."""
    block = _readme_gate_block()
    assert "make accept GATE=docs/gate.example.toml" in block
    evidence = REPOSITORY / "evidence"
    before = set(evidence.iterdir()) if evidence.is_dir() else None
    try:
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block], cwd=REPOSITORY, capture_output=True, text=True, timeout=900
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert "dd-accept gate `release`: **PASS**" in result.stdout  # cat "$out/gate.md"
        assert "dd-accept verify: every digest matches" in result.stdout
        (out,) = set(evidence.iterdir()) - (before or set()) - {p for p in evidence.glob("*.tar.gz")}
        document = json.loads((out / "gate.json").read_text())
        verdicts = {c["id"]: c["verdict"] for c in document["checks"]}
        assert document["verdict"] == "pass" and verdicts == {"gate.checks": "pass", "gate.max_error_rate": "pass"}
        # replicas, proxy, 2 clients, default-threshold replica
        assert_the_dry_run_planned_what_the_run_did(out / "candidate" / "commands.jsonl", srun_steps=5)
        kinds = every_event_parses(out / "candidate")
        assert set(kinds) == {"request", "admission", "upstream", "queue"} and min(kinds.values()) > 0, kinds
    finally:  # the checkout is left as it was
        if before is None:
            shutil.rmtree(evidence, ignore_errors=True)
        else:
            for path in set(evidence.iterdir()) - before:
                shutil.rmtree(path) if path.is_dir() else path.unlink()


def test_a_gate_that_cannot_finish_leaves_nothing_half_written(tmp_path):
    """The baseline's wheels cannot be fetched: exit 2, one line, and no gate directory
    (not even the part made before the failure)."""
    out = tmp_path / "gate"
    result = run_cli(
        "--quiet", "gate", "--config", str(REPOSITORY / "docs" / "gate.example.toml"),
        "--sut", "data-designer-slurm==99.0.0", "--sut", "data-designer-slurm==1.0.0rc1", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "cannot fetch the wheels" in result.stderr
    assert not out.exists()


def test_a_gate_with_a_threshold_the_sut_misses_fails_and_compares_two_suts(tmp_path, sut_wheelhouse):
    (wheel,) = sut_wheelhouse.sut_wheels
    local = tmp_path / wheel.file
    shutil.copy(sut_wheelhouse.path / wheel.file, local)
    config = tmp_path / "strict.toml"
    config.write_text(
        "[gate]\n"
        'name = "strict"\n'
        'scenarios = ["overload", "streaming"]\n'
        "[options]\n"
        "replicas = 4\n"
        "overloaded = 3\n"  # as many overloaded replicas as the proxy has attempts: 429s reach the client
        "records = 16\n"
        "[thresholds]\n"
        "max_error_rate = 0.0\n"
        "[metrics.streaming]\n"  # positive controls of the serving-metric demands and of goodput
        "p99_ttft_ms = { max = 2000 }\n"
        # the same wheel twice, held by TPOT: a loaded machine bunches the client's reads, which
        # moves p50 ITL (CI: 4.55 and 16.8 ms for one wheel, its streams paced at 20 ms), not TPOT
        "p50_tpot_ms = { vs_baseline = 3.0 }\n"
        '[goodput]\nscenario = "streaming"\nttft_ms = 2000\nmin_fraction = 0.9\n'
    )
    out = tmp_path / "gate"
    result = run_cli(
        "--quiet", "gate", "--config", str(config), "--sut", "data-designer-slurm==1.0.0rc1",
        "--sut", str(local), "--out", str(out), "--json", timeout=1200,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-2000:]
    document = json.loads((out / "gate.json").read_text())
    printed = document_of(result, "dd-accept/gate/v1")  # --json: gate.json, with where it is and the exit status
    assert printed == {**document, "directory": str(out), "exit_status": 1}
    assert documents.problem(document, "dd-accept/gate/v1") is None
    checks = {c["id"]: c for c in document["checks"]}
    assert checks["gate.max_error_rate"]["verdict"] == "fail"
    assert checks["gate.max_error_rate"]["metrics"]["client_error_rate"] > 0
    assert checks["gate.checks"]["verdict"] == "pass"  # the SUT behaves correctly; only the gate's demand fails
    ttft = checks["gate.metric.streaming.p99_ttft_ms"]
    assert ttft["verdict"] == "pass" and 0 < ttft["metrics"]["p99_ttft_ms"] <= 2000, ttft
    # judged per phase: the stalled replica's and the sparse streams' phases, faults by design, left out
    assert "left out as faults by design: " in ttft["detail"] and "routing with one replica stalled" in ttft["detail"]
    assert "sparse streams: each event before the next" in ttft["detail"], ttft
    tpot = checks["gate.metric.streaming.p50_tpot_ms"]
    assert tpot["verdict"] == "pass" and tpot["metrics"]["baseline_p50_tpot_ms"] > 10, tpot  # paced at 20 ms
    good = checks["gate.goodput.streaming"]
    assert good["verdict"] == "pass" and good["metrics"]["goodput_fraction"] >= 0.9, good
    assert sorted(document["bundles"]) == ["baseline", "candidate"]
    comparison = (out / "comparison.md").read_text()
    assert "data-designer-slurm==1.0.0rc1" in comparison and "| `overload.partial.completes` |" in comparison
    assert document["comparison"]["regressed"] == []
    assert "<table" in (out / "comparison.html").read_text()
    for role in ("baseline", "candidate"):
        assert run_cli("verify", str(out / role)).returncode == 0
    compared = run_cli("compare", str(out / "baseline"), str(out / "candidate"), "--format", "json")
    assert document_of(compared, "dd-accept/compare/v1")["regressed"] == []
    trail = run_cli("history", str(out), "--csv", str(tmp_path / "history.csv"), "--tolerance", "5")
    assert trail.returncode == 0 and "history: 2 bundles" in trail.stdout, trail.stderr
    assert "serving,streaming p99_ttft_ms" in (tmp_path / "history.csv").read_text()


def test_drain_thresholds_of_a_gate_file_replace_the_profiles(tmp_path):
    """Negative control of the drain thresholds: rc1's endpoint drains in about 3 s, so a
    gate demanding a 2 s window fails drain.scancel_step where it took longer, and the 4 s
    allowance is where the long stream is forced (the profile says 10 s and 12 s, under which
    both pass)."""
    config = tmp_path / "drain.toml"
    config.write_text(
        '[gate]\nname = "drain"\nscenarios = ["drain", "streaming"]\n'
        "[thresholds]\ndrain_window_s = 2\ndrain_allowance_s = 4\n"
        "[metrics.streaming]\np99_ttft_ms = { max = 0.001 }\n"  # negative controls: a metric demand, goodput
        "[goodput]\nttft_ms = 0.001\n"
    )
    out = tmp_path / "gate"
    result = run_cli("--quiet", "gate", "--config", str(config), "--out", str(out), timeout=900)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-2000:]
    scenarios = load_results(out / "candidate" / "results.json")["scenarios"]
    checks = {c["id"]: c for scenario in scenarios for c in scenario["checks"]}
    scancel = checks["drain.scancel_step"]
    assert "within the 2s window" in scancel["expected"], scancel  # the gate's window, not the profile's 10 s
    # rc1 drains its 4 s streams about 3 s after a TERM sent 1 s into them: over the 2 s window,
    # a fail. A TERM a loaded machine sent later leaves less to drain (CI once measured under
    # 2 s): the verdict follows the number either way, and the profile's 10 s would pass both.
    last_s = scancel["metrics"]["last_stream_end_s"]
    assert last_s < 10 and (scancel["verdict"] == "fail") == (last_s > 2), scancel
    allowance = checks["drain.allowance"]
    assert allowance["verdict"] == "fail" and "the 4s allowance" in allowance["expected"]
    assert "forced at 4." in allowance["observed"] and allowance["metrics"]["streams_forced"] == 1
    gate = json.loads((out / "gate.json").read_text())
    # the gate names exactly the checks its candidate did not pass, scancel_step among them where it failed
    shown = gate["checks"][0]["observed"]
    assert gate["verdict"] == "fail" and shown.startswith("not passing: "), gate["checks"][0]
    not_passing = [c["id"] for c in checks.values() if c["verdict"] != "pass"]
    assert sorted(shown.removeprefix("not passing: ").split(", ")) == sorted(not_passing), (shown, not_passing)
    assert ("drain.scancel_step" in not_passing) == (scancel["verdict"] == "fail")
    demand = next(c for c in gate["checks"] if c["id"] == "gate.metric.streaming.p99_ttft_ms")
    assert demand["verdict"] == "fail" and demand["expected"] == "p99_ttft_ms ≤ 0.001 ms"
    # judged per phase: the worst phase that drives no fault is named with its number
    assert demand["metrics"]["p99_ttft_ms"] > 0.001 and " ms in " in demand["observed"], demand
    assert "(the worst of " in demand["observed"] and "routing with one replica stalled" not in demand["observed"]
    good = next(c for c in gate["checks"] if c["id"] == "gate.goodput.streaming")
    assert good["verdict"] == "fail" and good["metrics"]["good"] == 0 and good["metrics"]["attempts"] > 0, good
    summary = (out / "candidate" / "summary.md").read_text()
    assert "### Serving metrics" in summary and "| streaming |" in summary
