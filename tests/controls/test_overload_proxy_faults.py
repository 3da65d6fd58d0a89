"""Negative controls for the overload checks: faults in the SUT's proxy (rc1 wheel variants).

Each control asserts that the targeted check fails for the fault's reason (its observed
numbers show the fault) and that checks the fault does not touch still pass.
"""

import pytest

from tests.controls.controls import run_against_fault

pytestmark = pytest.mark.cluster


def test_no_failover_is_caught_by_partial_completes_and_failover(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    checks = run_against_fault("no-failover", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    completes, failover = checks["overload.partial.completes"], checks["overload.partial.failover"]
    assert completes.verdict == "fail" and "429:" in completes.observed
    assert failover.verdict == "fail" and failover.observed.startswith("0 request(s) failed over")
    assert checks["overload.total.retry_after"].verdict == "pass"


def test_five_attempts_is_caught_by_total_attempts(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    checks = run_against_fault("five-attempts", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    attempts = checks["overload.total.attempts"]
    assert attempts.verdict == "fail" and "attempts per 429: 5:" in attempts.observed
    assert checks["overload.partial.completes"].verdict == "pass"
    assert checks["overload.total.admission_decrease"].verdict == "pass"


def test_lost_retry_after_is_caught_by_total_retry_after(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    checks = run_against_fault("retry-after-lost", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    retry_after = checks["overload.total.retry_after"]
    assert retry_after.verdict == "fail" and "None:" in retry_after.observed
    assert checks["overload.total.attempts"].verdict == "pass"


def test_429_passed_on_as_503_is_caught_by_admission_decrease(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    checks = run_against_fault("429-as-503", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    decrease = checks["overload.total.admission_decrease"]
    assert decrease.verdict == "fail" and decrease.observed == "8 (no decrease)"
    assert checks["overload.partial.completes"].verdict == "pass"
