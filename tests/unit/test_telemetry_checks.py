"""The telemetry checks as pure functions: the SUT's counters and records against what the
replicas and the client saw, phase by phase; unclaimed is unsupported, never pass."""

import json
from dataclasses import replace

import pytest

from dd_accept.acceptance import telemetry_checks as checks
from dd_accept.acceptance import telemetry_counter_checks as counters
from dd_accept.acceptance import telemetry_payload_checks as payloads
from dd_accept.acceptance import telemetry_records
from dd_accept.acceptance.drain_checks import StepEnd
from dd_accept.base.events import ClientRequest, UpstreamAttempt
from dd_accept.sut.profile import TELEMETRY_CLAIMS, TelemetryProfile

CLAIMED = TelemetryProfile(claims=TELEMETRY_CLAIMS)


def attempt(request_id, replica, status, started, outcome="ok", size=500):
    return UpstreamAttempt(
        replica=replica, path="/v1/chat/completions", outcome=outcome, started=started, duration_s=0.01,
        request_id=request_id, status=status, bytes=size,
    )  # fmt: skip


def response(request_id, status=200, outcome="ok", size=500):
    return ClientRequest(
        mode="raw", record=0, attempt=0, outcome=outcome, request_id=request_id, status=status, bytes=size
    )


def retry_phase(name="retry-429"):
    """a: 429 on replica 0, then 200 on 1; b: 200 on 2; c: 503 on 1, 503 on 2, 200 on 3."""
    upstream = [
        attempt("a", 0, 429, 1.0), attempt("a", 1, 200, 1.1), attempt("b", 2, 200, 1.0),
        attempt("c", 1, 503, 1.0), attempt("c", 2, 503, 1.1), attempt("c", 3, 200, 1.2),
    ]  # fmt: skip
    client = [response("a"), response("b"), response("c")]
    before = {"requests": 10, "attempts": 12, "retries": {"http_429": 1}, "final_statuses": {"200": 10},
              "backends": [{"index": i, "requests": 3} for i in range(4)]}  # fmt: skip
    after = {"requests": 13, "attempts": 18, "retries": {"http_429": 2, "http_503": 2}, "final_statuses": {"200": 13},
             "backends": [{"index": 0, "requests": 4}, {"index": 1, "requests": 5}, {"index": 2, "requests": 5},
                          {"index": 3, "requests": 4}]}  # fmt: skip
    records = [
        {"attempts": 2, "final_status": 200, "upstream_outcomes": ["429", "200"], "failover": True},
        {"attempts": 1, "final_status": 200, "upstream_outcomes": ["200"], "failover": False},
        {"attempts": 3, "final_status": 200, "upstream_outcomes": ["503", "503", "200"], "failover": True},
    ]
    lines = ["INFO noise"] + [f"slurm_proxy_request {json.dumps(r)}" for r in records]
    return telemetry_records.TelemetryPhase(name, client, upstream, before, after, lines, replicas=4)


def test_counters_that_moved_by_what_the_replicas_and_client_saw_pass():
    result = checks.attempt_counters([retry_phase()], CLAIMED)
    assert result.verdict == "pass", result
    assert "retry-429: 3 requests, 6 attempts, retries {http_429: 1, http_503: 2}" in result.observed
    assert result.metrics["retries_observed"] == 3


@pytest.mark.parametrize("spelled", ["{}", "http_{}", "status_{}", "HTTP {}", "172.18.0.4:8000 http_{}"])
def test_retry_causes_are_read_by_the_status_they_name_however_spelled(spelled):
    """The seed counts retries by cause, not how a cause is spelled; a count under the wrong
    status still fails."""
    phase = retry_phase()
    after = phase.metrics_after | {"retries": {spelled.format(429): 2, spelled.format(503): 2}}
    before = phase.metrics_before | {"retries": {spelled.format(429): 1}}
    result = checks.attempt_counters([replace(phase, metrics_before=before, metrics_after=after)], CLAIMED)
    assert result.verdict == "pass", result
    swapped = after | {"retries": {spelled.format(429): 3, spelled.format(503): 1}}
    wrong = checks.attempt_counters([replace(phase, metrics_before=before, metrics_after=swapped)], CLAIMED)
    assert wrong.verdict == "fail" and "retries {http_429: 2, http_503: 1}, observed {http_429: 1, http_503: 2}" in (
        wrong.detail
    ), wrong


def test_a_proxy_counting_one_attempt_per_request_fails_naming_both_numbers():
    phase = retry_phase()
    once = replace(phase, metrics_after=phase.metrics_after | {"attempts": 15})
    result = checks.attempt_counters([once], CLAIMED)
    assert result.verdict == "fail" and "retry-429: attempts 3, observed 6" in result.detail
    wrong_backend = replace(phase, metrics_after=phase.metrics_after | {"backends": [{"index": 0, "requests": 9}]})
    assert "backends [6, 0, 0, 0], observed [1, 2, 2, 1]" in checks.attempt_counters([wrong_backend], CLAIMED).detail
    no_retries = replace(phase, metrics_after=phase.metrics_after | {"retries": {"http_429": 1}})
    assert "retries {}, observed {http_429: 1, http_503: 2}" in checks.attempt_counters([no_retries], CLAIMED).detail


def test_missing_counters_fail_and_phases_without_a_retry_cannot_pass():
    phase = retry_phase()
    bare = replace(phase, metrics_after={"requests": 13})
    assert "the metrics have no attempts" in checks.attempt_counters([bare], CLAIMED).detail
    steady = telemetry_records.TelemetryPhase(
        "steady", [response("x")], [attempt("x", 0, 200, 1.0)], {"requests": 0, "attempts": 0},
        {"requests": 1, "attempts": 1, "retries": {}, "final_statuses": {"200": 1},
         "backends": [{"index": 0, "requests": 1}]}, replicas=1,
    )  # fmt: skip
    result = checks.attempt_counters([steady], CLAIMED)
    assert result.verdict == "fail" and "no phase produced a retry" in result.detail


def test_records_match_the_replicas_attempts_as_a_multiset_and_absence_is_named():
    assert checks.request_log([retry_phase()], CLAIMED).verdict == "pass"
    silent = replace(retry_phase(), log_lines=["nothing here"])
    result = checks.request_log([silent], CLAIMED)
    assert (
        result.verdict == "fail"
        and result.observed == "no `slurm_proxy_request` record was written for 3 whole responses"
    )
    phase = retry_phase()
    last_only = [
        "slurm_proxy_request " + json.dumps({"attempts": 1, "final_status": 200, "upstream_outcomes": [o]})
        for o in ("200", "200", "200")
    ]
    wrong = checks.request_log([replace(phase, log_lines=last_only)], CLAIMED)
    assert wrong.verdict == "fail" and "not logged: 1x attempts 2 [429,200] -> 200" in wrong.detail
    garbled = checks.request_log([replace(phase, log_lines=[*phase.log_lines, "slurm_proxy_request {oops"])], CLAIMED)
    assert garbled.verdict == "fail" and "1 marked lines with no request record" in garbled.detail


