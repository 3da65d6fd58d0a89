"""The verdict rules of results.json: unsupported fails unless allowed; errors always fail."""

import json

from dd_accept.base.results import SCHEMA, CheckResult, ScenarioResult, run_verdict, write_results


def _scenario(*verdicts, error=None):
    checks = []
    for n, verdict in enumerate(verdicts):
        if verdict == "unsupported":
            checks.append(CheckResult.unsupported(f"s.c{n}", "x", "the profile declares no such capability"))
        else:
            checks.append(CheckResult.judge(f"s.c{n}", verdict == "pass", "x", "y"))
    return ScenarioResult("s", checks, error=error)


def test_unsupported_fails_the_run_unless_allowed():
    scenario = _scenario("pass", "unsupported")
    assert scenario.verdict() == "fail" and run_verdict([scenario], allow_unsupported=False) == "fail"
    assert scenario.verdict(allow_unsupported=True) == "pass"
    assert [c.id for c in scenario.failed()] == ["s.c1"] and scenario.failed(allow_unsupported=True) == []


def test_a_failed_check_fails_even_when_unsupported_is_allowed():
    assert _scenario("fail", "unsupported").verdict(allow_unsupported=True) == "fail"


def test_a_scenario_that_could_not_be_judged_fails_and_so_does_an_empty_run():
    assert _scenario("pass", error="ClusterError: boom").verdict() == "fail"
    assert _scenario().verdict() == "fail", "no check ran: nothing was shown to pass"
    assert run_verdict([], allow_unsupported=True) == "fail"


def test_results_json_round_trips_with_its_schema(tmp_path):
    scenario = _scenario("pass", "unsupported")
    document = write_results(tmp_path / "results.json", [scenario], {"spec": "x"}, allow_unsupported=True)
    loaded = json.loads((tmp_path / "results.json").read_text())
    assert loaded == document and loaded["schema"] == SCHEMA and loaded["verdict"] == "pass"
    assert ScenarioResult.from_json(loaded["scenarios"][0]).checks == scenario.checks
