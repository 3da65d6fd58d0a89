"""gate.html: a gate's verdict on one page, with the matrix (check by Slurm release) when the
gate ran several releases — what a release manager opens first. Drawn from gate.json's own
document, so the page can never say something the JSON does not; self-contained like the
bundle's report (no scripts, no external resources), every value escaped."""

from __future__ import annotations

import html
from typing import Any

_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin-bottom: 1.5em; }
td, th { border: 1px solid #ccc; padding: 4px 8px; vertical-align: top; text-align: left; }
.pass { background: #e2f7e2; } .fail { background: #fde2e2; }
.unsupported, .not-run { background: #fff6d6; } small { color: #555; }
"""


def _cell_class(verdict: str) -> str:
    return verdict.replace(" ", "-") if verdict in ("pass", "fail", "unsupported", "not run") else "fail"


def _numbers(metrics: dict[str, Any], most: int = 2) -> str:
    shown = [f"{name} {value:g}" for name, value in list(metrics.items())[:most] if isinstance(value, int | float)]
    return ", ".join(shown)


def _gate_checks(document: dict[str, Any]) -> str:
    rows = [
        f'<tr class="{_cell_class(c["verdict"])}"><td><code>{html.escape(c["id"])}</code></td>'
        f"<td>{html.escape(c['verdict'])}</td><td>{html.escape(c['expected'])}</td>"
        f"<td>{html.escape(c['observed'])}</td></tr>"
        for c in document["checks"]
    ]
    return (
        '<table id="gate-checks"><thead><tr><th>gate check</th><th>verdict</th><th>expected</th>'
        "<th>observed</th></tr></thead><tbody>\n" + "\n".join(rows) + "\n</tbody></table>"
    )


def _bundles(document: dict[str, Any]) -> str:
    items = [
        f'<li>{html.escape(role)}: <a href="{html.escape(path)}/report.html">{html.escape(path)}/</a></li>'
        for role, path in document["bundles"].items()
    ]
    return '<ul id="bundles">' + "".join(items) + "</ul>"


def _matrix(matrix: dict[str, Any]) -> str:
    releases: list[str] = matrix["releases"]
    by_release: dict[str, Any] = matrix["by_release"]
    head = "".join(
        f'<th class="{_cell_class(by_release[r]["verdict"])}">Slurm {html.escape(r)}<br>'
        f"<small>{html.escape(by_release[r]['verdict'])}</small></th>"
        for r in releases
    )
    reasons = [
        f"<li>Slurm {html.escape(r)}: <b>not run</b>: {html.escape(by_release[r].get('reason', ''))}</li>"
        for r in releases
        if by_release[r]["verdict"] == "not run"
    ]
    rows = []
    for check_id, cells in matrix["checks"].items():
        shown = []
        for release in releases:
            cell = cells.get(release)
            verdict = "not run" if cell is None else cell["verdict"]
            numbers = "" if cell is None else _numbers(cell.get("metrics", {}))
            extra = f"<br><small>{html.escape(numbers)}</small>" if numbers else ""
            shown.append(f'<td class="{_cell_class(verdict)}">{html.escape(verdict)}{extra}</td>')
        rows.append(f"<tr><td><code>{html.escape(check_id)}</code></td>{''.join(shown)}</tr>")
    return (
        "<h2>Checks by Slurm release</h2>"
        + (f'<ul id="not-run">{"".join(reasons)}</ul>' if reasons else "")
        + f'<table id="matrix"><thead><tr><th>check</th>{head}</tr></thead><tbody>\n'
        + "\n".join(rows)
        + "\n</tbody></table>"
    )


def to_html(document: dict[str, Any]) -> str:
    """The page for one gate.json document."""
    name, verdict = html.escape(document["gate"]), document["verdict"]
    comparison = document.get("comparison")
    headline = f'<p id="comparison">{html.escape(comparison["headline"])}</p>' if comparison else ""
    matrix = _matrix(document["matrix"]) if "matrix" in document else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>dd-accept gate {name}</title>
<style>{_STYLE}</style></head><body>
<h1>dd-accept gate <code>{name}</code>: <span id="verdict" class="{_cell_class(verdict)}">{verdict.upper()}</span></h1>
<p><small>{html.escape(document["time"])}</small></p>
{_bundles(document)}
{headline}
{_gate_checks(document)}
{matrix}
</body></html>
"""
