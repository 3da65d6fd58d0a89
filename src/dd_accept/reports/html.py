"""The HTML report: one self-contained file (inline CSS and SVG, no script, nothing fetched),
rendered from a bundle alone, so anyone holding the bundle can re-render it.

Charts: each scenario's latency percentiles (TTFT, ITL, TPOT, E2EL); the client's
admission limit over time; per-replica outcomes; a request timeline (each request's
upstream attempts on it: which replica, which status, and for a telemetry run the SUT's own
record of each beside it) with the signal marks on the same axis (for drain runs this
is the drain timeline: streams, TERM, KILL); for a capacity run, the curve (tokens/s and chunk
delay per load level, the knee marked).
"""

from __future__ import annotations

import functools
import itertools
import json
from collections import Counter, defaultdict
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dd_accept.base.capacity_curve import CURVE_FILE
from dd_accept.base.drain_outcomes import MARKS, classify, whole_streams
from dd_accept.base.events import (
    ADMISSION_PROBE_ID,
    SUT_ATTEMPT_RECORDS,
    AdmissionChange,
    ClientRequest,
    E,
    QueueGauge,
    SutAttemptRecord,
    UpstreamAttempt,
    of_type,
    readable_events,
)
from dd_accept.base.results import load_results, partial_note, run_span, where_judged
from dd_accept.base.serving_names import SUMMARY_COLUMNS, serving_rows, shown
from dd_accept.reports.serving_charts import WIDTH, capacity_chart, latency_cdf_chart, latency_chart

if TYPE_CHECKING:
    import jinja2

ROW = 14
COLOURS = {"ok": "#2e7d32", "rate_limited": "#f9a825", "truncated": "#c62828", "error": "#c62828"}
SIGNAL_COMMANDS = ("scancel", "kill")


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _axis(t0: float, t1: float, height: int) -> str:
    span = max(t1 - t0, 1e-6)
    ticks = []
    step = max(1, round(span / 8))
    for second in range(0, int(span) + 1, step):
        x = 40 + (WIDTH - 60) * second / span
        ticks.append(
            f'<line x1="{x:.1f}" y1="0" x2="{x:.1f}" y2="{height}" class="grid"/>'
            f'<text x="{x:.1f}" y="{height + 12}" class="tick">{second}s</text>'
        )
    return "".join(ticks)


def _x(t: float, t0: float, t1: float) -> float:
    return 40 + (WIDTH - 60) * (t - t0) / max(t1 - t0, 1e-6)


def _timed(rows: list[Any], cls: type[E]) -> list[E]:
    """The bundle's rows that are events of `cls` with a numeric time (a sanitized or older
    bundle may hold others: the report draws what it can read)."""
    return [e for e in of_type(readable_events(rows), cls) if isinstance(e.t, int | float)]


def admission_chart(events: list[dict[str, Any]], title: str) -> str:
    points = [(e.t, e.limit) for e in _timed(events, AdmissionChange) if isinstance(e.limit, int | float)]
    if not points:
        return ""
    t0, t1 = points[0][0], max(points[-1][0], points[0][0] + 1)
    top = max(limit for _, limit in points) + 1
    height = 140

    def y(limit: float) -> float:
        return height - 10 - (height - 20) * limit / top

    path = [f"M{_x(points[0][0], t0, t1):.1f},{y(points[0][1]):.1f}"]
    for (_, previous), (t, limit) in itertools.pairwise(points):
        path.append(f"H{_x(t, t0, t1):.1f}V{y(limit):.1f}" if limit != previous else f"H{_x(t, t0, t1):.1f}")
    limited = [e.t for e in _timed(events, ClientRequest) if e.status == 429]
    marks = "".join(f'<circle cx="{_x(t, t0, t1):.1f}" cy="{y(0):.1f}" r="2.5" class="m429"/>' for t in limited)
    labels = "".join(
        f'<text x="4" y="{y(v) + 4:.1f}" class="tick">{v}</text>' for v in sorted({limit for _, limit in points})
    )
    return (
        f"<figure><figcaption>Admission limit over time — {escape(title)} (dots: 429s)</figcaption>"
        f'<svg viewBox="0 0 {WIDTH} {height + 16}" role="img" aria-label="admission limit">'
        f'{_axis(t0, t1, height)}{labels}<path d="{"".join(path)}" class="limit"/>{marks}</svg></figure>'
    )


