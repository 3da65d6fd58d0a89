"""The replica over real HTTP, as a local process: what the SUT and its clients see."""

import asyncio
import json
import signal
import subprocess
import sys
import time
import urllib.request

import aiohttp
import pytest
from openai import OpenAI
from prometheus_client.parser import text_string_to_metric_families

from dd_accept.base.events import ADMISSION_PROBE_ID, ADMISSION_PROBE_PATH, admitted_probe
from dd_accept.base.waiting import wait_until
from dd_accept.node.control import ControlError
from dd_accept.node.probe import probe

FAST = ("--ttft-ms", "5", "--itl-ms", "1")
MIDDLEWARE = "data_designer.slurm.runtime.backpressure:QueueDepthBackpressureMiddleware"


def _client(replica):
    return OpenAI(base_url=f"{replica.url}/v1", api_key="unused", max_retries=0)


def _metrics(replica):
    text = urllib.request.urlopen(f"{replica.url}/metrics").read().decode()
    return {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if not s.labels or set(s.labels) == {"model_name"}
    }


async def _raw_stream(url, path="/v1/chat/completions", max_tokens=8, **extra):
    body = {"model": "m", "max_tokens": max_tokens, "stream": True, **extra}
    if path.endswith("chat/completions"):
        body["messages"] = [{"role": "user", "content": "x"}]
    else:
        body["prompt"] = "x"
    events = []
    async with aiohttp.ClientSession() as session, session.post(f"{url}{path}", json=body) as response:
        headers = dict(response.headers)
        async for line in response.content:
            if line.startswith(b"data: "):
                events.append(line[6:].strip())
    return response.status, headers, events


@pytest.mark.parametrize("stream", [False, True])
def test_openai_client_parses_chat_completions(local_replica, stream):
    replica = local_replica(*FAST)
    client = _client(replica)
    messages = [{"role": "user", "content": "hello"}]
    if stream:
        chunks = list(
            client.chat.completions.create(
                model="m", messages=messages, max_tokens=6, stream=True, stream_options={"include_usage": True}
            )
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert chunks[0].choices[0].delta.role == "assistant"
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
        assert chunks[-1].usage.completion_tokens == 6 and chunks[-1].choices == []
    else:
        response = client.chat.completions.create(model="m", messages=messages, max_tokens=6)
        text = response.choices[0].message.content
        assert response.usage.completion_tokens == 6 and response.choices[0].finish_reason == "length"
    assert text.split() == ["tok"] * 6


@pytest.mark.parametrize("stream", [False, True])
def test_openai_client_parses_text_completions(local_replica, stream):
    replica = local_replica(*FAST)
    client = _client(replica)
    if stream:
        chunks = list(client.completions.create(model="m", prompt="p", max_tokens=4, stream=True))
        text = "".join(c.choices[0].text for c in chunks)
    else:
        text = client.completions.create(model="m", prompt="p", max_tokens=4).choices[0].text
    assert text.split() == ["tok"] * 4


def test_stream_ends_with_done_and_usage_only_when_asked(local_replica):
    replica = local_replica(*FAST)
    status, headers, events = asyncio.run(_raw_stream(replica.url, max_tokens=3))
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    assert events[-1] == b"[DONE]" and len(events) == 3 + 1 + 1
    assert all("usage" not in json.loads(e) for e in events[:-1])
    _, _, with_usage = asyncio.run(_raw_stream(replica.url, max_tokens=3, stream_options={"include_usage": True}))
    assert json.loads(with_usage[-2])["usage"]["completion_tokens"] == 3


def test_metrics_parse_with_prometheus_parser_and_count_work(local_replica):
    replica = local_replica(*FAST)
    _client(replica).chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=5)
    metrics = _metrics(replica)
    assert metrics["vllm:num_requests_waiting"] == 0 and metrics["vllm:num_requests_running"] == 0
    assert metrics["vllm:generation_tokens_total"] == 5
    assert metrics["vllm:prompt_tokens_total"] >= 1
    assert metrics["ddaccept_replica_connections_accepted_total"] >= 1


def test_probes_and_model_list(local_replica):
    replica = local_replica(*FAST)
    assert urllib.request.urlopen(f"{replica.url}/health").status == 200
    assert json.load(urllib.request.urlopen(f"{replica.url}/version"))["version"]
    assert json.load(urllib.request.urlopen(f"{replica.url}/v1/models"))["data"][0]["object"] == "model"


