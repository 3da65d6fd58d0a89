"""Raw mode: an aiohttp SSE client with no admission control, the way an SSE user consumes.

Per request it records status, Retry-After, time to first token, inter-token gaps, chunk
and byte counts, whether `[DONE]` arrived, and how it ended. A 429 is retried after its
Retry-After (the caller's job, as in the generation engine).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import aiohttp

from dd_accept.base.events import ClientRequest, EventWriter
from dd_accept.node.event_loop import running_loop_name
from dd_accept.node.loadclient.workload import Workload

MAX_CHUNK_OFFSETS = 2048  # as the replica records them, so the two lists line up


async def _one(
    session: aiohttp.ClientSession, workload: Workload, record: int, attempt: int, events: EventWriter
) -> tuple[int, float | None]:
    body = {
        "model": workload.model,
        "messages": [{"role": "user", "content": workload.prompt()}],
        "max_tokens": workload.max_tokens,
        "stream": workload.stream,
    }
    request_id = f"{workload.run_tag}{record}.{attempt}"
    started = time.monotonic()
    first: float | None = None
    last: float | None = None
    gaps: list[float] = []
    offsets: list[float] = []  # per data event: when it arrived, after the first
    chunks = size = 0
    done = False
    status = 0
    retry_after: str | None = None
    outcome = "ok"
    error = None
    try:
        headers = {**dict(workload.headers), "x-dd-request-id": request_id}
        async with session.post(f"{workload.endpoint}/v1/chat/completions", json=body, headers=headers) as response:
            status = response.status
            retry_after = response.headers.get("Retry-After")
            # Read what the socket holds and split it into events here: a readline per SSE
            # line costs the client more than the proxy's forwarding of it, and a harness
            # that pays more per chunk than the SUT measures itself (the capacity scenario).
            # Events that arrive in one read arrived together: they share its time. Lines end
            # in LF, CRLF or CR; a data line is `data:` with or without its space (SSE).

            def take(line: bytes, now: float) -> None:
                nonlocal chunks, first, last, done
                if not line.startswith(b"data:"):
                    return
                if line[5:].strip() == b"[DONE]":
                    done = True
                    return
                chunks += 1
                if first is None:
                    first = now
                elif last is not None:
                    gaps.append(now - last)
                if chunks <= MAX_CHUNK_OFFSETS:
                    offsets.append(round(now - first, 4))
                last = now

            pending = b""
            now = time.monotonic()
            async for data in response.content.iter_any():
                size += len(data)
                now = time.monotonic()
                text = pending + data
                if b"\r" in text:
                    text = text.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
                *whole, pending = text.split(b"\n")
                for line in whole:
                    take(line, now)
            take(pending, now)  # a body that ends without its newline
            if status != 200:
                outcome = "rate_limited" if status == 429 else "http_error"
            elif workload.stream and not done:
                outcome = "truncated"
    except (TimeoutError, aiohttp.ClientError) as caught:
        outcome, error = "error", type(caught).__name__
    events.write(
        ClientRequest(
            mode="raw",
            request_id=request_id,
            started=round(time.time() - (time.monotonic() - started), 6),
            record=record,
            attempt=attempt,
            status=status,
            retry_after=retry_after,
            outcome=outcome,
            error=error,
            latency_s=round(time.monotonic() - started, 6),
            ttft_s=None if first is None else round(first - started, 6),
            chunks=chunks,
            bytes=size,
            done=done,
            gap_max_s=round(max(gaps), 6) if gaps else None,
            gap_mean_s=round(sum(gaps) / len(gaps), 6) if gaps else None,
            chunk_offsets_s=offsets if len(offsets) > 1 else None,
        )
    )
    wait = float(retry_after) if outcome == "rate_limited" and retry_after and retry_after.isdigit() else None
    return (1 if outcome == "ok" else 0), wait


async def run_raw(workload: Workload, events: EventWriter) -> dict[str, Any]:
    """Send the workload's records: `concurrency` at a time, or arriving at `rate` per second
    (constant or Poisson, seeded), for `duration_s` when it is set. The summary carries the
    client's own CPU seconds and the window it spent them in, so a capacity run can show what
    the harness cost at each load."""
    started = time.monotonic()
    cpu_started = time.process_time()
    window = workload.duration_s or workload.deadline_s
    deadline = started + min(window, workload.deadline_s)
    pending = deque(range(workload.records))
    completed = 0
    timeout = aiohttp.ClientTimeout(total=None, sock_read=workload.deadline_s)
    # aiohttp's default pool holds 100 connections: a saturation run needs one per stream.
    connector = aiohttp.TCPConnector(limit=workload.connections)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:

        async def send(record: int) -> None:
            nonlocal completed
            for attempt in range(workload.max_record_attempts):
                ok, wait = await _one(session, workload, record, attempt, events)
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
    return {
        "records": workload.records,
        "completed": completed,
        "incomplete": workload.records - completed,
        "cpu_s": round(time.process_time() - cpu_started, 4),
        "window_s": round(time.monotonic() - started, 4),
        "loop": running_loop_name(),
    }


def arrivals(workload: Workload) -> Iterator[float]:
    """Seconds after the start at which each request is sent: every 1/rate (constant), or
    exponential gaps of mean 1/rate (Poisson), from the workload's seed, as vLLM's
    `bench serve --request-rate` (with burstiness 1) and guidellm's profiles send them."""
    chooser = random.Random(workload.seed)
    at = 0.0
    while True:
        yield at
        at += chooser.expovariate(workload.rate) if workload.arrival == "poisson" else 1.0 / workload.rate
