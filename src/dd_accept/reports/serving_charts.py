"""The serving charts of the report: latency percentiles per scenario, each run's latency
distribution per phase (an empirical CDF), and the capacity curve.

Percentiles (the latency bars, the gate's numbers) say where a distribution's marks are; a
CDF shows its shape, which is what tells a bimodal TTFT (some requests failed over, some did
not) from a uniformly slower one with the same p99. One line per load-client phase of a run,
on a log scale of milliseconds: TTFT where the client timed the first chunk, else end-to-end
latency (the SUT's own client sees no chunks). Only attempts that completed, as in the
serving metrics.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

from dd_accept.base.capacity_curve import CURVE_KIND
from dd_accept.base.events import ClientRequest
from dd_accept.base.serving_names import LATENCIES

WIDTH = 860  # of every chart of the report (reports.html draws the others at it)
HEIGHT, LEFT, RIGHT = 180, 60, 200  # of the CDF; RIGHT: room for its legend
MOST_POINTS = 200  # a line's vertices: a CDF of 10,000 requests drawn at 200 quantiles
LINE_COLOURS = ("#1565c0", "#c62828", "#2e7d32", "#f9a825", "#6a1b9a", "#00838f", "#ef6c00", "#5d4037")


def measured(attempts: list[ClientRequest]) -> tuple[str, list[float]]:
    """("TTFT" or "E2EL", the completed attempts' values in ms, ascending)."""
    ok = [a for a in attempts if a.outcome == "ok"]
    ttft = sorted(a.ttft_s * 1000 for a in ok if a.ttft_s is not None)
    if ttft:
        return "TTFT", ttft
    return "E2EL", sorted(a.latency_s * 1000 for a in ok if a.latency_s is not None)


def cdf_points(values: list[float]) -> list[tuple[float, float]]:
    """(value, share of values at or below it), at most MOST_POINTS of them, the last at 1."""
    n = len(values)
    if n <= MOST_POINTS:
        return [(v, (i + 1) / n) for i, v in enumerate(values)]
    picks = sorted({round(k * (n - 1) / (MOST_POINTS - 1)) for k in range(MOST_POINTS)})
    return [(values[i], (i + 1) / n) for i in picks]


def latency_cdf_chart(phases: dict[str, list[ClientRequest]], title: str) -> str:
    """The CDF of each phase's latency (phase name -> its client's attempts); empty markup
    when no phase completed a request. Phases that measured TTFT and those that measured only
    E2EL are never drawn on one axis: the measure most phases have is drawn."""
    curves = {name: measured(attempts) for name, attempts in phases.items()}
    curves = {name: pair for name, pair in curves.items() if pair[1]}
    if not curves:
        return ""
    kinds = [kind for kind, _ in curves.values()]
    kind = max(set(kinds), key=lambda k: (kinds.count(k), k == "TTFT"))
    curves = {name: values for name, (k, values) in curves.items() if k == kind}
    positive = [v for values in curves.values() for v in values if v > 0]
    low = math.log10(min(positive, default=1.0)) - 0.05
    high = math.log10(max(positive, default=10.0)) + 0.05
    right = WIDTH - RIGHT

    def x(ms: float) -> float:
        return LEFT + (right - LEFT) * (math.log10(max(ms, 10**low)) - low) / max(high - low, 1e-6)

    def y(share: float) -> float:
        return HEIGHT - HEIGHT * share

    grid = "".join(
        f'<line x1="{x(10**e):.1f}" y1="0" x2="{x(10**e):.1f}" y2="{HEIGHT}" class="grid"/>'
        f'<text x="{x(10**e):.1f}" y="{HEIGHT + 12}" class="tick">{10**e:g} ms</text>'
        for e in range(math.floor(low), math.ceil(high) + 1)
        if low <= e <= high
    )
    grid += "".join(
        f'<line x1="{LEFT}" y1="{y(s):.1f}" x2="{right}" y2="{y(s):.1f}" class="grid"/>'
        f'<text x="4" y="{y(s) + 4:.1f}" class="tick">{s:.0%}</text>'
        for s in (0.5, 0.9, 0.99, 1.0)
    )
    lines, legend = [], []
    for i, (name, values) in enumerate(sorted(curves.items())):
        colour = LINE_COLOURS[i % len(LINE_COLOURS)]
        steps = []
        previous = 0.0
        for value, share in cdf_points(values):
            steps.append(f"{x(value):.1f},{y(previous):.1f} {x(value):.1f},{y(share):.1f}")
            previous = share
        label = f"{name} ({len(values)})"
        lines.append(
            f'<polyline points="{" ".join(steps)}" fill="none" stroke="{colour}" stroke-width="1.5">'
            f"<title>{escape(label)}</title></polyline>"
        )
        legend.append(f'<text x="{right + 12}" y="{14 + 14 * i}" class="tick" fill="{colour}">{escape(label)}</text>')
    return (
        f"<figure><figcaption>{kind} distribution — {escape(title)}: share of completed requests at or "
        f"under each latency, one line per phase (requests in brackets; log scale)</figcaption>"
        f'<svg viewBox="0 0 {WIDTH} {HEIGHT + 16}" role="img" aria-label="{kind} distribution">'
        f"{grid}{''.join(lines)}{''.join(legend)}</svg></figure>"
    )


def latency_chart(metrics: dict[str, float], title: str) -> str:
    """Each latency's distribution as its percentiles on a log scale: a bar from p50 to p99,
    p90 marked, the mean a tick (ms, vLLM's definitions; acceptance.serving)."""
    rows = [name for name in LATENCIES if f"p50_{name}_ms" in metrics]
    values = [metrics[f"{key}_{name}_ms"] for name in rows for key in ("mean", "p50", "p90", "p99")]
    positive = [v for v in values if v > 0]
    if not positive:
        return ""
    low, high = math.log10(min(positive)) - 0.1, math.log10(max(positive)) + 0.1
    left, width, height = 60, WIDTH - 80, 28 * len(rows)

    def x(ms: float) -> float:
        return left + width * (math.log10(max(ms, 10**low)) - low) / max(high - low, 1e-6)

    ticks = "".join(
        f'<line x1="{x(10**e):.1f}" y1="0" x2="{x(10**e):.1f}" y2="{height}" class="grid"/>'
        f'<text x="{x(10**e):.1f}" y="{height + 12}" class="tick">{10**e:g} ms</text>'
        for e in range(math.floor(low), math.ceil(high) + 1)
        if low <= e <= high
    )
    marks = []
    for i, name in enumerate(rows):
        y = 14 + 28 * i
        p50, p90, p99, mean = (metrics[f"{key}_{name}_ms"] for key in ("p50", "p90", "p99", "mean"))
        marks.append(
            f'<text x="4" y="{y + 4}" class="tick">{name.upper()}</text>'
            f'<line x1="{x(p50):.1f}" y1="{y}" x2="{x(p99):.1f}" y2="{y}" class="span" stroke="#1565c0"/>'
            f'<circle cx="{x(p90):.1f}" cy="{y}" r="4" fill="#f9a825"/>'
            f'<line x1="{x(mean):.1f}" y1="{y - 7}" x2="{x(mean):.1f}" y2="{y + 7}" class="term"/>'
            f'<text x="{x(p99) + 6:.1f}" y="{y + 4}" class="tick">'
            f"p50 {p50:.3g} · p90 {p90:.3g} · p99 {p99:.3g} ms</text>"
        )
    return (
        f"<figure><figcaption>Latency percentiles — {escape(title)} (bar p50 to p99, dot p90, tick mean; log scale)"
        f'</figcaption><svg viewBox="0 0 {WIDTH} {height + 16}" role="img" aria-label="latency percentiles">'
        f"{ticks}{''.join(marks)}</svg></figure>"
    )


def capacity_chart(rows: list[dict[str, Any]], title: str) -> str:
    """The capacity curve: output tokens/s at each load level (bars; red where the level broke
    the SLO) and each chunk's delay p95 (line, right-hand scale), the knee marked."""
    levels = [r for r in rows if r.get("kind") == CURVE_KIND and isinstance(r.get("output_throughput"), int | float)]
    if not levels:
        return ""
    left, height, right = 60, 160, WIDTH - 60
    step = (right - left) / len(levels)
    top_tokens = max(max(r["output_throughput"] for r in levels), 1.0)
    delays = [r["chunk_delay_p95_ms"] for r in levels if isinstance(r.get("chunk_delay_p95_ms"), int | float)]
    top_delay = max(max(delays, default=1.0), 1.0)
    served = [i for i, r in enumerate(levels) if not r.get("slo_broken")]
    knee = next((i for i in reversed(served) if i + 1 >= len(levels) or levels[i + 1].get("slo_broken")), None)
    parts, points = [], []
    for i, row in enumerate(levels):
        x = left + i * step
        bar = height * row["output_throughput"] / top_tokens
        colour = "#c62828" if row.get("slo_broken") else ("#1565c0" if i == knee else "#90caf9")
        reason = f": {row['slo_broken']}" if row.get("slo_broken") else ""
        parts.append(
            f'<rect x="{x + 4:.1f}" y="{height - bar:.1f}" width="{step - 8:.1f}" height="{bar:.1f}" fill="{colour}">'
            f"<title>{row['load']:g} {escape(str(row.get('unit', '')))}: {row['output_throughput']:.0f} tok/s"
            f"{escape(reason)}</title></rect>"
            f'<text x="{x + step / 2:.1f}" y="{height + 12}" class="tick" text-anchor="middle">{row["load"]:g}</text>'
        )
        if isinstance(row.get("chunk_delay_p95_ms"), int | float):
            points.append(f"{x + step / 2:.1f},{height - height * row['chunk_delay_p95_ms'] / top_delay:.1f}")
    unit = escape(str(levels[0].get("unit", "")))
    return (
        f"<figure><figcaption>Capacity — {escape(title)}: output tokens/s per load level ({unit}; up to "
        f"{top_tokens:.0f}), dark blue the knee, red a level that broke the SLO; line: chunk delay p95 "
        f'(up to {top_delay:.1f} ms)</figcaption><svg viewBox="0 0 {WIDTH} {height + 18}" role="img" '
        f'aria-label="capacity curve">{"".join(parts)}'
        f'<polyline points="{" ".join(points)}" fill="none" stroke="#f9a825" stroke-width="2"/></svg></figure>'
    )
