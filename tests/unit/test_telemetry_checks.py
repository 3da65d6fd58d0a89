"""The telemetry checks as pure functions: the SUT's counters and records against what the
replicas and the client saw, phase by phase; unclaimed is unsupported, never pass."""

import json
from dataclasses import replace

import pytest

from dd_accept.acceptance import telemetry_checks as checks
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
    return checks.TelemetryPhase(name, client, upstream, before, after, lines, replicas=4)


def test_counters_that_moved_by_what_the_replicas_and_client_saw_pass():
    result = checks.attempt_counters([retry_phase()], CLAIMED)
    assert result.verdict == "pass", result
    assert "retry-429: 3 requests, 6 attempts, retries {http_429: 1, http_503: 2}" in result.observed
    assert result.metrics["retries_observed"] == 3


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
    steady = checks.TelemetryPhase(
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
    return checks.TelemetryPhase("cut", client, upstream, {}, {}, lines, 4)


def incomplete(size):
    return {"incomplete": True, "bytes_sent": size, "final_status": 200}


def test_each_cut_stream_is_logged_with_bytes_between_what_the_client_got_and_the_replica_sent():
    result = checks.incomplete_streams([cut_phase([incomplete(479), incomplete(959)])], CLAIMED)
    assert result.verdict == "pass" and result.metrics["logged_with_bytes"] == 2, result
    assert "client got / replica sent: 479/479, 700/959 bytes" in result.observed
    between = checks.incomplete_streams([cut_phase([incomplete(479), incomplete(800)])], CLAIMED)
    assert between.verdict == "pass", "the client's reader may drop what it buffered when the stream broke"
    for sizes in ((479, 12), (479, 1000), (479, 479)):  # too few, more than the replica sent, one stream's twice
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
    phase = checks.TelemetryPhase("exhausted", [response("x", 503, "http_error")], upstream, before, after, [], 3)
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
    assert checks.timeouts({}, nothing).verdict == "unsupported"
    missing = checks.connection_lifecycle({"connections": {"opened": 3}}, CLAIMED)
    assert missing.verdict == "fail" and "no connections.expired, connections.stale, connections.discarded" in (
        missing.observed
    )
    assert checks.timeouts([], CLAIMED).observed == "the proxy's metrics are not a JSON object"
    present = {"timeouts": {"terminal": 0, "streaming": 0}}
    reported = checks.timeouts(present, CLAIMED)
    assert reported.verdict == "unsupported" and reported.detail.startswith("not judged")


def test_an_unknown_claim_is_refused():
    with pytest.raises(ValueError, match="unknown tracing"):
        TelemetryProfile(claims=("tracing",))
