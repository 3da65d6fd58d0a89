"""`compare` holds every serving metric of every scenario and phase to the baseline's (issue
#28, item 8): a tripled p99 E2EL is flagged with both numbers (negative control); equal
values and changes within the tolerance are not (positive controls)."""

from __future__ import annotations

import json

import pytest

from dd_accept.base.regressions import SERVING_TOLERANCE, serving_worse
from dd_accept.base.results import CheckResult, ScenarioResult, write_results
from dd_accept.reports import compare
from tests.helpers import run_cli, sealed

REQUIRED = {"requests": 64.0, "completed": 64.0, "error_rate": 0.0, "rate_limited_rate": 0.0}


def _serving_bundle(directory, started=1_000.0, **metrics):
    """A sealed bundle whose streaming scenario, and its one phase, measured `metrics`."""
    directory.mkdir(parents=True)
    measured = {**REQUIRED, **metrics}
    serving = {"metrics": measured, "phases": [{"title": "drive", "metrics": dict(measured)}], "events": "run-1"}
    checks = [CheckResult.judge("streaming.no_buffering", True, "x", "y", metrics={"held": 0})]
    scenario = ScenarioResult("streaming", checks=checks, started=started, ended=started + 10, serving=serving)
    write_results(directory / "results.json", [scenario], {"spec": "sut==1"}, False)
    return sealed(directory)


def _json(result):
    assert result.stdout.strip(), result.stderr
    return json.loads(result.stdout)


def test_the_serving_rule_flags_only_what_got_worse_beyond_the_tolerance():
    assert serving_worse("lower", 800.0, 2400.0, SERVING_TOLERANCE)  # a tripled latency
    assert not serving_worse("lower", 800.0, 800.0, SERVING_TOLERANCE)
    assert not serving_worse("lower", 800.0, 1200.0, SERVING_TOLERANCE)  # exactly at the bound
    assert serving_worse("lower", 800.0, 1201.0, SERVING_TOLERANCE)
    assert not serving_worse("lower", 800.0, 100.0, SERVING_TOLERANCE)  # better
    assert serving_worse("higher", 40.0, 19.0, SERVING_TOLERANCE) and not serving_worse("higher", 40.0, 21.0, 0.5)
    assert serving_worse("lower", 0.0, 0.01, SERVING_TOLERANCE)  # errors where there were none
    assert not serving_worse("higher", 0.0, 0.0, SERVING_TOLERANCE)


def test_a_tripled_p99_e2el_is_a_regression_with_both_numbers(tmp_path):
    _serving_bundle(tmp_path / "a", p99_e2el_ms=800.0, p99_ttft_ms=100.0, output_throughput=900.0)
    _serving_bundle(tmp_path / "b", p99_e2el_ms=2400.0, p99_ttft_ms=140.0, output_throughput=800.0)
    result = run_cli("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--format", "json", "--fail-on-regression")
    assert result.returncode == 1, result.stderr
    document = _json(result)
    worse = [(r["scenario"], r["phase"], r["name"]) for r in document["serving_regressions"]]
    assert worse == [("streaming", None, "p99_e2el_ms"), ("streaming", "drive", "p99_e2el_ms")], worse
    first = document["serving_regressions"][0]
    assert (first["baseline"], first["candidate"], first["ratio"], first["tolerance"]) == (800.0, 2400.0, 3.0, 0.5)
    assert first["description"] == (
        "serving streaming p99_e2el_ms: baseline 800 ms, candidate 2400 ms (x3.00; at most 1200 ms allowed, "
        "tolerance 50%)"
    )
    assert "1 same; 2 serving metric(s) worse beyond the tolerance" in document["headline"]
    assert document["regressed"] == [] and document["metric_regressions"] == []  # every check still passed
    rows = {(r["phase"], r["name"]): r for r in document["serving"]}
    assert rows[(None, "p99_ttft_ms")]["ratio"] == 1.4 and not rows[(None, "p99_ttft_ms")]["regressed"]  # +40%
    assert not rows[(None, "output_throughput")]["regressed"] and rows[(None, "requests")]["better"] is None
    assert "dd-accept compare: worse than the baseline: serving streaming p99_e2el_ms: baseline 800 ms" in (
        result.stderr
    )
    markdown = run_cli("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--format", "md").stdout
    assert "| streaming | `p99_e2el_ms` | 800 ms | 2400 ms | **x3.00 worse** |" in markdown, markdown
    assert "| streaming / drive | `p99_e2el_ms` | 800 ms | 2400 ms | **x3.00 worse** |" in markdown
    table = run_cli("compare", str(tmp_path / "a"), str(tmp_path / "b")).stdout
    assert "streaming | p99_e2el_ms | 800 ms | 2400 ms | x3.00 worse" in table
    assert "streaming | p99_ttft_ms | 100 ms | 140 ms | x1.40\n" in table
    page = run_cli("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--format", "html").stdout
    assert '<table id="serving">' in page and "<td>2400 ms</td>" in page and "<script" not in page
    # a wider tolerance the user asks for
    lenient = run_cli("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--serving-tolerance", "0.2",
                      "--format", "json", "--fail-on-regression")  # fmt: skip
    names = {r["name"] for r in _json(lenient)["serving_regressions"]}
    assert names == {"p99_e2el_ms", "p99_ttft_ms"} and _json(lenient)["serving_tolerance"] == 0.2


