"""`dd-accept checks [SCENARIO ...]`: every check id with what it judges, in one line each.

Gate files (`allow_unsupported`), `verify --require-check` and `compare` name checks by id;
a release engineer writing one should not have to read the source or a bundle to learn the
names, as `pytest --collect-only` lists tests without running them. The ids and lines come
from the checks themselves (acceptance.catalog), so the list cannot drift from what runs.
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.table import Table

from dd_accept.acceptance.catalog import CHECKS, SUMMARIES
from dd_accept.base.errors import EXIT_PASS, UsageError
from dd_accept.harness.console import ConsoleListener


def add_checks_command(commands: Any) -> None:
    listed = commands.add_parser(
        "checks", help="list every check id with what it judges (the names gate files and verify take)"
    )
    listed.add_argument(
        "scenarios", nargs="*", metavar="SCENARIO", help=f"only these scenarios' checks ({', '.join(CHECKS)})"
    )
    listed.set_defaults(handler=_cmd_checks)


def _cmd_checks(args: argparse.Namespace, console: ConsoleListener) -> int:
    unknown = [name for name in args.scenarios if name not in CHECKS]
    if unknown:
        raise UsageError(f"checks: unknown scenario {unknown[0]!r} (known: {', '.join(CHECKS)})")
    chosen = args.scenarios or list(CHECKS)
    rows = [(check_id, scenario) for scenario in chosen for check_id in CHECKS[scenario]]
    listed = [{"id": check_id, "scenario": scenario, "summary": SUMMARIES[check_id]} for check_id, scenario in rows]
    console.emit({"schema": "dd-accept/checks/v1", "checks": listed, "exit_status": EXIT_PASS})
    table = Table(title=f"dd-accept checks: {len(rows)}")
    table.add_column("check")
    table.add_column("what it judges", overflow="fold")
    for check_id, _ in rows:
        table.add_row(check_id, SUMMARIES[check_id])
    console.table(table)
    return EXIT_PASS
