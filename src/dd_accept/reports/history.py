"""History: each metric and verdict of many bundles over time, with the changes that went
beyond a tolerance flagged.

ReFrame keeps a performance log and judges each run against references; a release team
asks the same of dd-accept over weeks of bundles: did TTFT p99 creep up, did a check start
failing, on which run. `history` reads the bundles' `results.json` (each verified first and
held to its schema, as every reader does: `reading`), orders them by when they ran, and follows every serving metric of
every scenario, every check's key numbers and every check's verdict. A change is flagged when
a value moved in its worse direction by more than the tolerance against the run before it or
against the best earlier run (a creep of small steps), a check number dd-accept declares
(base.regressions) got worse under its own rule, or a verdict went from pass to anything else;
bundles judged in different places (Slurm releases, process tracking, a site's cluster) have
series of their own. It prints a table, writes one self-contained HTML page (a chart per
metric, a verdict grid; no script, nothing fetched) and a CSV in long
form for spreadsheets.
"""

from __future__ import annotations

import csv
import hashlib
import io
from dataclasses import dataclass, field
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import Any

from dd_accept.base.errors import UsageError
from dd_accept.base.regressions import REGRESSION_METRICS, RegressionMetric, serving_worse
from dd_accept.base.results import all_checks, run_span, where_judged
from dd_accept.base.serving_names import better, unit_of
from dd_accept.base.shown_paths import shown_path
from dd_accept.reports.reading import BANNER_STYLE, ReadingPolicy, Shown, read_verified

# The check numbers dd-accept knows the worse direction and the noise of (base.regressions).
DECLARED = {(declared.check, declared.metric): declared for declared in REGRESSION_METRICS}


@dataclass(frozen=True, slots=True)
class Point:
    """One bundle, as history shows it."""

    name: str  # the bundle's name (directory or archive), as given
    time: float  # when its first scenario started (Unix time)
    sut: str
    where: str
    results: dict[str, Any]
    shown: Shown  # how it verified

    @property
    def standing(self) -> str:
        return self.shown.verification.standing


@dataclass(slots=True)
class Series:
    key: str  # "serving streaming p99_ttft_ms" or "check overload.recovery latency_p99_s"
    unit: str
    better: str | None  # "higher", "lower", or None: not flagged (counts, check metrics)
    values: list[float | None] = field(default_factory=list)
    declared: RegressionMetric | None = None  # a check number's own rule (base.regressions); else history's
    flags: list[str] = field(default_factory=list)  # per point: "" or why it is flagged


@dataclass(slots=True)
class History:
    points: list[Point]
    series: list[Series]
    verdicts: dict[str, list[str | None]]  # check id -> verdict per point
    verdict_flags: dict[str, list[str]]
    tolerance: float

    @property
    def flagged(self) -> list[tuple[str, str, str]]:
        """(point, series or check, why) for every flagged change."""
        found = [(self.points[i].name, s.key, why) for s in self.series for i, why in enumerate(s.flags) if why]
        for check_id, flags in self.verdict_flags.items():
            found += [(self.points[i].name, f"check {check_id}", why) for i, why in enumerate(flags) if why]
        return found


def find_bundles(paths: list[Path]) -> list[Path]:
    """Bundles named, and every bundle under a directory named (a gate's candidate/ and
    baseline/, an evidence/ directory of many runs), in a stable order."""
    found: list[Path] = []
    for path in paths:
        if not path.exists():
            raise UsageError(f"history: {shown_path(path)}: no such file or directory")
        if path.is_dir() and not (path / "results.json").is_file():
            found += sorted(p.parent for p in path.rglob("results.json") if not _hidden(p, path))
            archives = (p for p in path.rglob("*.tar.gz") if not _hidden(p, path))
            found += sorted(p for p in archives if not p.with_suffix("").with_suffix("").is_dir())
        else:
            found.append(path)
    if not found:
        raise UsageError("history: no bundle found (a bundle holds results.json)")
    return list({path.resolve(): path for path in reversed(found)}.values())[::-1]  # each bundle once


