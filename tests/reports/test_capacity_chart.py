"""The report draws a capacity run's curve from the bundle's capacity-curve.jsonl alone."""

from dd_accept.reports.serving_charts import capacity_chart


def row(load, tokens, delay, broken=""):
    return {"kind": "capacity_level", "load": load, "unit": "streams in flight", "output_throughput": tokens,
            "chunk_delay_p95_ms": delay, "slo_broken": broken}  # fmt: skip


def test_the_knee_is_dark_and_broken_levels_red():
    chart = capacity_chart(
        [row(8, 1200, 1.0), row(12, 1800, 2.0), row(18, 2600, 40.0, "chunk delay p95 40.0 ms > 25 ms"),
         row(27, 2700, 60.0, "chunk delay p95 60.0 ms > 25 ms")],
        "run-1",
    )  # fmt: skip
    assert chart.count("<rect ") == 4
    assert chart.count('fill="#1565c0"') == 1 and "12 streams in flight: 1800 tok/s</title>" in chart
    assert chart.count('fill="#c62828"') == 2 and "chunk delay p95 40.0 ms &gt; 25 ms" in chart
    assert "up to 60.0 ms" in chart


def test_no_curve_no_chart():
    assert capacity_chart([{"kind": "request"}], "x") == ""
