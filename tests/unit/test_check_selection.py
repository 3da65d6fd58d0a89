"""`--check`/`-k`: which checks a run judges, the scenarios and phases that run for them, and
how a partial run says so everywhere it is shown (results, verify, report, compare)."""

import json

import pytest

from dd_accept.acceptance.catalog import JUDGED
from dd_accept.acceptance.phases import Phase, chosen_phases, declared_checks, run_phases, scenario_runner
from dd_accept.acceptance.request import RunRequest
from dd_accept.acceptance.scenarios import SCENARIOS
from dd_accept.base import check_selection
from dd_accept.base.errors import SutBehaviourMissing, UsageError
from dd_accept.base.results import CheckResult, ScenarioResult, not_chosen, partial_note, write_results
from dd_accept.harness.runner import ENTRY_TEST, _pytest_argv, write_request
from dd_accept.reports import render
from dd_accept.reports.compare import compare
from dd_accept.reports.verify import Policy, facts_lines, policy_problems, verified_facts
from tests.helpers import run_cli
from tests.unit.test_phases import _state, _step

IDS = ("overload.partial.completes", "overload.total.attempts", "overload.total.cooldown", "drain.allowance")


def test_a_pattern_is_an_id_a_glob_or_a_dotted_prefix():
    assert check_selection.chosen(["drain.allowance"], IDS) == ("drain.allowance",)
    assert check_selection.chosen(["overload.total.*"], IDS) == IDS[1:3]
    assert check_selection.chosen(["overload.total"], IDS) == IDS[1:3]
    assert check_selection.chosen(["*.allowance", "overload.partial"], IDS) == (IDS[0], IDS[3])
    assert check_selection.chosen(["overload.tot"], IDS) == (), "a prefix ends at a dot: no half words"
    assert check_selection.unmatched(["drain", "nosuch", "overload.total.attempt"], IDS) == [
        "nosuch",
        "overload.total.attempt",
    ]
    assert check_selection.may_choose(["*.integrity"], "streaming")
    assert check_selection.may_choose(["drain.allowance"], "drain")
    assert not check_selection.may_choose(["drain.allowance"], "overload")


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_the_phases_declare_each_check_of_their_scenario_once(scenario):
    """What `--check` reads (the phases' `judges`) is the scenario's registered checks, each
    judged by one phase; that no phase judges an undeclared one is checked on every run."""
    phases = scenario.phases
    declared = declared_checks(phases)
    assert sorted(declared) == sorted(JUDGED[scenario.name])
    assert len(set(declared)) == len(declared), "a check is judged by one phase"
    assert all(not p.teardown or not p.judges for p in phases), "a teardown judges nothing"


def _phases():
    return (
        Phase("deploy", "deploy", _step("deploy")),
        Phase("judge", "first", _judging("s.first", "s.first"), judges=("s.first",)),
        Phase("drive", "alone: drive", _step("alone: drive"), segments=("alone",)),
        Phase("judge", "alone: judge", _judging("s.alone", "s.alone"), judges=("s.alone",), segments=("alone",)),
        Phase("judge", "last", _judging("s.last", "s.last"), judges=("s.last",)),
        Phase("stop", "teardown", _step("teardown"), teardown=True),
    )


def _judging(name, check_id):
    def act(state):
        state.did.append(name)
        state.result.add(CheckResult.judge(check_id, True, "x", "x"))

    return act


def test_a_selection_runs_the_phases_up_to_its_last_judge_and_skips_parts_that_stand_alone():
    titles = lambda checks: [p.title for p in chosen_phases(_phases(), checks)]  # noqa: E731
    assert titles(None) == [p.title for p in _phases()]
    assert titles({"s.first"}) == ["deploy", "first", "teardown"]
    assert titles({"s.alone"}) == ["deploy", "first", "alone: drive", "alone: judge", "teardown"]
    assert titles({"s.last"}) == ["deploy", "first", "last", "teardown"], "a part judging nothing chosen is left out"