def _hidden(found: Path, root: Path) -> bool:
    """A dot-directory under the one named is scratch (a run's `.NAME.raw` while it writes,
    an editor's or a tool's own), never a bundle someone filed."""
    return any(part.startswith(".") for part in found.relative_to(root).parts)


def load_points(bundles: list[Path], policy: ReadingPolicy) -> list[Point]:
    """Each bundle verified first: the first that does not is refused, unless the policy
    shows it (then marked NOT verified on its row)."""
    points = []
    for bundle in bundles:
        shown = read_verified(bundle, "history", policy)
        results = shown.results
        began, _ = run_span(results)
        if began is None or not _a_date(began):
            raise UsageError(f"history: {shown_path(bundle)} says no time its scenarios started that a calendar holds")
        sut = results.get("sut", {}).get("spec", "?")
        points.append(Point(bundle.name, began, sut, where_judged(results), results, shown))
    return sorted(points, key=lambda p: p.time)


def _a_date(timestamp: float) -> bool:
    try:
        datetime.fromtimestamp(timestamp, UTC)
    except (OverflowError, OSError, ValueError):
        return False
    return timestamp > 0


def _numbers(results: dict[str, Any], place: str) -> dict[str, tuple[float, str, str | None, RegressionMetric | None]]:
    """series key -> (value, unit, which way is better, own tolerance) for one bundle. A
    check's key numbers are shown, and flagged only where dd-accept declares which way is
    worse and by how much its noise moves it (base.regressions: the capacity knee, CPU per
    chunk, a light chunk's delay), under that tolerance and only between runs on one ladder
    (a series per ladder): which way is better is otherwise the check's to say, not history's.
    With bundles from several places (Slurm releases, process tracking, a site's cluster),
    each place has series of its own: numbers from different clusters are not one trend."""
    at = f" @ {place}" if place else ""
    numbers: dict[str, tuple[float, str, str | None, RegressionMetric | None]] = {}
    for scenario in results["scenarios"]:
        for name, value in ((scenario.get("serving") or {}).get("metrics") or {}).items():
            numbers[f"serving {scenario['name']} {name}{at}"] = (value, unit_of(name), better(name), None)
    checks = {check["id"]: check for check in all_checks(results)}
    for check in checks.values():
        for name, value in check.get("metrics", {}).items():
            declared = DECLARED.get((check["id"], name))
            if declared is None:
                numbers[f"check {check['id']} {name}{at}"] = (value, unit_of(name), None, None)
                continue
            ladder = checks.get(declared.ladder_in or declared.check, {}).get("metrics", {})
            on = hashlib.sha256(repr([ladder.get(key) for key in declared.same]).encode()).hexdigest()[:6]
            better_way = "higher" if declared.worse == "lower" else "lower"
            key = f"check {check['id']} {name}{at}" + (f" [ladder {on}]" if declared.same else "")
            numbers[key] = (value, declared.unit, better_way, declared)
    return numbers


def build_history(points: list[Point], tolerance: float) -> History:
    several = len({p.where for p in points}) > 1
    per_point = [_numbers(p.results, p.where if several else "") for p in points]
    keys = list(dict.fromkeys(key for numbers in per_point for key in numbers))
    series = []
    for key in keys:
        unit, direction, own = next((n[key][1], n[key][2], n[key][3]) for n in per_point if key in n)
        entry = Series(key, unit, direction, [n[key][0] if key in n else None for n in per_point], declared=own)
        entry.flags = [_flag(entry, i, tolerance) for i in range(len(points))]
        series.append(entry)
    by_point = [{c["id"]: c["verdict"] for c in all_checks(p.results)} for p in points]
    check_ids = list(dict.fromkeys(cid for verdicts_of in by_point for cid in verdicts_of))
    verdicts = {cid: [verdicts_of.get(cid) for verdicts_of in by_point] for cid in check_ids}
    flags = {
        cid: [
            f"{values[i - 1]} → {values[i] or 'not run'}"
            if i and values[i - 1] == "pass" and values[i] != "pass"
            else ""
            for i in range(len(values))
        ]
        for cid, values in verdicts.items()
    }
    return History(points, series, verdicts, flags, tolerance)


