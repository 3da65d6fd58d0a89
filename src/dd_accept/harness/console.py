"""The console is a listener of harness events, like the evidence writer will be.

Progress goes to stderr so stdout stays parseable; `quiet` is honoured by every method.
Tables go to stdout: drawn for a terminal, one plain line per row for a CI log or a pipe,
so a check id is never folded at 80 columns (NO_COLOR and COLUMNS are rich's, as ever).
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.status import Status
from rich.table import Table
from rich.text import Text

from dd_accept.base import documents


class ConsoleListener:
    """Shows build and lifecycle progress as a live status line (or nothing when quiet)."""

    def __init__(
        self, quiet: bool = False, out: Console | None = None, err: Console | None = None, no_color: bool = False
    ) -> None:
        self.quiet = quiet
        # no_color: `--no-color`; rich itself honours NO_COLOR (and FORCE_COLOR) from the environment.
        self.err = err or Console(stderr=True, highlight=False, no_color=no_color or None)
        self.out = out or Console(highlight=False, no_color=no_color or None)
        self._status: Status | None = None
        self._step = ""
        self.document: dict[str, Any] | None = None  # what `--json` prints, once the command is done

    def emit(self, document: dict[str, Any]) -> None:
        """The command's machine-readable result (`--json`), held to the schema it names; the
        last one emitted is the command's (a gate's runs each emit theirs, then the gate)."""
        self.document = documents.checked(document)

    def __enter__(self) -> ConsoleListener:
        if not self.quiet and self.err.is_terminal:
            self._status = self.err.status("starting")
            self._status.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def on_step(self, name: str) -> None:
        self._step = name
        if self.quiet:
            return
        if self._status is not None:
            self._status.update(f"[bold]{name}[/bold]")
        else:
            self.err.print(f"• {name}")

    def on_detail(self, text: str) -> None:
        if self._status is not None and not self.quiet:
            self._status.update(f"[bold]{self._step}[/bold] [dim]{text}[/dim]")

    def info(self, text: str) -> None:
        if not self.quiet:
            self.err.print(text)

    def table(self, table: Table) -> None:
        """A table for a person on a terminal (the first column, the ids people grep for,
        never wraps); for a CI log or a pipe, one plain line per row, whatever the width.
        A table without rows is not shown."""
        if not table.row_count:
            return
        if self.out.is_terminal:
            if table.columns:
                table.columns[0].no_wrap = True
            self.out.print(table)
            return
        print(plain_table(table), file=self.out.file)


def plain_table(table: Table) -> str:
    """The title, the column headers, then one line per row: cells in column order, markup
    removed, joined by " | " (a cell's own line breaks become "; ")."""
    columns = [[_plain(cell) for cell in column.cells] for column in table.columns]
    title = _plain(table.title) if table.title else ""
    header = " | ".join(_plain(column.header) for column in table.columns)
    rows = [header, *(" | ".join(cells) for cells in zip(*columns, strict=True))]
    return "\n".join([title, *rows] if title else rows)


def _plain(cell: object) -> str:
    text = Text.from_markup(cell) if isinstance(cell, str) else cell
    plain = text.plain if isinstance(text, Text) else str(text)
    return "; ".join(line for line in plain.splitlines() if line.strip())


def fail_line(message: str) -> None:
    """The single line a user sees for a usage or environment error."""
    first = message.strip().splitlines()[0] if message.strip() else "error"
    rest = message.strip().splitlines()[1:]
    print(f"dd-accept: error: {first}", file=sys.stderr)
    # Cluster errors carry log tails after the first line; they help and are not a traceback.
    for line in rest:
        print(f"  {line}", file=sys.stderr)
