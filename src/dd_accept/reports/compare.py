"""Baseline against candidate, check by check: what changed between two bundles.

A release engineer's question is never "did it pass" alone but "what got worse since the
last release": a verdict that flipped, a key number (error rate, time to first token, drain
time) that moved, or a serving metric (TTFT, ITL, E2EL percentiles, throughput) that got
worse while every check still passed. The comparison reads only the two bundles'
`results.json`, each verified first (`reading`), and says how each verified.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dd_accept.base.regressions import (
    REGRESSION_METRICS,
    SERVING_TOLERANCE,
    RegressionMetric,
    cheapest_median,
    per_level,
    serving_bound,
    serving_worse,
)
from dd_accept.base.results import not_chosen, partial_note, where_judged
from dd_accept.base.serving_names import SUMMARY_COLUMNS, better, shown, unit_of
from dd_accept.reports.reading import Shown

CHANGES = ("regressed", "fixed", "changed", "same", "added", "removed")
ROLES = ("baseline", "candidate")
# The serving metrics a table shows for each scenario (every one, and each phase's, is in the
# --json document); a flagged one is shown wherever it is.
SHOWN_SERVING = tuple(name for name, _ in SUMMARY_COLUMNS)


@dataclass(frozen=True, slots=True)
class MetricChange:
    name: str
    baseline: float | None
    candidate: float | None

    @property
    def ratio(self) -> float | None:
        """candidate / baseline; None when either is missing or the baseline is zero."""
        if self.baseline in (None, 0) or self.candidate is None:
            return None
        return self.candidate / self.baseline

    def show_ratio(self) -> str:
        ratio = self.ratio
        if ratio is not None:
            return f"x{ratio:.2f}"
        if self.baseline == 0 and self.candidate not in (None, 0):
            return "new non-zero"
        return "-"


@dataclass(frozen=True, slots=True)
class CheckChange:
    id: str
    baseline: str | None  # verdict, None when the baseline did not run the check
    candidate: str | None
    metrics: tuple[MetricChange, ...] = ()

    @property
    def change(self) -> str:
        if self.baseline is None:
            return "added"
        if self.candidate is None:
            return "removed"
        if self.baseline == self.candidate:
            return "same"
        if self.baseline == "pass":
            return "regressed"
        return "fixed" if self.candidate == "pass" else "changed"


@dataclass(frozen=True, slots=True)
class MetricRegression:
    """A number that got worse than the baseline's beyond its tolerance (base.regressions)."""

    declared: RegressionMetric
    baseline: float
    candidate: float | None  # None: the candidate did not measure it (its run ended without it)
    tolerance: float

    def describe(self) -> str:
        d = self.declared
        bound = "at least" if d.worse == "lower" else "at most"
        if self.candidate is None:
            return f"{d.check} {d.metric}: baseline {self.baseline:.4g} {d.unit}, not measured in the candidate"
        return (
            f"{d.check} {d.metric}: baseline {self.baseline:.4g} {d.unit}, candidate {self.candidate:.4g} {d.unit} "
            f"({bound} {d.bound(self.baseline, self.tolerance):.4g} allowed, tolerance {self.tolerance:.0%})"
        )

    def to_json(self) -> dict[str, Any]:
        d = self.declared
        return {
            "check": d.check,
            "metric": d.metric,
            "baseline": self.baseline,
            "candidate": self.candidate,
            "tolerance": self.tolerance,
            "worse": d.worse,
            "description": self.describe(),
        }


