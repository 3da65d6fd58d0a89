"""Both raw load clients (aiohttp's and the wire client) against a local SSE server: events
split across reads are counted whole, and requests are sent at the rate and arrival process
the workload asks for. Each test runs on both: they must count alike."""

import asyncio
import itertools
import statistics
import time
from dataclasses import replace

import pytest
from aiohttp import web

from dd_accept.base.events import ClientRequest, EventWriter, of_type, read_event_file
from dd_accept.node.loadclient.raw import run_raw
from dd_accept.node.loadclient.schedule import arrivals
from dd_accept.node.loadclient.wire import run_wire
from dd_accept.node.loadclient.workload import Workload

CLIENTS = pytest.mark.parametrize("run_client", [run_raw, run_wire], ids=["raw", "wire"])
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


@CLIENTS
def test_events_split_across_reads_are_counted_whole_with_every_byte(tmp_path, run_client):
    stream = EVENT * 5 + b"data: [DONE]\n\n"
    # cut mid-line, mid-"data: ", mid-[DONE]
    handler = _streaming(*(stream[start : start + 7] for start in range(0, len(stream), 7)), pause_s=0.002)

    events = EventWriter(tmp_path / "e.jsonl", source="client")

    async def body(url):
        return await run_client(Workload(endpoint=url, records=2, concurrency=2, max_tokens=5), events)

    summary = asyncio.run(_serve(handler, body))
    events.close()
    attempts = of_type(read_event_file(tmp_path / "e.jsonl"), ClientRequest)
    assert summary["completed"] == 2 and summary["cpu_s"] > 0 and summary["window_s"] > 0
    assert abs(summary["wall_clock_step_s"]) < 0.05, "no step on a steady clock"
    assert [(a.chunks, a.bytes, a.done, a.outcome) for a in attempts] == [(5, len(stream), True, "ok")] * 2
    assert len(attempts[0].chunk_offsets_s) == 5 and attempts[0].chunk_offsets_s == sorted(attempts[0].chunk_offsets_s)


@CLIENTS
def test_a_stream_without_done_is_truncated(tmp_path, run_client):
    handler = _streaming(EVENT * 3)

    events = EventWriter(tmp_path / "e.jsonl", source="client")

    async def body(url):
        return await run_client(Workload(endpoint=url, records=1, concurrency=1, max_record_attempts=1), events)

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


@CLIENTS
def test_a_rate_run_sends_its_requests_at_that_rate_for_its_duration(tmp_path, run_client):
    handler = _streaming(EVENT + b"data: [DONE]\n\n")

    events = EventWriter(tmp_path / "e.jsonl", source="client")
    workload = Workload(endpoint="", records=1000, arrival="constant", rate=40, duration_s=0.5, max_record_attempts=1)

    async def body(url):
        started = time.monotonic()
        summary = await run_client(replace(workload, endpoint=url), events)
        return summary, time.monotonic() - started

    summary, elapsed = asyncio.run(_serve(handler, body))
    events.close()
    assert 19 <= summary["completed"] <= 21, summary  # 40/s for 0.5 s, the first at 0
    assert elapsed < 2


@CLIENTS
def test_data_lines_without_their_space_cr_endings_and_a_last_line_without_newline_count(tmp_path, run_client):
    body = b'data:{"a":1}\r\rdata: {"a":2}\r\n\r\ndata:[DONE]'
    handler = _streaming(body)

    events = EventWriter(tmp_path / "e.jsonl", source="client")

    async def run(url):
        return await run_client(Workload(endpoint=url, records=1, concurrency=1, max_record_attempts=1), events)

    asyncio.run(_serve(handler, run))
    events.close()
    (attempt,) = of_type(read_event_file(tmp_path / "e.jsonl"), ClientRequest)
    assert (attempt.chunks, attempt.done, attempt.outcome, attempt.bytes) == (2, True, "ok", len(body))
    assert attempt.ttft_s is not None