def test_records_of_the_proxys_own_endpoints_are_set_aside_and_a_request_logged_without_attempts_is_not():
    """A proxy may log its `/health` and `/metrics` requests under the marker: no upstream
    attempt, beyond the responses that had none. A driven request logged with no attempts
    still leaves its own record missing."""
    phase = retry_phase()
    own = "slurm_proxy_request " + json.dumps({"attempts": 0, "final_status": 200, "upstream_outcomes": []})
    result = checks.request_log([replace(phase, log_lines=[*phase.log_lines, own, own])], CLAIMED)
    assert result.verdict == "pass" and result.metrics["records_set_aside"] == 2, result
    assert result.observed.endswith(
        "2 records set aside (the proxy's own endpoints: another path, or no upstream attempt)"
    )
    instead = [line for line in phase.log_lines if '"attempts": 2' not in line] + [own]
    wrong = checks.request_log([replace(phase, log_lines=instead)], CLAIMED)
    assert wrong.verdict == "fail" and "not logged: 1x attempts 2 [429,200] -> 200" in wrong.detail, wrong


@pytest.mark.parametrize(
    ("field", "value"),
    [("path", "/health"), ("request", "GET /health HTTP/1.1"), ("path", "/metrics?x=1")],
)
def test_a_record_naming_the_proxys_own_path_is_set_aside_whatever_attempts_it_lists(field, value):
    """A /health that probes the backends may log the probes as its attempts: the record
    names a path no client sends, so it is no driven request's. A driven request's record
    that names its completion path is still judged, and one that names another path is
    missing from what was served."""
    phase = retry_phase()
    probing = {"attempts": 4, "final_status": 200, "upstream_outcomes": ["200"] * 4, field: value}
    own = "slurm_proxy_request " + json.dumps(probing)
    result = checks.request_log([replace(phase, log_lines=[*phase.log_lines, own])], CLAIMED)
    assert result.verdict == "pass" and result.metrics["records_set_aside"] == 1, result
    unnamed = {k: v for k, v in probing.items() if k != field}
    listed = "slurm_proxy_request " + json.dumps(unnamed)
    wrong = checks.request_log([replace(phase, log_lines=[*phase.log_lines, listed])], CLAIMED)
    assert wrong.verdict == "fail" and "logged but not seen: 1x attempts 4 [200,200,200,200] -> 200" in wrong.detail
    driven = [
        line.replace("{", '{"path": "/v1/chat/completions", ', 1) for line in phase.log_lines
    ]  # every driven request names its path: all judged, none set aside
    named = checks.request_log([replace(phase, log_lines=driven)], CLAIMED)
    assert named.verdict == "pass" and named.metrics["records_set_aside"] == 0, named
    routed = [line.replace("{", '{"route": "/{path:.*}", ', 1) for line in phase.log_lines]  # a pattern
    assert checks.request_log([replace(phase, log_lines=routed)], CLAIMED).metrics["records_set_aside"] == 0
    # the upstream named as a URL (a backend's base) is no request path; nor is a repr's bracket
    based = [
        line.replace("{", '{"endpoint": "http://10.0.0.3:8001", "url": "ftp://a]b/", ', 1) for line in phase.log_lines
    ]
    assert checks.request_log([replace(phase, log_lines=based)], CLAIMED).verdict == "pass"
    shown = [line.replace("{", '{"route": "<PlainResource  /v1/chat/completions>", ', 1) for line in phase.log_lines]
    assert checks.request_log([replace(phase, log_lines=shown)], CLAIMED).metrics["records_set_aside"] == 0
    # a pattern in one field, the real path in the next: the path decides
    both = {**probing, "route": "/{path:.*}", "path": "/health"}
    both_line = "slurm_proxy_request " + json.dumps(both)
    assert checks.request_log([replace(phase, log_lines=[*phase.log_lines, both_line])], CLAIMED).verdict == "pass"
    mislabelled = [line.replace("{", '{"path": "/health", ', 1) for line in phase.log_lines]
    lost = checks.request_log([replace(phase, log_lines=mislabelled)], CLAIMED)
    assert lost.verdict == "fail" and lost.metrics["records"] == 0, lost


def cut_phase(records, client_bytes=(479, 700), replica_bytes=(479, 959)):
    upstream = [
        attempt("a", 3, 200, 1.0, outcome="cut", size=replica_bytes[0]),
        attempt("b", 2, 200, 1.0, outcome="cut", size=replica_bytes[1]),
        attempt("c", 0, 200, 1.0),
    ]
    client = [
        response("a", outcome="error", size=client_bytes[0]),
        response("b", outcome="truncated", size=client_bytes[1]),
        response("c"),
    ]
    lines = [f"slurm_proxy_request {json.dumps(r)}" for r in records]
    return telemetry_records.TelemetryPhase("cut", client, upstream, {}, {}, lines, 4)


def incomplete(size):
    return {"incomplete": True, "bytes_sent": size, "final_status": 200}


def test_each_cut_stream_is_logged_with_bytes_between_what_the_client_got_and_the_replica_sent():
    result = checks.incomplete_streams([cut_phase([incomplete(479), incomplete(959)])], CLAIMED)
    assert result.verdict == "pass" and result.metrics["logged_with_bytes"] == 2, result
    assert "client got / replica sent: 479/479, 700/959 bytes" in result.observed
    between = checks.incomplete_streams([cut_phase([incomplete(479), incomplete(800)])], CLAIMED)
    assert between.verdict == "pass", "the client's reader may drop what it buffered when the stream broke"
    for sizes in ((479, 12), (479, 3000), (479, 479)):  # too few, far more than was sent, one stream's twice
        wrong = checks.incomplete_streams([cut_phase([incomplete(n) for n in sizes])], CLAIMED)
        assert wrong.verdict == "fail" and "1 cut streams not logged with their bytes" in wrong.detail, sizes
    one = checks.incomplete_streams([cut_phase([incomplete(479)])], CLAIMED)
    assert one.verdict == "fail" and one.metrics["logged_incomplete"] == 1
    extra = checks.incomplete_streams([cut_phase([incomplete(479), incomplete(959), incomplete(959)])], CLAIMED)
    assert extra.verdict == "fail" and "1 incomplete records for no cut stream" in extra.detail
    assert checks.incomplete_streams([], CLAIMED).verdict == "fail"


def test_incomplete_records_where_nothing_was_cut_fail():
    phase = retry_phase()
    noisy = replace(phase, log_lines=[*phase.log_lines, f"slurm_proxy_request {json.dumps(incomplete(40))}"])
    result = checks.incomplete_streams([noisy, cut_phase([incomplete(479), incomplete(959)])], CLAIMED)
    assert result.verdict == "fail" and "incomplete records where nothing was cut: retry-429 1" in result.detail
    # and the request log leaves a flagged record out of its own multiset
    assert checks.request_log([noisy], CLAIMED).verdict == "pass"