def _flag(series: Series, index: int, tolerance: float) -> str:
    """Why the value at `index` is flagged, or "": worse than the bundle before it by more
    than the tolerance (a step), or — where it first crosses — worse than the best earlier
    value by more than it (a creep of small steps that each stayed within it)."""
    now = series.values[index]
    earlier = [v for v in series.values[:index] if v is not None]
    if now is None or not earlier or series.better is None:
        return ""

    def worse(before: float, after: float) -> str:
        return _worse(before, after, series.better or "lower", tolerance, series.declared)

    step = worse(earlier[-1], now)
    if step:
        return step
    best = max(earlier) if series.better == "higher" else min(earlier)
    drift = worse(best, now)
    # A creep is flagged where it crosses the tolerance, not again on every run that stays past it.
    return drift + " since the best" if drift and not worse(best, earlier[-1]) else ""


def _worse(before: float, now: float, better: str, tolerance: float, declared: RegressionMetric | None) -> str:
    """Why `now` is flagged against `before`, or "": under a declared check number's own rule
    (its tolerance and margin), else under the one serving rule."""
    if declared is not None:
        if not declared.regressed(before, now):
            return ""
    elif not serving_worse(better, before, now, tolerance):
        return ""
    if before == 0:  # from none at all: no fraction of it to state
        return f"{before:.4g} → {now:.4g}"
    return f"{before:.4g} → {now:.4g} ({(now - before) / abs(before):+.0%})"


