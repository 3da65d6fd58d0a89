"""Controls for the telemetry checks, each asserting the numbers behind its verdict.

rc1 counts its attempts and retries truly but writes none of the records it claims (its
per-request record is logged at INFO with no handler) and counts no expired, stale or
discarded connection and no timeout. `telemetry-logged` is rc1 with its records emitted
and cut streams logged: the positive control of the record checks. `telemetry-miscounted`
is that, counting one attempt per request and logging only the last: the negative control
of the counters and the records, each for its own reason.
"""

import pytest

from dd_accept.acceptance.telemetry import TelemetryOptions, run_telemetry
from dd_accept.base.progress import ProgressWriter
from dd_accept.fixtures.deployment import RunDirectory
from tests.controls.controls import run_with_fault

pytestmark = pytest.mark.cluster
OPTIONS = TelemetryOptions()
CUT = 3  # replica 3 cuts two streams after 2 chunks, replica 2 one after 5
# whole responses: four phases of 24, less the cut streams, and the exhausted phase's 503s
RESPONSES = 4 * OPTIONS.requests - CUT + OPTIONS.exhausted_requests


def _telemetry(allocation, run, profile, progress):
    return run_telemetry(allocation, run, profile, OPTIONS, progress)


def test_rc1_counts_truly_but_writes_no_record_it_claims(sut_allocation, sut_profile, sut_cluster):
    result = _telemetry(sut_allocation, RunDirectory.create(sut_cluster), sut_profile, ProgressWriter(None, "t"))
    checks = {c.id: c for c in result.checks}
    counters = checks["telemetry.attempt_counters"]
    assert counters.verdict == "pass", counters
    # 6 forced 429s on replica 0, 4 forced 503s on each of replicas 1 and 2, all retried; the
    # exhausted phase's requests each retried twice before the client got the third 503
    retries = OPTIONS.forced_429 + 2 * OPTIONS.forced_503 + 2 * OPTIONS.exhausted_requests
    assert counters.metrics["retries_observed"] == retries, counters
    assert "retry-429: 24 requests, 30 attempts, retries {http_429: 6}" in counters.observed
    assert "exhausted: 4 requests, 12 attempts, retries {http_503: 8}" in counters.observed
    log = checks["telemetry.request_log"]
    assert log.verdict == "fail" and log.metrics["records"] == 0 and log.metrics["responses"] == RESPONSES, log
    cut = checks["telemetry.incomplete_streams"]
    assert cut.verdict == "fail" and cut.metrics["cut_streams"] == CUT, cut
    assert cut.metrics["logged_incomplete"] == 0
    for name in ("telemetry.connection_lifecycle", "telemetry.timeouts"):
        assert checks[name].verdict == "fail" and checks[name].observed.startswith("the proxy's metrics have no")


def test_emitted_records_pass_the_record_checks(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    checks = run_with_fault(_telemetry, "telemetry-logged", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    log = checks["telemetry.request_log"]
    assert log.verdict == "pass" and log.metrics["records"] == log.metrics["responses"] == RESPONSES, log
    # every forced status made a request fail over; every exhausted request did
    most = OPTIONS.forced_429 + 2 * OPTIONS.forced_503 + OPTIONS.exhausted_requests
    assert OPTIONS.exhausted_requests + 3 <= log.metrics["failovers"] <= most, log
    cut = checks["telemetry.incomplete_streams"]
    assert cut.verdict == "pass" and cut.metrics["logged_with_bytes"] == CUT, cut
    assert checks["telemetry.attempt_counters"].verdict == "pass"
    assert checks["telemetry.timeouts"].verdict == "fail", "untouched: still no timeout counters"


def test_miscounted_attempts_and_last_attempt_records_fail_each_for_its_reason(
    sut_wheelhouse, sut_image, sut_profile, tmp_path
):
    checks = run_with_fault(_telemetry, "telemetry-miscounted", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    counters = checks["telemetry.attempt_counters"]
    assert counters.verdict == "fail" and "retry-429: attempts 24, observed 30" in counters.detail, counters
    log = checks["telemetry.request_log"]
    assert log.verdict == "fail" and log.metrics["records"] == log.metrics["responses"], "one record each, wrong"
    assert "retry-429: 24 responses, 24 records; not logged: 6x attempts 2 [429,200] -> 200" in log.detail, log
    assert checks["telemetry.incomplete_streams"].verdict == "pass", "untouched: cut streams still logged"