def test_held_queue_depth_is_published_and_released(local_replica):
    replica = local_replica(*FAST)
    assert replica.control("hold", depth=5)["waiting"] == 5
    assert _metrics(replica)["vllm:num_requests_waiting"] == 5
    replica.control("release")
    assert _metrics(replica)["vllm:num_requests_waiting"] == 0


def test_failing_health_answers_503(local_replica):
    replica = local_replica(*FAST)
    replica.control("health", ok=False)
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(f"{replica.url}/health")
    assert caught.value.code == 503
    replica.control("health", ok=True)
    assert urllib.request.urlopen(f"{replica.url}/health").status == 200


def test_a_hung_replica_accepts_but_answers_nothing_until_released(local_replica):
    replica = local_replica(*FAST)
    state = replica.control("hang", on=True)
    assert state["hung"] is True and state["pid"] > 0, "the process is alive and its control plane answers"
    with pytest.raises(TimeoutError):
        urllib.request.urlopen(f"{replica.url}/health", timeout=0.5)
    replica.control("hang", on=False)
    assert urllib.request.urlopen(f"{replica.url}/health", timeout=5).status == 200


def _answers(replica, count):
    """(status, Retry-After) of `count` completions one after another, as the client saw them."""
    answers = []
    for _ in range(count):
        try:
            _client(replica).completions.create(model="m", prompt="p", max_tokens=1)
            answers.append((200, None))
        except Exception as error:  # openai.APIStatusError
            answers.append((error.status_code, error.response.headers.get("retry-after")))
    return answers


def test_next_k_requests_get_the_forced_status_then_normal_service(local_replica):
    replica = local_replica(*FAST)
    replica.control("respond", status=503, count=2, retry_after=4)
    assert _answers(replica, 3) == [(503, "4"), (503, "4"), (200, None)]


def test_a_sequence_of_forced_statuses_is_answered_one_each_in_order(local_replica):
    replica = local_replica(*FAST)
    assert replica.control("respond", statuses=[500, 502, 504])["forced_remaining"] == 3
    assert [status for status, _ in _answers(replica, 4)] == [500, 502, 504, 200]
    with pytest.raises(Exception, match="400"):
        replica.control("respond", statuses=[200, 99])


def test_closing_keepalive_makes_every_request_a_new_connection(local_replica):
    replica = local_replica(*FAST)

    async def three_requests():
        async with aiohttp.ClientSession() as session:
            for _ in range(3):
                async with session.post(
                    f"{replica.url}/v1/completions", json={"prompt": "p", "max_tokens": 1}
                ) as response:
                    await response.read()
                    closes = response.headers.get("Connection", "")
        return closes

    def accepted_since(before):
        return replica.control("state")["connections_accepted"] - before - 1  # minus the state query's own

    before = replica.control("state")["connections_accepted"]
    asyncio.run(three_requests())
    reused = accepted_since(before)
    replica.control("keepalive", close=True)
    before = replica.control("state")["connections_accepted"]
    assert asyncio.run(three_requests()).lower() == "close"
    closed_each_time = accepted_since(before)
    assert (reused, closed_each_time) == (1, 3)


def test_connections_that_carried_requests_are_told_from_probe_only_ones(local_replica):
    """A proxy may keep its health probes on connections of their own; the replica counts
    the connections that carried a real request apart from those that carried only probes."""
    replica = local_replica(*FAST)

    async def traffic():
        async with aiohttp.ClientSession() as probes, aiohttp.ClientSession() as requests:
            for _ in range(3):  # one kept-alive connection, probes only
                async with probes.get(f"{replica.url}/health") as response:
                    await response.read()
            for _ in range(2):  # another, requests after a probe on the same connection
                async with requests.get(f"{replica.url}/health") as response:
                    await response.read()
                async with requests.post(f"{replica.url}/v1/completions", json={"prompt": "p", "max_tokens": 1}) as r:
                    await r.read()

    before = replica.control("state")
    asyncio.run(traffic())
    after = replica.control("state")
    assert after["connections_accepted"] - before["connections_accepted"] - 1 == 2  # minus the state query's own
    assert after["connections_with_requests"] - before["connections_with_requests"] == 1
    assert after["probe_requests"] - before["probe_requests"] == 5


