"""Hold Ctrl-C (and SIGTERM) back while the engine is creating something.

An interrupt that lands inside an engine request abandons the request on our side while
the engine goes on and creates the object anyway, after teardown has already listed what
exists: a leftover container. Deferring the signal until the request has returned keeps
what we know and what exists in step; the interrupt is then raised as usual.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def remember(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    previous = {sig: signal.signal(sig, remember) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if received:
        raise KeyboardInterrupt
