"""Faults planted in a real run's records, for the request ledger's negative controls: a
generation done twice, and an answer lost on the way. Each edits a copy of the run
directory the way the fault would have written it, and returns the request id it touched,
so a control asserts the ledger names exactly that request."""

from __future__ import annotations

import json
from pathlib import Path


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def _whole_generations(directory: Path) -> list[tuple[Path, dict]]:
    found = []
    for path in sorted(directory.glob("replicas/*.jsonl")):
        for row in _rows(path):
            upstream = row.get("kind") == "upstream" and row.get("request_id")
            if upstream and row["status"] == 200 and row["outcome"] == "ok":
                found.append((path, row))
    return found


def plant_duplicate(directory: Path) -> str:
    """A proxy that sent a request on after a replica had answered it whole: the same id
    generated whole again, on the next replica, right after the first ended."""
    path, first = _whole_generations(directory)[0]
    again = dict(first, replica=first["replica"] + 1, started=first["started"] + first["duration_s"] + 0.01)
    again["t"] = again["started"] + first["duration_s"]
    _write(path, [*_rows(path), again])
    return first["request_id"]


def plant_loss(directory: Path) -> str:
    """A proxy that dropped an answer a replica finished: the client's record of a request the
    replicas answered whole says it ended cut (no [DONE]), after the replica was done."""
    generated = {row["request_id"] for _, row in _whole_generations(directory)}
    for path in sorted(directory.glob("*.jsonl")):
        rows = _rows(path)
        for index, row in enumerate(rows):
            if row.get("kind") == "request" and row.get("outcome") == "ok" and row.get("request_id") in generated:
                rows[index] = dict(row, outcome="truncated", done=False)
                _write(path, rows)
                return row["request_id"]
    raise AssertionError(f"no answered request to plant a loss on in {directory.name}")