@dataclass(frozen=True, slots=True)
class ServingChange:
    """One serving metric of one scenario, or of one phase of it, in both bundles."""

    scenario: str
    phase: str | None  # None: the whole scenario
    metric: MetricChange
    tolerance: float
    # Why its numbers are shown and never flagged: the phase drives a fault by design (results
    # v4 marks it), or the scenario's whole pools such phases with the others.
    fault: str = ""

    @property
    def where(self) -> str:
        return self.scenario if self.phase is None else f"{self.scenario} / {self.phase}"

    @property
    def better(self) -> str | None:
        return better(self.metric.name)

    @property
    def regressed(self) -> bool:
        """Worse than the baseline's beyond the tolerance (base.regressions.serving_worse); a
        count, a spread or a number only one side measured is shown, never flagged."""
        was, now, direction = self.metric.baseline, self.metric.candidate, self.better
        if was is None or now is None or direction is None or self.fault:
            return False
        return serving_worse(direction, was, now, self.tolerance)

    def describe(self) -> str:
        name, was, now = self.metric.name, self.metric.baseline, self.metric.candidate
        bound = "at least" if self.better == "higher" else "at most"
        limit = serving_bound(self.better or "lower", was or 0.0, self.tolerance)
        return (
            f"serving {self.where} {name}: baseline {amount(name, was)}, candidate {amount(name, now)} "
            f"({self.metric.show_ratio()}; {bound} {amount(name, limit)} allowed, tolerance {self.tolerance:.0%})"
        )

    def to_json(self) -> dict[str, Any]:
        m = self.metric
        return {
            "scenario": self.scenario,
            "phase": self.phase,
            "name": m.name,
            "baseline": m.baseline,
            "candidate": m.candidate,
            "ratio": m.ratio,
            "better": self.better,
            "regressed": self.regressed,
            **({"fault": self.fault} if self.fault else {}),
        }


def amount(name: str, value: float | None) -> str:
    """A serving number with its unit, as a person reads it (fractions as percentages)."""
    if value is None:
        return "-"
    unit = unit_of(name)
    return shown(name, value) if unit == "fraction" else f"{value:.4g} {unit}".strip()


@dataclass(frozen=True, slots=True)
class Comparison:
    baseline: str  # the SUT as the bundle names it
    candidate: str
    baseline_verdict: str
    candidate_verdict: str
    checks: tuple[CheckChange, ...] = field(default_factory=tuple)
    # Where each ran ("Slurm 24.11, cgroup"), when its results say; "" for older bundles.
    baseline_cluster: str = ""
    candidate_cluster: str = ""
    # Numbers worse than the baseline's beyond their tolerance, even where both runs passed.
    metric_regressions: tuple[MetricRegression, ...] = ()
    # Numbers not compared, and why (two knees measured on different ladders).
    not_compared: tuple[str, ...] = ()
    # Every serving metric of every scenario and phase either bundle measured.
    serving: tuple[ServingChange, ...] = ()
    serving_tolerance: float = SERVING_TOLERANCE
    # How each bundle verified, by role ("baseline", "candidate"); empty where the bundles are
    # the gate's own, just written.
    bundles: tuple[Shown, ...] = ()

    @property
    def regressed(self) -> bool:
        return bool(self.regressions or self.metric_regressions or self.serving_regressions)

    @property
    def by_role(self) -> list[tuple[str, Shown]]:
        """(role, the bundle as read): nothing for the gate's own bundles."""
        return list(zip(ROLES, self.bundles, strict=True)) if self.bundles else []

    @property
    def serving_regressions(self) -> list[ServingChange]:
        return [change for change in self.serving if change.regressed]

    def count(self, change: str) -> int:
        return sum(1 for check in self.checks if check.change == change)

    @property
    def regressions(self) -> list[CheckChange]:
        return [check for check in self.checks if check.change == "regressed"]

    def headline(self) -> str:
        counts = ", ".join(f"{self.count(c)} {c}" for c in CHANGES if self.count(c))
        if self.metric_regressions:
            counts += f"; {len(self.metric_regressions)} number(s) worse beyond their tolerance"
        if self.serving_regressions:
            counts += f"; {len(self.serving_regressions)} serving metric(s) worse beyond the tolerance"
        before = f" on {self.baseline_cluster}" if self.baseline_cluster else ""
        after = f" on {self.candidate_cluster}" if self.candidate_cluster else ""
        return (
            f"baseline {self.baseline}{before} ({self.baseline_verdict}) → candidate {self.candidate}{after} "
            f"({self.candidate_verdict}): {counts or 'no checks'}"
        )


