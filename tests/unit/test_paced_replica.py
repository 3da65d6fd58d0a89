"""The paced replica over real HTTP, as a local process: the same OpenAI stream a client sees
from the ASGI replica, paced by one timer, with the same per-request evidence."""

import asyncio
import http.client
import json
import socket
import statistics
import time
from collections import Counter

import pytest
from openai import OpenAI

from dd_accept.acceptance.capacity_checks import chunk_delays
from dd_accept.base.events import ClientRequest, EventWriter, UpstreamAttempt, of_type, read_event_file
from dd_accept.node import event_loop
from dd_accept.node.control import ControlError, control
from dd_accept.node.loadclient.wire import run_wire
from dd_accept.node.loadclient.workload import Workload
from dd_accept.node.replica.paced import Pacer

PACED = "dd_accept.node.replica.paced"


@pytest.fixture
def paced(local_replica, tmp_path):
    def start(ttft_ms="20", itl_ms="5"):
        events = tmp_path / "replica-events.jsonl"
        replica = local_replica("--ttft-ms", ttft_ms, "--itl-ms", itl_ms, "--events", str(events), program=PACED)
        return replica, events

    return start


@pytest.mark.parametrize("stream", [False, True])
def test_the_openai_client_reads_its_chat_completions(paced, stream):
    replica, _ = paced(ttft_ms="2", itl_ms="1")
    client = OpenAI(base_url=f"{replica.url}/v1", api_key="unused", max_retries=0)
    messages = [{"role": "user", "content": "hello"}]
    if stream:
        chunks = list(
            client.chat.completions.create(
                model="m", messages=messages, max_tokens=6, stream=True, stream_options={"include_usage": True}
            )
        )
        assert chunks[0].choices[0].delta.role == "assistant"
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "tok " * 6
        assert chunks[-1].usage.completion_tokens == 6 and chunks[-2].choices[0].finish_reason == "length"
    else:
        answer = client.chat.completions.create(model="m", messages=messages, max_tokens=6)
        assert answer.choices[0].message.content == "tok " * 6 and answer.usage.completion_tokens == 6
    text = client.completions.create(model="m", prompt="x", max_tokens=3)
    assert text.choices[0].text == "tok " * 3


def test_streams_are_paced_and_recorded_chunk_by_chunk_as_the_client_counts_them(paced, tmp_path):
    """20 streams of 16 tokens, 5 ms apart after 20 ms: the client's gaps average the ITL, and
    the replica's record of each request lines up with the client's, chunk for chunk."""
    replica, replica_events = paced()
    events = EventWriter(tmp_path / "client.jsonl", source="client")
    workload = Workload(endpoint=replica.url, records=40, concurrency=20, max_tokens=16, max_record_attempts=1)
    summary = asyncio.run(run_wire(workload, events))
    events.close()
    assert summary["completed"] == 40, [
        (a.outcome, a.error) for a in of_type(read_event_file(tmp_path / "client.jsonl"), ClientRequest)
    ]
    client = {a.request_id: a for a in of_type(read_event_file(tmp_path / "client.jsonl"), ClientRequest)}
    time.sleep(0.2)
    served = of_type(read_event_file(replica_events), UpstreamAttempt)
    assert {a.request_id for a in served} == set(client)
    for attempt in served:
        seen = client[attempt.request_id]
        assert (attempt.status, attempt.outcome, attempt.data_events) == (200, "ok", seen.chunks) == (200, "ok", 17)
        assert len(attempt.chunk_offsets_s) == len(seen.chunk_offsets_s) == 17
        # each chunk's write on the replica and read on the client, paired: no proxy between
        # (the replica stamps a chunk after its write, so a client may read it a moment
        # "before"; the bounds leave room for a busy machine: the counts above pair the
        # chunks, this that every pair has a sane delay, not how fast it was)
        delays = chunk_delays(seen, attempt)
        assert len(delays) == 17 and all(-0.05 <= d < 0.25 for d in delays), delays
        assert 0.018 <= attempt.first_byte_s <= 0.5, attempt.first_byte_s
    gaps = [a.gap_mean_s for a in client.values()]
    assert 0.004 <= statistics.median(gaps) <= 0.008, gaps  # 15 gaps of 5 ms, the finish event at once
    state = replica.control("state")
    assert state["paced"] and state["requests"] == 40 and state["chunks_sent"] == 40 * 17
    # one keep-alive connection per stream in flight; urllib's start-up probes and this control
    # call opened one each
    assert state["connections_accepted"] == 20 + state["probe_requests"] + 1, state


