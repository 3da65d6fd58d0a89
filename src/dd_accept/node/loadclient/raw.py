"""Raw mode: an aiohttp SSE client with no admission control, the way an SSE user consumes.

Per request it records status, Retry-After, time to first token, inter-token gaps, chunk
and byte counts, whether `[DONE]` arrived, and how it ended. A 429 is retried after its
Retry-After (the caller's job, as in the generation engine).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp

from dd_accept.base.events import EventWriter
from dd_accept.base.wall_clock import WallAnchor
from dd_accept.node.loadclient.schedule import TIMED_OUT, drive, outcome_of, retry_wait
from dd_accept.node.loadclient.sse import SseTally
from dd_accept.node.loadclient.workload import Workload


async def _one(
    session: aiohttp.ClientSession, workload: Workload, record: int, attempt: int, events: EventWriter
) -> tuple[int, float | None]:
    request_id = f"{workload.run_tag}{record}.{attempt}"
    clock = WallAnchor()
    tally = SseTally()
    status = 0
    retry_after: str | None = None
    outcome = "ok"
    error = None
    try:
        headers = {**dict(workload.request_headers), "x-dd-request-id": request_id}
        async with (
            asyncio.timeout(workload.stream_deadline_s or None),
            session.post(f"{workload.endpoint}/v1/chat/completions", json=workload.body(), headers=headers) as response,
        ):
            status = response.status
            retry_after = response.headers.get("Retry-After")
            now = time.monotonic()
            async for data in response.content.iter_any():
                now = time.monotonic()
                tally.feed(data, now)
                if workload.read_bytes_per_s:  # a slow link: aiohttp stops reading the socket
                    await asyncio.sleep(len(data) / workload.read_bytes_per_s)  # once its buffer is full
                if 0 < workload.hang_up_after <= tally.chunks and status == 200 and not tally.done:
                    response.close()  # the connection, not back to the pool: the user left
                    outcome = "hung_up"
                    break
            else:
                tally.end(now)
                outcome = outcome_of(status, workload.stream, tally.done)
    except TimeoutError as caught:  # the session bounds only reads (sock_read), the stream its whole
        outcome, error = TIMED_OUT, type(caught).__name__
    except aiohttp.ClientError as caught:
        outcome, error = "error", type(caught).__name__
    events.write(
        tally.request(
            clock, mode="raw", request_id=request_id, record=record, attempt=attempt, status=status,
            retry_after=retry_after, outcome=outcome, error=error,
        )
    )  # fmt: skip
    return (1 if outcome in ("ok", "hung_up") else 0), retry_wait(outcome, retry_after)


async def run_raw(workload: Workload, events: EventWriter) -> dict[str, Any]:
    """Send the workload's records through aiohttp (see `schedule.drive` for when)."""
    timeout = aiohttp.ClientTimeout(total=None, sock_read=workload.deadline_s)
    # aiohttp's default pool holds 100 connections: a saturation run needs one per stream.
    connector = aiohttp.TCPConnector(limit=workload.connections)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        return await drive(workload, lambda record, attempt: _one(session, workload, record, attempt, events))
