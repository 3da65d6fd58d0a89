"""A gate's capacity rounds: the baseline and candidate run capacity in turn, and each declared
number is judged on all their runs (base.noisy_comparison). The runs are stand-ins that write
the capacity checks a real run would (the cluster controls pin what real runs measure); what
is tested here is the order of the runs, where their bundles go and how they are judged."""

import json

import pytest

from dd_accept.base.errors import UsageError
from dd_accept.base.regressions import KNEE_THROUGHPUT, PROXY_CPU_PER_CHUNK, at_level
from dd_accept.harness import gate as gate_module
from dd_accept.harness.console import ConsoleListener
from dd_accept.harness.gate_file import parse_gate
from dd_accept.harness.gate_rounds import judge_round_regressions, later_rounds
from tests.gate.test_judge_and_compare import SCENARIO, _results
from tests.helpers import run_cli

ROUNDS = """
[gate]
name = "r"
scenarios = ["overload", "capacity"]
capacity_rounds = 3
"""
LADDER = {"ladder_mode": 0.0, "ladder_start": 18.0, "ladder_factor": 1.5, "level_seconds": 2.0}
COST = "gate.regression.capacity.proxy_cpu_per_chunk.proxy_cpu_us_per_chunk"


def _capacity(cost: float, knee: float) -> dict:
    """A capacity scenario's checks as a run writes them: the cost at each level (the knee's
    levels, 18 to 60 streams) and the knee on its ladder."""
    levels = {at_level(PROXY_CPU_PER_CHUNK, load): cost * (1 + 0.01 * i) for i, load in enumerate((18, 27, 40, 60))}
    checks = [
        {"id": "capacity.knee", "verdict": "pass", "expected": "e", "observed": "o", "detail": "",
         "metrics": {KNEE_THROUGHPUT: knee, "light_chunk_delay_p50_ms": 0.3, **LADDER}},
        {"id": "capacity.proxy_cpu_per_chunk", "verdict": "pass", "expected": "e", "observed": "o", "detail": "",
         "metrics": {PROXY_CPU_PER_CHUNK: cost, **levels}},
    ]  # fmt: skip
    return {**SCENARIO, "name": "capacity", "checks": checks}


def _stand_ins(monkeypatch, costs: dict[str, list[float]], missing: str = "", kneeless: str = ""):
    """Runs that write, for each role, its next cost (and a knee of 20,000 tokens/s); the run
    named `missing` ends with exit 2 and no results (a machine that starved it). Returns what
    ran: (role, out directory name, scenarios asked) in order. The run named `kneeless` was
    not judged (its machine bounded the knee), so it wrote no knee and no ladder."""
    made, served = [], {role: iter(values) for role, values in costs.items()}

    def run(request, console):
        role = request.out.name.split("-")[0]
        made.append((role, request.out.name, request.scenario))
        request.out.mkdir(parents=True)
        if request.out.name == missing:
            return 2
        results = _results(spec=request.sut)
        results["scenarios"] = [s for s in results["scenarios"] if s["name"] == "overload"] * (
            request.scenario != "capacity"
        ) + [_capacity(next(served[role]), 20_000.0)]
        if request.out.name == kneeless:
            capacity = results["scenarios"][-1]
            capacity["checks"] = [c for c in capacity["checks"] if c["id"] != "capacity.knee"]
        (request.out / "results.json").write_text(json.dumps(results))
        return 0

    monkeypatch.setattr(gate_module, "run", run)
    return made


def _gate(tmp_path, text=ROUNDS):
    out = tmp_path / "gate"
    code = gate_module.run_gate(
        parse_gate(text, "r.toml"), ["sut==1", "sut==2"], out, ConsoleListener(quiet=True), None
    )
    return code, out, json.loads((out / "gate.json").read_text())


def test_rounds_run_in_turn_and_the_later_ones_run_capacity_only(tmp_path, monkeypatch):
    made = _stand_ins(monkeypatch, {"baseline": [30.4, 36.2, 46.6], "candidate": [32.6, 46.1, 29.8]})
    code, out, document = _gate(tmp_path)
    assert [(role, name) for role, name, _ in made] == [
        ("baseline", "baseline"), ("candidate", "candidate"),  # round 1: each SUT's full run
        ("candidate", "candidate-2"), ("baseline", "baseline-2"),  # reversed: neither is always later
        ("baseline", "baseline-3"), ("candidate", "candidate-3"),
    ]  # fmt: skip
    assert [scenarios for *_, scenarios in made] == ["overload,capacity"] * 2 + ["capacity"] * 4
    assert later_rounds(1) == [] and len(later_rounds(7)) == 12
    # rc1's own spread on one day, three runs against three: not a regression
    assert code == 0, document
    checks = {c["id"]: c for c in document["checks"]}
    assert checks[COST]["verdict"] == "pass" and checks[COST]["metrics"]["rounds"] == 3, checks[COST]
    assert checks[COST]["metrics"]["p"] > 0.05 and "Mann-Whitney" in checks[COST]["observed"], checks[COST]
    assert document["bundles"]["candidate-3"] == "candidate-3" and (out / "baseline-2" / "results.json").is_file()


