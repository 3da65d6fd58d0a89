"""The console is a listener of harness events, like the evidence writer will be.

Progress goes to stderr so stdout stays parseable; `quiet` is honoured by every method.
"""

from __future__ import annotations

import sys
from types import TracebackType

from rich.console import Console
from rich.status import Status
from rich.table import Table


class ConsoleListener:
    """Shows build and lifecycle progress as a live status line (or nothing when quiet)."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.err = Console(stderr=True, highlight=False)
        self.out = Console(highlight=False)
        self._status: Status | None = None
        self._step = ""

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
        self.out.print(table)


def fail_line(message: str) -> None:
    """The single line a user sees for a usage or environment error."""
    first = message.strip().splitlines()[0] if message.strip() else "error"
    rest = message.strip().splitlines()[1:]
    print(f"dd-accept: error: {first}", file=sys.stderr)
    # Cluster errors carry log tails after the first line; they help and are not a traceback.
    for line in rest:
        print(f"  {line}", file=sys.stderr)
