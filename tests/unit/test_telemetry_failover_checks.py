"""telemetry.connection_errors as a pure function: connection errors (refused, reset) are
retried on another backend; each part of the rule has a control that names its numbers."""

from dd_accept.acceptance.telemetry_failover_checks import connection_error_retries, connection_errors
from tests.unit.test_telemetry_checks import attempt, response

# a: reset on replica 1, then served by 2; b: refused on 0 (no replica saw it), served by 3; c: served by 2
UPSTREAM = [
    attempt("a", 1, None, 1.0, outcome="reset", size=0),
    attempt("a", 2, 200, 1.1),
    attempt("b", 3, 200, 1.0),
    attempt("c", 2, 200, 1.0),
]
CLIENT = [response("a"), response("b"), response("c")]
# the proxy counted 5 attempts (4 served, 1 refused) and 2 connection-error retries
RC1_COUNTED = (5.0, {"connection_error": 2.0})


def _judge(client=CLIENT, upstream=UPSTREAM, counted=RC1_COUNTED):
    return connection_errors(client, upstream, counted, refusing=0, resetting=1)


def test_every_request_completing_once_with_its_connection_errors_counted_passes():
    result = _judge()
    assert result.verdict == "pass", result
    assert result.metrics == {"requests": 3, "completed": 3, "resets_seen": 1, "served_twice": 0,
                              "attempts_counted": 5, "refused_attempts": 1, "connection_error_retries": 2}  # fmt: skip
    assert result.observed.endswith("the proxy counted 5 attempts (1 reached no replica), 2 connection-error retries")
    assert _judge(counted=None).verdict == "pass", "unclaimed counters: the failover alone is judged"


def test_a_proxy_that_does_not_retry_connection_errors_fails_naming_what_the_client_got():
    # a's reset and b's refusal each ended the request: 502, no retry
    client = [response("a", status=502, outcome="http_error"), response("b", status=502, outcome="http_error"),
              response("c")]  # fmt: skip
    upstream = [UPSTREAM[0], UPSTREAM[3]]
    result = _judge(client, upstream, (3.0, {}))
    assert result.verdict == "fail" and result.metrics["completed"] == 1, result
    assert "2 of 3 requests did not complete: 2x 502" in result.detail
    assert "1 reset requests were never served by another backend" in result.detail
    assert "connection-error retries counted 0, observed 2 (1 resets seen, 1 attempts that reached no replica)" in (
        result.detail
    )


def test_a_phase_in_which_no_connection_error_happened_fails_rather_than_passing_on_nothing():
    result = _judge(upstream=UPSTREAM[1:], counted=(3.0, {}))
    assert result.verdict == "fail" and result.detail.startswith("no connection error happened"), result


def test_a_request_served_twice_after_a_retry_fails():
    twice = [*UPSTREAM, attempt("c", 3, 200, 1.2)]
    result = _judge(upstream=twice, counted=(6.0, {"connection_error": 2.0}))
    assert result.verdict == "fail" and "1 requests were served more than once" in result.detail, result


def test_miscounted_retries_or_attempts_fail_with_both_numbers():
    under = _judge(counted=(5.0, {"connection_error": 1.0}))
    assert under.verdict == "fail" and "connection-error retries counted 1, observed 2" in under.detail
    fewer = _judge(counted=(3.0, {"connection_error": 2.0}))
    assert fewer.verdict == "fail" and "counted 3 attempts, fewer than the 4 served" in fewer.detail
    missing = _judge(counted=(None, None))
    assert missing.verdict == "fail" and "no attempts or no retries by reason" in missing.detail


def test_connection_error_retries_are_every_reason_that_names_no_status_and_no_timeout():
    assert connection_error_retries({"http_429": 3.0, "connection_error": 2.0, "timeout": 1.0}) == 2.0
    assert connection_error_retries({"ClientConnectorError": 1.0, "ServerDisconnectedError": 2, "503": 4}) == 3.0
    assert connection_error_retries({}) == 0.0 and connection_error_retries(None) is None
