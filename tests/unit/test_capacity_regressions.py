"""Numbers that got worse between two releases beyond measured noise are regressions, even
when each release passed its own run."""

import pytest

from dd_accept.acceptance.capacity import CapacityOptions
from dd_accept.base.regressions import KNEE_THROUGHPUT, LIGHT_CHUNK_DELAY, PROXY_CPU_PER_CHUNK, REGRESSION_METRICS
from dd_accept.harness.gate import judge_regressions
from dd_accept.reports import compare, compare_render

LADDER_METRICS = dict(CapacityOptions().ladder())


def results(
    knee: float, cost: float, verdict: str = "pass", delay: float = 0.4, levels: dict | None = None, **ladder: float
) -> dict:
    knee_metrics = {KNEE_THROUGHPUT: knee, LIGHT_CHUNK_DELAY: delay, **LADDER_METRICS, **ladder}
    cost_metrics = {PROXY_CPU_PER_CHUNK: cost} | {
        f"{PROXY_CPU_PER_CHUNK}_at_{k:g}": v for k, v in (levels or {}).items()
    }
    checks = [
        {"id": "capacity.knee", "verdict": verdict, "metrics": knee_metrics},
        {"id": "capacity.proxy_cpu_per_chunk", "verdict": "pass", "metrics": cost_metrics},
    ]
    return {"sut": {"spec": "x"}, "verdict": verdict, "scenarios": [{"name": "capacity", "checks": checks}]}


def test_a_knee_two_ladder_steps_lower_is_noise_more_than_sixty_percent_is_a_regression():
    assert compare.compare(results(8000, 40), results(3600, 40)).metric_regressions == (), "8000 / 1.5 / 1.5"
    found = compare.compare(results(8000, 40), results(3100, 40))
    (worse,) = found.metric_regressions
    assert found.regressed and not found.regressions, "both passed: only the number regressed"
    assert worse.describe() == (
        "capacity.knee knee_output_throughput: baseline 8000 output tokens/s, candidate 3100 output tokens/s "
        "(at least 3200 allowed, tolerance 60%)"
    )


def test_cpu_per_chunk_regresses_upwards_and_an_improvement_never_does():
    assert compare.compare(results(8000, 40), results(8000, 70)).metric_regressions == (), "75% more is noise"
    (worse,) = compare.compare(results(8000, 40), results(8000, 80)).metric_regressions
    assert worse.declared.metric == PROXY_CPU_PER_CHUNK and worse.candidate == 80, "twice the CPU per chunk"
    assert compare.compare(results(8000, 40), results(20000, 10)).metric_regressions == ()


def test_a_given_tolerance_replaces_every_metrics_own():
    assert len(compare.compare(results(8000, 40), results(7000, 44), tolerance=0.05).metric_regressions) == 2


def test_every_token_held_a_millisecond_longer_is_a_regression_a_fraction_of_one_is_not():
    assert compare.compare(results(8000, 40, delay=0.4), results(8000, 40, delay=1.0)).metric_regressions == ()
    (worse,) = compare.compare(results(8000, 40, delay=0.4), results(8000, 40, delay=1.4)).metric_regressions
    assert worse.declared.metric == LIGHT_CHUNK_DELAY and "at most 1.1 allowed" in worse.describe()


def test_knees_from_different_ladders_are_not_compared_and_the_reason_is_said():
    found = compare.compare(results(8000, 40), results(2000, 40, ladder_mode=2.0, ladder_start=40.0))
    assert [r.declared.metric for r in found.metric_regressions] == []
    assert found.not_compared == (
        "capacity.knee knee_output_throughput: the runs' ladders differ (ladder_mode, ladder_start)",
        "capacity.proxy_cpu_per_chunk proxy_cpu_us_per_chunk: the runs' ladders differ (ladder_mode, ladder_start)",
        "capacity.knee light_chunk_delay_p50_ms: the runs' ladders differ (ladder_mode, ladder_start)",
    )
    # a shorter ladder: its knee and cheapest levels say nothing against nine levels; its first level does
    shorter = compare.compare(results(8000, 40), results(2000, 90, delay=2.0, ladder_levels=2.0))
    assert [r.declared.metric for r in shorter.metric_regressions] == [LIGHT_CHUNK_DELAY]
    assert len(shorter.not_compared) == 2


def test_a_candidate_that_ran_the_check_and_measured_nothing_regressed():
    crashed = results(8000, 40)
    for check in crashed["scenarios"][0]["checks"]:
        check["metrics"] = {}
    found = compare.compare(results(8000, 40), crashed)
    assert len(found.metric_regressions) == 3 and found.regressed
    assert "not measured in the candidate" in found.metric_regressions[0].describe()
    assert compare.compare(results(8000, 0.0), results(8000, 40)).metric_regressions == ()
    # the delay has an absolute margin: a baseline of 0 still bounds it
    assert len(compare.compare(results(8000, 40, delay=0.0), results(8000, 40, delay=0.9)).metric_regressions) == 1