def to_json(comparison: Comparison, exit_status: int) -> dict[str, Any]:
    """The `dd-accept/compare/v1` document (`compare --json`, `--format json`)."""

    def side(sut: str, verdict: str, cluster: str) -> dict[str, str]:
        return {"sut": sut, "verdict": verdict, "cluster": cluster}

    return {
        "schema": "dd-accept/compare/v1",
        "baseline": side(comparison.baseline, comparison.baseline_verdict, comparison.baseline_cluster),
        "candidate": side(comparison.candidate, comparison.candidate_verdict, comparison.candidate_cluster),
        "headline": comparison.headline(),
        "checks": [
            {
                "id": check.id,
                "baseline": check.baseline,
                "candidate": check.candidate,
                "change": check.change,
                "metrics": [
                    {"name": m.name, "baseline": m.baseline, "candidate": m.candidate, "ratio": m.ratio}
                    for m in check.metrics
                ],
            }
            for check in comparison.checks
        ],
        "regressed": [check.id for check in comparison.regressions],
        "metric_regressions": [regression.to_json() for regression in comparison.metric_regressions],
        "not_compared": list(comparison.not_compared),
        "serving": [change.to_json() for change in comparison.serving],
        "serving_regressions": [
            {**change.to_json(), "tolerance": comparison.serving_tolerance, "description": change.describe()}
            for change in comparison.serving_regressions
        ],
        "serving_tolerance": comparison.serving_tolerance,
        "verification": {role: bundle.verification.standing_json() for role, bundle in comparison.by_role},
        "exit_status": exit_status,
    }


def checks_by_id(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {check["id"]: check for scenario in results.get("scenarios", []) for check in scenario.get("checks", [])}


def metric_regressions(
    before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]], tolerance: float | None = None
) -> tuple[tuple[MetricRegression, ...], tuple[str, ...]]:
    """Each declared number the baseline measured and the candidate worsened beyond the
    tolerance (the metric's own, grounded in measured noise, unless one is given) or, having
    run the check, did not measure; and the numbers left uncompared, with why (the candidate
    did not run the check; the two ran on different ladders or machines)."""
    found, skipped = [], []
    for declared in REGRESSION_METRICS:
        was_metrics = before.get(declared.check, {}).get("metrics", {})
        now_metrics = after.get(declared.check, {}).get("metrics", {})
        was, now = was_metrics.get(declared.metric), now_metrics.get(declared.metric)
        allowed = declared.tolerance if tolerance is None else tolerance
        if was is None:
            continue
        if declared.check not in after:
            skipped.append(f"{declared.check} {declared.metric}: the candidate did not run {declared.check}")
            continue
        ladder = declared.ladder_in or declared.check
        was_ladder = before.get(ladder, {}).get("metrics", {})
        now_ladder = after.get(ladder, {}).get("metrics", {})
        differ = [key for key in declared.same if was_ladder.get(key) != now_ladder.get(key)]
        if now is None:  # it ran the check and measured nothing: its run ended without it
            found.append(MetricRegression(declared, was, None, allowed))
        elif differ:
            skipped.append(f"{declared.check} {declared.metric}: the runs' ladders differ ({', '.join(differ)})")
        else:
            was, now = _on_shared_levels(declared, was_metrics, now_metrics, was, now)
            if declared.regressed(was, now, tolerance):
                found.append(MetricRegression(declared, was, now, allowed))
    return tuple(found), tuple(skipped)


def _on_shared_levels(
    declared: RegressionMetric, was_metrics: dict[str, float], now_metrics: dict[str, float], was: float, now: float
) -> tuple[float, float]:
    """A per-level metric, read on the levels both runs reached (as its check reads it)."""
    if not declared.per_level:
        return was, now
    before, after = per_level(was_metrics, declared.metric), per_level(now_metrics, declared.metric)
    shared = set(before) & set(after)
    was_read = cheapest_median({load: before[load] for load in shared})
    now_read = cheapest_median({load: after[load] for load in shared})
    if was_read is None or now_read is None:
        return was, now
    return was_read[1], now_read[1]


def round_values(declared: RegressionMetric, runs: list[dict[str, dict[str, Any]]]) -> list[float]:
    """Each run's value of a declared number, for interleaved rounds (base.noisy_comparison):
    a per-level metric read on the levels every run reached (as `_on_shared_levels` reads
    two), so a candidate whose knee came early is compared where all of them forwarded."""
    metrics = [run.get(declared.check, {}).get("metrics", {}) for run in runs]
    if declared.per_level:
        levels = [per_level(m, declared.metric) for m in metrics]
        shared = set.intersection(*(set(found) for found in levels)) if levels else set()
        if shared:
            reads = [cheapest_median({load: found[load] for load in shared}) for found in levels]
            return [read[1] for read in reads if read is not None]
    return [float(m[declared.metric]) for m in metrics if declared.metric in m]