def test_records_are_read_however_a_release_reasonably_spells_them():
    phase = retry_phase()
    spelled = [
        # structured logging: the whole line is the record, the marker one of its values
        json.dumps({"event": "slurm_proxy_request", "final_status": "200", "upstream_outcomes": ["http_429", 200]}),
        # the marker then the record, text after it; attempts left out (the outcomes' count)
        'slurm_proxy_request {"final_status": 200, "upstream_outcomes": ["200"]} pid=4242',
        # one entry per attempt, each with its status
        "slurm_proxy_request "
        + json.dumps(
            {"final_status": 200, "attempts": [{"backend": 1, "status": 503}, {"status": 503}, {"status": 200}]}
        ),
        # a per-attempt event under the same marker: not a request's record, left out
        'slurm_proxy_request {"backend": 0, "status": 429, "header_s": 0.01}',
    ]
    result = checks.request_log([replace(phase, log_lines=spelled)], CLAIMED)
    assert result.verdict == "pass" and result.metrics["records"] == 3, result


def test_a_record_whose_final_status_is_not_the_clients_fails():
    phase = retry_phase()
    lines = [
        line.replace('"final_status": 200', '"final_status": 503') if '"attempts": 3' in line else line
        for line in phase.log_lines
    ]
    result = checks.request_log([replace(phase, log_lines=lines)], CLAIMED)
    assert result.verdict == "fail" and "logged but not seen: 1x attempts 3 [503,503,200] -> 503" in result.detail


def test_final_statuses_that_are_not_200_are_counted_as_the_client_got_them():
    upstream = [attempt("x", i, 503, 1.0 + i / 10) for i in range(3)]
    before = {"requests": 0, "attempts": 0, "retries": {}, "final_statuses": {}, "backends": []}
    after = {"requests": 1, "attempts": 3, "retries": {"http_503": 2}, "final_statuses": {"503": 1},
             "backends": [{"index": i, "requests": 1} for i in range(3)]}  # fmt: skip
    phase = telemetry_records.TelemetryPhase(
        "exhausted", [response("x", 503, "http_error")], upstream, before, after, [], 3
    )
    assert checks.attempt_counters([phase], CLAIMED).verdict == "pass"
    counted_as_200 = replace(phase, metrics_after=after | {"final_statuses": {"200": 1}})
    result = checks.attempt_counters([counted_as_200], CLAIMED)
    assert result.verdict == "fail" and "final_statuses {200: 1}, observed {503: 1}" in result.detail
    uncounted_request = replace(phase, metrics_after=after | {"requests": 0})
    assert "requests 0, observed 1" in checks.attempt_counters([uncounted_request], CLAIMED).detail


def test_unclaimed_is_unsupported_never_pass_and_claimed_counters_must_exist():
    nothing = TelemetryProfile()
    assert checks.request_log([retry_phase()], nothing).verdict == "unsupported"
    assert checks.attempt_counters([retry_phase()], nothing).verdict == "unsupported"
    assert counters.timeouts({}, nothing).verdict == "unsupported"
    missing = counters.connection_lifecycle({"connections": {"opened": 3}}, CLAIMED)
    assert missing.verdict == "fail" and "no connections.expired, connections.stale, connections.discarded" in (
        missing.observed
    )
    assert counters.timeouts([], CLAIMED).observed == "the proxy's metrics are not a JSON object"
    present = {"timeouts": {"terminal": 0, "streaming": 0}}
    reported = counters.timeouts(present, CLAIMED)
    assert reported.verdict == "unsupported" and reported.detail.startswith("not judged")


def test_an_unknown_claim_is_refused():
    with pytest.raises(ValueError, match="unknown tracing"):
        TelemetryProfile(claims=("tracing",))


def counted(name, path, before, after, allowed, seen="seen"):
    group, key = path.split(".")
    return counters.CountedPhase(name, {group: {key: before}}, {group: {key: after}}, {path: allowed}, seen)


LIFECYCLE = {"connections": {"expired": 0, "stale": 0, "discarded": 0}}


def test_each_connection_counter_must_move_by_what_the_replicas_saw_in_its_phase():
    phases = [
        counted("stale", "connections.stale", 0, 8, (6, 7, 8), "the replicas closed 8 idle connections"),
        counted("expired", "connections.expired", 1, 5, (4,)),
        counted("discarded", "connections.discarded", 3, 27, (24, 25, 26)),
    ]
    good = counters.connection_lifecycle(LIFECYCLE, CLAIMED, phases)
    assert good.verdict == "pass" and (good.metrics["judged"], good.metrics["wrong"]) == (3.0, 0.0), good
    assert good.metrics["connections_stale_counted"] == good.metrics["connections_stale_seen"] == 8.0, good
    assert good.metrics["connections_stale_seen_min"] == 6.0
    assert "stale: connections.stale +8 (the replicas closed 8 idle connections)" in good.observed
    # a proxy that counts stale connections as expired
    swapped = [
        counted("stale", "connections.stale", 0, 0, (6, 7, 8)),
        counted("expired", "connections.expired", 1, 13, (4,)),
        counted("discarded", "connections.discarded", 3, 27, (24, 25, 26)),
    ]
    bad = counters.connection_lifecycle(LIFECYCLE, CLAIMED, swapped)
    assert bad.verdict == "fail", bad
    assert bad.detail == (
        "expired: connections.expired counted 12, the replicas saw 4; "
        "stale: connections.stale counted 0, the replicas saw 6 to 8"
    ), bad
    # one too many, one too few: each is wrong, whatever the other counters say
    for after in (9, 5):
        off = [counted("stale", "connections.stale", 0, after, (6, 7, 8)), *phases[1:]]
        assert counters.connection_lifecycle(LIFECYCLE, CLAIMED, off).verdict == "fail", after


def test_the_counts_a_view_allows_are_said_as_a_person_says_them():
    assert counters.allowed_text((3,)) == "3"
    assert counters.allowed_text((5, 1)) == "1 or 5"
    assert counters.allowed_text((4, 5, 6, 4)) == "4 to 6"
    assert counters.allowed_text((2, 3)) == "2 or 3"


def test_a_counter_no_phase_could_drive_leaves_the_check_unsupported_unless_another_is_wrong():
    """A keep-alive of 100 s would need 200 s of idling: beyond what a phase waits."""
    slow = replace(CLAIMED, keepalive_seconds=100.0)
    assert not counters.drivable(100.0, counters.EXPIRY_WAITS) and counters.drivable(65.0, counters.EXPIRY_WAITS)
    assert not counters.drivable(None) and not counters.drivable(0.0) and not counters.drivable(3600.0)
    assert counters.drivable(1.0, counters.TIMEOUT_WAITS) and not counters.drivable(60.0, counters.TIMEOUT_WAITS)
    phases = [
        counted("stale", "connections.stale", 0, 8, (8,)),
        counted("discarded", "connections.discarded", 0, 24, (24,)),
    ]
    partial = counters.connection_lifecycle(LIFECYCLE, slow, phases)
    assert partial.verdict == "unsupported" and partial.detail.startswith("not judged: connections.expired"), partial
    assert "100.0 s in the profile" in partial.detail and "never a pass" in partial.detail
    wrong = counters.connection_lifecycle(LIFECYCLE, slow, [counted("stale", "connections.stale", 0, 9, (8,))])
    assert wrong.verdict == "fail", "a wrong count fails whatever else could not be judged"


