"""The serving metrics' names and units: defined here once, for the scenarios that measure
them, the gate files that limit them, and the reports and history that show them."""

from __future__ import annotations

import re

PERCENTILES = (50, 90, 99)
LATENCIES = ("ttft", "itl", "tpot", "e2el")  # each in ms: mean_*, median_*, std_*, p50_*, p90_*, p99_*; *_count
# Every metric's unit, for the report, summary.md and history: names ending in _ms are ms.
UNITS = {
    "requests": "attempts",
    "completed": "attempts",
    "duration_s": "s",
    "request_throughput": "req/s",
    "output_throughput": "tok/s",
    "error_rate": "fraction",
    "rate_limited_rate": "fraction",
}


def unit_of(name: str) -> str:
    if name.endswith("_ms"):
        return "ms"
    if name.endswith("_count"):
        return "values"
    return UNITS.get(name) or ("s" if name.endswith("_s") else "")  # a check's key numbers name theirs so


# The columns a summary shows (summary.md, the run's table, the report), in order: the
# whole set is in results.json.
SUMMARY_COLUMNS = (
    ("requests", "attempts"),
    ("completed", "ok"),
    ("request_throughput", "req/s"),
    ("output_throughput", "tok/s"),
    ("p50_ttft_ms", "TTFT p50 ms"),
    ("p90_ttft_ms", "TTFT p90 ms"),
    ("p99_ttft_ms", "TTFT p99 ms"),
    ("p50_itl_ms", "ITL p50 ms"),
    ("p99_itl_ms", "ITL p99 ms"),
    ("p50_tpot_ms", "TPOT p50 ms"),
    ("p50_e2el_ms", "E2EL p50 ms"),
    ("p99_e2el_ms", "E2EL p99 ms"),
    ("error_rate", "errors"),
    ("rate_limited_rate", "429s"),
)


def shown(name: str, value: float | None) -> str:
    """A metric as a person reads it: rates as percentages, counts whole, the rest 3 digits."""
    if value is None:
        return "-"
    if unit_of(name) == "fraction":
        return f"{value * 100:.1f}%"
    if unit_of(name) in ("attempts", "values"):
        return f"{value:.0f}"
    return f"{value:.3g}" if value < 1000 else f"{value:.0f}"


def serving_rows(results: dict) -> list[tuple[str, dict]]:
    """(label, metrics) for each scenario that measured any, then each of its phases."""
    rows: list[tuple[str, dict]] = []
    for scenario in results.get("scenarios", []):
        serving = scenario.get("serving")
        if not serving:
            continue
        rows.append((scenario["name"], serving["metrics"]))
        rows += [(f"{scenario['name']} / {phase['title']}", phase["metrics"]) for phase in serving["phases"]]
    return rows


# Higher is better for these; lower for every other (latencies, error and 429 rates), except
# the counts and the span, which describe the run and have no better direction.
HIGHER_IS_BETTER = frozenset({"request_throughput", "output_throughput"})
WITHOUT_DIRECTION = frozenset({"requests", "completed", "duration_s"})  # and *_count, std_*: the spread


def better(name: str) -> str | None:
    """ "higher" or "lower": which way a metric improves; None for a count or the span."""
    if name in WITHOUT_DIRECTION or name.endswith("_count") or name.startswith("std_"):
        return None
    return "higher" if name in HIGHER_IS_BETTER else "lower"


METRIC_NAME = re.compile(
    r"^(requests|completed|duration_s|request_throughput|output_throughput|error_rate|rate_limited_rate"
    r"|(mean|median|std|p50|p90|p99)_(ttft|itl|tpot|e2el)_ms|(ttft|itl|tpot|e2el)_count)$"
)