def ladders_differ(declared: RegressionMetric, runs: list[dict[str, dict[str, Any]]]) -> list[str]:
    """The ladder keys on which the runs disagree: numbers from different ladders never compare."""
    ladder = declared.ladder_in or declared.check
    seen = [run.get(ladder, {}).get("metrics", {}) for run in runs]
    return [key for key in declared.same if len({repr(m.get(key)) for m in seen}) > 1]


POOLED_WITH_FAULTS = "the scenario's whole pools phases that drive a fault by design"


def _serving_of(
    results: dict[str, Any],
) -> tuple[dict[tuple[str, str | None], dict[str, float]], dict[tuple[str, str | None], str]]:
    """(scenario, phase title or None) -> its serving metrics, in the order the run wrote them;
    and the same keys -> the fault by design that makes its numbers noise to a comparison."""
    found: dict[tuple[str, str | None], dict[str, float]] = {}
    faults: dict[tuple[str, str | None], str] = {}
    for scenario in results.get("scenarios", []):
        serving = scenario.get("serving")
        if serving:
            found[(scenario["name"], None)] = serving["metrics"]
            for phase in serving["phases"]:
                found.setdefault((scenario["name"], phase["title"]), phase["metrics"])
                if phase.get("fault"):
                    faults[(scenario["name"], phase["title"])] = phase["fault"]
                    faults[(scenario["name"], None)] = POOLED_WITH_FAULTS
    return found, faults


def serving_changes(
    baseline: dict[str, Any], candidate: dict[str, Any], tolerance: float = SERVING_TOLERANCE
) -> tuple[ServingChange, ...]:
    """Each serving metric of each scenario and phase, paired by scenario name and phase title
    (a capacity ladder's levels pair where both runs reached them). A phase either run marks
    as driving a fault by design (a stalled replica's TTFT), and a scenario's whole that pools
    such phases, are shown and never flagged: their numbers are the fault's, and as noisy."""
    (before, faults_before), (after, faults_after) = _serving_of(baseline), _serving_of(candidate)
    changes = []
    for key in dict.fromkeys([*before, *after]):
        was, now = before.get(key, {}), after.get(key, {})
        fault = faults_after.get(key) or faults_before.get(key) or ""
        measured = dict.fromkeys([*was, *now])
        for name in [*(n for n in SHOWN_SERVING if n in measured), *(n for n in measured if n not in SHOWN_SERVING)]:
            change = MetricChange(name, was.get(name), now.get(name))
            changes.append(ServingChange(key[0], key[1], change, tolerance, fault))
    return tuple(changes)


def compare(
    baseline: dict[str, Any],
    candidate: dict[str, Any],
    tolerance: float | None = None,
    serving_tolerance: float = SERVING_TOLERANCE,
    bundles: tuple[Shown, ...] = (),
) -> Comparison:
    """`bundles`: the two as read and verified (baseline, candidate), for what each page says of them."""
    before, after = checks_by_id(baseline), checks_by_id(candidate)
    worse, skipped = metric_regressions(before, after, tolerance)
    # a check a partial run (`--check`) did not choose was not judged: neither removed nor added
    unchosen = {"baseline": not_chosen(baseline, after), "candidate": not_chosen(candidate, before)}
    skipped += tuple(
        f"{role}: {partial_note(results)}; the {len(unchosen[role])} check(s) it did not choose are not compared"
        for role, results in (("baseline", baseline), ("candidate", candidate))
        if partial_note(results)
    )
    rows = []
    for check_id in sorted((set(before) | set(after)) - unchosen["baseline"] - unchosen["candidate"]):
        a, b = before.get(check_id, {}), after.get(check_id, {})
        names = sorted(set(a.get("metrics", {})) | set(b.get("metrics", {})))
        metrics = tuple(MetricChange(n, a.get("metrics", {}).get(n), b.get("metrics", {}).get(n)) for n in names)
        rows.append(CheckChange(check_id, a.get("verdict"), b.get("verdict"), metrics))
    return Comparison(
        baseline=baseline.get("sut", {}).get("spec", "?"),
        candidate=candidate.get("sut", {}).get("spec", "?"),
        baseline_verdict=baseline.get("verdict", "?"),
        candidate_verdict=candidate.get("verdict", "?"),
        checks=tuple(rows),
        baseline_cluster=where_judged(baseline),
        candidate_cluster=where_judged(candidate),
        metric_regressions=worse,
        not_compared=skipped,
        serving=serving_changes(baseline, candidate, serving_tolerance),
        serving_tolerance=serving_tolerance,
        bundles=bundles,
    )