ZERO = {"timeouts": {"terminal": 0, "streaming": 0}}


def timed_out(terminal, streaming, allowed_terminal=(5, 1), allowed_streaming=(2,), seen="held 7"):
    after = {"timeouts": {"terminal": terminal, "streaming": streaming}}
    allowed = {"timeouts.terminal": allowed_terminal, "timeouts.streaming": allowed_streaming}
    return counters.timeouts(after, CLAIMED, [counters.CountedPhase("timeouts", ZERO, after, allowed, seen)])


def test_a_terminal_timeout_is_read_either_way_the_seed_allows_and_streaming_apart():
    """Five attempts timed out before their first byte, one with no retry after it; two
    streams stalled mid-way. Every such attempt (5) and only the unretried ones (1) are the
    two readings of "terminal ... timeouts without requiring another retry"."""
    for terminal in (5, 1):
        result = timed_out(terminal, 2)
        assert result.verdict == "pass" and result.metrics["timeouts_terminal_counted"] == terminal, result
    # streaming timeouts counted as terminal, under either reading
    for terminal in (7, 3):
        bad = timed_out(terminal, 0)
        assert bad.verdict == "fail", bad
        assert bad.detail == (
            f"timeouts: timeouts.terminal counted {terminal}, the replicas saw 1 or 5; "
            "timeouts: timeouts.streaming counted 0, the replicas saw 2"
        ), bad
    assert timed_out(5, 3).verdict == "fail", "a streaming timeout counted twice"
    assert timed_out(0, 2).verdict == "fail", "no terminal timeout counted"


def test_an_event_that_never_happened_fails_rather_than_passing_on_zero_equals_zero():
    """A proxy that never timed out (the replicas saw it abandon nothing they held) fails,
    named after that, however its counters read."""
    result = timed_out(0, 0, (0, 0), (0,), "the replicas held 7; the proxy abandoned 0")
    assert result.verdict == "fail", result
    assert "no event for timeouts.terminal happened (the replicas held 7; the proxy abandoned 0)" in result.detail
    assert "no event for timeouts.streaming happened" in result.detail


ORIGINS = tuple(f"http://10.9.0.{i + 2}:8000" for i in range(4))


def with_attempt_records(phase, records):
    lines = phase.log_lines + [f"slurm_proxy_request {json.dumps(r)}" for r in records]
    return replace(phase, log_lines=lines, origins=ORIGINS)


SERVED = [(0, 429), (1, 200), (2, 200), (1, 503), (2, 503), (3, 200)]  # retry_phase's attempts


def test_each_attempt_logged_with_its_backend_and_status_passes_however_the_backend_is_named():
    by_index = [{"backend": b, "status": s} for b, s in SERVED]
    by_origin = [{"upstream": f"{ORIGINS[b]}/v1/chat/completions", "status_code": f"http_{s}"} for b, s in SERVED]
    for records in (by_index, by_origin):
        result = checks.attempt_log([with_attempt_records(retry_phase(), records)], CLAIMED)
        assert result.verdict == "pass", result
        assert (result.metrics["attempts_served"], result.metrics["attempts_logged"]) == (6.0, 6.0), result
        assert result.metrics["retried"] == 3.0
    # the request records alone (rc1's) are no per-attempt log
    alone = checks.attempt_log([replace(retry_phase(), origins=ORIGINS)], CLAIMED)
    assert alone.verdict == "fail" and alone.observed.startswith("no per-attempt `slurm_proxy_request` record"), alone


def test_a_log_naming_the_wrong_backend_or_only_final_attempts_fails_naming_them():
    shifted = [{"backend": (b + 1) % 4, "status": s} for b, s in SERVED]
    result = checks.attempt_log([with_attempt_records(retry_phase(), shifted)], CLAIMED)
    assert result.verdict == "fail" and "6 attempts served, 6 logged; not logged: " in result.detail, result
    assert "1x backend 0 status 429" in result.detail and "logged but not served: " in result.detail
    finals = [{"backend": b, "status": s} for b, s in SERVED if s == 200]
    result = checks.attempt_log([with_attempt_records(retry_phase(), finals)], CLAIMED)
    assert result.verdict == "fail" and "6 attempts served, 3 logged" in result.detail, result
    nameless = [{"status": s} for _, s in SERVED]
    result = checks.attempt_log([with_attempt_records(retry_phase(), nameless)], CLAIMED)
    assert "6 attempt records with no backend or no status" in result.detail, result
    unknown = [{"backend": "http://10.9.9.9:1", "status": s} for _, s in SERVED]
    assert checks.attempt_log([with_attempt_records(retry_phase(), unknown)], CLAIMED).verdict == "fail"
    assert (
        telemetry_records.backend_named(7, ORIGINS) == "?7"
        and telemetry_records.backend_named(True, ORIGINS) == "?True"
    )


def timeout_phase(records):
    """a: held by replica 0 past the terminal timeout (no status), retried on 2; b: held by
    replica 1 after its status and two events (mid-stream), the client's stream broken; c: 200."""
    upstream = [
        attempt("a", 0, None, 1.0, outcome="abandoned", size=0), attempt("a", 2, 200, 2.1),
        attempt("b", 1, 200, 1.0, outcome="abandoned", size=300), attempt("c", 3, 200, 1.0),
    ]  # fmt: skip
    client = [response("a"), response("b", outcome="truncated", size=250), response("c")]
    lines = [f"slurm_proxy_request {json.dumps(r)}" for r in records]
    return telemetry_records.TelemetryPhase("timeouts", client, upstream, {}, {}, lines, 4, ORIGINS)


TIMED_OUT = [{"backend": 0, "status": "timeout"}, {"backend": 2, "status": 200}, {"backend": 1, "status": 200},
             {"backend": 3, "status": 200}]  # fmt: skip


