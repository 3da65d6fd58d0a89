"""Negative controls for the overload checks: faults in the SUT's proxy (rc1 wheel variants).

Each control asserts that the targeted check fails for the fault's reason (its observed
numbers show the fault) and that checks the fault does not touch still pass.
"""

import pytest

from dd_accept import deployment
from dd_accept.acceptance import overload_admission, overload_checks
from dd_accept.acceptance.overload import OverloadOptions
from dd_accept.base.results import ScenarioResult
from tests.controls.controls import overload_phases, overload_without_late_rounds, run_against_fault, run_with_fault

pytestmark = pytest.mark.cluster


def test_no_failover_is_caught_by_partial_completes_and_failover(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    chosen = ("overload.partial.completes", "overload.partial.failover", "overload.total.retry_after")
    checks = run_against_fault("no-failover", sut_wheelhouse, sut_image, sut_profile, tmp_path, checks=chosen)
    completes, failover = checks["overload.partial.completes"], checks["overload.partial.failover"]
    assert completes.verdict == "fail" and "429:" in completes.observed
    assert failover.verdict == "fail" and failover.observed.startswith("0 request(s) failed over")
    assert checks["overload.total.retry_after"].verdict == "pass"


def test_five_attempts_is_caught_by_total_attempts(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    chosen = ("overload.total.attempts", "overload.partial.completes", "overload.total.admission_decrease")
    checks = run_against_fault("five-attempts", sut_wheelhouse, sut_image, sut_profile, tmp_path, checks=chosen)
    attempts = checks["overload.total.attempts"]
    assert attempts.verdict == "fail" and "attempts per 429: 5:" in attempts.observed
    assert checks["overload.partial.completes"].verdict == "pass"
    assert checks["overload.total.admission_decrease"].verdict == "pass"


def test_lost_retry_after_is_caught_by_total_retry_after(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    chosen = ("overload.total.retry_after", "overload.total.attempts")
    checks = run_against_fault("retry-after-lost", sut_wheelhouse, sut_image, sut_profile, tmp_path, checks=chosen)
    retry_after = checks["overload.total.retry_after"]
    assert retry_after.verdict == "fail" and "None:" in retry_after.observed
    assert checks["overload.total.attempts"].verdict == "pass"


def test_a_substituted_retry_after_is_told_from_the_replicas_value(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    """The proxy's own fallback (7) differs from the replicas' value (3) by design."""
    scenario = overload_without_late_rounds()
    checks = run_with_fault(scenario, "retry-after-substituted", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    retry_after = checks["overload.total.retry_after"]
    assert retry_after.verdict == "fail" and "Retry-After values: 7.0:" in retry_after.observed, retry_after
    assert "substituted its fallback" in retry_after.detail
    assert checks["overload.total.attempts"].verdict == "pass"
    assert checks["overload.admission.rejects"].verdict == "pass", "the replicas still answer 3"


def test_admission_that_never_rejects_is_a_failed_check_not_an_error(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    """A SUT fault the scenario waits on is judged (exit 1), never 'could not be judged'. No
    record gets through an overloaded replica that never rejects, so each phase lasts as long
    as the client's deadline: shorter ones here show the same findings sooner."""
    options = OverloadOptions(partial_deadline_s=20.0, total_deadline_s=25.0)
    scenario = overload_without_late_rounds(options)
    checks = run_with_fault(scenario, "admission-never-rejects", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    admission = checks["overload.admission.rejects"]
    assert admission.verdict == "fail" and "threshold 0, depth 7: 400: 2" in admission.observed, admission
    assert "did not reject" in admission.detail
    assert checks["overload.partial.failover"].observed.startswith("0 request(s) failed over")
    assert checks["overload.total.attempts"].verdict == "fail", "no 429 reaches the client"


def _admission_only(allocation, run, profile, progress):
    """The overload scenario's admission samples alone: with a middleware that rejects at
    the threshold every replica rejects, so the full scenario would spend its client
    deadlines (minutes) for nothing more than this check already shows."""
    options = OverloadOptions()
    result = ScenarioResult("overload")
    replicas = deployment.start_replicas(
        allocation, 2, run=run, profile=profile, threshold=options.threshold, retry_after=options.retry_after
    )
    try:
        samples = [
            replicas.hold_at(None, depth=options.threshold, threshold=options.threshold),
            replicas.overload(None, depth=options.queue_depth, threshold=options.threshold),
            replicas.relieve(threshold=options.threshold),
        ]
    finally:
        replicas.stop()
    cold, at_default = overload_admission.at_default_threshold(
        allocation, profile, options.retry_after, options.seed, ()
    )
    stale_after_s = profile.queue_admission.stale_after_seconds
    result.add(overload_checks.admission_rejects(samples + at_default, options.retry_after, cold, stale_after_s))
    return result


def test_admission_at_the_threshold_is_caught(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    checks = run_with_fault(_admission_only, "admission-at-threshold", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    admission = checks["overload.admission.rejects"]
    assert admission.verdict == "fail" and "threshold 0, depth 0: 429: 2" in admission.observed, admission
    assert "threshold 128, depth 128: 429: 1" in admission.observed
    assert "did not admit" in admission.detail


def test_a_middleware_that_fails_open_long_after_a_cold_start_is_caught(
    sut_wheelhouse, sut_image, sut_profile, tmp_path
):
    """The sampler's first reading comes 3 s late: the primed samples still pass (the
    scenario waits for the 429), but from a cold start the middleware admits a queue held
    too deep for longer than its own 1 s staleness bound."""
    checks = run_with_fault(
        _admission_only, "admission-slow-first-reading", sut_wheelhouse, sut_image, sut_profile, tmp_path
    )
    admission = checks["overload.admission.rejects"]
    assert admission.verdict == "fail", admission
    assert admission.metrics["admission_wrong"] == 0, "every primed sample answered as it must"
    assert admission.metrics["cold_start_admitted"] >= 20, admission.observed  # 40 probes over 2 s, all admitted
    assert "no 429 in 40 probes" in admission.observed and "beyond 1.5s" in admission.detail


def _overload(*titles, replicas=2):
    return overload_phases(*titles, options=OverloadOptions(replicas=replicas))


# Total overload's hold and the admission phases: what the exempt paths are judged by, and the
# admission check they must leave passing (no client: the exemption is asked at the replicas).
_EXEMPTION = _overload(
    "deploying replicas", "deploying the SUT's proxy", "total overload",
    "total overload: the paths queue admission exempts", "total overload lifted",
    "queue admission at the SUT's default threshold, from a cold start", "queue admission",
    "stopping the proxy", "stopping the replicas",
)  # fmt: skip


def test_a_middleware_that_gates_health_probes_is_caught_by_exempt(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    checks = run_with_fault(_EXEMPTION, "admission-gates-probes", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    exempt = checks["overload.admission.exempt"]
    print("admission-gates-probes:", exempt.observed)
    # 2 replicas held at depth 7, each asked the profile's 6 exempt paths: every one refused
    assert exempt.verdict == "fail" and exempt.metrics == {"exempt_asked": 12, "exempt_refused": 12}, exempt
    assert (
        "on the 2 of 2 replica(s) at depth 7 (threshold 0) rejecting the admission probe before and after: 429: 12"
        in (exempt.observed)
    ), exempt
    assert "/health: 2" in exempt.observed and exempt.detail.startswith("first refusal: replica 0 answered /health"), (
        exempt
    )
    assert checks["overload.admission.rejects"].verdict == "pass", checks["overload.admission.rejects"]


# The round with every third replica resetting each request and the others answering 429, and
# total overload's exempt paths: the check the fault leaves passing (no client: the requests
# are the harness's own).
_UNREACHABLE = _overload(
    "deploying replicas", "deploying the SUT's proxy", "total overload",
    "total overload: the paths queue admission exempts", "total overload lifted", "overload with backends lost",
    "overload with backends lost: what the proxy answers", "stopping the proxy", "stopping the replicas",
    replicas=8,
)  # fmt: skip


def test_a_proxy_that_forgets_the_overload_it_saw_is_caught_by_unreachable(
    sut_wheelhouse, sut_image, sut_profile, tmp_path
):
    """rc1 tries backends round a ring, three a request, one at a time here: with replicas 2
    and 5 resetting, the requests that start at 0 or 3 (4 of 12 on a fresh proxy) end on a
    reset after two 429s. This variant answers those 502."""
    checks = run_with_fault(_UNREACHABLE, "overload-forgotten", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    unreachable = checks["overload.total.unreachable"]
    print("overload-forgotten:", unreachable.observed, "|", unreachable.detail)
    assert unreachable.verdict == "fail" and unreachable.metrics["wrong"] == unreachable.metrics["ended_on_reset"] == 4
    assert "12 met overload" in unreachable.observed and "client statuses 429: 8, 502: 4" in unreachable.observed
    assert unreachable.detail == (
        "request unreachable-0-0: attempts 429, 429, reset at the replicas; the client got 502 (Retry-After None)"
    ), unreachable
    assert checks["overload.admission.exempt"].verdict == "pass", checks["overload.admission.exempt"]


def test_429_passed_on_as_503_is_caught_by_admission_decrease(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    chosen = ("overload.total.admission_decrease", "overload.partial.completes")
    checks = run_against_fault("429-as-503", sut_wheelhouse, sut_image, sut_profile, tmp_path, checks=chosen)
    decrease = checks["overload.total.admission_decrease"]
    assert decrease.verdict == "fail" and decrease.observed.startswith("8 (no decrease);"), decrease
    assert decrease.metrics["limit_breaches"] == 0, "the limit it kept (8) was respected"
    assert checks["overload.partial.completes"].verdict == "pass"