_GET_PROBE_PATH = "/dd-accept/admission-probe"  # the admission probe in bundles made before it was a POST
LAST_CALENDAR_SECOND = 253402300800  # 10000-01-01: datetime holds no later time


def replica_chart(replica_events: list[dict[str, Any]], title: str = "") -> str:
    """What each replica answered, by status; the harness's own admission probes (a 4xx or a
    429 by design, never routed through the SUT) in grey, not as the SUT's errors."""
    by_replica: dict[int, Counter[str]] = defaultdict(Counter)
    for event in of_type(readable_events(replica_events), UpstreamAttempt):
        probe = event.request_id == ADMISSION_PROBE_ID or event.path == _GET_PROBE_PATH
        by_replica[int(event.replica)]["probe" if probe else str(event.status)] += 1
    if not by_replica:
        return ""
    top = max(sum(c.values()) for c in by_replica.values())
    bar, height = 36, 150
    parts = []
    for slot, (replica, counts) in enumerate(sorted(by_replica.items())):
        x, y = 40 + slot * (bar + 14), height - 10
        for status, count in sorted(counts.items()):
            h = (height - 30) * count / top
            y -= h
            colour = {"200": COLOURS["ok"], "429": COLOURS["rate_limited"], "probe": PROBE_GREY}.get(status, "#c62828")
            what = "the harness's admission probes" if status == "probe" else f"status {status}"
            parts.append(
                f'<rect x="{x}" y="{y:.1f}" width="{bar}" height="{h:.1f}" fill="{colour}">'
                f"<title>replica {replica}: {count} of {escape(what)}</title></rect>"
            )
        parts.append(f'<text x="{x + bar / 2}" y="{height + 4}" class="tick" text-anchor="middle">{replica}</text>')
    width = 60 + len(by_replica) * (bar + 14)
    return (
        f"<figure><figcaption>Requests each replica answered{' — ' + escape(title) if title else ''} (green 200, "
        "amber 429, red other; grey: the harness's own admission probes, not the SUT's)</figcaption>"
        f'<svg viewBox="0 0 {max(width, 200)} {height + 10}" role="img" aria-label="replica outcomes">'
        f"{''.join(parts)}</svg></figure>"
    )


PROBE_GREY = "#bdbdbd"


def attempt_colour(attempt: UpstreamAttempt) -> str:
    """An upstream attempt's mark: green 2xx, amber 429, red other statuses, grey for one
    that never got a status (abandoned by the proxy, cut before its headers)."""
    if attempt.status is None:
        return "#9e9e9e"
    if attempt.status == 429:
        return "#f9a825"
    return "#2e7d32" if 200 <= attempt.status < 300 else "#c62828"


def sut_record_marks(records: list[SutAttemptRecord], rows: dict[str, int], t0: float, t1: float) -> list[str]:
    """The SUT's own attempt records as hollow squares above their requests' lines, at the
    start of the replicas' attempt each was paired with (by backend, status and order)."""
    marks = []
    for record in records:
        row = rows.get(record.request_id or "")
        if row is None or record.attempt_started is None:
            continue
        x, y = _x(record.attempt_started, t0, t1), 8 + row * ROW - 5
        marks.append(
            f'<rect x="{x - 2.5:.1f}" y="{y - 2.5:.1f}" width="5" height="5" fill="none" stroke="#1565c0" '
            f'class="sut-record"><title>the SUT logged: backend {escape(record.backend)}, '
            f"{escape(record.status)}</title></rect>"
        )
    return marks


