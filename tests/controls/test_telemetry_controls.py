"""Controls for the telemetry checks, each asserting the numbers behind its verdict.

rc1 counts its attempts and retries truly but writes none of the records it claims (its
per-request record is logged at INFO with no handler) and counts no expired, stale or
discarded connection and no timeout. `telemetry-logged` is rc1 with its records emitted (as JSON lines),
cut streams logged (those its own drain bound ends at its window too), and connections and
timeouts counted (keep-alive and read timeout 1 s, as its profile says; a terminal timeout
where no retry followed): the positive control of every telemetry check.
`telemetry-miscounted` is that (its lines logfmt), counting one attempt per request, logging only the last,
counting stale connections as expired and streaming timeouts as terminal, and exiting at its
drain window without a record of the streams it cuts: the negative control of each, for its
own reason.
"""

import re

import pytest

from dd_accept.acceptance import telemetry_counter_checks as counter_checks
from dd_accept.acceptance.phases import scenario_runner
from dd_accept.acceptance.telemetry import PHASES, TelemetryOptions, TelemetryRun, run_telemetry
from dd_accept.base.progress import ProgressWriter
from dd_accept.deployment import RunDirectory
from tests.controls.controls import run_with_fault, stop_story
from tests.helpers import assert_the_dry_run_planned_what_the_run_did

pytestmark = pytest.mark.cluster
OPTIONS = TelemetryOptions()
CUT = 3  # replica 3 cuts two streams after 2 chunks, replica 2 one after 5
# whole responses: four phases of 24, less the cut streams, and the exhausted phase's 5xx
RESPONSES = 4 * OPTIONS.requests - CUT + OPTIONS.exhausted_requests
# a SUT that reports connection counters also gets the expired and discarded phases judged
# by the record checks (the stale window's requests are judged by the stale counter alone)
LIFECYCLE_RESPONSES = OPTIONS.requests + 2 * OPTIONS.replicas
# attempts the replicas serve in rc1's five phases: one per request, one more per forced 429
# and 5xx, three per exhausted request
ATTEMPTS = 4 * OPTIONS.requests + OPTIONS.forced_429 + sum(OPTIONS.forced_failures) + 3 * OPTIONS.exhausted_requests


DRAINED = OPTIONS.drain_streams  # longer than the drain allowance, running at TERM: the drain bound ends them
LONE = OPTIONS.replicas - 1  # the request sent alone while every replica holds: each of its 3 attempts times out


def _seen(result, path):
    """(counted, fewest the replicas' view allows, most it allows) for a counter path."""
    key = path.replace(".", "_")
    return tuple(result.metrics[f"{key}_{what}"] for what in ("counted", "seen_min", "seen"))


def _connection_errors_retried(checks):
    """rc1 retries connection errors on another backend (the brief): with replica 0 refusing
    and replica 1 resetting, every request completed once, and its counters say so."""
    failover = checks["telemetry.connection_errors"]
    numbers = failover.metrics
    assert failover.verdict == "pass", failover
    assert numbers["completed"] == numbers["requests"] == OPTIONS.requests and numbers["served_twice"] == 0, failover
    assert 1 <= numbers["resets_seen"] <= OPTIONS.connection_resets, failover
    # least-connections tries replica 0 first while it refuses: attempts no replica saw
    assert numbers["refused_attempts"] >= 1, failover
    assert numbers["connection_error_retries"] == numbers["resets_seen"] + numbers["refused_attempts"], failover


def _telemetry(allocation, run, profile, progress):
    return run_telemetry(allocation, run, profile, OPTIONS, progress)


def _shaped_telemetry(shapes):
    """The scenario, keeping what shape the proxy's marked lines came in: `shapes` gets the
    count of lines that are JSON objects and of logfmt lines (`level=... msg="..."`)."""

    def scenario(allocation, run, profile, progress):
        result = _telemetry(allocation, run, profile, progress)
        marked = [
            line for line in run.path("proxy.log")[1].read_text().splitlines() if profile.telemetry.log_marker in line
        ]
        shapes["marked"] = len(marked)
        shapes["json"] = sum(line.startswith('{"time": ') and line.endswith('"}') for line in marked)
        shapes["logfmt"] = sum(line.startswith("level=info ") and ' msg="slurm_proxy_' in line for line in marked)
        return result

    return scenario


