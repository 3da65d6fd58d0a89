"""The fault point between a local SSE server and the raw load client: each fault does to a
stream what it says, counted in the stream's own units, and records what it did."""

import asyncio

import pytest
from aiohttp import web

from dd_accept.base.events import ClientRequest, EventWriter, RelayedResponse, of_type, read_event_file
from dd_accept.node.faultpoint import Relay, chunk, data_events, header
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


async def _through_fault_point(tmp_path, fault, records=3, after=2, stall_s=0.0):
    """`records` streams from a local SSE server through the fault point to the raw client;
    each as the client saw it beside the fault point's record of it."""

    async def relayed_to_the_client(upstream_url):
        relayed = EventWriter(tmp_path / "relayed.jsonl", source="faultpoint")
        relay = Relay(0, ("127.0.0.1", int(upstream_url.rsplit(":", 1)[1])), fault, after, relayed, stall_s)
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
        assert seen.bytes == relayed.bytes


def test_a_stall_holds_the_rest_of_each_stream_then_lets_it_through_whole(tmp_path):
    for seen, relayed in asyncio.run(_through_fault_point(tmp_path, "stall", after=2, stall_s=0.3)):
        assert (relayed.ended, relayed.stalled_s, relayed.data_events) == ("whole", 0.3, EVENTS)
        assert (seen.outcome, seen.done, seen.chunks) == ("ok", True, EVENTS) and seen.gap_max_s >= 0.3, seen


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        (b' {"error": {"message": "x"}}', True),
        (b'{"object":"error","message":"x"}', True),
        (b' {"id":"c","choices":[{"delta":{"content":"error"}}]}', False),
        (b' {"id":"c","object":"chat.completion.chunk","choices":[]}', False),
    ],
)
def test_error_events_are_told_from_tokens_that_say_error(payload, error):
    assert is_error_event(payload) is error


def test_the_framing_helpers():
    assert chunk(b"abc") == b"3\r\nabc\r\n" and data_events(EVENT * 2 + b"data: [DONE]\n\n") == 2
    assert header(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"transfer-encoding") == b"chunked"
