"""The one polling helper: scenarios never sleep a fixed time and hope.

A wait keeps the probe apart from the predicate, so that when it gives up it can say what
it last saw; a probe may also declare a terminal state so the wait stops early instead of
spending its whole timeout on something that can no longer happen.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
SHOWN_LIMIT = 600  # a failure message shows the last value, not a page of it


class WaitTimeout(TimeoutError):
    """Raised with the last observed value, so a failure explains itself."""

    def __init__(self, what: str, timeout: float, last: object, error: BaseException | None) -> None:
        shown = last.describe() if callable(getattr(last, "describe", None)) else repr(last)
        if len(shown) > SHOWN_LIMIT:
            shown = f"{shown[: SHOWN_LIMIT // 2]} … {shown[-SHOWN_LIMIT // 2 :]} ({len(shown)} characters)"
        detail = f"last observed: {shown}"
        if error is not None:
            detail = f"last error: {type(error).__name__}: {error}"
        super().__init__(f"timed out after {timeout:.1f}s waiting for {what}; {detail}")
        self.what = what
        self.last = last
        self.error = error


class WaitAborted(RuntimeError):
    """The probe reached a state from which the awaited condition cannot follow."""


def wait_until(
    probe: Callable[[], T],
    predicate: Callable[[T], bool],
    *,
    timeout: float,
    what: str,
    interval: float = 0.1,
    max_interval: float = 1.0,
    terminal: Callable[[T], str | None] | None = None,
    transient: tuple[type[BaseException], ...] = (),
) -> T:
    """Poll `probe` until `predicate` holds; raise `WaitTimeout` with the last value.

    `terminal(value)` returning a reason aborts at once (e.g. a container that exited).
    Exceptions of the `transient` types are remembered and retried, others propagate.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    last_error: BaseException | None = None
    delay = interval
    while True:
        try:
            value = probe()
        except transient as error:
            last_error = error
        else:
            last, last_error = value, None
            if predicate(value):
                return value
            if terminal is not None and (reason := terminal(value)) is not None:
                raise WaitAborted(f"gave up waiting for {what}: {reason}")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WaitTimeout(what, timeout, last, last_error)
        time.sleep(min(delay, remaining))
        delay = min(delay * 1.5, max_interval)


def wait_for_finding(
    probe: Callable[[], T], predicate: Callable[[T], bool], *, timeout: float, what: str, interval: float = 0.1
) -> T | None:
    """`wait_until` for a behaviour of the SUT: the first value that holds, or None when none
    came in time. None is evidence for a check (which names what did not happen), never an
    error; use `wait_until` where the harness itself must get there."""
    try:
        return wait_until(probe, predicate, timeout=timeout, what=what, interval=interval)
    except WaitTimeout:
        return None