@CLIENTS
def test_a_refused_connection_is_an_error_attempt_and_a_429_keeps_its_retry_after(tmp_path, run_client):
    async def too_many(request):
        return web.json_response({"error": "busy"}, status=429, headers={"Retry-After": "0"})

    events = EventWriter(tmp_path / "e.jsonl", source="client")

    async def run(url):
        return await run_client(Workload(endpoint=url, records=1, concurrency=1, max_record_attempts=2), events)

    summary = asyncio.run(_serve(too_many, run))
    refused = asyncio.run(run_client(Workload(endpoint="http://127.0.0.1:9", records=1, max_record_attempts=1), events))
    events.close()
    first, second, failed = of_type(read_event_file(tmp_path / "e.jsonl"), ClientRequest)
    assert summary["completed"] == 0 and refused["completed"] == 0
    assert [(a.attempt, a.status, a.outcome, a.retry_after) for a in (first, second)] == [
        (0, 429, "rate_limited", "0"),
        (1, 429, "rate_limited", "0"),
    ]
    assert (failed.outcome, failed.status) == ("error", 0) and failed.error


def test_the_wire_client_refuses_an_endpoint_it_cannot_speak_to(tmp_path):
    with pytest.raises(ValueError, match="plain HTTP"):
        asyncio.run(run_wire(Workload(endpoint="https://127.0.0.1:1"), EventWriter(None, source="client")))


