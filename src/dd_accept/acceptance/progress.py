"""Scenario progress as JSONL lines that any listener can follow (the CLI tails the file).

Scenarios run inside pytest, possibly in xdist workers; a file is the one channel all of
them share with the process that shows progress.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


class ProgressWriter:
    def __init__(self, path: Path | None, scenario: str) -> None:
        self.path = path
        self.scenario = scenario
        self.started = time.monotonic()

    def emit(self, phase: str, **numbers: Any) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = {
            "t": time.time(),
            "scenario": self.scenario,
            "phase": phase,
            "elapsed_s": round(time.monotonic() - self.started, 1),
            **numbers,
        }
        with open(self.path, "a") as handle:
            handle.write(json.dumps(line) + "\n")
