"""The wire checks on made-up records: each passes on what a correct proxy leaves behind and
fails, naming its reason, on what each mishandling leaves; a phase the fault point did not
fault is the harness's error, and a proxy that forwarded nothing fails every check."""

from dataclasses import replace

import pytest

from dd_accept.acceptance import wire_checks as checks
from dd_accept.acceptance.wire import FAULTS, STREAM_BOUND_S, SlowLinkPart, WireOptions, _load, stall_seconds
from dd_accept.base.events import ClientRequest, RelayedResponse, UpstreamAttempt
from dd_accept.sut.profile import profile_for

EVENT_BYTES = 60
EVENT_DATA = 52  # an event's data: its bytes less `data: ` and the blank line


def _client(request_id, outcome="ok", done=True, chunks=16, errors=None, size=None, payload=None):
    return ClientRequest(
        mode="raw", record=0, attempt=0, outcome=outcome, request_id=request_id, done=done, chunks=chunks,
        bytes=chunks * EVENT_BYTES + (14 if done else 0) if size is None else size, error_events=errors,
        payload_bytes=chunks * EVENT_DATA if payload is None else payload,
    )  # fmt: skip


def _relayed(request_id, ended="whole", events=16, split=0, fault="none", size=None, stalled_s=0.0, slowed_s=0.0):
    return RelayedResponse(
        request_id=request_id, upstream=0, fault=fault, status=200, ended=ended, data_events=events,
        bytes=events * EVENT_BYTES + (0 if ended in ("reset", "broken") else 14) if size is None else size, split=split,
        payload_bytes=events * EVENT_DATA, stalled_s=stalled_s, slowed_s=slowed_s,
    )  # fmt: skip


def _attempt(request_id):
    return UpstreamAttempt(replica=0, path="/v1/chat/completions", outcome="disconnected", started=0.0,
                           duration_s=0.1, request_id=request_id, status=200)  # fmt: skip


IDS = [f"r-{i}" for i in range(4)]


def test_split_frames_pass_whole_and_fail_when_the_client_got_other_bytes():
    relayed = [_relayed(i, split=17, fault="split") for i in IDS]
    good = checks.split_frames([_client(i) for i in IDS], relayed)
    assert good.verdict == "pass" and good.metrics["frames_split"] == 68, good
    reframed = [_client(i, chunks=20, size=20 * EVENT_BYTES) for i in IDS]  # halves forwarded as events
    bad = checks.split_frames(reframed, relayed)
    assert bad.verdict == "fail" and bad.metrics["streams_differing"] == 4
    assert "treats a TCP read as a frame" in bad.detail


def test_a_proxy_that_reframes_events_forwards_them_and_one_that_loses_a_data_byte_does_not():
    """CRLF line ends and heartbeat comments are the proxy's framing: the client's body is
    longer, its events and their data are those forwarded. A lost data byte is no framing."""
    relayed = [_relayed(i, split=17, fault="split") for i in IDS]
    reframed = [_client(i, size=16 * EVENT_BYTES + 14 + 17 * 2 + 3 * len(b": ping\n\n")) for i in IDS]
    assert checks.split_frames(reframed, relayed).verdict == "pass"
    stalled = [_relayed(i, fault="stall", stalled_s=3.0) for i in IDS]
    heartbeats = checks.stall_survived(reframed, stalled, 3600.0)
    assert heartbeats.verdict == "pass" and heartbeats.observed == "4 streams silent 3s mid-way: 4 whole", heartbeats
    lost = [_client(IDS[0], payload=16 * EVENT_DATA - 1)] + [_client(i) for i in IDS[1:]]
    bad = checks.split_frames(lost, relayed)
    assert bad.verdict == "fail" and bad.metrics["streams_differing"] == 1, bad


def test_split_frames_that_never_split_is_the_harness_fault():
    with pytest.raises(RuntimeError, match="split no frame"):
        checks.split_frames([_client(i) for i in IDS], [_relayed(i) for i in IDS])


