"""A gate's capacity rounds: the baseline and the candidate measured in turn, judged together.

One capacity run of each release compares two numbers a machine moves by up to half between
runs (docs/benchmarks.md), so a single comparison allows 75% more CPU per chunk, and a proxy
twice as costly sits at that edge. `[gate] capacity_rounds = N` runs capacity N times for each
SUT, interleaved (baseline, candidate, then candidate, baseline, then baseline, candidate, ...:
a machine that drifts during the gate drifts for both), and judges each declared number
(base.regressions) on all the runs with the rank test and interval of base.noisy_comparison.
The first round is each SUT's full run; the later ones run capacity only, each its own bundle
beside them (`baseline-2/`, `candidate-2/`, ...), verifiable on its own.
"""

from __future__ import annotations

from typing import Any

from dd_accept.base.noisy_comparison import CONFIDENCE, SIGNIFICANCE, judge_rounds
from dd_accept.base.regressions import REGRESSION_METRICS, RegressionMetric
from dd_accept.base.results import CheckResult
from dd_accept.reports.compare import checks_by_id, ladders_differ, round_values

ROLES = ("baseline", "candidate")


def later_rounds(rounds: int) -> list[tuple[str, int]]:
    """(role, round) of every run after the first round's baseline and candidate, in the
    order they run: each pair reversed from the one before (ABBA), so neither release is
    always the one measured later."""
    order: list[tuple[str, int]] = []
    for number in range(2, rounds + 1):
        pair = ROLES[::-1] if number % 2 == 0 else ROLES
        order += [(role, number) for role in pair]
    return order


def round_name(role: str, number: int) -> str:
    """Where a run's bundle is, beside the first round's `baseline/` and `candidate/`."""
    return role if number == 1 else f"{role}-{number}"


def judge_round_regressions(
    baselines: list[dict[str, Any]], candidates: list[dict[str, Any]], planned: int
) -> list[CheckResult]:
    """Each declared number the baseline's first run measured, judged on every round: failed
    when the candidate's runs are worse (Mann-Whitney at 5% and the whole interval of the
    ratio beyond the metric's smallest change), or when a run planned did not measure it (a
    gate never passes what it could not judge)."""
    before = [checks_by_id(results) for results in baselines]
    after = [checks_by_id(results) for results in candidates]
    found = []
    for declared in REGRESSION_METRICS:
        if not before or declared.metric not in before[0].get(declared.check, {}).get("metrics", {}):
            continue
        differ = ladders_differ(declared, before + after)
        if differ:  # one gate's runs share one ladder: a run without it (not judged) measured nothing to compare
            found.append(_not_judged(declared, planned, f"the runs' ladders differ ({', '.join(differ)})"))
            continue
        found.append(_judged(declared, round_values(declared, before), round_values(declared, after), planned))
    return found


def _expected(declared: RegressionMetric, planned: int) -> str:
    change = f"{declared.smallest_change:.0%}"
    direction = "lower" if declared.worse == "lower" else "higher"
    return (
        f"over {planned} interleaved runs each, the candidate's {declared.metric} is not {direction} than the "
        f"baseline's by more than {change} (Mann-Whitney one-sided p <= {SIGNIFICANCE:g} and the whole "
        f"{CONFIDENCE:.0%} interval of the ratio of medians beyond {change})"
    )


def _not_judged(declared: RegressionMetric, planned: int, why: str) -> CheckResult:
    check_id = f"gate.regression.{declared.check}.{declared.metric}"
    return CheckResult.judge(
        check_id, False, _expected(declared, planned), why, "not judged: a round did not measure it"
    )


def _judged(declared: RegressionMetric, was: list[float], now: list[float], planned: int) -> CheckResult:
    if len(was) < planned or len(now) < planned:
        measured = f"measured in {len(was)} of {planned} baseline runs and {len(now)} of {planned} candidate runs"
        return _not_judged(declared, planned, measured)
    expected, check_id = _expected(declared, planned), f"gate.regression.{declared.check}.{declared.metric}"
    verdict = judge_rounds(was, now, declared.worse, declared.smallest_change)
    metrics = {"p": round(verdict.p, 4), "rounds": float(planned)}
    if verdict.interval is not None:
        interval = verdict.interval
        metrics |= {"ratio": round(interval.ratio, 4), "ratio_low": round(interval.low, 4)}
        metrics |= {"ratio_high": round(interval.high, 4)}
    return CheckResult.judge(
        check_id,
        not verdict.worse,
        expected,
        verdict.show(declared.unit),
        "worse than the baseline in every view" if verdict.worse else "",
        metrics,
    )
