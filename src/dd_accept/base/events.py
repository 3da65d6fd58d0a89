"""JSONL events on one clock: wall time, which host and containers share (one kernel).

Only counts, sizes, statuses and timings are written, never request or response text.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, TextIO

# One event as written and read back: writers and readers share this name, so a search for
# it finds every place that touches the event format.
Event = dict[str, Any]


class EventWriter:
    def __init__(self, path: Path | None, source: str) -> None:
        self.source = source
        self._lock = threading.Lock()
        self._handle: TextIO | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = open(path, "a", buffering=1)  # noqa: SIM115 - closed in close()
        self.counts: dict[str, int] = {}

    def emit(self, kind: str, **fields: Any) -> None:
        record = {"t": round(time.time(), 6), "source": self.source, "kind": kind, **fields}
        with self._lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            if self._handle is not None:
                self._handle.write(json.dumps(record, separators=(",", ":"), default=str) + "\n")

    def close(self) -> None:
        with self._lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None