def test_timed_out_attempts_are_logged_as_attempts_with_no_response():
    """telemetry-logged's records: the attempt held before its first byte says "timeout", the
    one abandoned mid-stream the status it got; a 504, or a word for the mid-stream one, too."""
    phases = [with_attempt_records(retry_phase(), [{"backend": b, "status": s} for b, s in SERVED])]
    result = checks.attempt_log([*phases, timeout_phase(TIMED_OUT)], CLAIMED)
    assert result.verdict == "pass" and result.metrics["attempts_served"] == 10.0, result
    assert result.metrics["attempts_unanswered"] == 1.0
    as_504 = [{**TIMED_OUT[0], "status": 504}, *TIMED_OUT[1:2], {"backend": 1, "outcome": "read_timeout"}, TIMED_OUT[3]]
    assert checks.attempt_log([*phases, timeout_phase(as_504)], CLAIMED).verdict == "pass"
    # an attempt that timed out and was not logged, or logged against another backend: caught
    unlogged = checks.attempt_log([*phases, timeout_phase(TIMED_OUT[1:])], CLAIMED)
    assert unlogged.verdict == "fail" and "not logged: 1x backend 0 status no response" in unlogged.detail, unlogged
    moved = [{"backend": 3, "status": "timeout"}, *TIMED_OUT[1:]]
    assert checks.attempt_log([*phases, timeout_phase(moved)], CLAIMED).verdict == "fail"
    # a word where the replica answered in full is no timeout
    worded = [*TIMED_OUT[:3], {"backend": 3, "status": "timeout"}]
    assert checks.attempt_log([*phases, timeout_phase(worded)], CLAIMED).verdict == "fail"


def test_a_stream_the_proxy_abandoned_mid_way_is_an_incomplete_stream():
    cut = cut_phase([incomplete(479), incomplete(959)])
    logged = checks.incomplete_streams([cut, timeout_phase([*TIMED_OUT, incomplete(260)])], CLAIMED)
    assert logged.verdict == "pass" and logged.metrics["cut_streams"] == 3.0, logged
    assert "in cut, timeouts" in logged.observed
    silent = checks.incomplete_streams([cut, timeout_phase(TIMED_OUT)], CLAIMED)
    assert silent.verdict == "fail" and "1 cut streams not logged with their bytes" in silent.detail, silent
    # the attempt held before its first byte was retried: no stream broke for it
    doubled = checks.incomplete_streams([cut, timeout_phase([*TIMED_OUT, incomplete(260), incomplete(0)])], CLAIMED)
    assert doubled.verdict == "fail" and "1 incomplete records for no cut stream" in doubled.detail


def drain_phase(records, replica_outcome="abandoned", replica_bytes=(2400, 2600), client_bytes=(2300, 2600)):
    """Two streams longer than the allowance, running at TERM: the replicas saw the proxy
    leave each after 2,400 and 2,600 bytes; the client got 2,300 and 2,600."""
    upstream = [
        attempt("d1", 0, 200, 10.0, outcome=replica_outcome, size=replica_bytes[0]),
        attempt("d2", 1, 200, 10.0, outcome=replica_outcome, size=replica_bytes[1]),
    ]
    client = [
        response("d1", outcome="error", size=client_bytes[0]),
        response("d2", outcome="error", size=client_bytes[1]),
    ]
    lines = [f"slurm_proxy_request {json.dumps(r)}" for r in records]
    return telemetry_records.TelemetryPhase(checks.DRAIN_PHASE, client, upstream, {}, {}, lines, 4, ORIGINS)


def test_streams_the_drain_bound_ended_are_incomplete_streams():
    """telemetry-logged ends what still streams at its window and logs each; the miscounted
    variant exits there without a record; rc1 is KILLed at the allowance and logs nothing."""
    cut = cut_phase([incomplete(479), incomplete(959)])
    logged = checks.incomplete_streams([cut, drain_phase([incomplete(2400), incomplete(2600)])], CLAIMED)
    assert logged.verdict == "pass" and logged.metrics["drain_logged_with_bytes"] == 2, logged
    assert logged.metrics["cut_streams"] == 4 and "in cut, drain" in logged.observed, logged
    exited = checks.incomplete_streams([cut, drain_phase([])], CLAIMED)
    assert exited.verdict == "fail" and "2 cut streams not logged with their bytes (drain 2)" in exited.detail
    assert exited.metrics["drain_cut_streams"] == 2 and exited.metrics["drain_logged_with_bytes"] == 0
    assert "KILLed" not in exited.detail, "it ended them itself, unlogged"
    killed = checks.incomplete_streams(
        [cut, drain_phase([])], CLAIMED, drain_killed_after_s=12.4, drain_end=StepEnd(137, 12.5, "slurmd step record")
    )
    assert "the endpoint still ran 12 s after TERM and was KILLed" in killed.detail, killed
    said = "drain: endpoint exit 137 12.5s after TERM (slurmd step record), KILL after 12.4s"
    assert killed.observed.endswith(said), killed
    ended = checks.incomplete_streams([cut, drain_phase([])], CLAIMED, drain_end=StepEnd(0, 10.8, "srun launcher"))
    assert ended.observed.endswith("drain: endpoint exit 0 10.8s after TERM (srun launcher), KILL never"), ended
    # records with another stream's bytes are no record of these
    wrong = checks.incomplete_streams([cut, drain_phase([incomplete(40), incomplete(9000)])], CLAIMED)
    assert wrong.verdict == "fail" and "(drain 2)" in wrong.detail, wrong
    # streams the replicas served whole were never ended by a drain bound: nothing there was cut
    whole = checks.incomplete_streams([cut, drain_phase([], replica_outcome="ok")], CLAIMED)
    assert whole.verdict == "fail" and "no stream broke at the drain bound" in whole.detail, whole


def test_a_proxy_that_stopped_reading_at_its_drain_bound_may_log_less_than_either_side_saw():
    """At its window a proxy forwarded 15,000 bytes, added a 90-byte error event it does not
    count, and left 170 bytes the replica wrote unread: the client got 15,090, the replica
    sent 15,170, and 15,000 is true. Where the replica itself cut the stream (nothing left
    unread) the floor stays what either side saw."""
    forwarded, event, unread = 15000, 90, 170
    sizes = {"replica_bytes": (forwarded + unread,) * 2, "client_bytes": (forwarded + event,) * 2}
    logged = [incomplete(forwarded), incomplete(forwarded)]
    result = checks.incomplete_streams([drain_phase(logged, **sizes)], CLAIMED)
    assert result.verdict == "pass", result
    assert checks.byte_bounds(forwarded + event, forwarded + unread)[0] == forwarded + event, "elsewhere"
    low = checks.byte_bounds(forwarded + event, forwarded + unread, stopped_reading=True)[0]
    assert low == forwarded + event - checks.ERROR_EVENT_BYTES
    # a record far below what the client got is still no record of the stream
    short = checks.incomplete_streams([drain_phase([incomplete(2000), incomplete(2000)], **sizes)], CLAIMED)
    assert short.verdict == "fail" and "(drain 2)" in short.detail, short


def test_attempt_records_under_a_marker_of_their_own_count_beside_the_request_records():
    """The seed names no marker for "each attempted upstream": a release may write
    `slurm_proxy_attempt {...}` beside `slurm_proxy_request {...}`. Other lines of the family
    that are no attempt (a start-up line) are not judged."""
    phase = retry_phase()
    lines = [
        *phase.log_lines,
        'slurm_proxy_started {"backends": 4}',
        *[f"slurm_proxy_attempt {json.dumps({'backend': b, 'status': s})}" for b, s in SERVED],
    ]
    result = checks.attempt_log([replace(phase, log_lines=lines, origins=ORIGINS)], CLAIMED)
    assert result.verdict == "pass" and result.metrics["attempts_logged"] == 6.0, result
    shifted = [*phase.log_lines, *[f"slurm_proxy_upstream {json.dumps({'backend': (b + 1) % 4, 'status': s})}"
                                   for b, s in SERVED]]  # fmt: skip
    assert checks.attempt_log([replace(phase, log_lines=shifted, origins=ORIGINS)], CLAIMED).verdict == "fail"


