"""The check numbers whose worsening between two releases is a regression by itself.

A release whose proxy forwards a token at twice the CPU, or whose knee came down a third,
passes every check of its own run when the floors leave room for a slower machine; only
the comparison with the release before it shows the change. Each metric is declared once
here, with the direction that is worse and the tolerance that measured noise allows
(benchmarks/capacity.py: five runs of rc1 on the reference machine, docs/benchmarks.md);
the capacity checks write the metrics under these names, and `compare`, `gate` and
`history` read them from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class RegressionMetric:
    check: str
    metric: str
    worse: Literal["lower", "higher"]
    tolerance: float  # the fraction by which it may get worse before it is a regression
    unit: str

    def regressed(self, baseline: float, candidate: float, tolerance: float | None = None) -> bool:
        """Worse than the baseline by more than the tolerance (a fraction of the baseline)."""
        allowed = self.tolerance if tolerance is None else tolerance
        if self.worse == "lower":
            return candidate < baseline * (1 - allowed)
        return candidate > baseline * (1 + allowed)

    def bound(self, baseline: float, tolerance: float | None = None) -> float:
        allowed = self.tolerance if tolerance is None else tolerance
        return baseline * (1 - allowed) if self.worse == "lower" else baseline * (1 + allowed)


KNEE_THROUGHPUT = "knee_output_throughput"
PROXY_CPU_PER_CHUNK = "proxy_cpu_us_per_chunk"

# Tolerances: the knee moves a whole ladder step (x1.5) between runs of one release, so a
# regression is more than one step down; CPU per chunk spread by up to a third over five runs.
REGRESSION_METRICS: tuple[RegressionMetric, ...] = (
    RegressionMetric("capacity.knee", KNEE_THROUGHPUT, "lower", 0.4, "output tokens/s"),
    RegressionMetric("capacity.proxy_cpu_per_chunk", PROXY_CPU_PER_CHUNK, "higher", 0.5, "us"),
)
