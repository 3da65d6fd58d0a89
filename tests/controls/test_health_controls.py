"""Controls for the health checks.

rc1 is the positive control of backend_loss.detected and attempt_failed and the negative
control of probe_isolation (its probes share the inference pool: a true finding); rc1 with
probes on their own pool is the positive control of probe_isolation.
"""

import pytest

from dd_accept.acceptance.health import HealthOptions, run_health
from dd_accept.acceptance.progress import ProgressWriter
from dd_accept.fixtures.deployment import RunDirectory
from tests.controls.controls import run_with_fault

pytestmark = pytest.mark.cluster


def _health(allocation, run, profile, progress):
    return run_health(allocation, run, profile, HealthOptions(), progress)


def test_rc1_detects_loss_fails_the_attempt_and_starves_its_probes(sut_allocation, sut_profile, sut_cluster):
    result = _health(sut_allocation, RunDirectory.create(sut_cluster), sut_profile, ProgressWriter(None, "health"))
    checks = {c.id: c for c in result.checks}
    assert checks["health.backend_loss.detected"].verdict == "pass", checks["health.backend_loss.detected"]
    assert checks["health.backend_loss.attempt_failed"].verdict == "pass", checks["health.backend_loss.attempt_failed"]
    isolation = checks["health.probe_isolation"]
    assert isolation.verdict == "fail" and not isolation.observed.startswith("/health 200")


def test_probes_on_their_own_pool_are_the_positive_control_of_probe_isolation(
    sut_wheelhouse, sut_image, sut_profile, tmp_path
):
    checks = run_with_fault(_health, "probe-capacity", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    isolation = checks["health.probe_isolation"]
    assert isolation.verdict == "pass" and isolation.observed.startswith("/health 200"), isolation


def test_a_health_endpoint_that_ignores_probes_is_caught_by_detected(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    checks = run_with_fault(_health, "health-always-ok", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    detected = checks["health.backend_loss.detected"]
    assert detected.verdict == "fail" and detected.observed == "the proxy's /health never reported the loss"
    assert checks["health.backend_loss.attempt_failed"].verdict == "pass"


def test_an_ignored_required_step_is_caught_by_attempt_failed(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    checks = run_with_fault(_health, "require-running-ignored", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    failed = checks["health.backend_loss.attempt_failed"]
    assert failed.verdict == "fail", failed
    assert "already finished" in failed.observed or "fewer replicas" in failed.observed, failed
    assert checks["health.backend_loss.detected"].verdict == "pass"