def test_a_broken_stream_may_be_logged_by_its_failure_but_only_in_place_of_its_own_status():
    """Found by a red-team read: a cut stream logged as `upstream_disconnected` is its 200
    attempt; a 429 logged as "timeout" beside a stream abandoned mid-way is not."""
    cut = cut_phase([incomplete(479), incomplete(959)])
    worded = [
        {"backend": 3, "status": "upstream_disconnected"},
        {"backend": 2, "status": 200},
        {"backend": 0, "status": 200},
    ]
    assert checks.attempt_log([with_attempt_records(cut, worded)], CLAIMED).verdict == "fail", "no retry: not judged"
    phases = [with_attempt_records(retry_phase(), [{"backend": b, "status": s} for b, s in SERVED])]
    assert checks.attempt_log([*phases, with_attempt_records(cut, worded)], CLAIMED).verdict == "pass"
    phase = timeout_phase(TIMED_OUT)
    upstream = [*phase.upstream, attempt("d", 1, 429, 0.5), attempt("d", 3, 200, 0.6)]
    records = [*TIMED_OUT, {"backend": 1, "status": "timeout"}, {"backend": 3, "status": 200}]
    swapped = replace(phase, upstream=upstream, client=[*phase.client, response("d")])
    result = checks.attempt_log([*phases, with_attempt_records(swapped, records)], CLAIMED)
    assert result.verdict == "fail" and "not logged: 1x backend 1 status 429" in result.detail, result


def test_a_health_line_of_the_marker_family_is_no_attempt():
    phase = retry_phase()
    lines = [
        *phase.log_lines,
        *[f"slurm_proxy_attempt {json.dumps({'backend': b, 'status': s})}" for b, s in SERVED],
        'slurm_proxy_health {"backend": 0, "status": 200, "ms": 3}',
    ]
    result = checks.attempt_log([replace(phase, log_lines=lines, origins=ORIGINS)], CLAIMED)
    assert result.verdict == "pass" and result.metrics["attempts_logged"] == 6.0, result


def test_unclaimed_attempt_log_is_unsupported():
    result = checks.attempt_log([retry_phase()], TelemetryProfile(claims=("request_log",)))
    assert result.verdict == "unsupported", result


CANARY = "0123abcd4567ef89"


def test_a_proxy_writing_request_text_response_bodies_or_credentials_fails_naming_each():
    clean = [
        'slurm_proxy_request {"attempts": 1, "final_status": 200}',
        "INFO route text_completion chat.completion.chunk",
    ]
    result = payloads.no_payloads(clean, CANARY)
    assert result.verdict == "pass" and result.metrics["lines"] == 2.0, "object names are no response text"
    leaky = [
        *clean,
        f'request body=b\'{{"messages": [{{"content": "ddprompt{CANARY[:8]}"}}]}}\' authorization=None',
        f"forwarding Authorization: Bearer ddcredential{CANARY}",
        f'upstream said data: {{"choices": [{{"delta": {{"content": "ddresponse{CANARY} "}}}}]}}',
        "user key sk-user-secret-value",
    ]
    result = payloads.no_payloads(leaky, CANARY, payloads.sent_secrets(("Authorization: Bearer sk-user-secret-value",)))
    assert result.verdict == "fail", result
    assert (result.metrics["prompt_lines"], result.metrics["header_lines"], result.metrics["response_lines"]) == (
        1.0,
        2.0,
        1.0,
    )
    assert result.detail == (
        "prompt text on the proxy's output (line 3); credential text on the proxy's output (line 4, 6); "
        "response text on the proxy's output (line 5)"
    ), result
    assert "sk-user-secret-value" not in result.detail + result.observed, "a user's secret is never shown"
    # another run's canary is no leak of this one
    assert payloads.no_payloads([f"ddprompt{'f' * 16}", f"ddresponse{'e' * 16}"], CANARY).verdict == "pass"
    # cut to fewer characters than the canary shows, a prompt is not told from any other text
    assert payloads.no_payloads([f"ddprompt{CANARY[:7]}"], CANARY).verdict == "pass"


def test_only_the_words_of_credential_headers_are_the_users_secrets():
    headers = (
        "Authorization: Bearer sk-abcdefgh1234",
        "X-Tenant: research-team",
        "x-api-key: short",
        "Cookie: s=1234567890",
    )
    assert payloads.sent_secrets(headers) == ("sk-abcdefgh1234", "s=1234567890")


def test_an_attempt_record_that_says_its_stream_was_incomplete_is_still_an_attempt():
    records = [{"backend": b, "status": st} for b, st in SERVED[:-1]]
    records.append({"backend": 3, "status": 200, "incomplete": True, "bytes_sent": 100})  # the last, cut
    records.append({"incomplete": True, "bytes_sent": 100})  # a request's incomplete record: not an attempt's
    result = checks.attempt_log([with_attempt_records(retry_phase(), records)], CLAIMED)
    assert result.verdict == "pass" and result.metrics["attempts_logged"] == 6.0, result


def test_a_counter_moved_by_another_windows_events_fails_there():
    """A proxy that counts a discard on every release passes the discarded window and fails
    the expired one, where nothing was discarded."""
    zero = {"connections": {"expired": 0, "stale": 0, "discarded": 0}}

    def window(name, after, expected, also):
        return counters.CountedPhase(name, zero, {"connections": after}, expected, "seen", also)

    honest = [
        window("expired", {"expired": 4, "stale": 0, "discarded": 0}, {"connections.expired": (4,)},
               {"connections.stale": (0,), "connections.discarded": (0,)}),
        window("discarded", {"expired": 0, "stale": 0, "discarded": 24}, {"connections.discarded": (24,)},
               {"connections.stale": (0,), "connections.expired": (0, 1)}),
    ]  # fmt: skip
    assert counters.connection_lifecycle(LIFECYCLE, CLAIMED, honest).verdict in ("pass", "unsupported")
    every_release = [
        window("expired", {"expired": 4, "stale": 0, "discarded": 12}, {"connections.expired": (4,)},
               {"connections.stale": (0,), "connections.discarded": (0,)}),
        honest[1],
    ]  # fmt: skip
    result = counters.connection_lifecycle(LIFECYCLE, CLAIMED, every_release)
    assert result.verdict == "fail", result
    assert result.detail == "expired: connections.discarded counted 12 where the replicas saw 0 of its events", result


def routed(replicas_in_turn, start=10.0, step=0.05):
    return [attempt(f"p-{n}", r, 200, start + n * step) for n, r in enumerate(replicas_in_turn)]