def timeline_chart(
    requests: list[dict[str, Any]],
    commands: list[dict[str, Any]],
    title: str,
    replica_events: list[dict[str, Any]] | None = None,
    sut_records: list[SutAttemptRecord] | None = None,
) -> str:
    """Each request as a line, and on it each upstream attempt the replicas served for it
    (which replica, which status: a dot at its start), with the signals sent; for a
    telemetry phase, the SUT's own record of each attempt beside the replicas' dot."""
    timed = sorted(
        (
            (e.started if e.started is not None else e.t - (e.latency_s or 0), e.t, e.outcome, e.request_id)
            for e in _timed(requests, ClientRequest)
        ),
        key=lambda span: span[:3],
    )
    if not timed:
        return ""
    spans = [(a, b, o) for a, b, o, _ in timed]
    attempts: dict[str, list[UpstreamAttempt]] = defaultdict(list)
    for attempt in of_type(readable_events(replica_events or []), UpstreamAttempt):
        if attempt.request_id and isinstance(attempt.started, int | float):
            attempts[attempt.request_id].append(attempt)
    t0, t1 = spans[0][0], max(end for _, end, _ in spans)
    marks = []
    for record in commands:
        argv = record.get("argv") or []
        try:
            start = _epoch(record["start"]) if record.get("start") else None
        except (TypeError, ValueError):
            start = None
        if not argv or start is None or not t0 - 1 <= start <= t1 + 1:
            continue
        said = argv[3:] if argv[:2] == ["bash", "-c"] else argv  # a script's: its $0 and arguments
        if said and said[0] in SIGNAL_COMMANDS:
            marks.append((start, " ".join(str(a) for a in said[:3]), "sig"))
    shown = spans[:60]
    height = len(shown) * ROW + 10
    lines = [
        f'<line x1="{_x(a, t0, t1):.1f}" x2="{max(_x(b, t0, t1), _x(a, t0, t1) + 1):.1f}" y1="{8 + i * ROW}" '
        f'y2="{8 + i * ROW}" stroke="{COLOURS.get(o, "#c62828")}" class="span"><title>{escape(o)}</title></line>'
        for i, (a, b, o) in enumerate(shown)
    ]
    dots = [
        f'<circle cx="{_x(a.started, t0, t1):.1f}" cy="{8 + i * ROW}" r="3.5" fill="{attempt_colour(a)}" stroke="#fff">'
        f"<title>attempt {n + 1}: replica {a.replica}, {a.status if a.status is not None else a.outcome}</title>"
        "</circle>"
        for i, (_, _, _, request_id) in enumerate(timed[:60])
        for n, a in enumerate(sorted(attempts.get(request_id or "", []), key=lambda a: a.started))
    ]
    signal_marks = [
        f'<line x1="{_x(t, t0, t1):.1f}" x2="{_x(t, t0, t1):.1f}" y1="0" y2="{height}" class="{kind}">'
        f"<title>{escape(label)}</title></line>"
        for t, label, kind in marks
    ]
    note = "" if len(spans) <= 60 else f" (first 60 of {len(spans)})"
    sut_note, squares = "", []
    if sut_records:  # a telemetry phase's: the SUT's own records of its attempts
        rows = {request_id: i for i, (_, _, _, request_id) in enumerate(timed[:60]) if request_id}
        squares = sut_record_marks(sut_records, rows, t0, t1)
        unplaced = sum(1 for r in sut_records if r.request_id is None)
        sut_note = (
            f"; blue squares: the SUT's own record of each attempt ({len(sut_records)} records, placed by backend, "
            f"status and order, its records carrying no request id; {unplaced} match no attempt the replicas served)"
        )
    return (
        f"<figure><figcaption>Request timeline — {escape(title)}{note}; dots: each upstream attempt as the "
        f"replicas served it (green 2xx, amber 429, red other, grey no status){sut_note}; red lines: signals sent "
        f"(scancel, kill)</figcaption>"
        f'<svg viewBox="0 0 {WIDTH} {height + 16}" role="img" aria-label="request timeline">'
        f"{_axis(t0, t1, height)}{''.join(lines)}{''.join(dots)}{''.join(squares)}{''.join(signal_marks)}</svg>"
        "</figure>"
    )


def queue_chart(queues: dict[str, list[dict[str, Any]]], title: str = "") -> str:
    """Each replica's waiting queue over time (one row per replica, shared time axis): shows
    which replicas were held in overload, how deep, and when they were relieved."""
    series = {name: _timed(rows, QueueGauge) for name, rows in queues.items()}
    series = {name: rows for name, rows in series.items() if rows}
    if not series:
        return ""
    times = [e.t for rows in series.values() for e in rows]
    t0, t1 = min(times), max(times)
    top = max(1, max(e.waiting for rows in series.values() for e in rows))
    band = 34
    height = band * len(series)
    parts = []
    for row, (name, rows) in enumerate(sorted(series.items(), key=lambda item: _replica_order(item[0]))):
        base = (row + 1) * band - 6

        def y(waiting: float, base: int = base) -> float:
            return base - (band - 12) * waiting / top

        points = [f"M{_x(t0, t0, t1):.1f},{base}"]
        for event in sorted(rows, key=lambda e: e.t):
            x = _x(event.t, t0, t1)
            points.append(f"H{x:.1f}V{y(event.waiting):.1f}")
        points.append(f"H{_x(t1, t0, t1):.1f}")
        deepest = max(e.waiting for e in rows)
        parts.append(
            f'<text x="2" y="{base - 4}" class="tick">{escape(name)}</text>'
            f'<line x1="40" x2="{WIDTH - 20}" y1="{base}" y2="{base}" class="grid"/>'
            f'<path d="{"".join(points)}" class="queue"><title>{escape(name)}: deepest queue {deepest}</title></path>'
        )
    return (
        f"<figure><figcaption>Queue depth per replica over time{' — ' + escape(title) if title else ''} "
        f"(waiting requests; full height = {top})"
        f"</figcaption>"
        f'<svg viewBox="0 0 {WIDTH} {height + 16}" role="img" aria-label="queue depth per replica">'
        f"{_axis(t0, t1, height)}{''.join(parts)}</svg></figure>"
    )


