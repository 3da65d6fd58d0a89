"""One wall-clock reading per record: a stepped clock moves whole records, never parts of one.

The checks compare moments that different processes wrote on the wall clock the nodes share
(a replica's write of a chunk against the client's read of it; a stream's end against the
TERM). A wall clock can be *stepped* while a run goes on: NTP or chrony correcting a drift
(`makestep`), a virtual machine catching up after the host paused it. A record that reads the
wall clock at its start and again at its end mixes two clocks across a step, and a correct
SUT looks as if it held every event before the step by the size of the step (a 1.04 s step
once failed rc1's no-buffering check in CI this way, and a drain stream seemed to begin
after the TERM it was cut by). So each record reads the wall clock once, when it starts, and
times everything after by the monotonic clock, which no one steps. A step can then only
land between two records, where it shifts one whole record against the other (a client's
and a replica's record of one request start milliseconds apart).
"""

from __future__ import annotations

import time


class WallAnchor:
    """The wall clock read once, beside the monotonic clock: later moments are derived."""

    __slots__ = ("mono", "wall")

    def __init__(self) -> None:
        self.mono = time.monotonic()
        self.wall = time.time()

    def at(self, mono: float) -> float:
        """The wall-clock moment of a monotonic reading, on this anchor's wall clock."""
        return self.wall + (mono - self.mono)

    def now(self) -> float:
        return self.wall + (time.monotonic() - self.mono)

    def elapsed(self) -> float:
        return time.monotonic() - self.mono
