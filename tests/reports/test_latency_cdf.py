"""The report's latency CDF: one line per phase, the shares at the values measured."""

import itertools
import re

from dd_accept.base.events import ClientRequest
from dd_accept.reports.serving_charts import HEIGHT, MOST_POINTS, cdf_points, latency_cdf_chart


def _ok(n, ttft_ms=None, e2el_ms=None, outcome="ok"):
    return ClientRequest(
        t=100.0 + n, mode="raw", record=n, attempt=0, outcome=outcome,
        ttft_s=None if ttft_ms is None else ttft_ms / 1000, latency_s=None if e2el_ms is None else e2el_ms / 1000,
    )  # fmt: skip


def _shares(svg_line):
    """The y of each vertex as a share of requests (1 at the top)."""
    points = re.search(r'points="([^"]+)"', svg_line).group(1).split()
    return [round((HEIGHT - float(p.split(",")[1])) / HEIGHT, 3) for p in points]


def test_each_phase_is_a_step_line_rising_to_all_its_completed_requests():
    fast = [_ok(n, ttft_ms=v) for n, v in enumerate([40, 10, 30, 20])]
    slow = [_ok(n, ttft_ms=500) for n in range(3)] + [_ok(9, outcome="error")]  # the error is not a latency
    chart = latency_cdf_chart({"partial": fast, "total": slow}, "run-1")
    lines = re.findall(r"<polyline[^>]*>", chart)
    assert len(lines) == 2 and "TTFT distribution — run-1" in chart
    assert "partial (4)" in chart and "total (3)" in chart, "completed requests only"
    # steps: up by a quarter at each of 10, 20, 30 and 40 ms; the slow phase jumps to 1 at 500 ms
    assert _shares(lines[0]) == [0.0, 0.25, 0.25, 0.5, 0.5, 0.75, 0.75, 1.0]
    assert _shares(lines[1]) == [0.0, 0.333, 0.333, 0.667, 0.667, 1.0]
    x_fast = float(re.search(r'points="([\d.]+),', lines[0]).group(1))
    x_slow = float(re.search(r'points="([\d.]+),', lines[1]).group(1))
    assert x_slow > x_fast, "slower requests lie further right"


def test_the_sut_clients_phases_show_end_to_end_latency_never_mixed_with_ttft():
    sut_only = {"total": [_ok(n, e2el_ms=100 + n) for n in range(3)]}
    assert "E2EL distribution" in latency_cdf_chart(sut_only, "r")
    mixed = {**sut_only, "partial": [_ok(0, ttft_ms=5, e2el_ms=50)], "recovery": [_ok(1, ttft_ms=7)]}
    chart = latency_cdf_chart(mixed, "r")
    assert "TTFT distribution" in chart and "total (3)" not in chart and chart.count("<polyline") == 2


def test_nothing_completed_draws_nothing():
    assert latency_cdf_chart({}, "r") == "" and latency_cdf_chart({"x": [_ok(0, outcome="error")]}, "r") == ""


def test_many_requests_are_drawn_at_quantiles_ending_at_all_of_them():
    values = [float(v) for v in range(10_000)]
    points = cdf_points(values)
    assert len(points) == MOST_POINTS and points[0] == (0.0, 1 / 10_000) and points[-1] == (9999.0, 1.0)
    assert all(a[0] <= b[0] and a[1] < b[1] for a, b in itertools.pairwise(points))