@pytest.mark.parametrize(
    ("client", "ending", "metric"),
    [
        (dict(outcome="truncated", done=False), "silent truncation", "silently_truncated"),
        (dict(outcome="deadline", done=False), "until the client gave up", "hung"),
        (dict(outcome="ok", done=True), "generated its end after the cut", "completed"),
    ],
)
def test_a_cut_stream_must_end_in_an_error_the_client_sees(client, ending, metric):
    relayed = [_relayed(i, ended="reset", events=4, fault="reset") for i in IDS]
    good = checks.cut_visible([_client(i, outcome="error", done=False, chunks=4) for i in IDS], relayed)
    assert good.verdict == "pass" and good.observed.startswith("4 streams cut after 4 event(s): 4 error"), good
    bad = checks.cut_visible([_client(IDS[0], chunks=4, **client)] + [_client(i, "error", False, 4) for i in IDS[1:]],
                             relayed)  # fmt: skip
    assert bad.verdict == "fail" and ending in bad.detail and bad.metrics[metric] == 1, bad


def test_an_error_event_must_reach_the_client():
    relayed = [_relayed(i, ended="error_event", events=5, fault="error") for i in IDS]
    good = checks.error_event([_client(i, chunks=5, errors=1) for i in IDS], relayed)
    assert good.verdict == "pass" and good.metrics == {
        "streams": 4,
        "errors_lost": 0,
        "streams_differing": 0,
        "events_lost_before_error": 0,
    }
    dropped = [_client(i, chunks=4, size=4 * EVENT_BYTES + 14) for i in IDS]
    bad = checks.error_event(dropped, relayed)
    assert bad.verdict == "fail" and bad.metrics["errors_lost"] == 4 and "drops the error" in bad.detail


def test_the_events_before_an_error_event_must_reach_the_client_too():
    """A proxy that tells the failure but drops the tokens before it (3 of the 4 here) gives
    the client a visible error over a shorter answer: still an answer lost. One that words the
    error its own way, or adds its own beside the replica's, keeps them all."""
    relayed = [_relayed(i, ended="error_event", events=5, fault="error") for i in IDS]
    short = [_client(IDS[0], chunks=2, errors=1)] + [_client(i, chunks=5, errors=1) for i in IDS[1:]]
    bad = checks.error_event(short, relayed)
    assert bad.verdict == "fail" and bad.metrics["events_lost_before_error"] == 1 and bad.metrics["errors_lost"] == 0
    assert "r-0 reached the client with 1 of the 4 the replica sent before its error" in bad.detail, bad
    own_words = [_client(i, chunks=6, errors=2, payload=999) for i in IDS]
    good = checks.error_event(own_words, relayed)
    assert good.verdict == "pass" and good.metrics["streams_differing"] == 4, good
    # every token, then the proxy's own error in a shape not read as one, then a broken body
    unrecognised = [_client(i, outcome="error", done=False, chunks=5, payload=999) for i in IDS]
    assert checks.error_event(unrecognised, relayed).verdict == "pass"


def test_a_retry_after_the_first_byte_fails_and_one_attempt_each_passes():
    relayed = [_relayed(i, ended="reset", events=4, fault="reset") for i in IDS]
    once = checks.no_retry_after_first_byte([], relayed, [_attempt(i) for i in IDS])
    assert once.verdict == "pass" and once.observed.endswith("the replicas saw 4 once"), once
    twice = checks.no_retry_after_first_byte([], relayed, [_attempt(i) for i in IDS] + [_attempt(IDS[2])])
    assert twice.verdict == "fail" and twice.metrics["retried_mid_stream"] == 1 and "generated again" in twice.detail


def test_a_proxy_that_forwarded_nothing_fails_every_check_by_name():
    refused = [_client(i, outcome="http_error", done=False, chunks=0) for i in IDS]
    for judge in (checks.split_frames, checks.cut_visible, checks.error_event):
        result = judge(refused, [])
        assert result.verdict == "fail" and "forwarded none of 4 request(s)" in result.observed, result
    for judge in (checks.stall_survived, checks.slow_link_survived):
        result = judge(refused, [], 3600.0)
        assert result.verdict == "fail" and "forwarded none of 4 request(s)" in result.observed, result
    result = checks.no_retry_after_first_byte(refused, [], [])
    assert result.verdict == "fail" and "4 http_error" in result.observed