def test_rc1_counts_truly_but_writes_no_record_it_claims(sut_allocation, sut_profile, sut_cluster):
    since = len(sut_cluster.records)
    result = _telemetry(sut_allocation, RunDirectory.create(sut_cluster), sut_profile, ProgressWriter(None, "t"))
    checks = {c.id: c for c in result.checks}
    counters = checks["telemetry.attempt_counters"]
    assert counters.verdict == "pass", counters
    # 6 forced 429s on replica 0, 4 and 2 forced 5xx on replicas 1 and 2, all retried; the
    # exhausted phase's requests each retried twice before the client got the third 5xx
    retries = OPTIONS.forced_429 + sum(OPTIONS.forced_failures) + 2 * OPTIONS.exhausted_requests
    assert counters.metrics["retries_observed"] == retries, counters
    assert "retry-429: 24 requests, 30 attempts, retries {http_429: 6}" in counters.observed
    # the exhausted requests, one per retried 5xx that every replica answers: 3 attempts each
    for status in (500, 502, 503, 504):
        assert f"exhausted-{status}: 1 requests, 3 attempts, retries {{http_{status}: 2}}" in counters.observed
    log = checks["telemetry.request_log"]
    assert log.verdict == "fail" and log.metrics["records"] == 0 and log.metrics["responses"] == RESPONSES, log
    attempts = checks["telemetry.attempt_log"]
    assert attempts.verdict == "fail" and attempts.metrics["attempts_logged"] == 0, attempts
    assert attempts.metrics["attempts_served"] == ATTEMPTS, attempts
    cut = checks["telemetry.incomplete_streams"]
    assert cut.verdict == "fail" and cut.metrics["cut_streams"] == CUT + DRAINED, cut
    assert cut.metrics["logged_incomplete"] == 0 and cut.metrics["drain_cut_streams"] == DRAINED, cut
    # rc1 does not bound its drain (the brief's fact 3): still streaming at the allowance, it is KILLed
    print(cut.observed, "|", cut.detail, "\n" + stop_story(sut_cluster.records, since))
    assert "was KILLed: it ended no stream at its drain window itself" in cut.detail, cut.observed
    assert "drain: endpoint exit 137 " in cut.observed and "), KILL after " in cut.observed, cut.observed
    for name in ("telemetry.connection_lifecycle", "telemetry.timeouts"):
        assert checks[name].verdict == "fail" and checks[name].observed.startswith("the proxy's metrics have no")
    leaks = checks["telemetry.no_payloads"]
    assert leaks.verdict == "pass", "rc1 writes no record, and so no payload"
    _connection_errors_retried(checks)
    # every status rc1 retries was met (replica 1: 500, 502, 503, 504; replica 2: 504, 503; in
    # the exhausted requests each status 3 times) and retried while attempts were left
    failover = checks["telemetry.status_failover"]
    assert failover.verdict == "pass" and failover.metrics["given_up"] == 0, failover
    assert failover.observed.startswith("met at the replicas: 429: 6, 500: 4, 502: 4, 503: 5, 504: 5;"), failover
    routing = checks["telemetry.probe_routing"]
    # rc1 counts its probe as a request in flight on replica 0: requests one at a time avoid it
    assert routing.verdict == "fail" and routing.metrics["probed_requests"] == 0, routing
    assert routing.metrics["in_window"] >= OPTIONS.replicas and routing.metrics["others_min"] >= 1, routing
    # what `run telemetry --dry-run` prints is what this run submitted, both ways
    assert_the_dry_run_planned_what_the_run_did(sut_cluster.records, scenario="telemetry", job=sut_allocation.job_id)


