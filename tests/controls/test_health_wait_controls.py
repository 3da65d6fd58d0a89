"""Controls of the health checks that judge the controller's wait, each a wait that watches
more than rc1's (which watches its launchers only).

A wait that also watches /health is the positive control of unresponsive.attempt_failed; the
same watch asking without a timeout is its negative one (it waits for ever on a hung replica).
A wait that also watches the job's nodes in Slurm and takes DRAIN for loss is the negative
control of node_drain.attempt_undisturbed; that same wait, which takes a query Slurm does not
answer for no verdict, is a positive control of controller_restart.attempt_undisturbed beside
rc1, and a wait that asks Slurm whether its job runs, with a 2 s bound, and takes no answer for
a lost job is its negative one. A wait that takes a required step's exit 0 for work done is the
negative control of preemption.attempt_failed. rc1, the positive control of the rest, is in
test_health_controls.py (one file a worker: the two share the run's time).
"""

import pytest

from tests.controls.controls import run_with_fault
from tests.controls.health_phases import (
    CONTROLLER_RESTART,
    HEALTHY,
    HEALTHY_APART,
    LOSS_ATTEMPT,
    NODE_DRAIN,
    PREEMPTION,
    UNRESPONSIVE_ATTEMPT,
    UNRESPONSIVE_DETECTION,
    health_phases,
)

pytestmark = pytest.mark.cluster


def test_a_wait_that_takes_a_clean_exit_for_work_done_is_caught_by_preemption(
    sut_wheelhouse, sut_image, sut_profile, tmp_path
):
    """Negative control of preemption.attempt_failed: rc1's wait failing the attempt only for a
    required step that failed. Preempted replicas exit 0 on Slurm's TERM, and the attempt runs
    on without them; a killed replica still fails it (backend loss keeps passing)."""
    health = health_phases(HEALTHY, HEALTHY_APART, LOSS_ATTEMPT, PREEMPTION)
    checks = run_with_fault(health, "clean-exit-is-done", sut_wheelhouse, sut_image, sut_profile, tmp_path, nodes=2)
    preempted = checks["health.preemption.attempt_failed"]
    print("clean-exit-is-done:", preempted.observed)
    assert preempted.verdict == "fail" and "returned 70" not in preempted.observed, preempted
    assert "TERM to its steps" in preempted.observed and "records" in preempted.observed, preempted
    assert int(preempted.observed.split("client ")[1].split("/")[0]) < 24, "the client did not get every record"
    loss = checks["health.backend_loss.attempt_failed"]
    assert loss.verdict == "pass" and loss.observed.startswith("the controller's wait returned 70"), loss