def test_its_control_plane_reports_state_to_the_token_only_and_nothing_else(paced):
    replica, _ = paced()
    with pytest.raises(ControlError, match="403"):
        control(replica.url, "state", {}, token="wrong")
    with pytest.raises(ControlError, match="only reports state"):
        replica.control("hold", depth=1)
    assert replica.control("state")["pid"] == replica.process.pid


def test_bad_requests_get_400_and_the_connection_keeps_serving(paced):
    replica, _ = paced(ttft_ms="1", itl_ms="1")
    connection = http.client.HTTPConnection("127.0.0.1", replica.port, timeout=5)
    answers = []
    for method, path, body in (
        ("POST", "/v1/chat/completions", b"[1"),
        ("POST", "/v1/chat/completions", json.dumps({"max_tokens": 0}).encode()),
        ("GET", "/health", None),
        ("GET", "/nowhere", None),
        ("POST", "/v1/chat/completions", json.dumps({"max_tokens": 2}).encode()),
    ):
        connection.request(method, path, body=body)
        answer = connection.getresponse()
        answers.append((answer.status, answer.read()))
    connection.close()
    assert [status for status, _ in answers] == [400, 400, 200, 404, 200]
    assert json.loads(answers[0][1])["error"]["code"] == 400
    assert json.loads(answers[4][1])["usage"]["completion_tokens"] == 2
    state = replica.control("state")
    # one connection for all five; each start-up probe and this control call opened one (the
    # probes counted include this connection's own /health)
    assert state["connections_accepted"] == state["probe_requests"] + 1, state


def test_a_pipelined_request_that_cannot_be_parsed_closes_a_stream_without_writing_into_it(paced):
    """An answer written into a stream would corrupt it: the connection is closed instead."""
    replica, _ = paced(ttft_ms="50", itl_ms="5")
    with socket.create_connection(("127.0.0.1", replica.port), timeout=5) as raw:
        body = json.dumps({"max_tokens": 4, "stream": True}).encode()
        raw.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
        )
        raw.sendall(b"\x00garbage\r\n\r\n")
        received = b""
        while chunk := raw.recv(65536):
            received += chunk
    assert received.startswith(b"HTTP/1.1 200") and received.count(b"HTTP/1.1") == 1, received[:300]


class _Once:
    """A stream that wants one token: it records when it was stepped."""

    def __init__(self, steps):
        self.steps = steps

    def step(self):
        self.steps.append(time.time())
        return False


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_the_pacer_takes_streams_due_in_the_past_and_later_ones_on_either_loop(loop):
    """uvloop hands back a plain Handle, without `when()`, for a time already past: the pacer
    keeps its own due time (a loaded replica falls behind; that must not end its streams)."""

    async def run():
        steps = []
        pacer = Pacer(asyncio.get_running_loop(), itl_s=0.001)
        now = asyncio.get_running_loop().time()
        pacer.add(now - 1.0, _Once(steps))
        pacer.add(now + 0.01, _Once(steps))
        pacer.add(now - 0.5, _Once(steps))
        await asyncio.sleep(0.05)
        return steps, pacer

    steps, pacer = event_loop.run(run(), loop)
    assert len(steps) == 3 and not pacer.buckets and not pacer.keys and pacer.timer is None


def test_hundreds_of_streams_at_once_all_end_whole(paced, tmp_path):
    """300 streams, 1 ms apart: the replica falls behind its own schedule and catches up."""
    replica, _ = paced(ttft_ms="1", itl_ms="1")
    events = EventWriter(tmp_path / "client.jsonl", source="client")
    workload = Workload(endpoint=replica.url, records=900, concurrency=300, max_tokens=32, max_record_attempts=1)
    summary = asyncio.run(run_wire(workload, events))
    events.close()
    outcomes = Counter(
        (a.outcome, a.status) for a in of_type(read_event_file(tmp_path / "client.jsonl"), ClientRequest)
    )
    assert summary["completed"] == 900 and outcomes == {("ok", 200): 900}, outcomes