@pytest.mark.parametrize("done", [True, False])
def test_a_proxy_that_tells_a_cut_in_the_stream_is_as_visible_as_a_broken_body(done):
    """A correct design beside rc1's: on a broken upstream, the proxy sends an error event
    and ends the body (with or without [DONE]); a client sees the failure either way."""
    relayed = [_relayed(i, ended="reset", events=4, fault="reset") for i in IDS]
    told = checks.cut_visible([_client(i, done=done, chunks=5, errors=1) for i in IDS], relayed)
    assert told.verdict == "pass" and told.observed.endswith("4 error event"), told


def test_an_error_event_the_proxy_turns_into_a_broken_body_is_still_visible():
    relayed = [_relayed(i, ended="error_event", events=5, fault="error") for i in IDS]
    broken = checks.error_event([_client(i, outcome="error", done=False, chunks=4) for i in IDS], relayed)
    assert broken.verdict == "pass" and "4 error;" in broken.observed, broken
    assert broken.metrics["streams_differing"] == 4  # counted, not judged: the failure was told


def test_a_stream_silent_for_less_than_the_declared_timeout_must_go_on():
    whole = [_relayed(i, fault="stall", stalled_s=3.0) for i in IDS]
    good = checks.stall_survived([_client(i) for i in IDS], whole, 3600.0)
    assert good.verdict == "pass" and good.observed == "4 streams silent 3s mid-way: 4 whole", good
    assert "less than its declared 3600s timeout" in good.expected
    # the proxy gave up during the silence: the fault point's writes met a closed connection
    gave_up = [_relayed(i, ended="broken", events=4, fault="stall", stalled_s=3.0) for i in IDS]
    bad = checks.stall_survived([_client(i, outcome="error", done=False, chunks=4) for i in IDS], gave_up, 3600.0)
    assert bad.verdict == "fail" and bad.metrics["streams_broken"] == 4 and "gave up on a stream silent" in bad.detail
    with pytest.raises(RuntimeError, match="stalled no stream"):
        checks.stall_survived([_client(i) for i in IDS], [_relayed(i) for i in IDS], 3600.0)


def test_a_stream_slow_as_a_whole_but_alive_must_reach_its_end():
    whole = [_relayed(i, fault="slow", slowed_s=8.0 + n / 10) for n, i in enumerate(IDS)]
    good = checks.slow_link_survived([_client(i) for i in IDS], whole, 3600.0)
    assert good.verdict == "pass" and good.observed == (
        "4 streams took 8.0-8.3s over the link: 4 whole; a bound on a whole response longer than 8.3s is not tested"
    ), good
    assert good.metrics["stream_s_max"] == 8.3 and "less than its declared 3600s timeout" in good.expected
    # a proxy bounding a whole response to 6 s: each stream cut 6 s in, its body broken
    cut = [_relayed(i, ended="broken", events=40, fault="slow", slowed_s=6.0) for i in IDS[:3]] + whole[3:]
    seen = [_client(i, outcome="error", done=False, chunks=40) for i in IDS[:3]] + [_client(IDS[3])]
    bad = checks.slow_link_survived(seen, cut, 3600.0)
    assert bad.verdict == "fail" and (bad.metrics["streams_broken"], bad.metrics["cut_after_s"]) == (3, 6.0), bad
    assert "slow but alive, 6.0s in" in bad.detail and bad.observed.endswith("3 error, 1 whole"), bad
    # a stream the proxy ended cleanly short of its end is no more whole than a broken one
    short = checks.slow_link_survived([_client(i, done=False, chunks=40) for i in IDS], whole, 3600.0)
    assert short.verdict == "fail" and short.observed.endswith("4 clean end"), short
    with pytest.raises(RuntimeError, match="slowed no stream"):
        checks.slow_link_survived([_client(i) for i in IDS], [_relayed(i) for i in IDS], 3600.0)


