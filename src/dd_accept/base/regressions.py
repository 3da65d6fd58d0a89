"""The check numbers whose worsening between two releases is a regression by itself.

A release whose proxy forwards a token at twice the CPU, whose knee came down by more than
two ladder steps, or that holds every token a millisecond longer, passes every check of its
own run when the floors leave room for a slower machine; only the comparison with the
release before it shows the change. Each metric is declared once here, with the direction
that is worse and the tolerance that measured noise allows (benchmarks/capacity.py: five
runs of rc1 on the reference machine, docs/benchmarks.md); the capacity checks write the
metrics under these names, and `compare` and `gate` read them from here. The serving
metrics every scenario's load clients measure (TTFT, ITL, TPOT, E2EL, throughput, error
rates) have one rule for all of them, `serving_worse`, which `compare` and `history` share.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

KNEE_THROUGHPUT = "knee_output_throughput"
PROXY_CPU_PER_CHUNK = "proxy_cpu_us_per_chunk"
LIGHT_CHUNK_DELAY = "light_chunk_delay_p50_ms"  # a chunk's delay through the proxy at the lightest level
# How a capacity run's ladder was built, in the knee's metrics: the mode (its index in
# options.LOAD_MODES), the first level, the factor, the most levels, the seconds per level and
# the SLO. A knee, and the CPU per chunk read at the cheapest levels it reached, compare only
# between equal ladders; the lightest level's delay only needs an equal first level.
LADDER = (
    "ladder_mode",
    "ladder_start",
    "ladder_factor",
    "ladder_levels",
    "level_seconds",
    "slo_added_ttft_ms",
    "slo_chunk_delay_ms",
    # and what it ran on: the replicas' workload and the machine's cores
    "replicas",
    "tokens_per_stream",
    "itl_ms",
    "machine_cpus",
)
FIRST_LEVEL = (
    "ladder_mode",
    "ladder_start",
    "level_seconds",
    "replicas",
    "tokens_per_stream",
    "itl_ms",
    "machine_cpus",
)


@dataclass(frozen=True, slots=True)
class RegressionMetric:
    check: str
    metric: str
    worse: Literal["lower", "higher"]
    tolerance: float  # the fraction by which it may get worse before it is a regression
    unit: str
    margin: float = 0.0  # and an absolute allowance on top, for numbers near the clock's resolution
    # Metrics that must be equal in both bundles for the two to compare (knees measured on
    # different ladders say nothing about each other), read from `ladder_in` (default: the
    # metric's own check).
    same: tuple[str, ...] = ()
    ladder_in: str = ""
    # Also written per load level (`METRIC_at_LOAD`): two runs are then compared on the levels
    # both reached (a candidate whose knee came early never reached the cheap levels).
    per_level: bool = False
    # With interleaved rounds (a gate's capacity_rounds, base.noisy_comparison) the noise is
    # the test's to judge, not the tolerance's: a change is a regression when the rank test
    # and the whole confidence interval say the candidate is worse by more than this fraction.
    smallest_change: float = 0.2

    def regressed(self, baseline: float, candidate: float, tolerance: float | None = None) -> bool:
        """Worse than the baseline by more than the tolerance (a fraction of the baseline) and
        the margin. A baseline of 0 or less where higher is worse was not a measurement."""
        if self.worse == "higher" and baseline <= 0 and not self.margin:
            return False
        bound = self.bound(baseline, tolerance)
        return candidate < bound if self.worse == "lower" else candidate > bound

    def bound(self, baseline: float, tolerance: float | None = None) -> float:
        allowed = self.tolerance if tolerance is None else tolerance
        if self.worse == "lower":
            return baseline * (1 - allowed) - self.margin
        return baseline * (1 + allowed) + self.margin


# Tolerances (ten runs of rc1 on the reference machine over two days, docs/benchmarks.md):
# the knee moves up to two ladder steps (x1.5 each, a fall of 56%) between runs of one release
# on a machine whose neighbours take its CPU (14,074 against 30,469 tokens/s: 54% lower), so a
# regression is more than two steps down; CPU per chunk spread by 28% one day and 53% the next
# (30.4-46.6 us), so 75% more is allowed, which catches a proxy twice as expensive per chunk
# when both runs see the machine alike (not a knee that halves: that is inside the noise);
# a chunk's delay at light load is a fraction of a millisecond, so half a millisecond more
# is allowed. Runs compare on one machine in one session: across the two days the CPU
# per chunk moved by 95% (23.9 against 46.6 us) with the machine, not the release.
# With interleaved rounds the smallest changes that count are what a release engineer would
# act on, not what the noise allows: a knee a fifth lower, a quarter more CPU per chunk (a
# proxy twice as costly is x2), half again a light chunk's delay (a fraction of a millisecond).
REGRESSION_METRICS: tuple[RegressionMetric, ...] = (
    RegressionMetric("capacity.knee", KNEE_THROUGHPUT, "lower", 0.6, "output tokens/s", same=LADDER),
    RegressionMetric(
        "capacity.proxy_cpu_per_chunk",
        PROXY_CPU_PER_CHUNK,
        "higher",
        0.75,
        "us",
        same=LADDER,
        ladder_in="capacity.knee",
        per_level=True,
        smallest_change=0.25,
    ),
    RegressionMetric(
        "capacity.knee", LIGHT_CHUNK_DELAY, "higher", 0.5, "ms", margin=0.5, same=FIRST_LEVEL, smallest_change=0.5
    ),
)


def at_level(metric: str, load: float) -> str:
    """The name of a metric's value at one load level: `proxy_cpu_us_per_chunk_at_60`."""
    return f"{metric}_at_{load:g}"


def cheapest_median(costs: dict[float, float]) -> tuple[float, float] | None:
    """(load, cost) of the median of the three cheapest levels (the cheaper of two): where
    forwarding is the proxy's own cost, not its idle wake-ups; one misread level never decides."""
    cheapest = sorted(costs.items(), key=lambda item: item[1])[:3]
    return cheapest[(len(cheapest) - 1) // 2] if cheapest else None


def per_level(metrics: dict[str, float], metric: str) -> dict[float, float]:
    """{load: value} of a metric written per level."""
    prefix = f"{metric}_at_"
    return {float(name.removeprefix(prefix)): value for name, value in metrics.items() if name.startswith(prefix)}


# A serving metric worse than the baseline's by more than this fraction is a regression
# (`compare`; `history` applies the same rule run after run, with its own --tolerance). Run
# to run noise of the serving metrics themselves has not been measured; the nearest measured
# numbers of one release on the reference machine (a chunk's delay at light load, the CPU per
# chunk) moved by up to 53% (docs/benchmarks.md), so half again is allowed: a p99 that doubles
# is caught, one that moves with the machine is not.
SERVING_TOLERANCE = 0.5


def serving_worse(better: str, baseline: float, candidate: float, tolerance: float) -> bool:
    """Worse in the metric's own direction ("higher" or "lower" is better, serving_names.better)
    by more than `tolerance`, a fraction of the baseline. From a baseline of none at all, any
    rise of a lower-is-better number (errors where there were none) is beyond every tolerance."""
    if baseline == 0:
        return better == "lower" and candidate > 0
    change = (candidate - baseline) / abs(baseline)
    return (-change if better == "higher" else change) > tolerance


def serving_bound(better: str, baseline: float, tolerance: float) -> float:
    """The worst value `serving_worse` still allows: what a report states beside a regression."""
    return baseline * (1 - tolerance) if better == "higher" else baseline * (1 + tolerance)
