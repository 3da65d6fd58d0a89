"""The latency distribution of each phase's requests, whole: an empirical CDF per phase.

Percentiles (the report's latency bars, the gate's numbers) say where a distribution's marks
are; a CDF shows its shape, which is what tells a bimodal TTFT (some requests failed over,
some did not) from a uniformly slower one with the same p99. One line per load-client phase
of a run, on a log scale of milliseconds: TTFT where the client timed the first chunk, else
end-to-end latency (the SUT's own client sees no chunks). Only attempts that completed, as
in the serving metrics.
"""

from __future__ import annotations

import math
from html import escape

from dd_accept.base.events import ClientRequest

WIDTH, HEIGHT, LEFT, RIGHT = 860, 180, 60, 200  # RIGHT: room for the legend
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
