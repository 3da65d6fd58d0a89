"""The one percentile every dd-accept number uses: vLLM's.

vLLM's `bench serve` (and AIPerf and guidellm after it) take percentiles with numpy's default,
linear interpolation between the closest ranks. dd-accept used to have a second, nearest-rank
definition for its checks beside it, so one bundle could say p99 0.344 s in a check and 254 ms
in its serving metrics for the same phase; a number a release engineer compares with vLLM's
must mean what vLLM's means, wherever it is printed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def percentile(values: Iterable[float], fraction: float) -> float | None:
    """numpy's default percentile at `fraction` (0.99 for p99) of `values`; None for none."""
    ordered = sorted(values)
    if not ordered:
        return None
    position = (len(ordered) - 1) * min(1.0, max(0.0, fraction))
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)
