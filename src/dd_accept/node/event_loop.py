"""Which event loop the harness's own programs on the nodes run on (replicas, load client).

The harness must cost less than what it measures (the capacity scenario's headroom), and
the event loop is most of what a Python SSE server or client spends per chunk: uvloop
(libuv) where it is installed, asyncio's own loop otherwise or when asked. The SUT's own
programs (its proxy, its client) choose their own loop; the SUT's queue admission
middleware, which runs inside the synthetic replica, runs on the replica's loop, as it does
inside vLLM's server (uvicorn on uvloop). uvloop rounds timers to whole milliseconds, so the
replicas' token gaps are paced to the millisecond, as vLLM's are.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

LOOPS = ("auto", "asyncio", "uvloop")
T = TypeVar("T")


def loop_factory(choice: str = "auto") -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory for `choice` (None: asyncio's default); "uvloop" without uvloop installed
    is an error, "auto" falls back quietly."""
    if choice not in LOOPS:
        raise ValueError(f"--loop must be one of {', '.join(LOOPS)}, got {choice!r}")
    if choice == "asyncio" or (choice == "auto" and importlib.util.find_spec("uvloop") is None):
        return None
    import uvloop

    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T], choice: str = "auto") -> T:
    with asyncio.Runner(loop_factory=loop_factory(choice)) as runner:
        return runner.run(main)


def running_loop_name() -> str:
    """ "uvloop" or "asyncio": what the running loop is, for a program's summary."""
    return "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"
