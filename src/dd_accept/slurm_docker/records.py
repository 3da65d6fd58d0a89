"""Every command run in the cluster becomes a frozen record: the records are evidence.

Modelled on Slurm's own test framework (`atf.run_command`): a command always yields
argv, node, start, duration, exit code and output, whether it passed, failed or timed out,
so a report can show exactly what the harness did and what the scheduler answered.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime

TAIL_CHARS = 4000

# `timeout` from coreutils exits 124 when it had to stop the command, 137 if it had to KILL it.
TIMEOUT_EXIT_CODES = frozenset({124, 137})


def tail(text: str, limit: int = TAIL_CHARS) -> str:
    """Keep the end of an output: errors are printed last, and evidence must stay small."""
    if len(text) <= limit:
        return text
    return "…" + text[-(limit - 1) :]


def decode(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", errors="replace")


@dataclass(frozen=True, slots=True)
class CommandRecord:
    """One command the harness ran on a cluster node, as it will appear in evidence."""

    argv: tuple[str, ...]
    node: str
    start: str
    duration_s: float
    exit_code: int | None
    stdout_tail: str
    stderr_tail: str
    timed_out: bool = False
    background: bool = False
    # The whole stdout, for callers that parse it; evidence keeps only the tail above.
    stdout: str = field(default="", repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @property
    def started_at(self) -> float:
        """When the command was started (epoch seconds)."""
        return datetime.fromisoformat(self.start.replace("Z", "+00:00")).timestamp()

    @property
    def ended_at(self) -> float:
        """When the command returned (epoch seconds): for `scancel`, a moment by which the
        signal had been handed to Slurm, so times measured from it are never too long."""
        return self.started_at + self.duration_s

    def to_json(self) -> dict[str, object]:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "stdout"}
        data["argv"] = list(self.argv)
        return data

    def describe(self) -> str:
        """One line for error messages: what ran, where, and how it ended."""
        status = "timed out" if self.timed_out else f"exit {self.exit_code}"
        detail = (self.stderr_tail or self.stdout_tail).strip().splitlines()
        last = f": {detail[-1]}" if detail else ""
        return f"`{' '.join(self.argv)}` on {self.node} ({status} after {self.duration_s:.2f}s){last}"


def utc_now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class CommandLog:
    """Append-only, thread-safe list of the records a cluster object produced."""

    _records: list[CommandRecord] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, record: CommandRecord) -> CommandRecord:
        with self._lock:
            self._records.append(record)
        return record

    def __iter__(self) -> Iterator[CommandRecord]:
        with self._lock:
            return iter(list(self._records))

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def since(self, index: int) -> Sequence[CommandRecord]:
        with self._lock:
            return list(self._records[index:])

    def to_jsonl(self) -> str:
        return "".join(json.dumps(record.to_json(), sort_keys=True) + "\n" for record in self)