def _replica_order(name: str) -> tuple[int, str]:
    digits = "".join(ch for ch in name if ch.isdigit())
    return (int(digits) if digits else 0, name)


DRAIN_COLOURS = {
    "completed": "#2e7d32",
    "bounded": "#00838f",
    "stalled": "#6a1b9a",
    "overran": "#ef6c00",
    "forced": "#f9a825",
    "lost": "#c62828",
    "ended before the stop": "#9e9e9e",
}


def drain_chart(
    streams: list[dict[str, Any]], mark: dict[str, Any], title: str, replica_events: list[dict[str, Any]]
) -> str:
    """The drain timeline: every stream against the stop (TERM), the drain window, the end of
    the allowance and the KILL, coloured by how it ended (completed, bounded, forced, lost),
    as the drain checks classify it (beside the replicas' records)."""

    rows = _timed(streams, ClientRequest)
    stop, forced = mark["stop_at"], mark.get("forced_at")
    if not rows or not isinstance(stop, int | float):
        return ""
    whole = whole_streams(rows, of_type(readable_events(replica_events), UpstreamAttempt))
    window, allowance = float(mark.get("window_s") or 0), float(mark.get("allowance_s") or 0)
    t0 = min(min(e.began for e in rows), stop) - 0.5
    t1 = max(max(e.t for e in rows), stop + allowance, forced or 0) + 0.5
    height = len(rows[:60]) * ROW + 10
    outcomes = {id(e): classify(e, stop, forced, window, e.request_id in whole) for e in rows}  # once, as judged
    spans = []
    for i, event in enumerate(sorted(rows, key=lambda e: e.began)[:60]):
        outcome = outcomes[id(event)]
        a, b = _x(event.began, t0, t1), _x(event.t, t0, t1)
        spans.append(
            f'<line x1="{a:.1f}" x2="{max(b, a + 1):.1f}" y1="{8 + i * ROW}" y2="{8 + i * ROW}" '
            f'stroke="{DRAIN_COLOURS[outcome]}" class="span"><title>{escape(outcome)}</title></line>'
        )
    x_stop = _x(stop, t0, t1)
    marks = [
        f'<rect x="{x_stop:.1f}" y="0" width="{_x(stop + window, t0, t1) - x_stop:.1f}" height="{height}" '
        f'class="window"><title>drain window {window:g}s</title></rect>',
        f'<line x1="{x_stop:.1f}" x2="{x_stop:.1f}" y1="0" y2="{height}" class="term"><title>TERM</title></line>',
    ]
    if allowance:
        x_allow = _x(stop + allowance, t0, t1)
        marks.append(
            f'<line x1="{x_allow:.1f}" x2="{x_allow:.1f}" y1="0" y2="{height}" class="allowance">'
            f"<title>allowance {allowance:g}s</title></line>"
        )
    if forced is not None:
        x_kill = _x(forced, t0, t1)
        marks.append(
            f'<line x1="{x_kill:.1f}" x2="{x_kill:.1f}" y1="0" y2="{height}" class="sig"><title>KILL</title></line>'
        )
    counts = Counter(outcomes[id(e)] for e in rows if e.began < stop <= e.t)
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no stream in flight"
    return (
        f"<figure><figcaption>Drain timeline — {escape(title)}: in flight at TERM: {escape(summary)}. "
        f"Blue band: the {window:g}s drain window; grey line: the {allowance:g}s allowance; red dashes: KILL; "
        "streams green completed, teal bounded by the endpoint, purple stalled, orange overran, amber forced, "
        "red lost</figcaption>"
        f'<svg viewBox="0 0 {WIDTH} {height + 16}" role="img" aria-label="drain timeline">'
        f"{''.join(marks)}{_axis(t0, t1, height)}{''.join(spans)}</svg></figure>"
    )


