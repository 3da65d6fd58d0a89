"""`dd-accept compare` and `history`: bundles against each other, each verified first."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from dd_accept.base.errors import EXIT_CHECK_FAILED, EXIT_PASS, UsageError
from dd_accept.base.regressions import REGRESSION_METRICS, SERVING_TOLERANCE
from dd_accept.base.shown_paths import shown_path
from dd_accept.harness.arguments import (
    add_reading_options,
    below_one,
    fraction,
    reading_policy,
    show_standing,
)
from dd_accept.harness.console import ConsoleListener
from dd_accept.harness.outputs import refuse_missing_directory, write_all
from dd_accept.reports import compare, compare_render, history
from dd_accept.reports.reading import read_verified


def _cmd_compare(args: argparse.Namespace, console: ConsoleListener) -> int:

    policy = reading_policy(args)
    baseline = read_verified(Path(args.baseline), "compare", policy)
    candidate = read_verified(Path(args.candidate), "compare", policy)
    comparison = compare.compare(
        baseline.results, candidate.results, args.tolerance, args.serving_tolerance, (baseline, candidate)
    )
    regressed = args.fail_on_regression and comparison.regressed
    code = EXIT_CHECK_FAILED if regressed else EXIT_PASS
    console.emit(compare.to_json(comparison, code))
    if args.format == "md":
        sys.stdout.write(compare_render.to_markdown(comparison))
    elif args.format == "html":
        sys.stdout.write(compare_render.to_html(comparison))
    elif args.format == "json":
        print(json.dumps(console.document, indent=2))
    else:
        for verified, line in compare_render.standing_lines(comparison):
            show_standing(console, verified, line)
        console.table(compare_render.to_table(comparison))
        console.table(compare_render.serving_table(comparison))
    if regressed:
        if comparison.regressions:
            print(f"dd-accept compare: {len(comparison.regressions)} check(s) regressed", file=sys.stderr)
        for worse in [*comparison.metric_regressions, *comparison.serving_regressions]:
            print(f"dd-accept compare: worse than the baseline: {worse.describe()}", file=sys.stderr)
    return code


def _cmd_history(args: argparse.Namespace, console: ConsoleListener) -> int:

    bundles = history.find_bundles([Path(p) for p in args.paths])
    chosen = [(Path(target), render) for target, render in ((args.html, history.to_html), (args.csv, history.to_csv))
              if target]  # fmt: skip
    _check_outputs([target for target, _ in chosen], bundles)
    outputs = dict(chosen)
    points = history.load_points(bundles, reading_policy(args))
    trail = history.build_history(points, args.tolerance)
    write_all({target: render(trail) for target, render in outputs.items()}, "history")
    evidence = Table(title=f"dd-accept history: {len(points)} bundles, how each verified")
    for column in ("bundle", "started (UTC)", "sut", "evidence"):
        evidence.add_column(column)
    for point in points:
        standing = escape(point.standing) if point.shown.verified else f"[bold red]{escape(point.standing)}[/bold red]"
        evidence.add_row(point.name, history.iso(point.time), point.sut, standing)
    console.table(evidence)
    table = Table(title=f"dd-accept history: {len(points)} bundles, oldest first")
    for column in ("series", "unit", "values", "first", "last", "min", "max", "flagged"):
        table.add_column(column)
    for entry in trail.series:
        known = [v for v in entry.values if v is not None]
        flags = "; ".join(f"{points[i].name}: {why}" for i, why in enumerate(entry.flags) if why)
        numbers = (f"{v:.4g}" for v in (known[0], known[-1], min(known), max(known)))
        table.add_row(entry.key, entry.unit, str(len(known)), *numbers, f"[red]{flags}[/red]" if flags else "")
    console.table(table)
    for point, name, why in trail.flagged:
        print(f"flagged: {name} in {point}: {why}", file=sys.stderr)
    if args.fail_on_change and trail.flagged:
        print(f"dd-accept history: {len(trail.flagged)} change(s) beyond the tolerance", file=sys.stderr)
        return EXIT_CHECK_FAILED
    return EXIT_PASS


def _check_outputs(targets: list[Path], inputs: list[Path]) -> None:
    """Output files that are new or plain files, each named once, and never inside an input."""
    resolved = [target.resolve() for target in targets]
    if len(set(resolved)) != len(resolved):
        raise UsageError("history: --html and --csv name the same file")
    for target, where in zip(targets, resolved, strict=True):
        if any(where == bundle.resolve() or bundle.resolve() in where.parents for bundle in inputs):
            raise UsageError(f"history: {shown_path(target)} is inside a bundle it reads; write it elsewhere")
        refuse_missing_directory(where, target, "history")


def add_comparison_commands(commands: Any) -> None:
    """`compare` (two bundles) and `history` (many, over time)."""
    compare = commands.add_parser(
        "compare",
        help="what changed between a baseline bundle and a candidate bundle: verdicts, key numbers, serving metrics",
        description="Verify both bundles as `verify` does (a bundle that does not verify is refused, exit 2, "
        "unless --allow-unverified), then compare them check by check and serving metric by serving metric.",
    )
    compare.add_argument("baseline", metavar="BUNDLE_A", help="baseline bundle directory or .tar.gz")
    compare.add_argument("candidate", metavar="BUNDLE_B", help="candidate bundle directory or .tar.gz")
    compare.add_argument(
        "--format",
        choices=("table", "md", "html", "json"),
        default="table",
        help="table (plain lines in a pipe), md, html, or json: dd-accept/compare/v1 (default: %(default)s)",
    )
    compare.add_argument(
        "--fail-on-regression",
        action="store_true",
        help="exit 1 when a passing check now fails, or a capacity number (knee, proxy CPU per chunk) or a "
        "serving metric (TTFT, ITL, TPOT, E2EL, throughput, error rates) is worse than the baseline's beyond "
        "its tolerance",
    )
    compare.add_argument(
        "--tolerance",
        type=below_one,
        default=None,
        metavar="FRACTION",
        help="how much worse a capacity number may get, as a fraction of the baseline's (default: each metric's "
        "own, from measured noise: "
        + ", ".join(f"{m.metric} {m.tolerance:g}" for m in REGRESSION_METRICS).replace("%", "%%")
        + ")",
    )
    compare.add_argument(
        "--serving-tolerance",
        type=below_one,
        default=SERVING_TOLERANCE,
        metavar="FRACTION",
        help="how much worse a serving metric of a scenario or phase may get, as a fraction of the baseline's "
        "(default: %(default)g)",
    )
    add_reading_options(compare)
    compare.set_defaults(handler=_cmd_compare)

    trail = commands.add_parser(
        "history",
        help="each metric and verdict of many bundles over time, changes beyond a tolerance flagged",
        description="Follow every serving metric, check metric and verdict across bundles, oldest first; flag "
        "a value that moved in its worse direction by more than the tolerance, or a check that stopped passing. "
        "Each bundle is verified first, as `verify` does: one that does not is refused (exit 2) unless "
        "--allow-unverified, which marks it NOT verified on its row.",
    )
    trail.add_argument(
        "paths", nargs="+", metavar="BUNDLE_OR_DIR", help="bundles (directory or .tar.gz), or directories of them"
    )
    trail.add_argument(
        "--tolerance",
        type=fraction,
        default=0.10,
        metavar="FRACTION",
        help="flag a change worse than this against the bundle before (default: %(default)g)",
    )
    trail.add_argument("--html", metavar="FILE.html", help="write one self-contained page of charts (default: none)")
    trail.add_argument("--csv", metavar="FILE.csv", help="write every value in long form (default: none)")
    trail.add_argument("--fail-on-change", action="store_true", help="exit 1 when a change is flagged")
    add_reading_options(trail)
    trail.set_defaults(handler=_cmd_history)
