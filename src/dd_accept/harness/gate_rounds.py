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
    """Every declared number, judged on every round: failed when the candidate's runs are worse
    (judge_rounds), or when a run planned did not measure it, or measured it on another ladder
    (a gate never passes what it could not judge). A per-level number is read on the levels
    every run of both SUTs reached, so an early-broken run moves neither side to its light,
    wake-up-dominated levels alone."""
    before = [checks_by_id(results) for results in baselines]
    after = [checks_by_id(results) for results in candidates]
    found = []
    complete = len(before) >= planned and len(after) >= planned  # else a round wrote no results at all
    for declared in REGRESSION_METRICS:
        unknown = _ladderless(declared, before, after) if complete else []
        if unknown:  # its knee not judged (the machine bounded it): its numbers compare with nothing
            said = f"no ladder in {', '.join(unknown)} (its knee was not judged), so its numbers compare with none"
            found.append(_not_judged(declared, planned, said))
            continue
        differ = ladders_differ(declared, before + after) if complete else []
        if differ:  # one gate's runs share one ladder
            found.append(_not_judged(declared, planned, f"the runs' ladders differ ({', '.join(differ)})"))
            continue
        values = round_values(declared, before + after) if complete else []
        if complete and len(values) == len(before) + len(after):
            found.append(_judged(declared, values[: len(before)], values[len(before) :], planned))
        else:  # a run that did not measure it: each side's own count says which
            found.append(_judged(declared, round_values(declared, before), round_values(declared, after), planned))
    return found


def _ladderless(declared: RegressionMetric, before: list[dict], after: list[dict]) -> list[str]:
    """The runs that wrote no ladder for a number (by role and round), where a declared number
    is read on a ladder: a run the machine left unjudged, named rather than read as a ladder
    that differs."""
    if not declared.same:
        return []
    ladder = declared.ladder_in or declared.check
    named = [
        (f"{role} run {n}", run)
        for role, runs in zip(ROLES, (before, after), strict=True)
        for n, run in enumerate(runs, 1)
    ]
    return [name for name, run in named if ladder not in run]


def _expected(declared: RegressionMetric, planned: int) -> str:
    change = f"{declared.smallest_change:.0%}"
    direction = "lower" if declared.worse == "lower" else "higher"
    return (
        f"over {planned} interleaved runs each, the candidate's {declared.metric} is not {direction} than the "
        f"baseline's by more than {change}"
        + (f" and {declared.margin:g} {declared.unit}" if declared.margin else "")
        + f" (a regression needs Mann-Whitney one-sided p <= {SIGNIFICANCE:g}, the ratio of medians beyond "
        f"{change} and its whole {CONFIDENCE:.0%} interval beyond half of that)"
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
    verdict = judge_rounds(was, now, declared.worse, declared.smallest_change, declared.margin)
    if verdict.interval is None:  # a baseline median of 0: no ratio to judge, never a pass by default
        return _not_judged(declared, planned, verdict.show(declared.unit))
    interval = verdict.interval
    metrics = {"p": round(verdict.p, 4), "rounds": float(planned), "ratio": round(interval.ratio, 4)}
    metrics |= {"ratio_low": round(interval.low, 4), "ratio_high": round(interval.high, 4)}
    return CheckResult.judge(
        check_id,
        not verdict.worse,
        expected,
        verdict.show(declared.unit),
        "worse than the baseline in every view" if verdict.worse else "",
        metrics,
    )
