"""How two releases' noisy benchmark numbers are told apart: repeated, interleaved runs of
each, a rank test and a bootstrap confidence interval, as asv and pyperf compare benchmarks.

One run of each says little: on one machine in one day rc1's CPU per chunk spread by 24-53%
between runs (docs/benchmarks.md), so a single comparison needs a tolerance as wide as that
noise, and a proxy twice as costly per chunk sits at its edge. Runs of the baseline and the
candidate taken in turn (ABBA) see the machine alike; from three of each, a difference is a
regression when both say so:

* Mann-Whitney's U (one-sided, exact over every split of the pooled runs): how likely a
  separation this complete is when both releases cost the same. With three runs a side the
  smallest possible p is 1/20 = 0.05, reached only when every candidate run is worse than
  every baseline run.
* a bootstrap interval of the ratio of the medians (each side resampled on its own, seeded,
  so a verdict is reproducible): the ratio beyond the smallest change that matters, and the
  whole interval beyond half of it.

Neither needs numpy; both are a few lines, checked against their definitions in the tests.
"""

from __future__ import annotations

import itertools
import random
import statistics
from dataclasses import dataclass
from typing import Literal

from dd_accept.base.percentiles import percentile

# Runs of each release the rank test needs to be able to say anything at 5%.
FEWEST_ROUNDS = 3
SIGNIFICANCE = 0.05
CONFIDENCE = 0.95
RESAMPLES = 4000


def mann_whitney_p(worse: list[float], other: list[float]) -> float:
    """One-sided exact p that `worse` is stochastically greater than `other`: the share of
    all splits of the pooled values into groups of these sizes whose U is at least the
    observed one (ties count half, as U counts them)."""
    if not worse or not other:
        return 1.0
    pooled = worse + other
    observed = _u(worse, other)
    splits = itertools.combinations(range(len(pooled)), len(worse))
    total = at_least = 0
    for chosen in splits:
        picked = set(chosen)
        mine = [pooled[i] for i in chosen]
        rest = [pooled[i] for i in range(len(pooled)) if i not in picked]
        total += 1
        at_least += _u(mine, rest) >= observed - 1e-12
    return at_least / total


def _u(a: list[float], b: list[float]) -> float:
    return sum(1.0 if x > y else 0.5 if x == y else 0.0 for x in a for y in b)


@dataclass(frozen=True, slots=True)
class RatioInterval:
    """The candidate's median over the baseline's, with a bootstrap interval around it."""

    ratio: float
    low: float
    high: float

    def show(self) -> str:
        return f"x{self.ratio:.2f} ({CONFIDENCE:.0%} interval x{self.low:.2f}-x{self.high:.2f})"


def ratio_interval(baseline: list[float], candidate: list[float], seed: int = 0) -> RatioInterval | None:
    """The ratio of medians and its percentile bootstrap interval; None without a positive
    baseline median (a ratio to nothing is no measurement)."""
    if not baseline or not candidate or statistics.median(baseline) <= 0:
        return None
    rng = random.Random(seed)
    ratios = []
    for _ in range(RESAMPLES):
        base = statistics.median(rng.choices(baseline, k=len(baseline)))
        cand = statistics.median(rng.choices(candidate, k=len(candidate)))
        if base > 0:
            ratios.append(cand / base)
    tail = (1 - CONFIDENCE) / 2
    low, high = percentile(ratios, tail), percentile(ratios, 1 - tail)
    point = statistics.median(candidate) / statistics.median(baseline)
    return RatioInterval(point, low if low is not None else point, high if high is not None else point)


@dataclass(frozen=True, slots=True)
class RoundsVerdict:
    """What the interleaved rounds of one number say, in the words a report prints."""

    worse: bool
    p: float
    interval: RatioInterval | None
    baseline: tuple[float, ...]
    candidate: tuple[float, ...]

    def show(self, unit: str) -> str:
        runs = f"baseline {_values(self.baseline)} {unit}, candidate {_values(self.candidate)} {unit}"
        spread = self.interval.show() if self.interval is not None else "no ratio"
        return f"{runs}: {spread}, Mann-Whitney one-sided p={self.p:.3f}"


def _values(values: tuple[float, ...]) -> str:
    return "[" + ", ".join(f"{v:.4g}" for v in values) + "]"


def judge_rounds(
    baseline: list[float],
    candidate: list[float],
    worse: Literal["lower", "higher"],
    smallest_change: float,
    margin: float = 0.0,
) -> RoundsVerdict:
    """Worse when all three say so: the rank test finds the candidate's runs worse than the
    baseline's (p at most SIGNIFICANCE), the ratio of medians is worse by more than
    `smallest_change` (a fraction; and the medians differ by more than `margin` in the number's
    own unit, for numbers near the clock's resolution), and the whole interval of the ratio is
    worse by more than half of it.

    Why half: simulated with log-normal run-to-run noise (benchmarks' spread, sigma 0.25, three
    runs a side), the whole interval beyond the full change catches a halved knee 59% of the
    time; the interval merely clear of 1, 85%, but then an equal release fails 5% of the time;
    beyond half, 75% caught and 1% false. With the spread interleaved runs show (sigma 0.1)
    every rule catches it and none fails an equal one. Too few runs never show it."""
    p = mann_whitney_p(candidate, baseline) if worse == "higher" else mann_whitney_p(baseline, candidate)
    interval = ratio_interval(baseline, candidate)

    def beyond(ratio: float, change: float) -> bool:
        return ratio > 1 + change if worse == "higher" else ratio < 1 - change

    bound = None if interval is None else (interval.low if worse == "higher" else interval.high)
    clear = bound is not None and beyond(bound, smallest_change / 2)
    large = interval is not None and beyond(interval.ratio, smallest_change)
    shift = statistics.median(candidate) - statistics.median(baseline) if baseline and candidate else 0.0
    noticeable = (shift if worse == "higher" else -shift) > margin
    enough = min(len(baseline), len(candidate)) >= FEWEST_ROUNDS
    verdict = enough and p <= SIGNIFICANCE and clear and large and noticeable
    return RoundsVerdict(verdict, p, interval, tuple(baseline), tuple(candidate))