def test_a_cut_stream_fails_at_the_client_after_k_chunks(local_replica):
    replica = local_replica(*FAST)
    replica.control("cut", after_chunks=3, count=1)
    with pytest.raises(aiohttp.ClientPayloadError):
        asyncio.run(_raw_stream(replica.url, max_tokens=20))
    assert replica.control("state")["chunks_sent"] == 3
    status, _, events = asyncio.run(_raw_stream(replica.url, max_tokens=4))
    assert status == 200 and events[-1] == b"[DONE]", "only the next stream is cut"


def test_stalled_tokens_hold_streams_until_released(local_replica):
    replica = local_replica(*FAST)
    replica.control("stall", on=True)

    async def scenario():
        task = asyncio.create_task(_raw_stream(replica.url, max_tokens=2))
        await asyncio.sleep(0.5)
        assert not task.done()
        await asyncio.to_thread(replica.control, "stall", on=False)
        return await task

    assert asyncio.run(scenario())[2][-1] == b"[DONE]"


def test_a_stall_after_the_first_token_lets_the_headers_and_that_token_out(local_replica):
    """streaming's routing phase: the proxy has the response in hand (a stream in flight),
    and the rest waits for the stall to end."""
    replica = local_replica(*FAST)
    replica.control("stall", on=True, after_tokens=1)

    async def scenario():
        body = {"model": "m", "max_tokens": 3, "stream": True, "messages": [{"role": "user", "content": "x"}]}
        url = f"{replica.url}/v1/chat/completions"
        async with aiohttp.ClientSession() as session, session.post(url, json=body) as response:
            first = await asyncio.wait_for(response.content.readline(), timeout=2)
            assert response.status == 200 and first.startswith(b"data: "), first
            rest = asyncio.ensure_future(response.content.read())
            await asyncio.sleep(0.5)
            assert not rest.done(), "the second token waits for the stall to end"
            await asyncio.to_thread(replica.control, "stall", on=False)
            return await asyncio.wait_for(rest, timeout=5)

    assert asyncio.run(scenario()).rstrip().endswith(b"data: [DONE]")


def test_pace_spaces_the_tokens_of_the_next_streams_and_back(local_replica, tmp_path):
    """The sparse streams of no_buffering: the same replicas, their tokens far apart."""
    log = tmp_path / "events.jsonl"
    replica = local_replica("--ttft-ms", "5", "--itl-ms", "10", "--latency", "lognormal", "--events", str(log))
    paced = replica.control("pace", itl_ms=300, exact=True)
    assert (paced["itl_ms"], paced["latency"]) == (300, "uniform"), "exact: gaps of the gap, not a long tail"
    assert asyncio.run(_raw_stream(replica.url, max_tokens=3))[2][-1] == b"[DONE]"
    restored = replica.control("pace")
    assert (restored["itl_ms"], restored["latency"]) == (10, "lognormal"), "as it started"
    assert asyncio.run(_raw_stream(replica.url, max_tokens=3))[2][-1] == b"[DONE]"
    sparse, dense = wait_until(lambda: _upstream_records(log), lambda r: len(r) == 2, timeout=5, what="both streams")
    assert sparse["chunk_offsets_s"][1] >= 0.25 and sparse["chunk_offsets_s"][2] >= 0.5, sparse
    assert dense["chunk_offsets_s"][2] < 0.1, dense


def test_pace_with_large_tokens_makes_each_token_that_long_and_back(local_replica):
    """The slow-reader part's streams: the same replicas, each token 16 KiB, unpaced."""
    replica = local_replica("--ttft-ms", "5", "--itl-ms", "10")
    replica.control("pace", itl_ms=0, exact=True, token_bytes=16384)
    _, _, large = asyncio.run(_raw_stream(replica.url, max_tokens=3))
    texts = [json.loads(e)["choices"][0]["delta"].get("content") for e in large[:3]]
    assert [len(t) for t in texts] == [16384] * 3 and texts[0].startswith("tok tok "), [t[:20] for t in texts]
    replica.control("pace")
    _, _, small = asyncio.run(_raw_stream(replica.url, max_tokens=3))
    assert json.loads(small[0])["choices"][0]["delta"]["content"] == "tok ", "as it started"


@pytest.mark.parametrize(("action", "expected"), [("exit", 3), ("kill", -9)])
def test_exit_and_kill(local_replica, action, expected):
    replica = local_replica(*FAST)
    replica.control(action, **({"code": 3} if action == "exit" else {}))
    assert replica.process.wait(timeout=20) == expected