def test_a_partial_run_keeps_the_chosen_checks_only_and_says_so_in_its_results(tmp_path):
    state = _state(tmp_path)
    state.result = ScenarioResult("s", selected=("s.alone",))
    result = run_phases(_phases(), state)
    assert state.did == ["deploy", "s.first", "alone: drive", "s.alone", "teardown"]
    assert [c.id for c in result.checks] == ["s.alone"], "s.first was judged on the way, not asked for"
    assert [p.judged for p in result.phases if p.judged] == [["s.alone"]]
    document = write_results(tmp_path / "results.json", [result], {}, allow_unsupported=False)
    assert document["schema"] == "dd-accept/results/v6" and document["scenarios"][0]["selected"] == ["s.alone"]
    assert ScenarioResult.from_json(document["scenarios"][0]).selected == ("s.alone",)
    whole = write_results(tmp_path / "whole.json", [ScenarioResult("s")], {}, allow_unsupported=False)
    assert "selected" not in whole["scenarios"][0]


def test_a_phase_judging_a_check_it_does_not_declare_is_a_harness_fault(tmp_path):
    state = _state(tmp_path)
    phases = (Phase("judge", "sly", _judging("sly", "s.other"), judges=("s.sly",)),)
    with pytest.raises(AssertionError, match=r"judged s\.other, which it does not declare"):
        run_phases(phases, state)


def test_a_behaviour_that_never_happens_is_kept_beside_a_selection(tmp_path):
    """A proxy that never serves fails `endpoint_starts` whatever was chosen: it is why the
    chosen checks were not judged, and a run reporting nothing would read as empty."""

    def never_serves(state):
        raise SutBehaviourMissing("endpoint_starts", "the proxy serves", "the proxy step ended")

    phases = (Phase("deploy", "deploy", never_serves), Phase("judge", "judge", _step("j"), judges=("s.j",)))
    run = scenario_runner("s", phases, lambda *a, **k: _state_for(tmp_path, *a))
    result = run(None, None, None, None, None, checks=["s.j"])
    assert [(c.id, c.verdict) for c in result.checks] == [("s.endpoint_starts", "fail")]
    assert result.selected == ("s.j",) and result.verdict() == "fail"
    assert [p.outcome for p in result.phases] == ["interrupted"]
    with pytest.raises(UsageError, match="chooses none of this scenario's checks"):
        run(None, None, None, None, None, checks=["s.nosuch"])


def _state_for(tmp_path, allocation, run, profile, options, progress, result):
    state = _state(tmp_path)
    state.result = result
    return state


def test_the_runner_runs_only_the_scenarios_a_pattern_chooses_and_passes_the_patterns_on(tmp_path):
    request = RunRequest(scenario="all", sut="data-designer-slurm==1.0.0rc1", profile=None, out=None)
    chosen = RunRequest(**{**request.__dict__, "checks": ("drain.allowance", "*.integrity")})
    assert chosen.scenarios() == ["drain", "streaming"]
    argv = _pytest_argv(chosen, tmp_path, write_request(chosen, tmp_path))
    assert argv[argv.index("--pyargs") + 1] == ENTRY_TEST
    handed = RunRequest.from_json((tmp_path / "request.json").read_text())
    assert handed.checks == ("drain.allowance", "*.integrity") and handed.scenarios() == ["drain", "streaming"]
    with pytest.raises(UsageError, match=r"'capacity\.knee' names none of the checks of overload, drain"):
        RunRequest(**{**request.__dict__, "checks": ("capacity.knee",)}).scenarios()