def test_emitted_records_pass_the_record_checks(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    """Its records are written as JSON lines, the record escaped inside the message: a correct
    release's production logging, which a reader of the raw text would take for no record."""
    shapes = {}
    scenario = _shaped_telemetry(shapes)
    checks = run_with_fault(scenario, "telemetry-logged", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    assert shapes["marked"] == shapes["json"] > 0, shapes
    log = checks["telemetry.request_log"]
    responses = RESPONSES + LIFECYCLE_RESPONSES
    assert log.verdict == "pass" and log.metrics["records"] == log.metrics["responses"] == responses, log
    # every forced status made a request fail over; every exhausted request did
    most = OPTIONS.forced_429 + sum(OPTIONS.forced_failures) + OPTIONS.exhausted_requests
    assert OPTIONS.exhausted_requests + 3 <= log.metrics["failovers"] <= most, log
    counters = checks["telemetry.attempt_counters"]
    assert counters.verdict == "pass", counters
    attempts = checks["telemetry.attempt_log"]
    assert attempts.verdict == "pass", attempts
    assert attempts.metrics["attempts_logged"] == attempts.metrics["attempts_served"] >= ATTEMPTS, attempts
    # the timeout phases' attempts are logged too: the lone request's three, held before the first byte
    assert attempts.metrics["attempts_unanswered"] >= 3, attempts
    lifecycle = checks["telemetry.connection_lifecycle"]
    assert lifecycle.verdict == "pass" and lifecycle.metrics["judged"] == 3, lifecycle
    stale, expired, discarded = (_seen(lifecycle, f"connections.{k}") for k in ("stale", "expired", "discarded"))
    # 8 requests at 4 at a time leave at least one pooled connection on each replica
    assert OPTIONS.replicas <= stale[1] <= stale[0] <= stale[2], lifecycle
    assert OPTIONS.replicas <= expired[1] <= expired[0] <= expired[2], lifecycle
    assert discarded == (OPTIONS.requests,) * 3, "every response of the phase said Connection: close"
    timeouts = checks["telemetry.timeouts"]
    assert timeouts.verdict == "pass" and timeouts.metrics["judged"] == 2, timeouts
    terminal, streaming = _seen(timeouts, "timeouts.terminal"), _seen(timeouts, "timeouts.streaming")
    # the variant counts a terminal timeout where no retry followed: the lone request's last attempt
    assert terminal[:2] == (1, 1) and LONE < terminal[2] <= LONE + OPTIONS.held_streams, timeouts
    assert streaming[0] == streaming[1] == streaming[2] >= 1, timeouts
    assert "the request sent alone got 502" in timeouts.observed, "rc1's documented status for it (its profile)"
    # the cut phase's streams, the one replica 2 cuts among the timeouts, and each abandoned mid-stream
    cut = checks["telemetry.incomplete_streams"]
    assert cut.verdict == "pass" and "in cut, timeouts, drain" in cut.observed, cut
    assert cut.metrics["logged_with_bytes"] == cut.metrics["cut_streams"] == CUT + 1 + streaming[2] + DRAINED, cut
    # it ended both drain streams at its window, by itself, and logged each with its bytes
    assert cut.metrics["drain_cut_streams"] == cut.metrics["drain_logged_with_bytes"] == DRAINED, cut
    leaks = checks["telemetry.no_payloads"]
    assert leaks.verdict == "pass" and leaks.metrics["lines"] >= responses, f"records without payloads {leaks}"
    _connection_errors_retried(checks)
    routing = checks["telemetry.probe_routing"]
    assert routing.verdict == "pass" and routing.metrics["probed_requests"] >= 1, routing
    assert routing.metrics["in_window"] >= OPTIONS.replicas, routing


def test_miscounted_attempts_and_last_attempt_records_fail_each_for_its_reason(
    sut_wheelhouse, sut_image, sut_profile, tmp_path
):
    shapes = {}
    scenario = _shaped_telemetry(shapes)
    checks = run_with_fault(scenario, "telemetry-miscounted", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    assert shapes["marked"] == shapes["logfmt"] > 0, f"its records are logfmt lines, read all the same {shapes}"
    counters = checks["telemetry.attempt_counters"]
    assert counters.verdict == "fail" and "retry-429: attempts 24, observed 30" in counters.detail, counters
    log = checks["telemetry.request_log"]
    assert log.verdict == "fail" and log.metrics["records"] == log.metrics["responses"], "one record each, wrong"
    assert "retry-429: 24 responses, 24 records; not logged: 6x attempts 2 [429,200] -> 200" in log.detail, log
    # it exits at its drain window with its streams unlogged; the streams cut before are still logged
    cut = checks["telemetry.incomplete_streams"]
    assert cut.verdict == "fail", cut
    assert cut.detail == f"{DRAINED} cut streams not logged with their bytes (drain {DRAINED})", cut
    assert cut.metrics["drain_cut_streams"] == DRAINED and cut.metrics["drain_logged_with_bytes"] == 0, cut
    assert cut.metrics["logged_with_bytes"] == cut.metrics["logged_incomplete"] == cut.metrics["cut_streams"] - DRAINED
    attempts = checks["telemetry.attempt_log"]
    assert attempts.verdict == "fail", attempts
    assert attempts.metrics["attempts_logged"] == attempts.metrics["attempts_served"], "every attempt logged, wrongly"
    # a shifted backend shows wherever the replicas did not serve alike: always where one answered 429
    assert "retry-429: 30 attempts served, 30 logged; not logged: " in attempts.detail, attempts
    lifecycle = checks["telemetry.connection_lifecycle"]
    stale = _seen(lifecycle, "connections.stale")
    assert lifecycle.verdict == "fail" and stale[0] == 0 and stale[1] >= 1, lifecycle
    allowed = counter_checks.allowed_text(tuple(range(int(stale[1]), int(stale[2]) + 1)))
    # and the stale window, where the proxy closed nothing idle, counts what it found dead as
    # expired: shown where that lies outside what the replicas allow there (CI once measured a
    # count inside it, which the check rightly let pass)
    shifted = re.fullmatch(
        rf"stale: connections\.stale counted 0, the replicas saw {allowed}"
        r"(?:; stale: connections\.expired counted (\d+) where the replicas saw (\d+)(?: to \d+)? of its events)?",
        lifecycle.detail,
    )
    assert shifted and (shifted[1] is None or int(shifted[1]) >= stale[1] + int(shifted[2])), lifecycle
    expired = _seen(lifecycle, "connections.expired")
    assert expired[1] <= expired[0] <= expired[2], f"untouched: what expired is still counted {lifecycle}"
    assert _seen(lifecycle, "connections.discarded") == (OPTIONS.requests,) * 3, "untouched"
    timeouts = checks["telemetry.timeouts"]
    terminal, streaming = _seen(timeouts, "timeouts.terminal"), _seen(timeouts, "timeouts.streaming")
    assert timeouts.verdict == "fail" and streaming[0] == 0 and streaming[2] >= 1, timeouts
    assert terminal[:2] == (1 + streaming[2], 1) and terminal[2] > LONE, "every streaming timeout counted as terminal"
    assert timeouts.detail == (
        f"timeouts: timeouts.terminal counted {terminal[0]:g}, the replicas saw 1 or {terminal[2]:g}; "
        f"timeouts: timeouts.streaming counted 0, the replicas saw {streaming[2]:g}"
    ), timeouts
    leaks = checks["telemetry.no_payloads"]
    assert leaks.verdict == "fail" and leaks.metrics["prompt_lines"] == leaks.metrics["header_lines"] > 0, leaks
    assert leaks.metrics["response_lines"] == 0, "responses are not written"
    assert leaks.detail.startswith("prompt text on the proxy's output (line "), leaks
    assert checks["telemetry.probe_routing"].verdict == "pass", "untouched: probes still out of least-connections"


def _phases(*titles):
    """The telemetry scenario's phases titled `titles` (exactly), with its judge and stops."""
    chosen = [p for p in PHASES if p.title in titles or p.kind == "judge" or p.teardown or p.kind == "deploy"]
    assert len([p for p in chosen if p.title in titles]) == len(titles), f"phases {titles} are not all declared"
    runner = scenario_runner("telemetry", chosen, TelemetryRun)
    return lambda allocation, run, profile, progress: runner(allocation, run, profile, OPTIONS, progress)


def test_a_proxy_that_passes_on_500_502_and_504_is_caught_by_status_failover(
    sut_wheelhouse, sut_image, sut_profile, tmp_path
):
    """Negative control of telemetry.status_failover: the proxy retries only 429 and 503.
    Replica 1 answers 500, 502, 503 and 504, replica 2 504 and 503: the three other 5xx
    reach the client. Its counters stay true (attempt_counters, untouched, passes)."""
    scenario = _phases(
        "replicas 1 and 2 answer the 5xx statuses the proxy retries", "requests while replicas 1 and 2 answer 5xx",
        "replicas answer what they serve again",
    )  # fmt: skip
    checks = run_with_fault(scenario, "no-5xx-failover", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    failover = checks["telemetry.status_failover"]
    print("no-5xx-failover:", failover.observed, "|", failover.detail)
    assert failover.verdict == "fail" and failover.metrics["given_up"] == 4, failover
    assert failover.observed.endswith(
        "4 request(s) given up before 3 attempts (last status 500: 1, 502: 1, 504: 2), 0 tried again on a replica "
        "already tried"
    ), failover
    assert re.search(r"failover-5xx: request \S+'s attempt 1 answered 5\d\d by a replica, no attempt after it \(the "
                     r"client got 5\d\d\)", failover.detail), failover  # fmt: skip
    assert checks["telemetry.attempt_counters"].verdict == "pass", checks["telemetry.attempt_counters"]


def test_a_proxy_that_sets_failing_backends_aside_still_meets_every_status_it_retries(
    sut_wheelhouse, sut_image, sut_profile, tmp_path
):
    """Positive control of telemetry.status_failover: `passive-ejection` (correct) sets a
    backend aside for 10 s after a 5xx it retried. In the failover phase replicas 1 and 2 then
    show it only their first status (500, 504): their 502 and 503 are never reached there. In
    the exhausted requests every replica answers the request's status, so each is met at
    every attempt, whichever backends are set aside: the check passes."""
    scenario = _phases(
        "replica 0 answers 429 with Retry-After", "requests while replica 0 answers 429",
        "replicas 1 and 2 answer the 5xx statuses the proxy retries", "requests while replicas 1 and 2 answer 5xx",
        "replicas answer what they serve again",
        "requests one at a time, every replica answering each a 5xx the proxy retries",
    )  # fmt: skip
    checks = run_with_fault(scenario, "passive-ejection", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    counters = checks["telemetry.attempt_counters"]
    failover = checks["telemetry.status_failover"]
    print("passive-ejection:", counters.observed, "|", failover.observed)
    # the reason the control exists: the variant did set replicas 1 and 2 aside after one 5xx each
    # (not which: a phase stretched past the 10 s aside by a busy machine meets one more, CI saw 503)
    retried = re.search(r"failover-5xx: 24 requests, \d+ attempts, retries \{([^}]*)\}", counters.observed)
    assert retried and set(re.findall(r"http_(\d+)", retried[1])) < {"500", "502", "503", "504"}, counters
    for status in (500, 502, 503, 504):
        assert f"exhausted-{status}: 1 requests, 3 attempts, retries {{http_{status}: 2}}" in counters.observed
    assert counters.verdict == "pass", counters
    assert failover.verdict == "pass" and failover.metrics["given_up"] == failover.metrics["same_backend"] == 0, (
        failover
    )
    # each status three times in the exhausted requests, and what the failover phase met beside
    met = {int(k): int(n) for k, n in re.findall(r"(\d{3}): (\d+)", failover.observed.split(";")[0])}
    assert met[429] == 6 and all(met.get(status, 0) >= 3 for status in (500, 502, 503, 504)), failover


def test_a_proxy_that_does_not_retry_connection_errors_fails_connection_errors_alone(
    sut_wheelhouse, sut_image, sut_profile, tmp_path
):
    """Negative control of telemetry.connection_errors: a refused or reset attempt ends its
    request with 502. Statuses still fail over, so the checks it does not touch keep rc1's
    verdicts: its counters are true, it writes no record and no payload."""
    scenario = _phases(  # 429s retried (what attempt_counters sees), then the refusals and resets
        "replica 0 answers 429 with Retry-After", "requests while replica 0 answers 429",
        "replicas answer what they serve again",
        "replica 0 refuses connections, replica 1 resets each request it reads",
        "requests while replicas refuse and reset connections", "replicas 0 and 1 serve again",
    )  # fmt: skip
    checks = run_with_fault(scenario, "no-connection-retry", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    failover = checks["telemetry.connection_errors"]
    numbers = failover.metrics
    print("no-connection-retry:", failover.observed, "|", failover.detail)
    assert failover.verdict == "fail" and numbers["completed"] < numbers["requests"] == OPTIONS.requests, failover
    failed = int(numbers["requests"] - numbers["completed"])
    assert f"{failed} of {OPTIONS.requests} requests did not complete: {failed}x 502" in failover.detail, failover
    # each request whose first attempt met a connection error got the 502: a reset or a refusal
    assert failed == numbers["resets_seen"] + numbers["refused_attempts"] and numbers["resets_seen"] >= 1, failover
    assert numbers["connection_error_retries"] == 0, "nothing was retried, and the counter says so"
    assert checks["telemetry.attempt_counters"].verdict == "pass", checks["telemetry.attempt_counters"]
    assert checks["telemetry.no_payloads"].verdict == "pass"
    assert checks["telemetry.request_log"].verdict == "fail" and checks["telemetry.request_log"].metrics["records"] == 0
