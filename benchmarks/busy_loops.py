"""Busy loops beside a measurement: a machine whose cores other work holds (a CI runner's
neighbours, a second job) must not make a correct SUT fail a check."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def busy_loops(count: int) -> Iterator[list[int]]:
    """`count` Python processes spinning on the host while the block runs (their PIDs); each
    stopped by its own PID however the block ends (Ctrl-C included)."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield [loop.pid for loop in loops]
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