def test_control_plane_requires_the_run_token(local_replica):
    replica = local_replica(*FAST)
    replica.token = "wrong"
    with pytest.raises(ControlError, match="403"):
        replica.control("state")


def test_real_sut_middleware_rejects_above_threshold_and_passes_below(local_replica, sut_local_path):
    replica = local_replica(
        *FAST,
        "--middleware",
        MIDDLEWARE,
        python_path=(sut_local_path,),
        environment={"DD_VLLM_MAX_WAITING_REQUESTS": "0", "DD_VLLM_RETRY_AFTER_SECONDS": "3"},
    )
    client = _client(replica)
    assert client.completions.create(model="m", prompt="p", max_tokens=1).choices[0].text.strip() == "tok"
    replica.control("hold", depth=1)
    asyncio.run(asyncio.sleep(0.3))  # the middleware samples the gauge every 0.1 s
    with pytest.raises(Exception) as caught:
        client.completions.create(model="m", prompt="p", max_tokens=1)
    assert caught.value.status_code == 429 and caught.value.response.headers["retry-after"] == "3"
    assert urllib.request.urlopen(f"{replica.url}/health").status == 200, "probes stay exempt"
    replica.control("hold", depth=0)
    asyncio.run(asyncio.sleep(0.3))
    assert client.completions.create(model="m", prompt="p", max_tokens=1).choices[0].text.strip() == "tok"


def test_the_admission_probe_is_gated_as_a_completion_and_spends_no_forced_answer(
    local_replica, sut_local_path, tmp_path
):
    """The harness probes queue admission with the request the middleware exists to gate (a
    POST to the chat endpoint): rc1's middleware answers 429 above its threshold, the app
    itself 400 below it (the probe's body asks for no tokens). A forced answer queued for
    the SUT's traffic is left for it, and the replica records the probe as the harness's."""
    log = tmp_path / "events.jsonl"
    replica = local_replica(
        *FAST, "--middleware", MIDDLEWARE, "--events", str(log), python_path=(sut_local_path,),
        environment={"DD_VLLM_MAX_WAITING_REQUESTS": "0", "DD_VLLM_RETRY_AFTER_SECONDS": "3"},
    )  # fmt: skip
    url = f"{replica.url}{ADMISSION_PROBE_PATH}"
    replica.control("respond", status=503, count=1)
    admitted = probe(url, admission=True)
    assert admitted["status"] == 400 and admitted_probe(admitted["status"]), admitted
    with pytest.raises(Exception) as caught:
        _client(replica).completions.create(model="m", prompt="p", max_tokens=1)
    assert caught.value.status_code == 503, "the forced answer went to the SUT's request, not to the probe"
    replica.control("hold", depth=1)
    rejected = wait_until(lambda: probe(url, admission=True), lambda row: row["status"] == 429, timeout=5, what="429")
    assert rejected["retry_after"] == "3" and not admitted_probe(rejected["status"])
    assert probe(f"{replica.url}/health")["status"] == 200, "a plain GET probe is still a GET"
    # a probe with an id of its own (overload's unreachable round) is recorded under that id, and says when it went
    named = probe(url, admission=True, request_id="unreachable-0-7")
    assert named["status"] == 429 and named["request_id"] == "unreachable-0-7" and named["sent"] > 0, named
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    probes = [row for row in rows if row.get("kind") == "upstream" and row["request_id"] == ADMISSION_PROBE_ID]
    assert [row["status"] for row in probes][:1] == [400] and probes[-1]["status"] == 429, probes

    def named_rows():  # the replica writes its record as it ends the request: maybe after the client read it
        return [json.loads(line) for line in log.read_text().splitlines() if '"unreachable-0-7"' in line]

    assert [row["status"] for row in wait_until(named_rows, bool, timeout=5, what="the record")] == [429]