def test_a_health_watching_wait_is_the_positive_control_of_unresponsive_attempt_failed(
    sut_wheelhouse, sut_image, sut_profile, tmp_path
):
    """rc1 fails health.unresponsive.attempt_failed (its wait checks processes only); the same
    wait also watching /health fails the attempt with the documented 70, well before the client."""
    health = health_phases(HEALTHY, LOSS_ATTEMPT, UNRESPONSIVE_DETECTION, UNRESPONSIVE_ATTEMPT)
    checks = run_with_fault(health, "health-watching-wait", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    failed = checks["health.unresponsive.attempt_failed"]
    assert failed.verdict == "pass", failed
    assert failed.observed.startswith("/health 503: the controller's wait returned 70"), failed
    assert "; hung: the controller's wait returned 70" in failed.observed, failed
    # its watch asks with a 2 s timeout, every half second
    assert failed.metrics["unhealthy_attempt_ended_after_s"] < 5 and failed.metrics["hung_attempt_ended_after_s"] < 8
    assert checks["health.backend_loss.attempt_failed"].verdict == "pass"
    assert checks["health.unresponsive.detected"].verdict == "pass"


def test_a_wait_that_asks_without_a_timeout_misses_a_hung_backend(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    """Negative control of the hung mode: the same watch with no timeout fails the 503
    attempt with 70 and waits for ever on the hung replica. Backend loss, which its process
    check still sees, keeps passing."""
    health = health_phases(HEALTHY, LOSS_ATTEMPT, UNRESPONSIVE_ATTEMPT)
    checks = run_with_fault(health, "health-wait-without-timeout", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    blind = checks["health.unresponsive.attempt_failed"]
    print("health-wait-without-timeout:", blind.observed)
    assert blind.verdict == "fail" and blind.detail.endswith("not failed as it must be: hung"), blind
    assert blind.observed.startswith("/health 503: the controller's wait returned 70"), blind
    assert "; hung: the controller did not end; client " in blind.observed, blind
    assert blind.metrics["unhealthy_attempt_ended_after_s"] < 5 and "hung_attempt_ended_after_s" not in blind.metrics
    assert checks["health.backend_loss.attempt_failed"].verdict == "pass"


def test_a_wait_that_takes_a_drained_node_for_a_lost_one_is_caught_by_node_drain(
    sut_wheelhouse, sut_image, sut_profile, tmp_path
):
    """Negative control of node_drain.attempt_undisturbed: rc1's wait also watching the job's
    nodes in Slurm fails the attempt with 70 once its node is set DRAIN, though Slurm kept
    every step running. Backend loss, which its process check still sees, keeps passing; so
    does the controller's restart, which this wait (asking Slurm, taking no answer for no
    verdict) rides out: a positive control of controller_restart beside rc1, which never asks."""
    health = health_phases(HEALTHY, LOSS_ATTEMPT, NODE_DRAIN, CONTROLLER_RESTART)
    checks = run_with_fault(health, "drained-node-is-lost", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    drained = checks["health.node_drain.attempt_undisturbed"]
    print("drained-node-is-lost:", drained.observed)
    assert drained.verdict == "fail" and drained.observed.startswith("the controller's wait returned 70"), drained
    assert "+DRAIN" in drained.observed and drained.metrics["records_done"] < drained.metrics["records"], drained
    assert "without a fault the attempt succeeded" in drained.observed, "the same wait succeeds undrained"
    assert drained.detail == "a drained node was taken for a lost one: Slurm kept its steps running", drained
    assert checks["health.backend_loss.attempt_failed"].verdict == "pass"
    restarted = checks["health.controller_restart.attempt_undisturbed"]
    assert restarted.verdict == "pass" and restarted.metrics["records_done"] == 24, restarted


def test_a_wait_that_takes_slurms_silence_for_a_lost_job_is_caught_by_controller_restart(
    sut_wheelhouse, sut_image, sut_profile, tmp_path
):
    """Negative control of controller_restart.attempt_undisturbed: rc1's wait also asking
    Slurm whether its job runs (bounded at 2 s) fails the attempt with 70 while the controller
    restarts, though Slurm kept the job and its steps. Backend loss keeps passing."""
    health = health_phases(HEALTHY, LOSS_ATTEMPT, CONTROLLER_RESTART)
    checks = run_with_fault(health, "controller-silence-is-loss", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    restarted = checks["health.controller_restart.attempt_undisturbed"]
    print("controller-silence-is-loss:", restarted.observed)
    assert restarted.verdict == "fail" and restarted.observed.startswith("the controller's wait returned 70"), restarted
    assert "job RUNNING before, RUNNING after" in restarted.observed, "Slurm kept the job it was taken to have lost"
    assert restarted.metrics["records_done"] < restarted.metrics["records"], restarted
    # taken for lost while the controller was down (a poll every half second, each query bounded at 2 s)
    assert restarted.metrics["ran_after_restart_s"] < restarted.metrics["controller_down_s"], restarted
    assert "without a fault the attempt succeeded" in restarted.observed, "the same wait succeeds undisturbed"
    expected = "the controller's restart was taken for the job's loss: Slurm kept the job and its steps running"
    assert restarted.detail == expected, restarted
    assert checks["health.backend_loss.attempt_failed"].verdict == "pass"