def test_a_probe_held_on_a_replica_must_not_take_it_out_of_least_connections():
    window = (9.9, 12.0)
    blind = checks.probe_routing(routed([0, 1, 2, 3] * 6), window, 0, 4, CLAIMED)
    assert blind.verdict == "pass" and blind.metrics["probed_requests"] == 6.0, blind
    assert blind.observed == "24 requests began in the probe's 2.1 s in flight; per replica 6, 6, 6, 6"
    counted = checks.probe_routing(routed([1, 2, 3] * 8), window, 0, 4, CLAIMED)
    assert counted.verdict == "fail" and counted.metrics["in_window"] == 24.0, counted
    assert counted.detail.startswith("replica 0 got none of the 24 requests while the probe was in flight")
    # requests after the probe ended (the proxy gave up on it) are not judged
    late = routed([1, 2, 3] * 4) + routed([0, 1, 2, 3] * 3, start=13.0)
    assert checks.probe_routing(late, window, 0, 4, CLAIMED).verdict == "fail"
    brief = checks.probe_routing(routed([1, 2]), (9.9, 10.06), 0, 4, CLAIMED)
    assert brief.verdict == "unsupported" and "too briefly" in brief.detail, brief
    assert checks.probe_routing([], None, 0, 4, CLAIMED).verdict == "fail", "no probe arrived"
    unclaimed = checks.probe_routing(routed([1]), window, 0, 4, TelemetryProfile(claims=("request_log",)))
    assert unclaimed.verdict == "unsupported"


def test_the_request_whose_every_attempt_timed_out_gets_the_status_the_profile_documents():
    documented = replace(CLAIMED, timeout_status=502)
    after = {"timeouts": {"terminal": 1, "streaming": 2}}
    allowed = {"timeouts.terminal": (5, 1), "timeouts.streaming": (2,)}
    phases = [counters.CountedPhase("timeouts", ZERO, after, allowed, "held 7")]
    assert counters.timeouts(after, documented, phases, 502).verdict == "pass"
    wrong = counters.timeouts(after, documented, phases, 504)
    assert wrong.verdict == "fail", wrong
    assert wrong.detail == "the request whose every attempt timed out got 504, the profile documents 502", wrong
    assert counters.timeouts(after, CLAIMED, phases, 504).verdict == "pass", "undocumented: reported, not judged"


def test_attempts_a_request_record_lists_inline_are_its_attempt_log():
    """A release may log each attempt inside its request's record: a list of attempts, or a
    list of backends beside rc1's `upstream_outcomes`. Read only where no separate attempt
    record exists (never counted twice)."""
    phase = retry_phase()
    by_request = {"a": [(0, 429), (1, 200)], "b": [(2, 200)], "c": [(1, 503), (2, 503), (3, 200)]}
    listed = [
        {"final_status": 200, "attempts": [{"backend": b, "status": st} for b, st in chain]}
        for chain in by_request.values()
    ]
    beside = [
        {
            "final_status": 200,
            "upstream_outcomes": [str(st) for _, st in chain],
            "upstream_backends": [b for b, _ in chain],
        }
        for chain in by_request.values()
    ]
    for records in (listed, beside):
        judged = replace(phase, log_lines=[f"slurm_proxy_request {json.dumps(r)}" for r in records], origins=ORIGINS)
        result = checks.attempt_log([judged], CLAIMED)
        assert result.verdict == "pass" and result.metrics["attempts_logged"] == 6.0, result
        assert checks.request_log([judged], CLAIMED).verdict == "pass"
    shifted = [{**r, "upstream_backends": [(b + 1) % 4 for b in r["upstream_backends"]]} for r in beside]
    judged = replace(phase, log_lines=[f"slurm_proxy_request {json.dumps(r)}" for r in shifted], origins=ORIGINS)
    assert checks.attempt_log([judged], CLAIMED).verdict == "fail"
    both = with_attempt_records(
        replace(phase, log_lines=[f"slurm_proxy_request {json.dumps(r)}" for r in listed]),
        [{"backend": b, "status": st} for b, st in SERVED],
    )
    result = checks.attempt_log([both], CLAIMED)
    assert result.verdict == "pass" and result.metrics["attempts_logged"] == 6.0, "separate records, not twice"


def test_attempt_statuses_are_read_however_a_release_spells_them():
    spelled = [{"backend": b, "http_status": f"{st} Reason"} for b, st in SERVED]
    result = checks.attempt_log([with_attempt_records(retry_phase(), spelled)], CLAIMED)
    assert result.verdict == "pass", result
    # start-of-attempt records (a backend, no status yet) beside the full ones are not judged
    started = [{"backend": b, "event": "attempt_start"} for b, _ in SERVED]
    records = [*started, *[{"backend": b, "status": st} for b, st in SERVED]]
    assert checks.attempt_log([with_attempt_records(retry_phase(), records)], CLAIMED).verdict == "pass"
    # no response, however said: 0, 599, 504, a word, or no status and an error
    phases = [with_attempt_records(retry_phase(), [{"backend": b, "status": st} for b, st in SERVED])]
    for said in ({"status": 0}, {"status": 599}, {"status": None, "error": "ServerTimeoutError"}, {"error": "timeout"}):
        records = [{"backend": 0, **said}, *TIMED_OUT[1:]]
        result = checks.attempt_log([*phases, timeout_phase(records)], CLAIMED)
        assert result.verdict == "pass", (said, result)
    # a request record whose final status is a word is a request's, not an attempt with no backend
    worded = [*TIMED_OUT, {"final_status": "timeout", "upstream_outcomes": ["timeout", "200"]}]
    assert checks.attempt_log([*phases, timeout_phase(worded)], CLAIMED).verdict == "pass"


def test_incomplete_records_are_read_however_a_release_spells_the_flag_and_bytes():
    spelled = [{"incomplete": "true", "bytes_sent": "479"}, {"incomplete": 1, "bytes_sent": 959}]
    assert checks.incomplete_streams([cut_phase(spelled)], CLAIMED).verdict == "pass"
    no = [{"incomplete": "false", "bytes_sent": 479}, incomplete(479), incomplete(959)]
    assert checks.incomplete_streams([cut_phase(no)], CLAIMED).verdict == "pass", "false is not flagged"
    # a proxy that adds its own SSE error event: the client got more than the replica sent
    errored = cut_phase([incomplete(479 + 90), incomplete(959 + 90)], client_bytes=(479 + 90, 700))
    result = checks.incomplete_streams([errored], CLAIMED)
    assert result.verdict == "pass", result
    # counting only what it forwarded, not its error event: still within the bounds
    assert (
        checks.incomplete_streams(
            [replace(errored, log_lines=cut_phase([incomplete(479), incomplete(959)]).log_lines)], CLAIMED
        ).verdict
        == "pass"
    )
    assert checks.byte_bounds(700, 959) == (700, 959 + 95 + 1024)