def test_a_candidate_twice_as_costly_in_every_round_fails_with_the_statistics(tmp_path, monkeypatch):
    """A proxy twice as costly per chunk, on a machine whose noise one comparison must allow
    75% for: x2 against x1.75 is caught by a single run only when both runs see the machine
    alike; three rounds each separate it with p = 0.05 and an interval above x1.25."""
    _stand_ins(monkeypatch, {"baseline": [30.4, 46.6, 36.2], "candidate": [2 * 46.1, 2 * 29.8, 2 * 32.6]})
    code, _, document = _gate(tmp_path)
    checks = {c["id"]: c for c in document["checks"]}
    cost = checks[COST]
    assert code == 1 and cost["verdict"] == "fail", cost
    assert cost["metrics"]["p"] == 0.05 and cost["metrics"]["ratio_low"] > 1.25, cost
    assert cost["metrics"]["ratio"] == pytest.approx(65.2 / 36.2, rel=0.02), cost  # read on the shared levels
    # the rounds' verdict replaces the single comparison of round 1: one check per number
    assert sum(c.startswith("gate.regression.capacity.proxy_cpu_per_chunk") for c in checks) == 1
    knee = checks["gate.regression.capacity.knee.knee_output_throughput"]
    assert knee["verdict"] == "pass", knee  # equal knees: the number the fault does not touch still passes


def test_a_round_that_measured_nothing_fails_the_gate_as_not_judged(tmp_path, monkeypatch):
    _stand_ins(monkeypatch, {"baseline": [30.0, 31.0], "candidate": [30.0, 31.0, 32.0]}, missing="baseline-2")
    code, _, document = _gate(tmp_path)
    cost = {c["id"]: c for c in document["checks"]}[COST]
    assert cost["verdict"] == "fail" and "measured in 2 of 3 baseline runs and 3 of 3" in cost["observed"], cost
    assert code == 2 and document["run_exit_status"]["baseline-2"] == 2  # the machine's, not the SUT's


def test_a_baseline_the_machine_did_not_finish_leaves_the_gate_not_judged(tmp_path, monkeypatch):
    """A baseline run that ended with exit 2 measured only part of what the candidate is held
    to: the gate is not judged (exit 2, the machine's), never failed on the candidate. CI once
    saw a correct candidate fail "p50_itl_ms: the baseline did not measure it" this way."""
    metrics = {"requests": 8.0, "completed": 8.0, "error_rate": 0.0, "rate_limited_rate": 0.0, "p50_ttft_ms": 40.0}
    serving = {"metrics": metrics, "phases": [{"title": "load", "metrics": metrics}]}

    def run(request, console):
        request.out.mkdir(parents=True)
        results = _results(spec=request.sut)
        broken = request.out.name == "baseline"
        if not broken:  # the baseline's overload stopped before it measured
            results["scenarios"][0]["serving"] = serving
        if broken:  # its streaming scenario stopped on the machine's error before it measured
            results["scenarios"][1] |= {"error": "could not freeze node2", "verdict": "fail"}
        (request.out / "results.json").write_text(json.dumps(results))
        return 2 if broken else 0

    monkeypatch.setattr(gate_module, "run", run)
    text = '[gate]\nname = "b"\nscenarios = ["overload"]\n[metrics.overload]\np50_ttft_ms = { vs_baseline = 2.0 }\n'
    code, _, document = _gate(tmp_path, text)
    demand = {c["id"]: c for c in document["checks"]}["gate.metric.overload.p50_ttft_ms"]
    assert demand["observed"] == "the baseline did not measure it", demand  # what the gate could tell
    assert code == 2 and document["run_exit_status"] == {"baseline": 2, "candidate": 0}, document


def test_a_round_the_machine_left_unjudged_fails_the_gate_and_never_drops_out(tmp_path, monkeypatch):
    """A round whose knee was not judged wrote no ladder: its cost compares with nothing, so
    the number is not judged (fail), never judged on the runs that remain, nor skipped."""
    _stand_ins(monkeypatch, {"baseline": [30.0] * 3, "candidate": [90.0] * 3}, kneeless="candidate-2")
    code, _, document = _gate(tmp_path)
    checks = {c["id"]: c for c in document["checks"]}
    said = "no ladder in candidate run 2 (its knee was not judged)"
    assert checks[COST]["verdict"] == "fail" and said in checks[COST]["observed"], checks
    knee = checks["gate.regression.capacity.knee.knee_output_throughput"]
    assert knee["verdict"] == "fail" and said in knee["observed"], knee
    # a run that wrote its ladder but another one still fails as a ladder that differs
    moved = [_capacity(30.0, 20_000.0) for _ in range(3)]
    moved[1]["checks"][0]["metrics"]["ladder_start"] = 40.0
    runs = [{"scenarios": [_capacity(30.0, 20_000.0)]} for _ in range(3)]
    differ = {c.id: c for c in judge_round_regressions(runs, [{"scenarios": [s]} for s in moved], 3)}[COST]
    assert differ.verdict == "fail" and "the runs' ladders differ (ladder_start)" in differ.observed, differ
    assert code == 1  # the stand-in exited 0; a real run the machine left unjudged exits 2, and so does the gate