def test_equal_and_within_tolerance_serving_metrics_are_not_flagged(tmp_path):
    _serving_bundle(tmp_path / "a", p99_e2el_ms=800.0, p50_itl_ms=2.0, request_throughput=40.0)
    _serving_bundle(tmp_path / "b", 2_000.0, p99_e2el_ms=1100.0, p50_itl_ms=2.0, request_throughput=25.0)
    for pair in (("a", "a"), ("a", "b")):
        result = run_cli("compare", *(str(tmp_path / name) for name in pair), "--format", "json",
                         "--fail-on-regression")  # fmt: skip
        assert result.returncode == 0, result.stderr
        document = _json(result)
        assert document["serving_regressions"] == [] and "serving metric" not in document["headline"]
        assert {r["name"] for r in document["serving"]} >= {"p99_e2el_ms", "p50_itl_ms", "request_throughput"}
    table = run_cli("compare", str(tmp_path / "a"), str(tmp_path / "b")).stdout
    assert "streaming | p99_e2el_ms | 800 ms | 1100 ms | x1.38\n" in table and " worse\n" not in table, table


@pytest.mark.parametrize(
    ("was", "now", "flagged"),
    [({"error_rate": 0.0}, {"error_rate": 0.05}, True), ({"requests": 64.0}, {"requests": 8.0}, False)],
)
def test_errors_from_none_are_flagged_and_counts_never(was, now, flagged):
    def results(metrics):
        serving = {"metrics": {**REQUIRED, **metrics}, "phases": []}
        return {"scenarios": [{"name": "streaming", "checks": [], "serving": serving}]}

    comparison = compare.compare(results(was), results(now))
    assert bool(comparison.serving_regressions) == flagged and comparison.regressed == flagged


def _phased(p99_normal, p99_stalled):
    """Results whose streaming scenario has a normal phase and one that drives a fault by design."""
    phases = [
        {"title": "streams", "metrics": {**REQUIRED, "p99_ttft_ms": p99_normal}},
        {"title": "routing with one replica stalled", "metrics": {**REQUIRED, "p99_ttft_ms": p99_stalled},
         "fault": "replica 0 stalls its streams"},
    ]  # fmt: skip
    whole = {**REQUIRED, "p99_ttft_ms": max(p99_normal, p99_stalled)}
    return {"scenarios": [{"name": "streaming", "checks": [], "serving": {"metrics": whole, "phases": phases}}]}


def test_a_phase_that_drives_a_fault_by_design_is_shown_never_flagged_and_its_pool_with_it():
    """The stalled replica's TTFT p99 (1.4 s, and noisy) tripling is the fault's, not the
    release's: shown, marked, not flagged; nor is the scenario's whole that pools it. The
    normal phase beside it is still held to the baseline (negative control)."""
    noisy = compare.compare(_phased(40.0, 1400.0), _phased(40.0, 4200.0))
    changes = {(c.phase, c.metric.name): c for c in noisy.serving}
    stalled = changes[("routing with one replica stalled", "p99_ttft_ms")]
    assert stalled.metric.ratio == 3.0 and not stalled.regressed and stalled.fault == "replica 0 stalls its streams"
    assert not changes[(None, "p99_ttft_ms")].regressed and changes[(None, "p99_ttft_ms")].fault
    assert noisy.serving_regressions == [] and stalled.to_json()["fault"] == "replica 0 stalls its streams"
    slower = compare.compare(_phased(40.0, 1400.0), _phased(130.0, 1400.0))
    assert [(c.phase, c.metric.name) for c in slower.serving_regressions] == [("streams", "p99_ttft_ms")]