def test_the_sut_attempt_records_are_placed_on_the_requests_of_the_same_backend_and_status():
    """The report's view: no request id in the SUT's records, so each is paired with the
    replicas' attempt of its backend and status, in order; one naming no served attempt, and
    a backend none of the replicas is, stay unplaced (and say nothing of what it named)."""
    records = [{"backend": b, "status": st} for b, st in SERVED] + [{"backend": "http://10.9.9.9:1", "status": 200}]
    placed = checks.placed_attempt_records(with_attempt_records(retry_phase(), records), CLAIMED)
    assert [(r.backend, r.status, r.request_id) for r in placed] == [
        ("0", "429", "a"), ("1", "200", "a"), ("2", "200", "b"), ("1", "503", "c"), ("2", "503", "c"),
        ("3", "200", "c"), ("?", "200", None),
    ]  # fmt: skip
    assert placed[0].attempt_started == 1.0 and placed[-1].attempt_started is None
    assert all(r.phase == "retry-429" for r in placed)


def test_timeouts_beyond_a_run_are_judged_not_driven_present_monotone_and_unmoved_where_none_happened():
    """rc1's profile puts both timeouts at 3600 s: no phase can drive them. A release whose
    counters exist, never fall and stay still where replicas answer at once passes, saying it
    was not driven (never a silent pass, never an unsupported that only --allow-unsupported
    lets through); one whose counter moves there, or falls, fails naming where."""
    slow = replace(CLAIMED, terminal_timeout_seconds=3600.0, streaming_timeout_seconds=3600.0)
    base = retry_phase()
    before, after = {**base.metrics_before, **ZERO}, {**base.metrics_after, **ZERO}
    quiet = [replace(base, name=name, metrics_before=before, metrics_after=after) for name in ("steady", "retry-429")]
    honest = counters.timeouts(ZERO, slow, [], None, quiet=quiet)
    assert honest.verdict == "pass" and honest.metrics["driven"] == 0.0, honest
    assert honest.detail.startswith(
        "not driven: timeouts.terminal, timeouts.streaming (the profile's timeouts (3600.0 s"
    )
    assert "unmoved in the 2 phases where none of their events could happen" in honest.observed
    moving = {"timeouts": {"terminal": 2, "streaming": 0}}
    busy = [quiet[0], replace(quiet[1], metrics_after={**quiet[1].metrics_after, **moving})]
    moved = counters.timeouts(moving, slow, [], None, quiet=busy)
    assert moved.verdict == "fail" and "retry-429: timeouts.terminal counted 2 where none of its events" in moved.detail
    reset = counters.timeouts(ZERO, slow, [], None, quiet=[replace(quiet[0], metrics_before={"timeouts": {
        "terminal": 3, "streaming": 0}})])  # fmt: skip
    assert (
        reset.verdict == "fail" and "timeouts.terminal fell between two readings of the run (3, 0, 0)" in reset.detail
    )
    missing = counters.timeouts({}, slow, [], None, quiet=quiet)
    assert missing.verdict == "fail" and missing.observed.startswith("the proxy's metrics have no"), "absent: no pass"
    assert counters.timeouts(ZERO, slow, [], None).verdict == "unsupported", "no quiet window: nothing judged"
    driven = timed_out(5, 2)
    assert driven.verdict == "pass" and driven.metrics["driven"] == 1.0, "a driven run says so"


RETRIED = (429, 500, 502, 503, 504)


def _failover_phase(*chains, name="failover-5xx"):
    """Each chain: (request id, [statuses in order], the client's status)."""
    upstream = [
        attempt(rid, i, status, 1.0 + i / 10) for rid, statuses, _ in chains for i, status in enumerate(statuses)
    ]
    client = [response(rid, status=got) for rid, _, got in chains]
    return telemetry_records.TelemetryPhase(name, client, upstream, {}, {})


def _every_status_met():
    return _failover_phase(
        ("a", [500, 502, 200], 200), ("b", [503, 504, 429], 429), ("c", [200], 200), name="met",
    )  # fmt: skip


def test_status_failover_passes_when_each_retried_status_was_tried_again_or_attempts_ran_out():
    result = checks.status_failover([_every_status_met()], RETRIED, 3)
    assert result.verdict == "pass", result
    assert result.observed == (
        "met at the replicas: 429: 1, 500: 1, 502: 1, 503: 1, 504: 1; 0 request(s) given up before 3 attempts, "
        "0 tried again on a replica already tried"
    )


def test_status_failover_fails_a_status_passed_on_with_attempts_left_and_names_it():
    given_up = _failover_phase(("d", [502], 502), ("e", [504], 504), ("f", [503, 200], 200))
    result = checks.status_failover([_every_status_met(), given_up], RETRIED, 3)
    assert result.verdict == "fail" and result.metrics["given_up"] == 2, result
    assert result.observed.endswith(
        "2 request(s) given up before 3 attempts (last status 502: 1, 504: 1), 0 tried again on a replica already tried"
    )
    assert result.detail == (
        "failover-5xx: request d's attempt 1 answered 502 by a replica, no attempt after it (the client got 502)"
    )


def test_status_failover_fails_a_retry_on_the_replica_that_just_failed():
    again = _failover_phase(("g", [500, 200], 200))
    again = replace(again, upstream=[attempt("g", 1, 500, 1.0), attempt("g", 1, 200, 1.1)])
    result = checks.status_failover([_every_status_met(), again], RETRIED, 3)
    assert result.verdict == "fail" and result.metrics["same_backend"] == 1 and result.metrics["given_up"] == 0
    assert result.detail == "failover-5xx: request g was sent to replica 1 again, not to another backend"


def test_status_failover_fails_when_a_retried_status_was_never_met():
    result = checks.status_failover([_failover_phase(("a", [503, 200], 200))], RETRIED, 3)
    assert result.verdict == "fail" and result.detail == (
        "never met at the replicas: 429, 500, 502, 504 (the rule was not exercised)"
    )


def test_a_504_a_replica_answered_matches_its_record_though_a_records_504_reads_as_no_response():
    """A proxy logs a replica's 504 as 504, which the reader takes for its own gateway timeout
    (no response): the served 504 reads the same, so a true log is not failed for it."""
    upstream = [attempt("a", 1, 504, 1.0), attempt("a", 2, 200, 1.1)]
    phase = telemetry_records.TelemetryPhase("failover-5xx", [response("a")], upstream, {}, {})
    records = [{"backend": 1, "status": 504}, {"backend": 2, "status": 200}]
    retried = with_attempt_records(retry_phase(), [{"backend": b, "status": st} for b, st in SERVED])
    result = checks.attempt_log([retried, with_attempt_records(phase, records)], CLAIMED)
    assert result.verdict == "pass" and result.metrics["attempts_unanswered"] == 0, result
    wrong = [{"backend": 2, "status": 504}, {"backend": 2, "status": 200}]  # the 504 named on the wrong backend
    result = checks.attempt_log([with_attempt_records(phase, wrong)], CLAIMED)
    assert result.verdict == "fail" and "not logged: 1x backend 1 status no response" in result.detail, result
