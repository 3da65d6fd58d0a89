"""The health scenario's controller-restart phase around the restart itself: when it judges,
when it is the cluster's error, and when it judges nothing (another job shares the controller
at the moment of the shutdown). The attempt and the restart are played; what is judged of
them is in test_health_checks and test_controller_restart."""

from types import SimpleNamespace

import pytest

from dd_accept.acceptance import health
from dd_accept.acceptance.health import HealthOptions, HealthRun
from dd_accept.acceptance.health_checks import AttemptOutcome
from dd_accept.base.errors import ClusterError
from dd_accept.base.results import ScenarioResult
from dd_accept.slurm_docker.controller_restart import ControllerRestart
from dd_accept.slurm_docker.step_exit import StepExit

STEPS = ("7.0", "7.1")


class Progress:
    def __init__(self):
        self.said = []

    def emit(self, phase, **numbers):
        self.said.append(phase)


def _phase(monkeypatch, *, alone=True, ended_at=1009.0, gone=(), state_after="RUNNING", status=0):
    """The phase with an attempt that ends at `ended_at` and a restart asked at 1000.0."""
    restarts = []

    def restart(allocation, held_s):
        restarts.append(held_s)
        return ControllerRestart(5.2, "RUNNING", state_after, STEPS, STEPS, 1000.0, gone)

    def attempt(allocation, profile, options, name, fault, **_):
        fault(None)
        return AttemptOutcome(status, ended_at - 999.0, 24 if status == 0 else 9, 24, True, ended_at)

    monkeypatch.setattr(health, "serves_only", lambda allocation: alone)
    monkeypatch.setattr(health, "restart_controller", restart)
    monkeypatch.setattr(health, "drilled_attempt", attempt)
    run = HealthRun(
        allocation=SimpleNamespace(job_id="7"), run=None, profile=None, options=HealthOptions(),
        progress=Progress(), result=ScenarioResult("health"),
    )  # fmt: skip
    return run, restarts


def test_a_restart_through_a_running_attempt_is_judged(monkeypatch):
    run, restarts = _phase(monkeypatch)
    health._controller_restart(run)
    assert restarts == [health.CONTROLLER_DOWN_S]
    assert [c.id for c in run.result.checks] == ["health.controller_restart.attempt_undisturbed"]
    assert run.result.checks[0].verdict == "pass"


def test_another_job_on_the_controller_at_the_shutdown_leaves_the_check_unjudged(monkeypatch):
    run, restarts = _phase(monkeypatch, alone=False)
    health._controller_restart(run)
    assert restarts == [], "the controller is not restarted under another scenario's job"
    assert run.result.checks == [] and run.progress.said == [
        "controller restart: not done, another job shares the controller"
    ]


def test_an_attempt_that_ended_before_the_shutdown_tested_nothing(monkeypatch):
    run, _ = _phase(monkeypatch, ended_at=999.5)  # running when the fault began, ended before the ask
    with pytest.raises(RuntimeError, match="tested nothing"):
        health._controller_restart(run)
    assert run.result.checks == []


def test_an_attempt_that_failed_before_the_shutdown_is_judged_not_dismissed(monkeypatch):
    run, _ = _phase(monkeypatch, ended_at=999.5, status=70)
    health._controller_restart(run)
    [failed] = run.result.checks
    assert failed.verdict == "fail" and "returned 70, 0.5s after slurmctld was shut down" in failed.observed


@pytest.mark.parametrize(
    "gone, state_after",
    [((("7.1", None),), "RUNNING"), ((("7.1", StepExit(137, 1005.0, "log")),), "RUNNING"), ((), "PENDING")],
    ids=["step-with-no-end", "step-killed-before-the-wait-returned", "job-requeued"],
)
def test_a_job_or_step_slurm_lost_is_the_clusters_error_never_the_suts(monkeypatch, gone, state_after):
    run, _ = _phase(monkeypatch, gone=gone, state_after=state_after)
    with pytest.raises(ClusterError, match="did not keep the job"):
        health._controller_restart(run)
    assert run.result.checks == []


def test_a_step_the_suts_stop_killed_after_its_wait_returned_is_not_slurms_loss(monkeypatch):
    run, _ = _phase(monkeypatch, gone=(("7.1", StepExit(137, 1010.0, "log")),), ended_at=1009.0)
    health._controller_restart(run)
    assert [c.verdict for c in run.result.checks] == ["pass"]
