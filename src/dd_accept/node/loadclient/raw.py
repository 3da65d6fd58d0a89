"""Raw mode: an aiohttp SSE client with no admission control, the way an SSE user consumes.

Per request it records status, Retry-After, time to first token, inter-token gaps, chunk
and byte counts, whether `[DONE]` arrived, and how it ended. A 429 is retried after its
Retry-After (the caller's job, as in the generation engine).
"""

from __future__ import annotations

import asyncio
import time

import aiohttp

from dd_accept.base.events import ClientRequest, EventWriter
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
            async for line in response.content:
                size += len(line)
                if not line.startswith(b"data: "):
                    continue
                now = time.monotonic()
                if line.strip() == b"data: [DONE]":
                    done = True
                    continue
                chunks += 1
                if first is None:
                    first = now
                elif last is not None:
                    gaps.append(now - last)
                if chunks <= MAX_CHUNK_OFFSETS:
                    offsets.append(round(now - first, 4))
                last = now
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


async def run_raw(workload: Workload, events: EventWriter) -> dict[str, int]:
    deadline = time.monotonic() + workload.deadline_s
    pending = list(range(workload.records))
    completed = 0
    timeout = aiohttp.ClientTimeout(total=None, sock_read=workload.deadline_s)
    # aiohttp's default pool holds 100 connections: a saturation run needs one per stream.
    connector = aiohttp.TCPConnector(limit=workload.concurrency)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:

        async def worker() -> None:
            nonlocal completed
            while pending and time.monotonic() < deadline:
                record = pending.pop(0)
                for attempt in range(workload.max_record_attempts):
                    ok, wait = await _one(session, workload, record, attempt, events)
                    if ok:
                        completed += 1
                        break
                    if time.monotonic() >= deadline:
                        break
                    await asyncio.sleep(wait if wait is not None else 0.1)

        await asyncio.gather(*(worker() for _ in range(workload.concurrency)))
    return {"records": workload.records, "completed": completed, "incomplete": workload.records - completed}
