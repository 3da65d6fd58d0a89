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
    assert garbled.verdict == "fail" and "1 records without attempts" in garbled.detail


def test_an_incomplete_stream_is_matched_by_the_bytes_sent():
    upstream = [attempt("a", 3, 200, 1.0, outcome="cut", size=479), attempt("b", 0, 200, 1.0)]
    client = [response("a", outcome="error", size=479), response("b")]
    record = {"incomplete": True, "bytes_sent": 479, "final_status": 200}
    phase = checks.TelemetryPhase("cut", client, upstream, {}, {}, [f"slurm_proxy_request {json.dumps(record)}"], 4)
    result = checks.incomplete_streams(phase, CLAIMED)
    assert result.verdict == "pass" and result.metrics["logged_with_bytes"] == 1, result
    wrong_bytes = replace(phase, log_lines=[f"slurm_proxy_request {json.dumps(record | {'bytes_sent': 12})}"])
    assert checks.incomplete_streams(wrong_bytes, CLAIMED).verdict == "fail"
    unlogged = checks.incomplete_streams(replace(phase, log_lines=[]), CLAIMED)
    assert unlogged.verdict == "fail" and "0 records with incomplete=true" in unlogged.observed
    assert checks.incomplete_streams(None, CLAIMED).verdict == "fail"


def test_unclaimed_is_unsupported_never_pass_and_claimed_counters_must_exist():
    nothing = TelemetryProfile()
    assert checks.request_log([retry_phase()], nothing).verdict == "unsupported"
    assert checks.attempt_counters([retry_phase()], nothing).verdict == "unsupported"
    assert checks.timeouts({}, nothing).verdict == "unsupported"
    missing = checks.connection_lifecycle({"connections": {"opened": 3}}, CLAIMED)
    assert missing.verdict == "fail" and "no connections.expired, connections.stale, connections.discarded" in (
        missing.observed
    )
    present = {"timeouts": {"terminal": 0, "streaming": 0}}
    reported = checks.timeouts(present, CLAIMED)
    assert reported.verdict == "unsupported" and reported.detail.startswith("not judged")


def test_an_unknown_claim_is_refused():
    with pytest.raises(ValueError, match="unknown tracing"):
        TelemetryProfile(claims=("tracing",))
