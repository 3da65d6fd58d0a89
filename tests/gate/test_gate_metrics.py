"""A gate file's demands on the serving metrics (limits, references with tolerances, the
baseline) and goodput under SLOs: each is a gate check with the observed number and the
bound it was held to; every mistake in the file is exit 2 naming the key."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from dd_accept.base.errors import UsageError
from dd_accept.base.events import ClientRequest, EventWriter
from dd_accept.harness.gate import judge, resolve_suts
from dd_accept.harness.gate_file import parse_gate
from dd_accept.harness.gate_metrics import GoodputSection, goodput, judge_goodput

HEAD = '[gate]\nname = "g"\nscenarios = ["streaming"]\n'
TWO = '[gate]\nname = "g"\nscenarios = ["streaming"]\nsuts = ["a==1", "a==2"]\n'


def _results(**metrics):
    serving = {"metrics": {"requests": 10.0, "completed": 10.0, "error_rate": 0.0, "rate_limited_rate": 0.0, **metrics},
               "phases": [], "events": "run-1"}  # fmt: skip
    checks = [{"id": "streaming.integrity", "verdict": "pass", "expected": "", "observed": "", "detail": "",
               "metrics": {}}]  # fmt: skip
    scenario = {"name": "streaming", "verdict": "pass", "error": None, "checks": checks, "serving": serving}
    return {"verdict": "pass", "scenarios": [scenario]}


def _by_id(checks):
    return {c.id: c for c in checks}


def test_limits_and_references_pass_or_fail_with_the_number_and_the_bound():
    gate = parse_gate(
        HEAD + "[metrics.streaming]\n"
        "p99_ttft_ms = { max = 250 }\n"
        "request_throughput = { ref = 40, lower = 0.2 }\n"  # at least 32
        "p50_itl_ms = { ref = 10, upper = 0.10 }\n",  # at most 11
        "g.toml",
    )
    good = _by_id(judge(gate, _results(p99_ttft_ms=120.0, request_throughput=35.0, p50_itl_ms=10.9)))
    assert all(good[f"gate.metric.streaming.{m}"].verdict == "pass" for m in ("p99_ttft_ms", "request_throughput"))
    assert good["gate.metric.streaming.p50_itl_ms"].verdict == "pass"
    bad = _by_id(judge(gate, _results(p99_ttft_ms=251.0, request_throughput=31.0, p50_itl_ms=11.2)))
    ttft = bad["gate.metric.streaming.p99_ttft_ms"]
    assert ttft.verdict == "fail" and ttft.expected == "p99_ttft_ms ≤ 250 ms" and ttft.observed == "251 ms"
    throughput = bad["gate.metric.streaming.request_throughput"]
    assert throughput.verdict == "fail" and throughput.expected == "request_throughput ≥ 32 req/s"
    assert bad["gate.metric.streaming.p50_itl_ms"].expected == "p50_itl_ms ≤ 11 ms"
    missing = _by_id(judge(gate, _results()))["gate.metric.streaming.p99_ttft_ms"]
    assert (
        missing.verdict == "fail"
        and missing.observed == "p99_ttft_ms was not measured in streaming outside its fault phases"
    )


def test_vs_baseline_holds_the_candidate_to_the_baselines_value_in_the_metrics_direction():
    gate = parse_gate(TWO + "[metrics.streaming]\np99_ttft_ms = { vs_baseline = 1.1 }\n"
                      "output_throughput = { vs_baseline = 1.25 }\n", "g.toml")  # fmt: skip
    baseline = _results(p99_ttft_ms=100.0, output_throughput=1000.0)
    fine = _by_id(judge(gate, _results(p99_ttft_ms=109.0, output_throughput=801.0), baseline=baseline))
    assert {c.verdict for i, c in fine.items() if i.startswith("gate.metric")} == {"pass"}
    worse = _by_id(judge(gate, _results(p99_ttft_ms=111.0, output_throughput=799.0), baseline=baseline))
    ttft = worse["gate.metric.streaming.p99_ttft_ms"]
    assert ttft.verdict == "fail" and "≤ 110 ms" in ttft.expected and ttft.metrics["baseline_p99_ttft_ms"] == 100
    throughput = worse["gate.metric.streaming.output_throughput"]
    assert throughput.expected == "output_throughput ≥ 800 tok/s (the baseline's 1000 tok/s / 1.25)", throughput
    with pytest.raises(UsageError, match="compares with a baseline: the gate needs two SUTs"):
        resolve_suts(gate, ["a==2"])  # `--sut` once replaces the file's two
    alone = _by_id(judge(gate, _results(p99_ttft_ms=1.0)))["gate.metric.streaming.p99_ttft_ms"]
    assert alone.verdict == "fail" and alone.observed == "the gate has no baseline"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (HEAD + "[metrics.streaming]\np99_ttft = { max = 1 }\n", "streaming.'p99_ttft': unknown serving metric"),
        (HEAD + "[metrics.streaming]\np99_ttft_ms = { maxi = 1 }\n", "unknown key metrics.streaming.p99_ttft_ms.maxi "),
        (HEAD + "[metrics.streaming]\np99_ttft_ms = { ref = 1 }\n", "ref needs a tolerance"),
        (HEAD + "[metrics.streaming]\np99_ttft_ms = { upper = 0.1 }\n", "tolerances around ref, which is missing"),
        (HEAD + "[metrics.streaming]\np99_ttft_ms = {}\n", "give at least one of"),
        (HEAD + "[metrics.streaming]\np99_ttft_ms = { max = \"1\" }\n", "p99_ttft_ms.max must be a number"),
        (HEAD + "[metrics.drain]\np99_ttft_ms = { max = 1 }\n", "the gate does not run scenario 'drain'"),
        (TWO + "[metrics.streaming]\np99_ttft_ms = { vs_baseline = 0.9 }\n", "at least 1"),
        (HEAD + "[goodput]\nscenario = \"streaming\"\n", "goodput needs at least one SLO"),
        (HEAD + "[goodput]\nttft_ms = 100\nmin_fraction = 1.5\n", "min_fraction from 0 to 1"),
        (HEAD + "[goodput]\nttft_ms = 100\ntpot_ms = 0\n", "SLOs must be positive"),
        (HEAD + "[goodput]\nttft_ms = 100\nmin_request_goodput = 0\n", "min_request_goodput must be positive"),
        (HEAD + "[goodput]\nscenario = \"overload\"\nttft_ms = 100\n", "the gate does not run scenario 'overload'"),
        (HEAD + "[metrics.streaming]\np99_ttft_ms = { max = nan }\n", "p99_ttft_ms.max must be a finite number"),
        (HEAD + "[metrics.streaming]\np99_ttft_ms = { vs_baseline = inf }\n", "must be a finite number"),
        (HEAD + "[goodput]\nttft_ms = nan\n", "goodput.ttft_ms must be a finite number"),
        (HEAD + "[metrics.streaming]\np99_ttft_ms = { max = -1 }\n", "max must be 0 or more"),
        (HEAD + "[metrics.streaming]\np99_ttft_ms = { min = 10, max = 1 }\n", "min 10 is above max 1"),
        (HEAD + "[metrics.streaming]\np99_ttft_ms = { ref = 0, upper = 0.1 }\n", "ref must be above 0"),
        (HEAD + '[metrics.streaming]\n"p99_ttft_ms\\n" = { max = 1 }\n', "unknown serving metric"),
        (HEAD + '[metrics."str\\neaming"]\np99_ttft_ms = { max = 1 }\n', "not a scenario's name"),
        (HEAD + "[metrics.streaming]\n", "must be a table of metrics, not empty"),
    ],
)  # fmt: skip
def test_a_wrong_demand_is_refused_naming_the_key(text, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        parse_gate(text, "g.toml")


def _attempt(ttft_s, latency_s, chunks=11, outcome="ok", started=None):
    started = time.time() - 10 if started is None else started
    return ClientRequest(t=started + latency_s, mode="raw", record=0, attempt=1, outcome=outcome, started=started,
                         ttft_s=ttft_s, latency_s=latency_s, chunks=chunks)  # fmt: skip


def test_goodput_counts_the_attempts_that_completed_within_every_slo():
    attempts = [
        _attempt(0.1, 1.1, started=100.0),  # TPOT 100 ms: good
        _attempt(0.3, 1.3, started=100.0),  # TTFT 300 ms: not good
        _attempt(0.1, 3.1, started=100.0),  # TPOT 300 ms: not good
        _attempt(0.1, 0.1, chunks=1, started=100.0),  # one token: TPOT 0, as vLLM counts it: good
        _attempt(None, 0.5, outcome="error", started=100.0),  # failed: counts against the fraction
    ]
    measured = goodput(attempts, {"ttft": 200, "tpot": 150})
    assert (measured["good"], measured["attempts"]) == (2, 5) and measured["goodput_fraction"] == pytest.approx(0.4)
    assert measured["request_goodput"] == pytest.approx(2 / 3.1)  # good ones per second of the span


def _bundle_with(tmp_path, attempts):
    writer = EventWriter(tmp_path / "events" / "run-1" / "client.jsonl", "client")
    for attempt in attempts:
        writer.write(attempt)
    writer.close()
    return tmp_path


def test_goodput_is_judged_from_the_bundles_own_client_events(tmp_path):
    bundle = _bundle_with(tmp_path, [_attempt(0.1, 1.1), _attempt(0.1, 1.1), _attempt(0.9, 1.9)])
    section = GoodputSection(scenario="streaming", ttft_ms=500, min_fraction=0.6)
    check = judge_goodput(section, bundle, _results())
    assert check.verdict == "pass" and check.observed.startswith("2 of 3 attempts (66.7%)"), check
    strict = judge_goodput(GoodputSection(scenario="streaming", ttft_ms=500, min_fraction=0.9), bundle, _results())
    assert strict.verdict == "fail" and strict.metrics["goodput_fraction"] == pytest.approx(2 / 3)
    assert "TTFT ≤ 500 ms" in strict.expected
    rate = GoodputSection(scenario="streaming", ttft_ms=500, min_fraction=0.5, min_request_goodput=100)
    slow = judge_goodput(rate, bundle, _results())
    assert slow.verdict == "fail" and slow.metrics["request_goodput"] < 100 and "100 such requests/s" in slow.expected
    gone = judge_goodput(section, tmp_path / "elsewhere", _results())
    assert gone.verdict == "fail" and gone.observed == "no client events of streaming in the bundle"


def test_an_slo_the_client_cannot_measure_fails_saying_so(tmp_path):
    """The SUT's own client measures no TTFT: a TTFT SLO cannot be met, and the check says
    why instead of counting every request as too slow."""
    sut = [ClientRequest(t=time.time(), mode="sut", record=0, attempt=1, outcome="ok", started=time.time() - 1,
                         latency_s=1.0, tokens=8)]  # fmt: skip
    check = judge_goodput(GoodputSection(scenario="streaming", ttft_ms=500), _bundle_with(tmp_path, sut), _results())
    assert check.verdict == "fail" and check.observed == "the client measured no TTFT in streaming"


def test_the_examples_commented_in_the_shipped_gate_file_are_valid():
    text = (Path(__file__).parents[2] / "docs" / "gate.example.toml").read_text()
    keys = r"\[metrics\.overload\]|p99_e2el_ms|request_throughput|\[goodput\]|scenario |ttft_ms|tpot_ms|min_fraction"
    text = re.sub(rf"^# ({keys})", r"\1", text, flags=re.M).replace('["overload"]', '["overload", "streaming"]')
    gate = parse_gate(text, "gate.example.toml")
    assert [d.check_id for d in gate.metrics] == [
        "gate.metric.overload.p99_e2el_ms", "gate.metric.overload.request_throughput",
    ]  # fmt: skip
    assert gate.goodput is not None and gate.goodput.slos == {"ttft": 500, "tpot": 50}


def _phased(phases, ended=None):
    """Results whose streaming serving block lists `phases`: (title, {metric: value}, fault)."""
    results = _results()
    (scenario,) = results["scenarios"]
    scenario["serving"]["phases"] = [
        {"title": title, "metrics": {"requests": 4.0, "completed": 4.0, "error_rate": 0.0, "rate_limited_rate": 0.0,
                                     **metrics}} | ({"fault": fault} if fault else {})
        for title, metrics, fault in phases
    ]  # fmt: skip
    scenario["phases"] = [
        {"kind": "drive", "title": title, "started": 100.0 + 10 * i, "ended": 110.0 + 10 * i, "outcome": "done"}
        for i, (title, _, _) in enumerate(phases)
    ]
    return results


STALLED = "routing with one replica stalled"


def test_a_demand_holds_in_each_phase_and_a_fault_phase_by_design_is_left_out():
    """The README's example gate flipped on rc1: pooled with the stalled replica's phase (TTFT
    p99 1.4 s), the scenario's p99 broke 250 ms. Per phase, the stalled phase is left out and
    named; every other phase must hold the demand, and the worst one is named."""
    gate = parse_gate(HEAD + "[metrics.streaming]\np99_ttft_ms = { max = 250 }\n", "g.toml")
    phases = [("streams through the proxy", {"p99_ttft_ms": 40.0}, ""),
              ("one stream at a time", {"p99_ttft_ms": 90.0}, ""),
              (STALLED, {"p99_ttft_ms": 1400.0}, "replica 0 stalls its streams")]  # fmt: skip
    results = _phased(phases)
    results["scenarios"][0]["serving"]["metrics"]["p99_ttft_ms"] = 1400.0  # what the pooled number said
    check = _by_id(judge(gate, results))["gate.metric.streaming.p99_ttft_ms"]
    assert check.verdict == "pass" and check.observed == "90 ms in one stream at a time (the worst of 2 phases)", check
    assert check.detail.endswith(f"left out as faults by design: {STALLED}") and check.metrics["p99_ttft_ms"] == 90
    # negative: a phase that is no fault breaking the demand fails, named, even when the others hold
    slow = _phased([phases[0], ("one stream at a time", {"p99_ttft_ms": 300.0}, ""), phases[2]])
    failed = _by_id(judge(gate, slow))["gate.metric.streaming.p99_ttft_ms"]
    assert failed.verdict == "fail" and failed.observed == "300 ms in one stream at a time (the worst of 2 phases)"
    # the fault is judged where it is no fault: unmarked, the stalled phase decides
    unmarked = _phased([*phases[:2], (STALLED, {"p99_ttft_ms": 1400.0}, "")])
    assert _by_id(judge(gate, unmarked))["gate.metric.streaming.p99_ttft_ms"].verdict == "fail"
    # only fault phases measured it: not measured, never a pass
    only = _by_id(judge(gate, _phased([phases[2]])))["gate.metric.streaming.p99_ttft_ms"]
    assert only.verdict == "fail" and only.observed.endswith("was not measured in streaming outside its fault phases")


def test_vs_baseline_pairs_each_phase_with_the_baselines_same_phase():
    gate = parse_gate(TWO + "[metrics.streaming]\np99_ttft_ms = { vs_baseline = 1.5 }\n", "g.toml")
    baseline = _phased([("a", {"p99_ttft_ms": 100.0}, ""), ("b", {"p99_ttft_ms": 20.0}, "")])
    # b tripled: within 1.5 x of the baseline's pooled worst (100), not of its own phase's 20
    candidate = _phased([("a", {"p99_ttft_ms": 100.0}, ""), ("b", {"p99_ttft_ms": 60.0}, "")])
    check = _by_id(judge(gate, candidate, baseline=baseline))["gate.metric.streaming.p99_ttft_ms"]
    assert check.verdict == "fail" and check.observed == "60 ms in b (the worst of 2 phases)", check
    assert check.metrics == {"p99_ttft_ms": 60.0, "baseline_p99_ttft_ms": 20.0}
    same = _by_id(judge(gate, baseline, baseline=baseline))["gate.metric.streaming.p99_ttft_ms"]
    assert same.verdict == "pass", same


def test_a_phase_the_baseline_measured_as_0_gives_no_ratio_and_is_left_out_said():
    """CI: the same wheel twice, the baseline's p50 gap 0 ms in one phase (its events all came in
    one read), the candidate's 16.5 ms: "3 x 0" failed a release against itself. That phase is
    left out of the ratio and named; the other phases are held to theirs."""
    gate = parse_gate(TWO + "[metrics.streaming]\np50_itl_ms = { vs_baseline = 3.0 }\n", "g.toml")
    baseline = _phased([("sparse", {"p50_itl_ms": 20.0}, ""), ("closing", {"p50_itl_ms": 0.0}, "")])
    candidate = _phased([("sparse", {"p50_itl_ms": 21.0}, ""), ("closing", {"p50_itl_ms": 16.5}, "")])
    check = _by_id(judge(gate, candidate, baseline=baseline))["gate.metric.streaming.p50_itl_ms"]
    assert check.verdict == "pass" and check.observed == "21 ms", check
    assert check.detail.endswith("left out, the baseline measuring 0 there (no ratio to hold): closing"), check
    slower = _phased([("sparse", {"p50_itl_ms": 61.0}, ""), ("closing", {"p50_itl_ms": 16.5}, "")])
    assert _by_id(judge(gate, slower, baseline=baseline))["gate.metric.streaming.p50_itl_ms"].verdict == "fail"


def test_goodput_leaves_out_the_attempts_of_phases_that_drive_a_fault_by_design(tmp_path):
    fine = [_attempt(0.1, 1.1, started=101.0) for _ in range(3)]  # in the first phase
    stalled = [_attempt(1.4, 2.4, started=111.0) for _ in range(3)]  # in the stalled phase
    bundle = _bundle_with(tmp_path, fine + stalled)
    section = GoodputSection(scenario="streaming", ttft_ms=500, min_fraction=0.9)
    marked = _phased([("streams", {}, ""), (STALLED, {}, "replica 0 stalls its streams")])
    check = judge_goodput(section, bundle, marked)
    assert check.verdict == "pass" and check.observed.startswith("3 of 3 attempts (100.0%)"), check
    assert f"outside the phases that drive a fault by design ({STALLED})" in check.expected
    pooled = judge_goodput(section, bundle, _phased([("streams", {}, ""), (STALLED, {}, "")]))
    assert pooled.verdict == "fail" and pooled.observed.startswith("3 of 6 attempts (50.0%)"), pooled