def test_the_request_log_keeps_each_events_send_time_and_probes_still_answer(local_replica, tmp_path):
    """Probes (empty bodies) and streams both pass the recorder; a stream's event records
    when each of its data events was sent, after the first (what no_buffering lines up)."""
    log = tmp_path / "events.jsonl"
    replica = local_replica("--ttft-ms", "5", "--itl-ms", "10", "--events", str(log))
    with urllib.request.urlopen(f"{replica.url}/health", timeout=5) as response:
        assert response.status == 200 and response.read() == b"", "the whole response, not only its status"
    status, _, events = asyncio.run(_raw_stream(replica.url, max_tokens=6))
    assert status == 200 and events[-1] == b"[DONE]"

    def streams():  # the replica writes a stream's record once it has ended, maybe after the client read [DONE]
        rows = [json.loads(line) for line in log.read_text().splitlines()]
        return [row for row in rows if row.get("kind") == "upstream" and row["path"] == "/v1/chat/completions"]

    (stream,) = wait_until(streams, bool, timeout=5, what="the stream's record in the replica's log")
    offsets = stream["chunk_offsets_s"]
    assert len(offsets) == stream["data_events"] == 7 and offsets[0] == 0.0
    assert offsets == sorted(offsets) and offsets[5] >= 0.04, "six tokens 10 ms apart, then the final event"


def _upstream_records(log, path="/v1/chat/completions"):
    rows = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return [row for row in rows if row.get("kind") == "upstream" and row["path"] == path]


def test_a_held_stream_is_abandoned_when_its_peer_times_it_out_and_served_when_it_waits(local_replica, tmp_path):
    """The timeouts phases: a stream held back before its first byte or after k chunks; a
    client that gives up is recorded as having abandoned it, one that waits gets it whole."""
    log = tmp_path / "events.jsonl"
    replica = local_replica(*FAST, "--events", str(log))

    async def stream(read_timeout):
        body = {"model": "m", "max_tokens": 6, "stream": True, "messages": [{"role": "user", "content": "x"}]}
        timeout = aiohttp.ClientTimeout(sock_read=read_timeout)
        url = f"{replica.url}/v1/chat/completions"
        async with aiohttp.ClientSession(timeout=timeout) as session, session.post(url, json=body) as response:
            return response.status, await response.read()

    replica.control("delay", seconds=5, count=1)
    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(stream(0.3))
    replica.control("delay", seconds=5, after_chunks=2, count=1)
    with pytest.raises((asyncio.TimeoutError, aiohttp.ClientPayloadError)):
        asyncio.run(stream(0.3))
    replica.control("delay", seconds=0.2, after_chunks=2, count=1)
    status, body = asyncio.run(stream(5))
    assert status == 200 and body.endswith(b"data: [DONE]\n\n"), "a client that waits gets the whole stream"
    assert replica.control("state")["delay_remaining"] == 0
    records = wait_until(lambda: _upstream_records(log), lambda r: len(r) == 3, timeout=10, what="three records")
    by_start = sorted(records, key=lambda r: r["started"])
    assert [(r["outcome"], r["status"], r["data_events"]) for r in by_start] == [
        ("abandoned", None, 0),
        ("abandoned", 200, 2),
        ("ok", 200, 7),  # six tokens and the final event
    ]


def test_a_stream_whose_peer_leaves_mid_way_stops_and_is_recorded_abandoned(local_replica, tmp_path):
    """A proxy that ends a stream (its drain bound, its streaming timeout) closes the
    connection mid-stream: the replica stops there, as vLLM aborts a request whose client
    left, and records it abandoned with what it sent; it is never served whole to nobody."""
    log = tmp_path / "events.jsonl"
    replica = local_replica("--ttft-ms", "5", "--itl-ms", "50", "--events", str(log))

    async def leave_after(events_wanted):
        body = {"model": "m", "max_tokens": 200, "stream": True, "messages": [{"role": "user", "content": "x"}]}
        url = f"{replica.url}/v1/chat/completions"
        seen = received = 0
        async with aiohttp.ClientSession() as session, session.post(url, json=body) as response:
            async for line in response.content:
                received += len(line)
                seen += line.startswith(b"data: ")
                if seen == events_wanted:
                    return received  # leaving the block closes the connection mid-stream

    received = asyncio.run(leave_after(5))
    (record,) = wait_until(lambda: _upstream_records(log), bool, timeout=5, what="the stream's record")
    assert record["outcome"] == "abandoned" and record["status"] == 200, record
    # 200 tokens 50 ms apart would take 10 s: it stopped within a few tokens of the client leaving
    assert 5 <= record["data_events"] <= 12 and record["bytes"] >= received, record
    assert record["duration_s"] < 3, "served whole, it would have taken 10 s"


