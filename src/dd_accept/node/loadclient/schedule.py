"""When a raw client sends: `concurrency` requests at a time, or arriving at a rate (constant
or Poisson, seeded), for a duration; each record retried after its Retry-After until it
succeeds or the attempts run out. Shared by both raw clients; what one attempt is, is theirs.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from dd_accept.node.event_loop import running_loop_name
from dd_accept.node.loadclient.workload import Workload
from dd_accept.node.step_usage import machine_cpu

# One attempt of one record: (1 when it succeeded, else 0; seconds to wait before the next).
Attempt = Callable[[int, int], Awaitable[tuple[int, float | None]]]


# An attempt the client gave up on, waiting: no byte for `deadline_s`, or the stream not over
# `stream_deadline_s` after it was sent. A hang, told apart from a body that broke ("error"):
# a proxy that leaves a cut stream open has not told its client anything.
TIMED_OUT = "deadline"


def outcome_of(status: int, stream: bool, done: bool) -> str:
    """How an attempt that got a whole response ended."""
    if status != 200:
        return "rate_limited" if status == 429 else "http_error"
    return "truncated" if stream and not done else "ok"


def retry_wait(outcome: str, retry_after: str | None) -> float | None:
    """A 429's Retry-After in seconds, when it gave a whole number."""
    return float(retry_after) if outcome == "rate_limited" and retry_after and retry_after.isdigit() else None


async def drive(workload: Workload, attempt: Attempt) -> dict[str, Any]:
    """Send the workload's records. The summary carries the client's own CPU seconds and the
    window it spent them in, so a capacity run can show what the harness cost at each load."""
    started = time.monotonic()
    wall_offset = time.time() - started  # the wall clock against the monotonic: moves only if stepped
    cpu_started = time.process_time()
    machine_started = _machine()
    window = workload.duration_s or workload.deadline_s
    deadline = started + min(window, workload.deadline_s)
    pending = deque(range(workload.records))
    completed = 0

    async def send(record: int) -> None:
        nonlocal completed
        for number in range(workload.max_record_attempts):
            ok, wait = await attempt(record, number)
            if ok:
                completed += 1
                return
            if time.monotonic() >= deadline:
                return
            await asyncio.sleep(wait if wait is not None else 0.1)

    async def worker() -> None:
        while pending and time.monotonic() < deadline:
            await send(pending.popleft())

    if workload.arrival == "concurrency":
        await asyncio.gather(*(worker() for _ in range(workload.concurrency)))
    else:
        sent = []
        for at in arrivals(workload):
            if not pending or started + at >= deadline:
                break
            await asyncio.sleep(max(0.0, started + at - time.monotonic()))
            sent.append(asyncio.ensure_future(send(pending.popleft())))
        await asyncio.gather(*sent)
    machine_ended = _machine()
    busy = stolen = None
    if machine_started is not None and machine_ended is not None:
        total = machine_ended["total_s"] - machine_started["total_s"]
        if total > 0:
            busy = round((machine_ended["busy_s"] - machine_started["busy_s"]) / total, 4)
            stolen = round((machine_ended["stolen_s"] - machine_started["stolen_s"]) / total, 4)
    return {
        "records": workload.records,
        "completed": completed,
        "incomplete": workload.records - completed,
        "cpu_s": round(time.process_time() - cpu_started, 4),
        "window_s": round(time.monotonic() - started, 4),
        # the machine's busy share while this client sent (its kernel's /proc/stat): the
        # capacity scenario's saturation reading, over the window the load was on
        "machine_busy": busy,
        "machine_stolen": stolen,  # the share of it a hypervisor gave elsewhere (a VM's steal)
        "loop": running_loop_name(),
        # how far the node's wall clock was stepped (NTP, a VM catching up) while this client
        # sent: evidence of a machine fault, which the records are timed to survive (base.wall_clock)
        "wall_clock_step_s": round(time.time() - time.monotonic() - wall_offset, 3),
    }


def _machine() -> dict[str, float] | None:
    try:
        return machine_cpu()
    except (OSError, ValueError, IndexError):  # no /proc/stat (not Linux)
        return None


def arrivals(workload: Workload) -> Iterator[float]:
    """Seconds after the start at which each request is sent: every 1/rate (constant), or
    exponential gaps of mean 1/rate (Poisson), from the workload's seed, as vLLM's
    `bench serve --request-rate` (with burstiness 1) and guidellm's profiles send them."""
    chooser = random.Random(workload.seed)
    at = 0.0
    while True:
        yield at
        at += chooser.expovariate(workload.rate) if workload.arrival == "poisson" else 1.0 / workload.rate