def to_csv(history: History) -> str:
    """Long form, one row per bundle and value: what a spreadsheet pivots."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["bundle", "time_utc", "sut", "where", "kind", "name", "value", "unit", "verdict", "flag",
                     "verified"])  # fmt: skip
    for i, point in enumerate(history.points):
        stamp = iso(point.time)
        verified = "verified" if point.shown.verified else "NOT verified"
        for entry in history.series:
            value = entry.values[i]
            if value is not None:
                kind, name = entry.key.split(" ", 1)
                writer.writerow([point.name, stamp, point.sut, point.where, kind, name, f"{value:.6g}", entry.unit, "",
                                 entry.flags[i], verified])  # fmt: skip
        for check_id, verdicts in history.verdicts.items():
            if verdicts[i] is not None:
                flag = history.verdict_flags[check_id][i]
                writer.writerow([point.name, stamp, point.sut, point.where, "verdict", check_id, "", "", verdicts[i],
                                 flag, verified])  # fmt: skip
    return out.getvalue()


def iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


CHART_W, CHART_H = 420, 120


def _chart(entry: Series) -> str:
    known = [(i, v) for i, v in enumerate(entry.values) if v is not None]
    low, high = min(v for _, v in known), max(v for _, v in known)
    span = (high - low) or abs(high) or 1.0
    count = max(len(entry.values) - 1, 1)

    def xy(i: int, v: float) -> tuple[float, float]:
        return 30 + (CHART_W - 40) * i / count, CHART_H - 18 - (CHART_H - 30) * (v - low) / span

    path = " ".join(f"{'M' if n == 0 else 'L'}{x:.1f},{y:.1f}" for n, (x, y) in enumerate(xy(i, v) for i, v in known))
    dots = "".join(
        f'<circle cx="{xy(i, v)[0]:.1f}" cy="{xy(i, v)[1]:.1f}" r="{5 if entry.flags[i] else 3}" '
        f'class="{"flag" if entry.flags[i] else "dot"}"><title>{v:.4g} {escape(entry.unit)}</title></circle>'
        for i, v in known
    )
    labels = (
        f'<text x="2" y="12" class="tick">{high:.4g}</text><text x="2" y="{CHART_H - 20}" class="tick">{low:.4g}</text>'
    )
    return (
        f"<figure><figcaption>{escape(entry.key)} ({escape(entry.unit or 'value')}, "
        f"{entry.better + ' is better' if entry.better else 'not flagged'})</figcaption>"
        f'<svg viewBox="0 0 {CHART_W} {CHART_H}" role="img" aria-label="{escape(entry.key)}">'
        f'{labels}<path d="{path}" class="line"/>{dots}</svg></figure>'
    )


def _bundles_html(history: History) -> tuple[str, str]:
    """(the banner at the top, the bundles' table): how every bundle verified, NOT verified
    ones first, so a chart drawn through an unverified bundle never passes for evidence."""
    rows = "".join(
        f"<tr><td><code>{escape(p.name)}</code></td><td>{iso(p.time)}</td><td>{escape(p.sut)}</td>"
        f'<td style="{BANNER_STYLE[p.shown.verified]}">{escape(p.standing)}</td></tr>'
        for p in sorted(history.points, key=lambda p: p.shown.verified)
    )
    unverified = sum(not p.shown.verified for p in history.points)
    banner = (
        f'<p class="verification not-verified" style="{BANNER_STYLE[False]}">NOT verified: {unverified} of '
        f"{len(history.points)} bundles (listed below): what they show is not evidence</p>"
        if unverified
        else f'<p class="verification verified" style="{BANNER_STYLE[True]}">verified: every one of the '
        f"{len(history.points)} bundles</p>"
    )
    table = (
        f"<h2>Bundles</h2><table><tr><th>bundle</th><th>started</th><th>SUT</th><th>evidence</th></tr>{rows}</table>"
    )
    return banner, table


def to_html(history: History) -> str:
    head = "".join(f"<th title='{escape(p.sut)}'>{escape(p.name)}<br><small>{iso(p.time)}</small>"
                   f"<br><small>{'verified' if p.shown.verified else '<b>NOT verified</b>'}</small></th>"
                   for p in history.points)  # fmt: skip
    banner, bundles = _bundles_html(history)
    rows = []
    for check_id, verdicts in history.verdicts.items():
        cells = "".join(
            f'<td class="{v or "none"}{" flagged" if history.verdict_flags[check_id][i] else ""}">{v or "-"}</td>'
            for i, v in enumerate(verdicts)
        )
        rows.append(f"<tr><td><code>{escape(check_id)}</code></td>{cells}</tr>")
    flagged = "".join(
        f"<li><code>{escape(name)}</code> in {escape(point)}: {escape(why)}</li>"
        for point, name, why in history.flagged
    )
    charts = "".join(_chart(s) for s in history.series if sum(v is not None for v in s.values) >= 1)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>dd-accept history</title>
<style>
body{{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}}
table{{border-collapse:collapse;font-size:.85em}} td,th{{border:1px solid #ddd;padding:3px 6px}}
td.pass{{color:#2e7d32}} td.fail{{color:#c62828;font-weight:bold}} td.flagged{{background:#ffebee}}
.charts{{display:flex;flex-wrap:wrap;gap:8px}} figure{{margin:0;width:430px}}
figcaption{{font-size:.75em;color:#555}} svg{{width:100%;background:#fafafa;border:1px solid #eee}}
.line{{fill:none;stroke:#1565c0;stroke-width:1.5}} .dot{{fill:#1565c0}} .flag{{fill:#c62828}}
.tick{{font-size:9px;fill:#666}}
</style></head><body>
{banner}
<h1>dd-accept history</h1>
<p>{len(history.points)} bundles, oldest first; a change is flagged when a value moved in its worse
direction by more than {history.tolerance:.0%} against the bundle before it, or a check stopped passing.</p>
<h2>Flagged changes</h2><ul>{flagged or "<li>none</li>"}</ul>
<h2>Verdicts</h2><table><tr><th>check</th>{head}</tr>{"".join(rows)}</table>
<h2>Metrics</h2><div class="charts">{charts}</div>
{bundles}
</body></html>
"""