def test_who_closed_an_idle_connection_is_told_apart(local_replica):
    """close_idle closes only idle connections and says how many carried requests; a peer
    that closes an idle connection is counted, a response that said Connection: close and
    a connection the replica closed are not."""
    replica = local_replica(*FAST)
    completion = {"prompt": "p", "max_tokens": 1}

    async def traffic():
        async with aiohttp.ClientSession() as pooled, aiohttp.ClientSession() as probes:
            async with pooled.post(f"{replica.url}/v1/completions", json=completion) as response:
                await response.read()
            async with probes.get(f"{replica.url}/health") as response:
                await response.read()
            closed = replica.control("close_idle")
            await asyncio.sleep(0.2)
            async with pooled.post(f"{replica.url}/v1/completions", json=completion) as response:
                await response.read()  # a new connection: the pooled one was closed
            return closed
        # leaving the sessions closes the new idle connection: the peer's close

    before = replica.control("state")
    closed = asyncio.run(traffic())
    assert closed == {"closed": 2, "closed_with_requests": 1}
    replica.control("keepalive", close=True)
    asyncio.run(asyncio.sleep(0.1))
    after = wait_until(
        lambda: replica.control("state"),
        lambda s: s["connections_closed"] - before["connections_closed"] >= 3,
        timeout=5,
        what="the closes",
    )
    assert after["idle_closed_by_peer"] - before["idle_closed_by_peer"] == 1
    assert after["idle_closed_by_peer_with_requests"] - before["idle_closed_by_peer_with_requests"] == 1
    replica.control("keepalive", close=False)


def test_a_response_canary_rides_in_every_token_streamed_or_whole(local_replica):
    replica = local_replica(*FAST, "--response-canary", "abcdef0123")

    async def ask(stream):
        body = {"model": "m", "max_tokens": 3, "stream": stream, "messages": [{"role": "user", "content": "x"}]}
        url = f"{replica.url}/v1/chat/completions"
        async with aiohttp.ClientSession() as session, session.post(url, json=body) as response:
            return await response.text()

    streamed, whole = asyncio.run(ask(True)), asyncio.run(ask(False))
    assert streamed.count('"content":"ddresponseabcdef0123 "') == 3, streamed
    assert json.loads(whole)["choices"][0]["message"]["content"] == "ddresponseabcdef0123 " * 3


def test_a_health_probe_is_held_in_flight_until_released_and_its_window_kept(local_replica):
    replica = local_replica(*FAST)
    replica.control("health_delay", seconds=30)

    async def probe():
        async with aiohttp.ClientSession() as session, session.get(f"{replica.url}/health") as response:
            return response.status, time.time()

    async def scenario():
        task = asyncio.ensure_future(probe())
        for _ in range(100):  # until the replica holds it (a loaded machine takes its time to send it)
            await asyncio.sleep(0.05)
            if replica.control("state")["probe_window"]:
                break
        await asyncio.sleep(0.5)
        held = replica.control("state")["probe_window"]
        replica.control("health_delay", seconds=0)
        return held, *(await asyncio.wait_for(task, 10))

    held, status, answered = asyncio.run(scenario())
    assert held[1] is None and status == 200, "held, then answered once released"
    start, end = replica.control("state")["probe_window"]
    assert start == held[0] and start + 0.4 < end <= answered + 0.05, (start, end, answered)


async def _post_once(url, path="/v1/chat/completions"):
    """One request on a new connection: its status, or the aiohttp error class it raised."""
    body = {"model": "m", "max_tokens": 2, "stream": True, "messages": [{"role": "user", "content": "x"}]}
    try:
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session,
            session.post(f"{url}{path}", json=body) as response,
        ):
            await response.read()
            return response.status
    except aiohttp.ClientError as error:
        return type(error).__name__


def test_a_reset_request_is_read_then_its_connection_reset_unanswered(local_replica, tmp_path):
    """The proxy's connection-error path, mid-request: the next 2 requests get no byte of a
    response (a connection error the client library raises), the replica records each as
    `reset` with no status, and the third is served."""
    log = tmp_path / "replica.jsonl"
    replica = local_replica(*FAST, "--events", str(log))
    assert replica.control("reset", count=2)["reset_remaining"] == 2
    seen = [asyncio.run(_post_once(replica.url)) for _ in range(3)]
    assert all(s in ("ServerDisconnectedError", "ClientOSError") for s in seen[:2]) and seen[2] == 200, seen
    records = wait_until(lambda: _upstream_records(log), lambda r: len(r) == 3, timeout=5, what="three records")
    outcomes = [(a["outcome"], a["status"]) for a in records]
    assert outcomes == [("reset", None), ("reset", None), ("ok", 200)], outcomes
    assert replica.control("state")["reset_remaining"] == 0


