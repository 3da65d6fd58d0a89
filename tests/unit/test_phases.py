"""The phase runner: declared order, teardown last and always, the first failure kept, and a
timeline of phases in results.json that follows the published schema."""

from dataclasses import dataclass, field

import pytest

from dd_accept.acceptance.phases import PHASE_KINDS, Phase, run_phases
from dd_accept.acceptance.scenarios import SCENARIOS
from dd_accept.base.progress import ProgressWriter
from dd_accept.base.results import ScenarioResult, schema_problem, write_results
from dd_accept.deployment import RunDirectory


@dataclass
class FakeRun:
    progress: ProgressWriter
    result: ScenarioResult
    backend_kind: str = "synthetic"
    did: list[str] = field(default_factory=list)
    run: object = None  # the run directory, where the serving metrics' client events are


def _state(tmp_path, backend="synthetic"):
    run = RunDirectory("/shared/runs/fake", tmp_path / "run")
    return FakeRun(ProgressWriter(tmp_path / "progress.jsonl", "fake"), ScenarioResult("fake"), backend, run=run)


def _step(name, fail=False):
    def act(state):
        state.did.append(name)
        if fail:
            raise RuntimeError(f"{name} broke")

    return act


def test_phases_run_in_order_and_teardown_runs_last(tmp_path):
    state = _state(tmp_path)
    phases = (
        Phase("deploy", "deploy", _step("deploy")),
        Phase("stop", "teardown", _step("teardown"), teardown=True),
        Phase("drive", "drive", _step("drive")),
        Phase("judge", "judge", _step("judge")),
    )
    run_phases(phases, state)
    assert state.did == ["deploy", "drive", "judge", "teardown"]
    assert [(r.kind, r.outcome) for r in state.result.phases] == [
        ("deploy", "done"), ("drive", "done"), ("judge", "done"), ("stop", "done"),
    ]  # fmt: skip
    assert all(r.ended is not None and r.ended >= r.started for r in state.result.phases)
    assert state.result.ended is not None
    progress = (tmp_path / "progress.jsonl").read_text()
    assert '"phase": "drive"' in progress and '"phase": "done"' in progress


def test_a_failing_phase_skips_the_rest_but_not_teardown_and_keeps_its_own_error(tmp_path):
    state = _state(tmp_path)
    phases = (
        Phase("deploy", "deploy", _step("deploy")),
        Phase("drive", "drive", _step("drive", fail=True)),
        Phase("judge", "judge", _step("judge")),
        Phase("stop", "stop proxy", _step("stop proxy", fail=True), teardown=True),
        Phase("stop", "stop replicas", _step("stop replicas"), teardown=True),
    )
    with pytest.raises(RuntimeError, match="drive broke"):  # not the teardown's error
        run_phases(phases, state)
    assert state.did == ["deploy", "drive", "stop proxy", "stop replicas"]
    outcomes = {r.title: r.outcome for r in state.result.phases}
    assert outcomes == {"deploy": "done", "drive": "interrupted", "stop proxy": "interrupted", "stop replicas": "done"}


def test_a_failing_teardown_is_raised_when_nothing_else_failed(tmp_path):
    state = _state(tmp_path)
    phases = (Phase("judge", "judge", _step("judge")), Phase("stop", "stop", _step("stop", fail=True), teardown=True))
    with pytest.raises(RuntimeError, match="stop broke"):
        run_phases(phases, state)


def test_phases_that_do_not_apply_to_the_backend_are_skipped(tmp_path):
    state = _state(tmp_path, backend="vllm")
    phases = (
        Phase("hold", "exact depth", _step("exact"), backends=frozenset({"synthetic"})),
        Phase("hold", "real load", _step("load"), backends=frozenset({"vllm"})),
    )
    run_phases(phases, state)
    assert state.did == ["load"]


def test_a_phase_that_cannot_run_against_this_cluster_is_left_out(tmp_path):
    state = _state(tmp_path)
    phases = (
        Phase("judge", "lose a node", _step("lose"), applies=lambda s: False),
        Phase("judge", "probe", _step("probe")),
    )
    result = run_phases(phases, state)
    assert state.did == ["probe"] and [p.title for p in result.phases] == ["probe"]


def test_an_unknown_phase_kind_is_refused():
    with pytest.raises(ValueError, match="is not one of"):
        Phase("warmup", "x", _step("x"))  # type: ignore[arg-type]


def test_the_phase_timeline_follows_the_results_schema(tmp_path):
    state = _state(tmp_path)
    run_phases((Phase("judge", "judge", _step("judge")),), state)
    document = write_results(tmp_path / "results.json", [state.result], {}, allow_unsupported=False)
    assert schema_problem(document) is None
    assert document["scenarios"][0]["phases"][0]["kind"] == "judge"
    assert ScenarioResult.from_json(document["scenarios"][0]).phases == state.result.phases
    document["scenarios"][0]["phases"][0]["kind"] = "warmup"
    assert "phases/0/kind" in schema_problem(document)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_every_scenario_declares_its_phases(scenario):
    phases = scenario.phases
    assert phases and all(isinstance(p, Phase) and p.kind in PHASE_KINDS for p in phases)
    assert any(p.kind == "judge" for p in phases)
    teardown = [p.teardown for p in phases]
    assert teardown == sorted(teardown), "teardown phases are declared last, where they run"
    assert len({p.title for p in phases}) == len(phases), "titles name phases in progress and plans"