@CLIENTS
def test_a_body_that_ends_when_the_server_closes_is_whole(tmp_path, run_client):
    """No length, no chunks, `connection: close`: the body runs to the close (RFC 9112, 6.3)."""
    body = EVENT * 3 + b"data: [DONE]\n\n"

    async def answer(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n" + body)
        await writer.drain()
        writer.close()

    async def run():
        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            workload = Workload(endpoint=f"http://127.0.0.1:{port}", records=2, concurrency=1, max_record_attempts=1)
            return await run_client(workload, events)

    events = EventWriter(tmp_path / "e.jsonl", source="client")
    summary = asyncio.run(run())
    events.close()
    attempts = of_type(read_event_file(tmp_path / "e.jsonl"), ClientRequest)
    assert summary["completed"] == 2, [(a.outcome, a.error) for a in attempts]
    assert [(a.status, a.outcome, a.chunks, a.done, a.bytes) for a in attempts] == [(200, "ok", 3, True, len(body))] * 2


@CLIENTS
def test_the_deadline_bounds_each_wait_for_bytes_not_the_whole_stream(tmp_path, run_client):
    """A stream longer than the deadline whose events keep coming is whole; one that stalls is not."""
    slow = _streaming(*([EVENT] * 6), b"data: [DONE]\n\n", pause_s=0.1)  # 0.6 s in all, 0.1 s apart
    events = EventWriter(tmp_path / "e.jsonl", source="client")

    async def run(url):
        return await run_client(Workload(endpoint=url, records=1, max_record_attempts=1, deadline_s=0.4), events)

    assert asyncio.run(_serve(slow, run))["completed"] == 1
    stalled = _streaming(EVENT, EVENT + b"data: [DONE]\n\n", pause_s=0.8)
    assert asyncio.run(_serve(stalled, run))["completed"] == 0
    events.close()
    whole, cut = of_type(read_event_file(tmp_path / "e.jsonl"), ClientRequest)
    assert whole.outcome == "ok" and whole.latency_s > 0.4
    # a hang the client gave up on, not a body that broke: a proxy that leaves a stream open tells nothing
    assert cut.outcome == "deadline" and cut.chunks == 1, cut
    assert cut.error in ("TimeoutError", "ServerTimeoutError", "SocketTimeoutError", "ReadTimeout"), cut


def test_a_stream_kept_open_by_comments_ends_at_its_stream_deadline(tmp_path):
    """`stream_deadline_s` (raw): a stream whose proxy sends keep-alive comments and never its
    end meets no wait for bytes; the client gives up on it at its own bound and records the
    hang, after the events that came. Without the bound the same stream ends whole."""
    kept_open = _streaming(EVENT, *([b": keep-alive\n\n"] * 12), b"data: [DONE]\n\n", pause_s=0.1)
    events = EventWriter(tmp_path / "e.jsonl", source="client")

    async def run(url, **bound):
        workload = Workload(endpoint=url, records=1, max_record_attempts=1, deadline_s=0.5, **bound)
        return await run_raw(workload, events)

    assert asyncio.run(_serve(kept_open, lambda url: run(url, stream_deadline_s=0.6)))["completed"] == 0
    assert asyncio.run(_serve(kept_open, run))["completed"] == 1
    events.close()
    hung, whole = of_type(read_event_file(tmp_path / "e.jsonl"), ClientRequest)
    assert (hung.outcome, hung.chunks, hung.done) == ("deadline", 1, False) and 0.6 <= hung.latency_s < 1.2, hung
    assert (whole.outcome, whole.done) == ("ok", True), whole
    assert Workload("http://x", stream_deadline_s=2.5).to_argv()[-2:] == ["--stream-deadline-s", "2.5"]
    with pytest.raises(ValueError, match="stream_deadline_s"):
        Workload("http://x", stream_deadline_s=-1)


@CLIENTS
def test_every_request_carries_the_canary_in_its_prompt_and_its_credential(tmp_path, run_client):
    seen = []

    async def handler(request):
        seen.append((request.headers.get("Authorization"), (await request.json())["messages"][0]["content"]))
        return await _streaming(EVENT, b"data: [DONE]\n\n")(request)

    events = EventWriter(tmp_path / "e.jsonl", source="client")

    async def body(url):
        workload = Workload(endpoint=url, records=3, concurrency=1, max_tokens=1, canary="feedface00")
        return await run_client(workload, events)

    asyncio.run(_serve(handler, body))
    events.close()
    assert len(seen) == 3
    for authorization, prompt in seen:
        assert authorization == "Bearer ddcredentialfeedface00" and prompt.startswith("ddpromptfeedface00 "), seen


def test_a_client_that_hangs_up_closes_the_stream_after_n_events(tmp_path):
    """`hang_up_after`: the raw client reads N events, closes the connection and records
    `hung_up`; the server sees its connection go (what a proxy must pass on upstream)."""
    gone = []

    async def handler(request):
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        try:
            for _ in range(200):
                await response.write(EVENT)
                await asyncio.sleep(0.01)
        except ConnectionError:
            gone.append(request.headers["x-dd-request-id"])
        return response

    events = EventWriter(tmp_path / "e.jsonl", source="client")

    async def body(url):
        workload = Workload(endpoint=url, records=3, concurrency=3, max_tokens=200, hang_up_after=4)
        return await run_raw(workload, events)

    summary = asyncio.run(_serve(handler, body))
    events.close()
    sent = of_type(read_event_file(tmp_path / "e.jsonl"), ClientRequest)
    assert summary["completed"] == 3 and [r.outcome for r in sent] == ["hung_up"] * 3, (summary, sent)
    assert all(r.chunks >= 4 and not r.done for r in sent), sent
    assert sorted(gone) == sorted(r.request_id for r in sent), "the server saw each connection close"
    assert Workload("http://x", hang_up_after=4).to_argv()[-2:] == ["--hang-up-after", "4"]
    with pytest.raises(ValueError, match="hang_up_after"):
        Workload("http://x", hang_up_after=-1)


def test_a_slow_reader_reads_at_its_rate_and_holds_the_server_back(tmp_path):
    """`read_bytes_per_s`: the raw client takes each stream no faster than its rate, and what
    it has not taken stays with the server (TCP's flow control): a server offering 64 MiB as
    fast as it can has written a fraction of it when the client leaves after 512 KiB."""
    token = b"data: " + b"x" * (16 * 1024 - 8) + b"\n\n"
    written = {}

    async def handler(request):
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        sent = 0
        try:
            for _ in range(4096):
                await response.write(token)  # waits while the client's side is full
                sent += len(token)
        except ConnectionError:
            pass
        written[request.headers["x-dd-request-id"]] = sent
        return response

    events = EventWriter(tmp_path / "e.jsonl", source="client")

    async def body(url):
        workload = Workload(endpoint=url, records=1, concurrency=1, max_tokens=4096, hang_up_after=32,
                            read_bytes_per_s=256 * 1024)  # fmt: skip
        started = time.monotonic()
        summary = await run_raw(workload, events)
        elapsed = time.monotonic() - started
        await asyncio.sleep(0.2)  # the server's handler notices the close
        return summary, elapsed

    summary, elapsed = asyncio.run(_serve(handler, body))
    events.close()
    (sent,) = of_type(read_event_file(tmp_path / "e.jsonl"), ClientRequest)
    assert summary["completed"] == 1 and sent.outcome == "hung_up" and sent.bytes >= 32 * len(token), sent
    assert elapsed >= sent.bytes / (256 * 1024), "it took each read's bytes at its rate"
    assert written and max(written.values()) < 32 * 2**20, f"the server ran on to {written} bytes"
    assert Workload("http://x", read_bytes_per_s=1024).to_argv()[-2:] == ["--read-bytes-per-s", "1024"]
    with pytest.raises(ValueError, match="read_bytes_per_s"):
        Workload("http://x", read_bytes_per_s=-1)
