"""Controls for the health checks.

rc1 is the positive control of backend_loss.detected, backend_loss.attempt_failed and
unresponsive.detected, and the negative control of probe_isolation (its probes share the
inference pool: a true finding) and of unresponsive.attempt_failed (its wait checks only that
processes live: the seed's "health failure still permits success"). rc1 with probes on their
own pool is the positive control of probe_isolation; rc1 whose wait also watches /health is
the positive control of unresponsive.attempt_failed.
"""

import pytest

from dd_accept.acceptance.health import HealthOptions, run_health
from dd_accept.base.progress import ProgressWriter
from dd_accept.fixtures.deployment import RunDirectory
from tests.controls.controls import run_with_fault

pytestmark = pytest.mark.cluster


def _health(allocation, run, profile, progress):
    return run_health(allocation, run, profile, HealthOptions(), progress)


def test_rc1_detects_loss_fails_the_attempt_and_starves_its_probes(sut_allocation, sut_profile, sut_cluster):
    result = _health(sut_allocation, RunDirectory.create(sut_cluster), sut_profile, ProgressWriter(None, "health"))
    checks = {c.id: c for c in result.checks}
    assert checks["health.backend_loss.detected"].verdict == "pass", checks["health.backend_loss.detected"]
    loss = checks["health.backend_loss.attempt_failed"]
    assert loss.verdict == "pass" and loss.observed.startswith("the controller's wait returned 70"), loss
    detected = checks["health.unresponsive.detected"]
    assert detected.verdict == "pass", detected
    assert "hung: /health 503, backends_ready 3" in detected.observed and detected.metrics["detected_after_s"] < 15
    unresponsive = checks["health.unresponsive.attempt_failed"]
    assert unresponsive.verdict == "fail" and unresponsive.observed.startswith("the attempt succeeded (wait status 0)")
    assert "48/48 records" in unresponsive.observed, unresponsive
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
    unresponsive = checks["health.unresponsive.detected"]
    assert unresponsive.verdict == "fail" and "hung: not reported within 15s" in unresponsive.observed
    assert "/health 503: not reported within 15s" in unresponsive.observed
    assert checks["health.backend_loss.attempt_failed"].verdict == "pass"


def test_an_ignored_required_step_is_caught_by_attempt_failed(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    checks = run_with_fault(_health, "require-running-ignored", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    failed = checks["health.backend_loss.attempt_failed"]
    assert failed.verdict == "fail", failed
    assert "client 24/24 records" in failed.observed and "returned 70" not in failed.observed, failed
    assert checks["health.backend_loss.detected"].verdict == "pass"


def test_a_health_watching_wait_is_the_positive_control_of_unresponsive_attempt_failed(
    sut_wheelhouse, sut_image, sut_profile, tmp_path
):
    """rc1 fails health.unresponsive.attempt_failed (its wait checks processes only); the same
    wait also watching /health fails the attempt with the documented 70, well before the client."""
    checks = run_with_fault(_health, "health-watching-wait", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    failed = checks["health.unresponsive.attempt_failed"]
    assert failed.verdict == "pass", failed
    assert (
        failed.observed.startswith("the controller's wait returned 70") and failed.metrics["attempt_ended_after_s"] < 5
    )
    assert checks["health.backend_loss.attempt_failed"].verdict == "pass"
    assert checks["health.unresponsive.detected"].verdict == "pass"
