"""Progress of long work: build listeners, and scenario progress as JSONL lines.

Any listener can follow the scenario progress file (the CLI tails it). Scenarios run
inside pytest, possibly in xdist workers; a file is the one channel all of them share
with the process that shows progress.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Protocol


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


class BuildListener(Protocol):
    """Observer of a build; the console display is one implementation, tests another."""

    def on_step(self, name: str) -> None: ...

    def on_detail(self, text: str) -> None: ...


class QuietListener:
    def on_step(self, name: str) -> None:
        pass

    def on_detail(self, text: str) -> None:
        pass
