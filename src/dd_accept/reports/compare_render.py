"""A comparison shown: a terminal table, Markdown for a pull request, a self-contained HTML
page; the bundles' verification above each, and what is worse than the baseline first.
"""

from __future__ import annotations

import html

from rich.table import Table

from dd_accept.reports.compare import SHOWN_SERVING, CheckChange, Comparison, ServingChange, amount
from dd_accept.reports.reading import banner_html, banner_markdown
from dd_accept.reports.render import md_text


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _metric_lines(check: CheckChange) -> list[str]:
    return [f"{m.name} {_number(m.baseline)} → {_number(m.candidate)} ({m.show_ratio()})" for m in check.metrics]


def shown_serving(comparison: Comparison) -> list[ServingChange]:
    """What a table shows of the serving metrics: each scenario's summary columns, and every
    flagged one of a scenario or a phase (the --json document holds them all)."""
    return [c for c in comparison.serving if c.regressed or (c.phase is None and c.metric.name in SHOWN_SERVING)]


def _serving_cells(change: ServingChange) -> tuple[str, str, str, str, str]:
    name = change.metric.name
    return (
        change.where,
        name,
        amount(name, change.metric.baseline),
        amount(name, change.metric.candidate),
        change.metric.show_ratio(),
    )


def standing_lines(comparison: Comparison) -> list[tuple[bool, str]]:
    """(verified, line) for each bundle: what a terminal prints above the tables."""
    return [(s.verified, f"{role} {s.name}: {s.verification.standing}") for role, s in comparison.by_role]


def _worse(comparison: Comparison) -> list[str]:
    return [r.describe() for r in comparison.metric_regressions] + [
        c.describe() for c in comparison.serving_regressions
    ]


def to_table(comparison: Comparison) -> Table:
    table = Table(title=comparison.headline())
    for column in ("check", "baseline", "candidate", "change", "key numbers (baseline → candidate)"):
        table.add_column(column, overflow="fold")
    colours = {"regressed": "red", "fixed": "green", "changed": "yellow"}
    for check in comparison.checks:
        colour = colours.get(check.change)
        change = f"[{colour}]{check.change}[/{colour}]" if colour else check.change
        table.add_row(check.id, check.baseline or "-", check.candidate or "-", change, "\n".join(_metric_lines(check)))
    return table


def serving_table(comparison: Comparison) -> Table:
    table = Table(title=f"serving metrics (worse by more than {comparison.serving_tolerance:.0%} is flagged)")
    for column in ("scenario / phase", "metric", "baseline", "candidate", "change"):
        table.add_column(column, overflow="fold")
    for change in shown_serving(comparison):
        *cells, ratio = _serving_cells(change)
        table.add_row(*cells, f"[red]{ratio} worse[/red]" if change.regressed else ratio)
    return table


def to_markdown(comparison: Comparison) -> str:
    lines = ["## dd-accept comparison", ""]
    lines += [banner_markdown(s, role).rstrip("\n") for role, s in comparison.by_role]
    lines += [
        *([""] if comparison.bundles else []),
        comparison.headline(),
        "",
        "| check | baseline | candidate | change | key numbers (baseline → candidate) |",
        "|---|---|---|---|---|",
    ]
    for check in comparison.checks:
        change = f"**{check.change}**" if check.change in ("regressed", "fixed", "changed") else check.change
        numbers = "<br>".join(_metric_lines(check)).replace("|", "\\|")
        lines.append(f"| `{check.id}` | {check.baseline or '-'} | {check.candidate or '-'} | {change} | {numbers} |")
    serving = shown_serving(comparison)
    if serving:
        lines += ["", "### Serving metrics", "", "| scenario / phase | metric | baseline | candidate | change |"]
        lines.append("|---|---|---:|---:|---|")
        for change in serving:
            where, name, was, now, ratio = _serving_cells(change)
            flag = f"**{ratio} worse**" if change.regressed else ratio
            lines.append(f"| {md_text(where)} | `{name}` | {was} | {now} | {flag} |")
    worse = _worse(comparison)
    if worse:
        lines += ["", "**Worse than the baseline beyond its tolerance:**", ""]
        lines += [f"- {line}" for line in worse]
    if comparison.not_compared:
        lines += ["", "**Not compared:**", ""] + [f"- {note}" for note in comparison.not_compared]
    return "\n".join(lines) + "\n"


def to_html(comparison: Comparison) -> str:
    """Self-contained page (no scripts, no external resources), like the bundle's report."""
    rows = []
    for check in comparison.checks:
        numbers = "<br>".join(html.escape(line) for line in _metric_lines(check))
        rows.append(
            f'<tr class="{check.change}"><td><code>{html.escape(check.id)}</code></td>'
            f"<td>{html.escape(check.baseline or '-')}</td><td>{html.escape(check.candidate or '-')}</td>"
            f"<td>{check.change}</td><td>{numbers}</td></tr>"
        )
    banners = "\n".join(banner_html(s, role) for role, s in comparison.by_role)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>dd-accept comparison</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: 4px 8px; vertical-align: top; }}
tr.regressed td {{ background: #fde2e2; }} tr.fixed td {{ background: #e2f7e2; }}
tr.changed td, tr.added td, tr.removed td {{ background: #fff6d6; }}
</style></head><body>
{banners}
<h1>dd-accept comparison</h1>
<p id="headline">{html.escape(comparison.headline())}</p>
<table id="comparison"><thead><tr><th>check</th><th>baseline</th><th>candidate</th><th>change</th>
<th>key numbers (baseline → candidate)</th></tr></thead>
<tbody>
{chr(10).join(rows)}
</tbody></table>
{_serving_html(comparison)}{_worse_html(comparison)}
</body></html>
"""


def _serving_html(comparison: Comparison) -> str:
    serving = shown_serving(comparison)
    if not serving:
        return ""
    rows = "".join(
        f'<tr class="{"regressed" if change.regressed else "same"}">'
        + "".join(f"<td>{html.escape(cell)}</td>" for cell in _serving_cells(change))
        + "</tr>"
        for change in serving
    )
    return (
        f'<h2>Serving metrics</h2><table id="serving"><thead><tr><th>scenario / phase</th><th>metric</th>'
        f"<th>baseline</th><th>candidate</th><th>change</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def _worse_html(comparison: Comparison) -> str:
    parts = []
    worse = _worse(comparison)
    if worse:
        items = "".join(f"<li>{html.escape(line)}</li>" for line in worse)
        parts.append(f'<h2>Worse than the baseline beyond its tolerance</h2><ul id="metric-regressions">{items}</ul>')
    if comparison.not_compared:
        items = "".join(f"<li>{html.escape(note)}</li>" for note in comparison.not_compared)
        parts.append(f'<h2>Not compared</h2><ul id="not-compared">{items}</ul>')
    return "".join(parts)