def test_a_refusing_replica_refuses_connections_then_listens_again(local_replica):
    """Nothing listens on its port for the time asked (connection refused: the proxy's other
    connection-error path), then it serves again, control plane included."""
    replica = local_replica(*FAST)

    async def pooled_then_refused():
        """A pooled connection from before the refusal is closed too: the next request finds
        it gone and its new connection refused, as a pool meets a restarting backend."""
        body = {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}]}
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{replica.url}/v1/chat/completions", json=body) as response:
                await response.read()
            refused = await asyncio.to_thread(replica.control, "refuse", seconds=1.5)
            assert refused["refusing_until"] > time.time() and refused["closed"] >= 1, refused
            await asyncio.sleep(0.1)
            with pytest.raises(aiohttp.ClientConnectorError):
                await session.post(f"{replica.url}/v1/chat/completions", json=body)

    asyncio.run(pooled_then_refused())
    assert asyncio.run(_post_once(replica.url)) == "ClientConnectorError"
    back = wait_until(lambda: asyncio.run(_post_once(replica.url)), lambda got: got == 200, timeout=10,
                      interval=0.2, what="the replica to listen again")  # fmt: skip
    assert back == 200 and replica.control("state")["pid"] == replica.process.pid
    with pytest.raises(ControlError, match="400"):
        replica.control("refuse", seconds=0)


async def _stream_while_termed(replica, max_tokens=400):
    """One long stream; TERM to the replica once it is under way: (events the client read, how
    the stream ended: "done" or the error that cut it)."""
    body = {"model": "m", "max_tokens": max_tokens, "stream": True, "prompt": "x"}
    events, ended = 0, "done"
    async with aiohttp.ClientSession() as session, session.post(f"{replica.url}/v1/completions", json=body) as response:
        try:
            async for line in response.content:
                if line.startswith(b"data: "):
                    events += 1
                    if events == 5:  # once: a second TERM after uvicorn restored its default ends the process
                        replica.process.send_signal(signal.SIGTERM)
        except aiohttp.ClientError as error:
            ended = type(error).__name__
    return events, ended


@pytest.mark.parametrize("exit_on_term", [True, False], ids=["exit-on-term", "uvicorn-drain"])
def test_term_stops_a_replica_at_once_with_exit_0_only_where_asked(local_replica, exit_on_term):
    """What a preempted backend shows a SUT's wait: vLLM's server stops serving at once on
    TERM and exits 0 (`--exit-on-term`, the health attempts' replicas); without it uvicorn
    drains the stream whole, then the TERM it re-raises ends the process."""
    replica = local_replica("--ttft-ms", "5", "--itl-ms", "10", *(["--exit-on-term"] if exit_on_term else []))
    events, ended = asyncio.run(_stream_while_termed(replica))
    status = replica.process.wait(timeout=30)
    if exit_on_term:
        assert (status, ended) == (0, "ClientPayloadError") and events < 100, (status, ended, events)
    else:
        assert status == -signal.SIGTERM and ended == "done" and events >= 400, (status, ended, events)


def test_pinned_streams_wait_for_their_release_and_requests_sent_at_once_arrive_together(local_replica, tmp_path):
    """overload's routing round: node.probe --stream --at-once sends its requests together, the
    smallest stream each, under ids of their own; a replica pins the next N streams (no first
    byte) until `unpin`, counting those that wait, and each is answered 200 whole after."""
    log = tmp_path / "events.jsonl"
    replica = local_replica(*FAST, "--events", str(log))
    replica.control("pin", count=3)
    argv = [sys.executable, "-m", "dd_accept.node.probe", "--stream", "--at-once", "--id", "routing-a-"]
    argv += [f"{replica.url}{ADMISSION_PROBE_PATH}"] * 4
    sending = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        # three pinned, the fourth past the pin's count and served at once
        state = wait_until(lambda: replica.control("state"), lambda s: s["pinned_now"] == 3, timeout=10, what="pins")
        assert state["pin_remaining"] == 0, state
        time.sleep(0.5)
        assert replica.control("state")["pinned_now"] == 3 and sending.poll() is None, "held until released"
        replica.control("unpin")
        out, _ = sending.communicate(timeout=30)
    finally:
        sending.kill()
    rows = [json.loads(line) for line in out.splitlines()]
    assert [row["request_id"] for row in rows] == [f"routing-a-{i}" for i in range(4)], "in the order of the URLs"
    assert {row["status"] for row in rows} == {200}, rows
    assert max(row["sent"] for row in rows) - min(row["sent"] for row in rows) < 0.5, "sent together"
    records = wait_until(
        lambda: [r for r in _upstream_records(log) if (r["request_id"] or "").startswith("routing-a-")],
        lambda found: len(found) == 4, timeout=5, what="the four records",
    )  # fmt: skip
    assert sorted(r["duration_s"] > 0.5 for r in records) == [False, True, True, True], records
    assert all(r["status"] == 200 and r["outcome"] == "ok" and r["data_events"] == 2 for r in records), records
    assert replica.control("state")["pinned_now"] == 0