@pytest.mark.parametrize(
    ("rounds", "scenarios", "said"),
    [
        (2, '["capacity"]', "3 rounds or more are needed"),
        (8, '["capacity"]', "gate.capacity_rounds is from 1 to 7, got 8"),
        (3, '["overload"]', "repeats scenario capacity, which the gate does not run"),
    ],
)
def test_rounds_the_test_cannot_use_are_refused_before_anything_runs(rounds, scenarios, said):
    text = f'[gate]\nname = "r"\nscenarios = {scenarios}\ncapacity_rounds = {rounds}\n'
    with pytest.raises(UsageError, match=said):
        parse_gate(text, "r.toml")


def test_rounds_need_a_baseline():
    with pytest.raises(UsageError, match=r"gate\.capacity_rounds compares with a baseline"):
        gate_module.resolve_suts(parse_gate(ROUNDS, "r.toml"), ["sut==2"])


def test_gate_check_validates_says_what_would_run_and_runs_nothing(tmp_path):
    config = tmp_path / "r.toml"
    config.write_text(ROUNDS + 'suts = ["data-designer-slurm==1.0.0rc1", "data-designer-slurm==1.0.0rc2"]\n')
    result = run_cli("gate", "--config", str(config), "--check", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert "gate file r.toml: valid; gate 'r' runs overload, capacity" in result.stdout
    assert "baseline: data-designer-slurm==1.0.0rc1" in result.stdout and "capacity rounds: 3" in result.stdout
    assert not (tmp_path / "out").exists()  # nothing started, nothing written
    config.write_text(ROUNDS.replace("capacity_rounds = 3", "capacity_rounds = 2"))
    wrong = run_cli("gate", "--config", str(config), "--check")
    assert wrong.returncode == 2 and "3 rounds or more are needed" in wrong.stderr and not wrong.stdout
    assert run_cli("--json", "gate", "--config", str(config), "--check").returncode == 2


def _run(costs: dict[float, float], knee: float = 20_000.0) -> dict:
    """One capacity run's results as the rounds read them: its cost per level (the cheapest
    three's median as its own number) and its knee on the shared ladder."""
    levels = {at_level(PROXY_CPU_PER_CHUNK, load): cost for load, cost in costs.items()}
    own = sorted(costs.values())[:3][min(1, len(costs) - 1)] if costs else None
    cost_metrics = {**levels, **({PROXY_CPU_PER_CHUNK: own} if own is not None else {})}
    checks = [
        {"id": "capacity.knee", "verdict": "pass", "metrics": {KNEE_THROUGHPUT: knee, "light_chunk_delay_p50_ms": 0.3,
                                                               **LADDER}},
        {"id": "capacity.proxy_cpu_per_chunk", "verdict": "pass", "metrics": cost_metrics},
    ]  # fmt: skip
    return {"scenarios": [{"name": "capacity", "checks": checks}]}


def test_per_level_costs_are_read_on_the_levels_every_run_of_both_suts_reached():
    """A baseline run that broke early reached only the light levels, where idle wake-ups cost
    most (170 us at 8 streams): read per side, the baseline would look dearer than a candidate
    twice as costly. Read on the levels all six runs reached, the candidate is x2."""
    rc1 = {8: 170.0, 16: 110.0, 32: 75.0, 60: 50.0, 90: 45.0, 135: 42.0}
    short = {load: cost for load, cost in rc1.items() if load <= 16}
    baselines = [_run(rc1), _run(rc1), _run(short, knee=6_000.0)]
    candidates = [_run({load: 2 * cost for load, cost in rc1.items()}) for _ in range(3)]
    cost = {c.id: c for c in judge_round_regressions(baselines, candidates, 3)}[COST]
    assert cost.verdict == "fail" and cost.metrics["ratio"] == 2.0, cost


def test_a_baseline_run_without_the_number_fails_it_as_not_judged_never_skips_it():
    baselines = [{"scenarios": [{"name": "capacity", "checks": []}]}, _run({18: 30.0}), _run({18: 31.0})]
    candidates = [_run({18: 30.0}), _run({18: 30.5}), _run({18: 31.5})]
    checks = {c.id: c for c in judge_round_regressions(baselines, candidates, 3)}
    assert checks and all(c.verdict == "fail" for c in checks.values()), checks
    assert "not judged" in checks[COST].detail, checks[COST]
