"""The fault point between a local SSE server and the raw load client: each fault does to a
stream what it says, counted in the stream's own units, and records what it did."""

import asyncio
import random

import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from dd_accept.base.events import ClientRequest, EventWriter, RelayedResponse, of_type, read_event_file
from dd_accept.node.faultpoint import Relay, SlowLink, _LinkClock, chunk, data_events, header
from dd_accept.node.loadclient.raw import run_raw
from dd_accept.node.loadclient.sse import is_error_event
from dd_accept.node.loadclient.workload import Workload
from tests.unit.test_raw_client import _serve

EVENT = b'data: {"id":"c","choices":[{"delta":{"content":"tok "}}]}\n\n'
EVENTS = 6


async def _sse(request):
    response = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await response.prepare(request)
    for _ in range(EVENTS):
        await response.write(EVENT)
        await asyncio.sleep(0.01)
    await response.write(b"data: [DONE]\n\n")
    return response


async def _through_fault_point(tmp_path, fault, records=3, after=2, stall_s=0.0, link=None):
    """`records` streams from a local SSE server through the fault point to the raw client;
    each as the client saw it beside the fault point's record of it."""

    async def relayed_to_the_client(upstream_url):
        relayed = EventWriter(tmp_path / "relayed.jsonl", source="faultpoint")
        relay = Relay(0, ("127.0.0.1", int(upstream_url.rsplit(":", 1)[1])), fault, after, relayed, stall_s, link)
        server = await asyncio.start_server(relay.serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = EventWriter(tmp_path / "client.jsonl", source="client")
        workload = Workload(endpoint=f"http://127.0.0.1:{port}", records=records, concurrency=1, max_record_attempts=1)
        try:
            await run_raw(workload, client)
        finally:
            client.close()
            server.close()
            relayed.close()

    await _serve(_sse, relayed_to_the_client)
    seen = {r.request_id: r for r in of_type(read_event_file(tmp_path / "client.jsonl"), ClientRequest)}
    done = {r.request_id: r for r in of_type(read_event_file(tmp_path / "relayed.jsonl"), RelayedResponse)}
    assert set(seen) == set(done) and len(seen) == records
    return [(seen[key], done[key]) for key in sorted(seen)]


def test_unchanged_streams_pass_through_whole(tmp_path):
    for seen, relayed in asyncio.run(_through_fault_point(tmp_path, "none")):
        assert (seen.outcome, seen.done, seen.chunks, relayed.ended, relayed.split) == ("ok", True, EVENTS, "whole", 0)
        assert seen.bytes == relayed.bytes == len(EVENT) * EVENTS + len(b"data: [DONE]\n\n")
        assert relayed.data_events == EVENTS and not seen.error_events
        # the data's bytes, counted as the client counts them: what the wire checks compare
        assert seen.payload_bytes == relayed.payload_bytes == len(EVENT.strip()[len(b"data:") :].strip()) * EVENTS


def test_split_frames_arrive_in_two_reads_and_are_counted_whole(tmp_path):
    for seen, relayed in asyncio.run(_through_fault_point(tmp_path, "split")):
        assert relayed.split >= EVENTS, relayed  # every data chunk went out as two segments
        assert (seen.outcome, seen.done, seen.chunks, seen.bytes) == ("ok", True, EVENTS, relayed.bytes)


def test_a_reset_after_n_events_is_an_error_the_client_sees(tmp_path):
    for seen, relayed in asyncio.run(_through_fault_point(tmp_path, "reset", after=2)):
        assert (relayed.ended, relayed.data_events) == ("reset", 2)
        assert seen.outcome == "error" and not seen.done and seen.chunks == 2, seen


def test_an_error_event_ends_the_stream_as_vllm_ends_a_failed_one(tmp_path):
    results = asyncio.run(_through_fault_point(tmp_path, "error", after=2))
    for seen, relayed in results:
        assert (relayed.ended, relayed.data_events) == ("error_event", 3)  # two tokens, the error
        assert (seen.outcome, seen.done, seen.chunks, seen.error_events) == ("ok", True, 3, 1), seen
        assert seen.bytes == relayed.bytes and seen.payload_bytes == relayed.payload_bytes > 0


def test_a_stall_holds_the_rest_of_each_stream_then_lets_it_through_whole(tmp_path):
    for seen, relayed in asyncio.run(_through_fault_point(tmp_path, "stall", after=2, stall_s=0.3)):
        assert (relayed.ended, relayed.stalled_s, relayed.data_events) == ("whole", 0.3, EVENTS)
        # the client's gap across the stall is the stall less how late it read the event before
        # it: on a busy machine (CI's shared phase) that event was read 7 ms late, a gap of 0.293 s
        assert (seen.outcome, seen.done, seen.chunks) == ("ok", True, EVENTS) and seen.gap_max_s >= 0.25, seen


def test_a_slow_link_delivers_each_stream_whole_and_records_how_long_it_took(tmp_path):
    # 7 chunks of about 70 bytes each at 1000 bytes/s: the rate alone takes about half a second
    link = SlowLink(latency_s=0.02, jitter_s=0.015, rate_bytes_s=1000.0)
    for seen, relayed in asyncio.run(_through_fault_point(tmp_path, "slow", records=2, link=link)):
        assert (relayed.ended, relayed.data_events, relayed.fault) == ("whole", EVENTS, "slow"), relayed
        assert relayed.slowed_s >= relayed.bytes / 1000 and relayed.stalled_s == 0.0, relayed
        assert (seen.outcome, seen.done, seen.chunks, seen.bytes) == ("ok", True, EVENTS, relayed.bytes), seen
        assert seen.latency_s >= relayed.bytes / 1000, seen


def test_the_slow_fault_without_a_link_is_refused():
    with pytest.raises(ValueError, match="needs its link"):
        Relay(0, ("127.0.0.1", 1), "slow", 1, None)


@given(
    st.lists(st.tuples(st.floats(0, 0.5), st.integers(1, 4096)), min_size=1, max_size=40),
    st.floats(0, 0.1),
    st.floats(0, 1),
    st.integers(0, 2**16),
)
def test_the_slow_links_chunks_leave_in_order_no_sooner_than_latency_and_rate_allow(arrivals, latency, share, seed):
    """Whatever comes in, when: no chunk overtakes the one before it, none leaves before its
    least latency has passed, and the link never carries more than its rate."""
    link = SlowLink(latency_s=latency, jitter_s=latency * share, rate_bytes_s=2000.0)
    clock, arrived, last = _LinkClock(link, random.Random(seed)), 0.0, 0.0
    for gap, size in arrivals:
        arrived += gap
        leaves = clock.leaves(arrived, size)
        assert leaves >= last + size / link.rate_bytes_s - 1e-9  # the rate: the one before it was sent first
        assert leaves >= arrived + link.latency_s - link.jitter_s + size / link.rate_bytes_s - 1e-9
        last = leaves


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        (b' {"error": {"message": "x"}}', True),
        (b'{"object":"error","message":"x"}', True),
        (b' {"type":"error","error":{"message":"x"}}', True),  # OpenAI's Responses, Anthropic's streams
        (b'{"type": "error", "message": "x"}', True),
        (b' {"id":"c","choices":[{"delta":{"tool_calls":[{"type":"function"}]}}]}', False),
        (b' {"id":"c","choices":[{"delta":{"content":"error"}}]}', False),
        (b' {"id":"c","object":"chat.completion.chunk","choices":[]}', False),
    ],
)
def test_error_events_are_told_from_tokens_that_say_error(payload, error):
    assert is_error_event(payload) is error


def test_the_framing_helpers():
    assert chunk(b"abc") == b"3\r\nabc\r\n" and data_events(EVENT * 2 + b"data: [DONE]\n\n") == 2
    assert header(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"transfer-encoding") == b"chunked"