def _served(request_id, outcome="abandoned", events=6):
    return UpstreamAttempt(replica=0, path="/v1/chat/completions", outcome=outcome, started=0.0, duration_s=0.1,
                           request_id=request_id, status=200, data_events=events)  # fmt: skip


def _left(request_id):
    return _client(request_id, outcome="hung_up", done=False, chunks=4)


def test_a_stream_its_client_left_must_stop_at_the_replica():
    left = [_left(i) for i in IDS]
    # stopped a few tokens after the client left (rc1: the proxy's next write fails, it closes upstream)
    good = checks.cancel_stops_generation(left, [_served(i) for i in IDS], tokens=200, after=4)
    assert good.verdict == "pass" and good.observed == "4 streams left after 4 events: 4 stopped", good
    assert good.metrics["events_generated_max"] == 6
    # served whole (the proxy read it to its end), past half of what remained, or never ended
    served = [_served("r-0", "ok", 202), _served("r-1", events=103), _served("r-2", events=102)]
    bad = checks.cancel_stops_generation(left, served, tokens=200, after=4)
    assert bad.verdict == "fail" and "ran on after its client left (first: r-0)" in bad.detail, bad
    assert (bad.metrics["generated_to_the_end"], bad.metrics["stopped_late"], bad.metrics["unrecorded"]) == (1, 1, 1)
    assert bad.metrics["stopped"] == 1, "102 events: 98 of the 196 that remained, just inside half"
    # a retry that served it whole after a stopped attempt still ran to the end
    retried = checks.cancel_stops_generation(left[:1], [_served("r-0"), _served("r-0", "ok", 202)], 200, 4)
    assert retried.verdict == "fail" and retried.metrics["generated_to_the_end"] == 1
    # judged from what each client had read: one read of 40 events leaves 160, so 120 is in time
    late_read = _client("r-0", outcome="hung_up", done=False, chunks=40)
    in_time = checks.cancel_stops_generation([late_read], [_served("r-0", events=120)], tokens=200, after=4)
    assert in_time.verdict == "pass", in_time


def test_a_proxy_that_streamed_nothing_fails_cancel_stops_generation_by_name():
    failed = [_client(i, outcome="http_error", done=False, chunks=0) for i in IDS]
    result = checks.cancel_stops_generation(failed, [], tokens=200, after=4)
    assert (
        result.verdict == "fail"
        and result.observed == "no stream reached the 4 events its client hangs up after: 4 http_error"
    )


def _slow(request_id, read_mib=1.0):
    return ClientRequest(mode="raw", record=0, attempt=0, outcome="hung_up", request_id=request_id, status=200,
                         done=False, chunks=64, bytes=int(read_mib * 2**20))  # fmt: skip


def _wrote(request_id, mib):
    return UpstreamAttempt(replica=0, path="/v1/chat/completions", outcome="abandoned", started=0.0, duration_s=4.0,
                           request_id=request_id, status=200, bytes=int(mib * 2**20))  # fmt: skip