def test_a_probe_that_hangs_up_leaves_after_the_first_line_one_stream_at_a_time(local_replica, tmp_path):
    """overload's routing round: node.probe --stream --hangup leaves each 200 after its first
    line, closing the connection (its row says so), and with --repeat/--every sends the next
    only that much later; the replica, holding the rest of each stream back, finds its peer
    gone and records the stream abandoned, not served whole."""
    log = tmp_path / "events.jsonl"
    replica = local_replica(*FAST, "--events", str(log))
    replica.control("delay", after_chunks=1, seconds=0.5, count=2)
    argv = [sys.executable, "-m", "dd_accept.node.probe", "--stream", "--hangup", "--id", "routing-n-hangup-"]
    argv += ["--repeat", "2", "--every", "0.8", f"{replica.url}{ADMISSION_PROBE_PATH}"]
    rows = [
        json.loads(line)
        for line in subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.splitlines()
    ]
    assert [(row["request_id"], row["status"], row.get("hung_up")) for row in rows] == [
        ("routing-n-hangup-0", 200, True), ("routing-n-hangup-1", 200, True),
    ], rows  # fmt: skip
    assert rows[0]["elapsed_s"] < 0.4, "left after the first line, not after the held-back rest"
    assert rows[1]["sent"] - rows[0]["sent"] >= 0.75, "the next sent --every later"
    records = wait_until(
        lambda: [r for r in _upstream_records(log) if (r["request_id"] or "").startswith("routing-n-hangup-")],
        lambda found: len(found) == 2, timeout=5, what="the two records",
    )  # fmt: skip
    assert all(r["status"] == 200 and r["outcome"] == "abandoned" for r in records), records
    # the client side as the ledger reads it: the request was left, not lost
    from dd_accept.acceptance.proxy_requests import client_request

    assert {client_request(0, row).outcome for row in rows} == {"hung_up"}


def test_a_stream_that_breaks_before_its_first_line_is_no_hang_up(local_replica):
    """Only a client that read a line and left is a hang-up (the ledger excuses it); a 200
    whose body broke at once is what the proxy did, and its row must not hide it."""
    replica = local_replica(*FAST)
    replica.control("cut", after_chunks=0, count=1)
    row = probe(f"{replica.url}{ADMISSION_PROBE_PATH}", stream=True, hangup=True, request_id="routing-n-hangup-0")
    assert row["status"] == 200 and "hung_up" not in row, row  # the headers came, then nothing


def test_a_probe_that_gives_up_before_the_first_byte_is_a_hang_up(local_replica, tmp_path):
    """overload's routing round: with --hangup a stream that gives nothing within --timeout is
    left (the client's own deadline: the row says hung_up, the ledger's excuse); the replica,
    holding it back, finds its peer gone and records it abandoned."""
    log = tmp_path / "events.jsonl"
    replica = local_replica(*FAST, "--events", str(log))
    replica.control("delay", seconds=1.0, count=1)
    url = f"{replica.url}{ADMISSION_PROBE_PATH}"
    row = probe(url, timeout=0.3, stream=True, hangup=True, request_id="routing-n-giveup-0")
    assert row["status"] is None and row["error"] == "TimeoutError" and row["hung_up"] is True, row
    (record,) = wait_until(lambda: _upstream_records(log), bool, timeout=5, what="the stream's record")
    assert record["request_id"] == "routing-n-giveup-0" and record["outcome"] == "abandoned", record
    # without --hangup the same deadline is an error the ledger sees
    replica.control("delay", seconds=1.0, count=1)
    assert "hung_up" not in probe(url, timeout=0.3, stream=True, request_id="routing-n-giveup-1")