def test_check_usage_errors_are_one_line_exit_2(tmp_path):
    for args, needle in [
        (["run", "all", "--check", "nosuch", "--out", str(tmp_path / "o")], "--check 'nosuch' names none"),
        (["run", "overload", "-k", "overload.endpoint_starts"], "endpoint_starts is judged in every run"),
    ]:
        result = run_cli(*args, env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
        assert result.returncode == 2 and needle in result.stderr, result.stderr
        assert result.stderr.count("\n") == 1 and not (tmp_path / "o").exists()


def _results(selected=None, verdict="pass"):
    scenario = {
        "name": "drain",
        "verdict": verdict,
        "started": 1.0,
        "ended": 2.0,
        "error": None,
        "checks": [{"id": "drain.allowance", "verdict": verdict, "expected": "e", "observed": "o", "detail": ""}],
    }
    scenario["checks"][0]["metrics"] = {}
    if selected:
        scenario["selected"] = selected
    return {"schema": "dd-accept/results/v6", "verdict": verdict, "sut": {"spec": "x==1"}, "scenarios": [scenario]}


def test_a_partial_run_is_named_partial_wherever_it_is_shown_and_never_meets_require_pass():
    partial, whole = _results(["drain.allowance"]), _results()
    assert partial_note(whole) == "" and not_chosen(whole, ["drain.scancel_step"]) == set()
    note = partial_note(partial)
    assert note == "a partial run: only the checks chosen with --check were judged (drain: drain.allowance)"
    summary = render.markdown(partial)  # Markdown escapes the parentheses
    assert "**a partial run: only the checks chosen with --check were judged \\(drain: drain.allowance\\)**" in summary
    assert "partial" not in render.markdown(whole)
    problems = policy_problems(partial, Policy(require_pass=True))
    assert problems and "--require-check names the checks such a run vouches for" in problems[0]
    assert policy_problems(whole, Policy(require_pass=True)) == []
    assert policy_problems(partial, Policy(require_checks=("drain.allowance",))) == []
    facts = verified_facts(partial, {}, 3, Policy(require_pass=True))
    assert facts["selected"] == {"drain": ["drain.allowance"]}
    assert "partial: only the checks chosen with --check were judged (drain: drain.allowance)" in "\n".join(
        facts_lines(type("V", (), {"facts": facts})())
    )


def test_compare_leaves_out_what_a_partial_run_did_not_choose_and_says_why():
    """A check the partial candidate did not choose was not judged: never "removed"."""
    baseline = _results()
    baseline["scenarios"][0]["checks"].append(
        {"id": "drain.scancel_step", "verdict": "pass", "expected": "e", "observed": "o"}
    )
    comparison = compare(baseline, _results(["drain.allowance"]))
    assert [(c.id, c.change) for c in comparison.checks] == [("drain.allowance", "same")]
    assert any("candidate: a partial run" in note and "1 check(s)" in note for note in comparison.not_compared)
    whole = compare(baseline, _results())
    assert ("drain.scancel_step", "removed") in [(c.id, c.change) for c in whole.checks]


def test_the_schema_refuses_a_selection_that_names_no_check(tmp_path):
    document = json.loads(json.dumps(_results(["drain.allowance"])))
    document.update(allow_unsupported=False)
    from dd_accept.base.results import schema_problem

    assert schema_problem(document) is None
    document["scenarios"][0]["selected"] = []
    assert "selected" in schema_problem(document)


SCENARIO_TESTS = """
import pytest

@pytest.mark.scenario("drain")
def test_drain(scenario_inputs):
    assert scenario_inputs.checks == ("drain.allowance",)

@pytest.mark.scenario("overload")
def test_overload():
    pass

def test_no_scenario():
    pass
"""


def test_the_plugin_deselects_a_scenario_no_pattern_can_name(pytester):
    """Under plain pytest, `--dd-check` deselects a scenario's test as `-k` would, and hands
    the patterns to the scenario (which refuses one that names none of its checks)."""
    pytester.makepyfile(test_scenarios=SCENARIO_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--dd-check", "drain.allowance")
    result.assert_outcomes(passed=2, deselected=1)
    everything = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "not test_drain")
    everything.assert_outcomes(passed=2, deselected=1)


def test_the_report_page_of_a_partial_run_says_so_at_its_top(tmp_path):
    from dd_accept.reports.html import render_bundle

    for name, selected in (("partial", ["drain.allowance"]), ("whole", None)):
        bundle = tmp_path / name
        bundle.mkdir()
        document = {**_results(selected), "allow_unsupported": False}
        (bundle / "results.json").write_text(json.dumps(document))
        page = render_bundle(bundle)
        top = page.index("<h1>")
        if selected:
            assert '<p id="partial"><strong>a partial run: only the checks chosen with --check' in page[top:]
            assert page.index('id="partial"') < page.index("drain.allowance</code>"), "above the checks"
        else:
            assert 'id="partial"' not in page