TEMPLATE_SOURCE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>dd-accept {{ results.verdict | upper }} — {{ results.sut.spec }}</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:960px;color:#222}
h1 .pass{color:#2e7d32} h1 .fail{color:#c62828}
table{border-collapse:collapse;width:100%;font-size:.9em}
td,th{border:1px solid #ddd;padding:4px 6px;vertical-align:top}
tr.fail td:nth-child(2){color:#c62828;font-weight:bold} tr.pass td:nth-child(2){color:#2e7d32}
figure{margin:1.5em 0} figcaption{font-size:.85em;color:#555;margin-bottom:4px}
svg{width:100%;height:auto;background:#fafafa;border:1px solid #eee}
.grid{stroke:#e4e4e4} .tick{font-size:10px;fill:#666} .limit{fill:none;stroke:#1565c0;stroke-width:2}
.m429{fill:#f9a825} .span{stroke-width:6} .sig{stroke:#c62828;stroke-width:1.5;stroke-dasharray:4 2}
.queue{fill:none;stroke:#6a1b9a;stroke-width:1.5} .window{fill:#1565c0;fill-opacity:.08}
.term{stroke:#b71c1c;stroke-width:2} .allowance{stroke:#757575;stroke-width:1.5;stroke-dasharray:2 2}
code{font-size:.85em}
</style></head><body>
{{ banner | safe }}
<h1>dd-accept <span class="{{ results.verdict }}">{{ results.verdict | upper }}</span></h1>
<p>SUT <code>{{ results.sut.spec }}</code>, profile <code>{{ results.sut.profile }}</code>
{%- if where %}, judged on {{ where }}{% endif %}{% if when %}; ran {{ when }}{% endif %}</p>
{% if partial %}<p id="partial"><strong>{{ partial }}</strong></p>{% endif %}
{% if not banner %}<p class="unverified">This page is the bundle's own and cannot vouch for itself:
<code>dd-accept verify</code> the bundle, or read it with <code>dd-accept report</code>, which verifies it
first.</p>{% endif %}
{% if failing %}<section id="not-passing"><h2>Not passing ({{ failing | length }})</h2><ul>
{% for s, c in failing %}<li><a href="#check-{{ c.id }}"><code>{{ c.id }}</code></a> <strong>{{ c.verdict }}</strong>:
{{ c.observed }}{% if c.detail %} <small>({{ c.detail }})</small>{% endif %}</li>
{% endfor %}</ul></section>{% endif %}
<ul>{% for w in results.sut.wheels %}
<li><code>{{ w.file }}</code> sha256 <code>{{ w.sha256 }}</code></li>{% endfor %}</ul>
{% for scenario in results.scenarios %}
<h2 id="scenario-{{ scenario.name }}">{{ scenario.name }} — {{ scenario.verdict }}</h2>
{% if scenario.error %}<p><strong>Not judged:</strong> {{ scenario.error }}</p>{% endif %}
{% set run = run_of.get(scenario.name) %}
<table><tr><th>check</th><th>verdict</th><th>expected</th><th>observed</th></tr>
{% for c in scenario.checks %}<tr class="{{ c.verdict }}" id="check-{{ c.id }}"><td><code>{{ c.id }}</code>
{%- if run %}<br><small><a href="#run-{{ run }}">charts</a> · <a href="events/{{ run }}/">events</a>
{%- if run in logs %} · <a href="logs/{{ run }}/">logs</a>{% endif %}</small>{% endif %}</td><td>{{ c.verdict }}</td>
<td>{{ c.expected }}</td><td>{{ c.observed }}{% if c.detail %}<br><small>{{ c.detail }}</small>{% endif %}</td></tr>
{% endfor %}</table>
{% if scenario.serving %}
<h3>Serving metrics</h3>
<table><tr><th>scenario / phase</th>{% for _, header in columns %}<th>{{ header }}</th>{% endfor %}</tr>
{% for label, metrics in serving_rows({"scenarios": [scenario]}) %}<tr><td>{{ label }}</td>
{% for name, _ in columns %}<td>{{ shown(name, metrics.get(name)) }}</td>{% endfor %}</tr>
{% endfor %}</table>
{{ latency_charts[scenario.name] | safe }}
{% endif %}
{% endfor %}
<h2>Charts</h2>
{% for name, charts in runs %}<section id="run-{{ name }}"><h3>Run {{ name }}</h3>
{% for chart in charts %}{{ chart | safe }}{% endfor %}</section>
{% endfor %}
</body></html>
"""


@functools.cache
def _template() -> jinja2.Template:
    """Compiled on first use, not at import: every command of the CLI imports this module
    through the bundle readers, and only `report` and a run's bundle render a page."""
    import jinja2

    return jinja2.Template(TEMPLATE_SOURCE, autoescape=True)


def render_bundle(bundle: Path, banner: str = "") -> str:
    """The bundle's report; `banner` (markup: `reading.banner_html`) goes above everything,
    where `report` says how the bundle verified. The report written into the bundle has none:
    the bundle cannot vouch for itself, and says so where the banner would be.

    Failures come first, each linked to its row; each check links to its run's charts and to
    the run's event and log files in the bundle; each chart is labelled with its run and phase."""
    results = load_results(bundle / "results.json")
    commands = _read_jsonl(bundle / "commands.jsonl") if (bundle / "commands.jsonl").is_file() else []
    runs: list[tuple[str, list[str]]] = []
    events = bundle / "events"
    for run in sorted(p for p in events.iterdir() if p.is_dir()) if events.is_dir() else []:
        charts: list[str] = []
        per_replica = {
            f"replica {f.stem.removeprefix('events-')}": _read_jsonl(f)
            for f in sorted((run / "replicas").glob("*.jsonl"))
        }
        replica_events = [e for rows in per_replica.values() for e in rows]
        marks = {m.get("phase"): m for m in _read_jsonl(run / MARKS)} if (run / MARKS).is_file() else {}
        sut_file = run.joinpath(*SUT_ATTEMPT_RECORDS)
        sut_records = of_type(readable_events(_read_jsonl(sut_file)), SutAttemptRecord) if sut_file.is_file() else None
        latencies: dict[str, list[ClientRequest]] = {}
        for client in sorted(run.glob("*.jsonl")):
            if client.name == CURVE_FILE:
                charts.insert(0, capacity_chart(_read_jsonl(client), run.name))
                continue
            if client.name == MARKS:
                continue
            rows = _read_jsonl(client)
            latencies[client.stem] = of_type(readable_events(rows), ClientRequest)
            title = f"{run.name} / {client.stem}"
            if client.stem in marks:
                charts.append(drain_chart(rows, marks[client.stem], title, replica_events))
            phase_records = None if sut_records is None else [r for r in sut_records if r.phase == client.stem]
            charts += [
                admission_chart(rows, title),
                timeline_chart(rows, commands, title, replica_events, phase_records),
            ]
        charts.append(latency_cdf_chart(latencies, run.name))
        charts += [queue_chart(per_replica, run.name), replica_chart(replica_events, run.name)]
        runs.append((run.name, [c for c in charts if c]))
    where = where_judged(results)
    latency_charts = {
        s["name"]: latency_chart(s["serving"]["metrics"], s["name"]) for s in results["scenarios"] if s.get("serving")
    }
    present = {name for name, _ in runs}
    return _template().render(
        results=results,
        where=where,
        runs=runs,
        columns=SUMMARY_COLUMNS,
        serving_rows=serving_rows,
        shown=shown,
        latency_charts=latency_charts,
        banner=banner,
        when=_when(results),
        partial=partial_note(results),
        failing=[(s, c) for s in results["scenarios"] for c in s.get("checks", []) if c.get("verdict") != "pass"],
        run_of={s["name"]: r for s in results["scenarios"] if (r := (s.get("serving") or {}).get("events")) in present},
        logs={name for name in present if (bundle / "logs" / name).is_dir()},
    )


def _when(results: dict[str, Any]) -> str:
    """When the run started (UTC) and how long its scenarios took, for the report's top."""
    began, ended = run_span(results)
    if began is None or not 0 <= began < LAST_CALENDAR_SECOND:  # a damaged bundle's time no calendar holds
        return ""
    started = datetime.fromtimestamp(began, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return started + (f", for {ended - began:.0f} s" if ended is not None else "")