def test_a_proxy_must_not_gather_what_its_slow_reader_has_not_taken():
    read = [_slow(i) for i in IDS]
    # held back: a few MiB of buffers over its size before the streams, the replicas paced by TCP
    good = checks.slow_reader_bounded(read, [_wrote(i, 5) for i in IDS], 60 * 1024, 66 * 1024, 64, 256)
    assert good.verdict == "pass", good
    assert good.observed == (
        "the proxy's peak RSS grew 6.0 MiB (from 60 to 66 MiB) while the client read 4.0 MiB of 4 streams "
        "and the replicas wrote 20.0 MiB"
    )
    assert good.expected.startswith("the proxy's resident memory grows by at most 32 MiB while a client reads")
    # gathered: the replicas wrote whole streams into it while its reader took 1 MiB of each
    bad = checks.slow_reader_bounded(read, [_wrote(i, 64) for i in IDS], 60 * 1024, 300 * 1024, 64, 256)
    assert bad.verdict == "fail" and bad.detail == "the proxy gathered what its slow reader had not taken (240 MiB)"
    assert bad.metrics["proxy_grew_mib"] == 240.0 and bad.metrics["replicas_wrote_mib"] == 256.0, bad
    # the bound is the check's, not the replicas': 33 MiB held fails though the replicas wrote little
    over = checks.slow_reader_bounded(read, [], 60 * 1024, 93 * 1024, 64, 256)
    assert over.verdict == "fail" and over.metrics["replicas_wrote_mib"] == 0
    # gone: its step ended during the streams (killed for what it gathered), a failure, not the harness's
    gone = checks.slow_reader_bounded(read, [_wrote(i, 64) for i in IDS], 60 * 1024, None, 64, 256)
    assert gone.verdict == "fail" and gone.detail == "the proxy did not survive a slow reader", gone
    assert gone.observed.startswith("the proxy's step ended while the client read 4.0 MiB of 4 streams"), gone


def test_a_proxy_that_streamed_nothing_fails_slow_reader_bounded_by_name():
    failed = [_client(i, outcome="http_error", done=False, chunks=0, size=0) for i in IDS]
    result = checks.slow_reader_bounded(failed, [], 60 * 1024, 60 * 1024, 64, 256)
    assert result.verdict == "fail" and result.observed == "no stream reached the slow reader: 4 http_error", result


@pytest.mark.parametrize(("timeout_s", "stream_s"), [(3600.0, 8.0), (None, 8.0), (6.0, 3.0)])
def test_the_slow_link_takes_its_streams_length_or_half_the_declared_timeout(timeout_s, stream_s):
    """Each chunk pays its latency then its bytes at the rate, in turn: the part's 64 tokens take
    `stream_s` in all, scaled down (latency, jitter and all) where the proxy declares less."""
    profile = profile_for("data-designer-slurm", "1.0.0rc1")
    profile = replace(profile, telemetry=replace(profile.telemetry, streaming_timeout_seconds=timeout_s))
    part = SlowLinkPart()
    link = part.link(profile, seed=3)
    took = part.tokens * link.latency_s + part.tokens * part.token_bytes / link.rate_bytes_s
    assert took == pytest.approx(stream_s) and link.seed == 3
    assert link.jitter_s / link.latency_s == pytest.approx(part.jitter_ms / part.latency_ms)


@pytest.mark.parametrize(("timeout_s", "stall_s"), [(3600.0, 10.0), (None, 10.0), (8.0, 4.0)])
def test_the_client_gives_up_on_a_stream_only_well_past_its_length_and_never_on_a_stream_it_leaves(timeout_s, stall_s):
    """The parts the client reads whole bound each stream (a proxy holding a cut stream open with
    keep-alive comments is a hang it records): past the stall in the stall part, past the slow
    link's length in the slowlink part; a stream it leaves itself is not bounded. The stall is
    10 s, or half the proxy's declared streaming timeout where that is shorter."""
    profile = profile_for("data-designer-slurm", "1.0.0rc1")
    profile = replace(profile, telemetry=replace(profile.telemetry, streaming_timeout_seconds=timeout_s))
    options = WireOptions()
    assert stall_seconds(profile) == stall_s
    bounds = {part: _load(options, part, profile)["stream_deadline_s"] for part in FAULTS}
    assert bounds == {
        "split": STREAM_BOUND_S, "reset": STREAM_BOUND_S, "error": STREAM_BOUND_S, "stall": stall_s + STREAM_BOUND_S,
        "hangup": 0, "slowread": 0, "slowlink": 2 * options.slow_link.stream_s + STREAM_BOUND_S,
    }  # fmt: skip
    # every whole stream's bound is longer than the stream: 16 tokens at 20 ms, the stall, the link
    assert bounds["split"] > options.tokens * options.itl_ms / 1000 + 5
    assert bounds["stall"] > stall_s + 5 and bounds["slowlink"] > 2 * options.slow_link.stream_s
