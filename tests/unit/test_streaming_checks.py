from dataclasses import replace

from dd_accept.acceptance import streaming_checks as checks
from dd_accept.base.events import ClientRequest, UpstreamAttempt

PACED = [round(i * 0.01, 4) for i in range(13)]  # 13 events, 10 ms apart


def client(request_id, chunks=13, size=2000, done=True, ttft=0.05, offsets=None):
    return ClientRequest(
        mode="raw", record=0, attempt=0,
        chunk_offsets_s=PACED if offsets is None else offsets,
        request_id=request_id, chunks=chunks, bytes=size, done=done, ttft_s=ttft,
        outcome="ok" if done else "truncated",
    )  # fmt: skip


def replica(request_id, events=13, size=2000, first_byte=0.04, status=200):
    return UpstreamAttempt(
        replica=0, path="/v1/chat/completions", outcome="ok", duration_s=0.2,
        chunk_offsets_s=PACED, request_id=request_id, data_events=events, bytes=size,
        first_byte_s=first_byte, status=status, t=1.0, started=1.0,
    )  # fmt: skip


def test_integrity_matches_each_stream_with_what_its_replica_sent():
    assert checks.integrity([client("a"), client("b")], [replica("a"), replica("b")]).verdict == "pass"
    assert checks.integrity([client("a", size=1990)], [replica("a")]).verdict == "fail"
    assert checks.integrity([client("a", done=False)], [replica("a")]).verdict == "fail"
    assert checks.integrity([client("a")], []).verdict == "fail", "a stream no replica served"


LONG = [round(i * 0.01, 4) for i in range(128)]  # a judged stream: 128 events over 1.27 s


def long_client(request_id, ttft=0.05, offsets=None):
    return replace(client(request_id, ttft=ttft, offsets=LONG if offsets is None else offsets), chunks=128)


def long_replica(request_id, first_byte=0.04):
    return replace(replica(request_id, first_byte=first_byte), chunk_offsets_s=LONG, data_events=128, duration_s=1.32)


def test_no_buffering_compares_client_and_replica_ttft():
    assert checks.no_buffering([long_client("a", ttft=0.06)], [long_replica("a")]).verdict == "pass"
    loaded = checks.no_buffering([long_client("a", ttft=0.30)], [long_replica("a")])
    assert loaded.verdict == "pass", "260 ms added with both cores saturated is noise (measured in CI), not buffering"
    assert loaded.metrics["streams_held"] == 0 and loaded.metrics["held_share_max"] < 0.25
    slow = checks.no_buffering([long_client("a", ttft=0.60)], [long_replica("a")])
    assert slow.verdict == "fail" and slow.metrics["streams_held"] == 0, "over the TTFT bound, yet not held"
    assert checks.no_buffering([], []).verdict == "fail"


def test_a_stream_delivered_at_its_end_is_held_whatever_its_length():
    """A buffering proxy delivers every event once the replica has sent the last: its TTFT
    grows with the stream, so its share of the stream, not a number of milliseconds, is what
    no machine's noise can reach. Short streams (13 events, 0.2 s) stay under the TTFT bound
    and are still caught."""
    buffered = checks.no_buffering([client("a", ttft=0.2, offsets=[0.0] * 13)], [replica("a")])
    assert buffered.verdict == "fail" and buffered.metrics["streams_held"] == 1, buffered
    assert buffered.metrics["added_ttft_p95_s"] < 0.5 and buffered.metrics["held_share_max"] > 0.75
    assert "1 of 1 streams held past 50% of their length" in buffered.observed
    whole = checks.no_buffering([long_client("a", ttft=1.35, offsets=[0.0] * 128)], [long_replica("a")])
    assert whole.verdict == "fail" and whole.metrics["held_share_max"] > 0.95


def test_no_buffering_judges_every_event_not_only_the_first():
    """A proxy that forwards the first event at once and holds the rest until the end: TTFT
    is perfect, every later event arrives with the last one."""
    held = [0.0] + [1.27] * 127
    check = checks.no_buffering([long_client("a", offsets=held)], [long_replica("a")])
    assert check.verdict == "fail", check
    assert check.metrics["added_ttft_p95_s"] < 0.1 and check.metrics["added_chunk_delay_max_s"] >= 1.2
    assert check.metrics["streams_held"] == 1 and "added delay per event p95" in check.observed
    one_hiccup = [*LONG[:60], *[x + 0.3 for x in LONG[60:61]], *LONG[61:]]
    streams = [long_client(f"s{i}") for i in range(30)] + [long_client("h", offsets=one_hiccup)]
    sent = [long_replica(f"s{i}") for i in range(30)] + [long_replica("h")]
    hiccup = checks.no_buffering(streams, sent)
    assert hiccup.verdict == "pass", "one 300 ms hiccup in 3968 events stays under every bound"
    jittered = [x + (0.24 if i % 10 == 0 else 0.0) for i, x in enumerate(LONG)]
    busy = checks.no_buffering([long_client("b", ttft=0.3, offsets=jittered)], [long_replica("b")])
    assert busy.verdict == "pass", "CI's worst: 257 ms TTFT, events up to 237 ms late, yet not held"
    steady_lag = [0.0] + [x + 0.3 for x in LONG[1:]]
    lagging = checks.no_buffering([long_client("c", offsets=steady_lag)], [long_replica("c")])
    assert lagging.verdict == "fail" and lagging.metrics["streams_held"] == 0, "per-event p95 over 250 ms"


