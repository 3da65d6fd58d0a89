"""The raw load client against a local SSE server: events split across reads are counted
whole, and requests are sent at the rate and arrival process the workload asks for."""

import asyncio
import itertools
import statistics
import time
from dataclasses import replace

from aiohttp import web

from dd_accept.base.events import ClientRequest, EventWriter, of_type, read_event_file
from dd_accept.node.loadclient.raw import arrivals, run_raw
from dd_accept.node.loadclient.workload import Workload

EVENT = b'data: {"choices":[{"delta":{"content":"tok "}}]}\n\n'


def _streaming(*writes, pause_s=0.0):
    """A handler that answers every request with these writes, `pause_s` apart."""

    async def handler(request):
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for write in writes:
            await response.write(write)
            if pause_s:
                await asyncio.sleep(pause_s)
        return response

    return handler


async def _serve(handler, body):
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        return await body(f"http://127.0.0.1:{port}")
    finally:
        await runner.cleanup()


def test_events_split_across_reads_are_counted_whole_with_every_byte(tmp_path):
    stream = EVENT * 5 + b"data: [DONE]\n\n"
    # cut mid-line, mid-"data: ", mid-[DONE]
    handler = _streaming(*(stream[start : start + 7] for start in range(0, len(stream), 7)), pause_s=0.002)

    events = EventWriter(tmp_path / "e.jsonl", source="client")

    async def body(url):
        return await run_raw(Workload(endpoint=url, records=2, concurrency=2, max_tokens=5), events)

    summary = asyncio.run(_serve(handler, body))
    events.close()
    attempts = of_type(read_event_file(tmp_path / "e.jsonl"), ClientRequest)
    assert summary["completed"] == 2 and summary["cpu_s"] > 0 and summary["window_s"] > 0
    assert [(a.chunks, a.bytes, a.done, a.outcome) for a in attempts] == [(5, len(stream), True, "ok")] * 2
    assert len(attempts[0].chunk_offsets_s) == 5 and attempts[0].chunk_offsets_s == sorted(attempts[0].chunk_offsets_s)


def test_a_stream_without_done_is_truncated(tmp_path):
    handler = _streaming(EVENT * 3)

    events = EventWriter(tmp_path / "e.jsonl", source="client")

    async def body(url):
        return await run_raw(Workload(endpoint=url, records=1, concurrency=1, max_record_attempts=1), events)

    asyncio.run(_serve(handler, body))
    events.close()
    (attempt,) = of_type(read_event_file(tmp_path / "e.jsonl"), ClientRequest)
    assert (attempt.chunks, attempt.done, attempt.outcome) == (3, False, "truncated")


def test_constant_arrivals_are_even_and_poisson_ones_seeded_with_the_rate_as_mean():
    constant = list(itertools.islice(arrivals(Workload(endpoint="x", arrival="constant", rate=50)), 5))
    assert all(abs(a - b) < 1e-9 for a, b in zip(constant, [0.0, 0.02, 0.04, 0.06, 0.08], strict=True))
    poisson = Workload(endpoint="x", arrival="poisson", rate=100, seed=7)
    first = list(itertools.islice(arrivals(poisson), 2001))
    assert first == list(itertools.islice(arrivals(poisson), 2001)), "the same seed, the same arrivals"
    gaps = [b - a for a, b in itertools.pairwise(first)]
    assert abs(statistics.mean(gaps) - 0.01) < 0.001 and statistics.stdev(gaps) > 0.008, "exponential gaps"
    other = list(itertools.islice(arrivals(Workload(endpoint="x", arrival="poisson", rate=100, seed=8)), 5))
    assert other != first[:5]


def test_a_rate_run_sends_its_requests_at_that_rate_for_its_duration(tmp_path):
    handler = _streaming(EVENT + b"data: [DONE]\n\n")

    events = EventWriter(tmp_path / "e.jsonl", source="client")
    workload = Workload(endpoint="", records=1000, arrival="constant", rate=40, duration_s=0.5, max_record_attempts=1)

    async def body(url):
        started = time.monotonic()
        summary = await run_raw(replace(workload, endpoint=url), events)
        return summary, time.monotonic() - started

    summary, elapsed = asyncio.run(_serve(handler, body))
    events.close()
    assert 19 <= summary["completed"] <= 21, summary  # 40/s for 0.5 s, the first at 0
    assert elapsed < 2


def test_data_lines_without_their_space_cr_endings_and_a_last_line_without_newline_count(tmp_path):
    body = b'data:{"a":1}\r\rdata: {"a":2}\r\n\r\ndata:[DONE]'
    handler = _streaming(body)

    events = EventWriter(tmp_path / "e.jsonl", source="client")

    async def run(url):
        return await run_raw(Workload(endpoint=url, records=1, concurrency=1, max_record_attempts=1), events)

    asyncio.run(_serve(handler, run))
    events.close()
    (attempt,) = of_type(read_event_file(tmp_path / "e.jsonl"), ClientRequest)
    assert (attempt.chunks, attempt.done, attempt.outcome, attempt.bytes) == (2, True, "ok", len(body))
    assert attempt.ttft_s is not None