def test_a_candidate_that_never_ran_capacity_is_not_compared_and_says_so():
    other = {"sut": {"spec": "x"}, "verdict": "pass", "scenarios": [{"name": "overload", "checks": []}]}
    found = compare.compare(results(8000, 40), other)
    assert found.metric_regressions == () and not found.regressed
    assert "capacity.knee knee_output_throughput: the candidate did not run capacity.knee" in found.not_compared


def test_cpu_per_chunk_compares_on_the_levels_both_runs_reached():
    # the candidate's knee came early: it never reached the cheap levels; per level it costs the same
    baseline = results(8000, 40, levels={8: 170, 12: 120, 18: 100, 27: 80, 40: 60, 60: 45, 90: 40, 135: 38})

    def cost_regressions(candidate):
        found = compare.compare(baseline, candidate).metric_regressions
        return [r for r in found if r.declared.metric == PROXY_CPU_PER_CHUNK]

    assert cost_regressions(results(4000, 80, levels={8: 172, 12: 118, 18: 101, 27: 82})) == [], "8-27 in both"
    (worse,) = cost_regressions(results(4000, 300, levels={8: 400, 12: 350, 18: 320, 27: 300}))
    assert (worse.baseline, worse.candidate) == (100, 320), "the median of the three cheapest shared levels"
    assert compare.compare(results(8000, 40), results(3000, 100), tolerance=2.0).metric_regressions == ()


def test_the_json_document_names_the_metric_both_values_and_the_tolerance():
    document = compare.to_json(compare.compare(results(8000, 40), results(3000, 40)), 1)
    (worse,) = document["metric_regressions"]
    assert (worse["metric"], worse["baseline"], worse["candidate"], worse["tolerance"]) == (
        KNEE_THROUGHPUT,
        8000,
        3000,
        0.6,
    )
    assert "knee_output_throughput" in compare_render.to_markdown(compare.compare(results(8000, 40), results(3000, 40)))


def test_a_gate_with_a_baseline_judges_each_declared_number():
    checks = {c.id: c for c in judge_regressions(results(8000, 40), results(3000, 41))}
    assert set(checks) == {f"gate.regression.{m.check}.{m.metric}" for m in REGRESSION_METRICS}
    knee = checks[f"gate.regression.capacity.knee.{KNEE_THROUGHPUT}"]
    assert knee.verdict == "fail" and knee.metrics == {"baseline": 8000, "candidate": 3000}
    assert "at least 3200 output tokens/s" in knee.expected
    assert checks[f"gate.regression.capacity.proxy_cpu_per_chunk.{PROXY_CPU_PER_CHUNK}"].verdict == "pass"
    assert judge_regressions({"scenarios": []}, results(1, 1)) == [], "nothing to compare: no check"


def test_each_declared_metric_is_one_its_check_writes():
    from dd_accept.acceptance import capacity_checks
    from tests.unit.test_capacity_checks import curve, level

    measured = curve(level(0, 8), level(1, 12))
    written = {
        "capacity.knee": capacity_checks.knee(measured, floor=1).metrics,
        "capacity.proxy_cpu_per_chunk": capacity_checks.proxy_cpu_per_chunk(measured, limit_us=1000).metrics,
    }
    for declared in REGRESSION_METRICS:
        assert declared.metric in written[declared.check], declared


def test_a_gate_tolerance_replaces_the_metrics_own_and_needs_capacity_and_two_suts():
    from dd_accept.base.errors import UsageError
    from dd_accept.harness.gate import resolve_suts
    from dd_accept.harness.gate_file import parse_gate

    text = (
        '[gate]\nname = "g"\nscenarios = ["capacity"]\nsuts = ["a==1", "a==2"]\n'
        "[thresholds]\ncapacity_tolerance = 0.1\n"
    )
    gate = parse_gate(text, "g.toml")
    assert gate.thresholds.capacity_tolerance == 0.1
    strict = {c.id: c for c in judge_regressions(results(8000, 40), results(7000, 40), 0.1)}
    assert strict[f"gate.regression.capacity.knee.{KNEE_THROUGHPUT}"].verdict == "fail"
    assert "tolerance 10%" in strict[f"gate.regression.capacity.knee.{KNEE_THROUGHPUT}"].expected
    with pytest.raises(UsageError, match="does not run"):
        parse_gate(text.replace('["capacity"]', '["overload"]'), "g.toml")
    with pytest.raises(UsageError, match="a fraction above 0"):
        parse_gate(text.replace("0.1", "-1.0"), "g.toml")
    with pytest.raises(UsageError, match="compares with a baseline"):
        resolve_suts(parse_gate(text.replace('"a==1", ', ""), "g.toml"), [])