def test_one_noisy_stream_of_many_does_not_decide_but_a_tenth_held_does():
    """A correct proxy on a starved machine had one stream of 64 at 0.55; a buffering one
    holds every stream. The share counts from the replica's first byte, not its TTFT."""
    late = [x + (0.48 if i == 60 else 0.0) for i, x in enumerate(LONG)]
    streams = [long_client(f"s{i}") for i in range(63)] + [long_client("n", ttft=0.25, offsets=late)]
    sent = [long_replica(f"s{i}") for i in range(63)] + [long_replica("n")]
    noisy = checks.no_buffering(streams, sent)
    assert noisy.verdict == "pass" and noisy.metrics["streams_held"] == 1, noisy
    assert noisy.metrics["held_share_max"] > 0.5
    held = [long_client(f"h{i}", ttft=1.3, offsets=[0.0] * 128) for i in range(7)]
    some = checks.no_buffering(streams[:57] + held, sent[:57] + [long_replica(f"h{i}") for i in range(7)])
    assert some.verdict == "fail" and some.metrics["streams_held"] == 7, "7 of 64 held: more than one in ten"
    slow_start = replace(long_replica("a"), first_byte_s=1.4, duration_s=2.68)
    whole = checks.no_buffering([long_client("a", ttft=2.7, offsets=[0.0] * 128)], [slow_start])
    assert whole.metrics["held_share_max"] > 0.95, "a replica's long TTFT does not dilute the share"


def test_chunk_lateness_lines_up_events_by_position():
    sent = replica("a")
    late = checks.chunk_lateness(client("a", offsets=[0, 0.02, 0.05]), replace(sent, chunk_offsets_s=[0, 0.01, 0.02]))
    assert [round(x, 6) for x in late] == [0.01, 0.03]
    assert checks.chunk_lateness(client("a", offsets=[]), replace(sent, chunk_offsets_s=[0, 0.01])) == []


def phase(opened, reused, idle, accepted, requests, errors=0):
    return checks.ConnectionPhase(opened, reused, idle, accepted, requests, errors)


def test_connection_accounting():
    kept, sequential, closing = phase(24, 40, 8, 24, 64), phase(0, 16, 24, 0, 16), phase(32, 32, 32, 32, 64)
    good = {"keep-alive": kept, "sequential": sequential, "closing": closing}
    assert checks.connection_accounting(good).verdict == "pass"
    swapped = checks.connection_accounting({**good, "sequential": phase(16, 0, 24, 0, 16)})
    assert swapped.verdict == "fail" and "disagree with the replicas in: sequential" in swapped.detail
    reused_closed = checks.connection_accounting({**good, "closing": phase(0, 64, 32, 0, 64)})
    assert reused_closed.verdict == "fail", "reused closed ones"
    errors = checks.connection_accounting({**good, "closing": phase(32, 32, 32, 32, 64, errors=1)})
    assert errors.verdict == "fail"


def test_connection_accounting_needs_a_phase_where_opened_differs_from_reused():
    """With opened == reused everywhere a swapped-counter proxy would agree: not judged, fails."""
    blind = checks.connection_accounting({"keep-alive": phase(32, 32, 0, 32, 64), "closing": phase(32, 32, 32, 32, 64)})
    assert blind.verdict == "fail" and "a swap would not show" in blind.detail


def routed(replica_index, started, duration, request_id=None):
    return UpstreamAttempt(
        replica=replica_index, path="/v1/chat/completions", outcome="ok", started=started, duration_s=duration,
        request_id=request_id,
    )  # fmt: skip


def test_least_connections_counts_requests_sent_to_a_busier_replica():
    stuck = [routed(0, 0.0, 10.0)]  # replica 0 stalled with one stream
    fair = stuck + [routed(1 + i % 3, 0.1 + i * 0.3, 0.2) for i in range(12)]
    check = checks.least_connections(fair, replicas=4, slowed=0, records=13)
    assert check.verdict == "pass", check
    round_robin = [routed(i % 4, 0.1 + i * 0.1, 10.0 if i % 4 == 0 else 0.05) for i in range(16)]
    bad = checks.least_connections(round_robin, replicas=4, slowed=0, records=16)
    assert bad.verdict == "fail" and bad.metrics["routing_violations"] >= 1, bad
    assert "sent to replica 0 with 2 in flight while one had 0" in bad.detail
    assert checks.least_connections(fair[:5], replicas=4, slowed=0, records=13).verdict == "fail", "too few"


def test_connection_accounting_accepts_health_probes_counted_or_left_out_but_not_a_miscount():
    """A proxy with a background health monitor: 4 probe-only connections and 12 probes at
    the replicas during the phase. Whether its counters include them or not, they must
    agree with one of the two views; a count that matches neither fails."""
    sequential = phase(0, 16, 24, 0, 16)

    def kept(opened, reused):
        return checks.ConnectionPhase(opened, reused, 8, 28, 64, 0, replicas_with_requests=24, probe_requests=12)

    for opened, reused in ((24, 40), (28, 48)):  # probes left out of the counters / counted in them
        result = checks.connection_accounting({"keep-alive": kept(opened, reused), "sequential": sequential})
        assert result.verdict == "pass", (opened, reused, result)
    assert "(24 with requests; 12 health probes)" in result.observed
    wrong = checks.connection_accounting({"keep-alive": kept(26, 38), "sequential": sequential})
    assert wrong.verdict == "fail" and "counts disagree with the replicas in: keep-alive" in wrong.detail
