"""The health scenario's preemption phase around the preemption itself: when it judges, when
it is the cluster's or the harness's error (replicas that did not stop cleanly; an attempt
over before the TERM), and that the attempt's end is counted from the node's TERM. The
attempt, the preempted job and Slurm are played; what is judged of them is in
test_health_checks and test_preemption."""

import dataclasses
from types import SimpleNamespace

import pytest

from dd_accept.acceptance import health_preemption
from dd_accept.acceptance.health import HealthOptions, HealthRun
from dd_accept.acceptance.health_checks import AttemptOutcome
from dd_accept.base.errors import ClusterError
from dd_accept.base.results import ScenarioResult
from dd_accept.slurm_docker.preemption import Preemption
from dd_accept.slurm_docker.step_exit import StepExit

TERM_AT = 1000.5  # the node's TERM: 0.5 s after the preemptor's submission at 1000.0


def _ends(*ends):
    """(exit code, moment) per replica step, as the node logged them."""
    return tuple(StepExit(code, at, "slurmd step record") for code, at in ends)


CLEAN = _ends((0, 1000.55), (0, 1000.56))


def _phase(monkeypatch, *, status=70, ended_at=1000.6, exits=CLEAN):
    released, asked = [], {}

    def attempt(allocation, profile, options, name, fault, **keywords):
        asked.update(keywords)
        fault(None)
        after = None if ended_at is None else ended_at - 999.0
        return AttemptOutcome(status, after, 0 if status != 0 else 24, 24, True, ended_at)

    serving = SimpleNamespace(release=lambda: released.append(True))
    preemption = Preemption("99", 1000.0, 0.5, ("8.0", "8.1"), "RUNNING")
    monkeypatch.setattr(health_preemption, "job_on_a_node_to_lose", lambda *a: serving)
    monkeypatch.setattr(health_preemption, "preempt", lambda job: preemption)
    monkeypatch.setattr(health_preemption, "with_exits", lambda p, job: dataclasses.replace(p, exits=exits))
    monkeypatch.setattr(health_preemption, "drilled_attempt", attempt)
    profile = SimpleNamespace(cleanup=SimpleNamespace(failure_status=70))
    run = HealthRun(
        allocation=SimpleNamespace(job_id="7"), run=None, profile=profile, options=HealthOptions(),
        progress=None, result=ScenarioResult("health"),
    )  # fmt: skip
    run.healthy_apart = AttemptOutcome(0, 8.0, 24, 24, True, 1008.0, replicas_apart=True)  # the baseline phase's
    return run, released, asked


def test_a_preemption_through_a_running_attempt_is_judged_from_the_nodes_term(monkeypatch):
    run, released, asked = _phase(monkeypatch)
    health_preemption.attempt(run)
    [judged] = run.result.checks
    assert judged.id == "health.preemption.attempt_failed" and judged.verdict == "pass", judged
    assert judged.metrics["failed_after_s"] == pytest.approx(0.1), "counted from the TERM, not the submission"
    assert released == [True] and asked["record_attempts"] == health_preemption.CLIENT_ATTEMPTS


def test_replicas_that_did_not_stop_cleanly_are_the_harnesss_error_never_the_suts(monkeypatch):
    run, released, _ = _phase(monkeypatch, exits=_ends((0, 1000.55), (137, 1000.58)))
    with pytest.raises(ClusterError, match=r"did not stop as a preempted server does \(exit 0\)"):
        health_preemption.attempt(run)
    assert run.result.checks == [] and released == [True]
    # where the wait never returned, what ended within a few seconds of the TERM is what it saw
    run, _, _ = _phase(monkeypatch, status=None, ended_at=None, exits=_ends((0, 1000.55), (137, 1001.0)))
    with pytest.raises(ClusterError, match="did not stop as a preempted server does"):
        health_preemption.attempt(run)


def test_replicas_the_suts_stop_killed_after_its_wait_returned_are_no_unclean_stop(monkeypatch):
    # rc1's wait returns 70 on the first clean exit; its stop then KILLs the replicas still up
    run, _, _ = _phase(monkeypatch, ended_at=1000.6, exits=_ends((0, 1000.55), (137, 1000.8), (137, 1000.8)))
    health_preemption.attempt(run)
    assert [c.verdict for c in run.result.checks] == ["pass"]
    # a wait that never returned: the harness KILLs the steps at the attempt's end, long after
    run, _, _ = _phase(monkeypatch, status=None, ended_at=None, exits=_ends((0, 1000.55), (137, 1090.0)))
    health_preemption.attempt(run)
    assert [c.verdict for c in run.result.checks] == ["fail"]


def test_an_attempt_that_succeeded_before_the_term_tested_nothing(monkeypatch):
    run, _, _ = _phase(monkeypatch, status=0, ended_at=1000.2)
    with pytest.raises(RuntimeError, match="tested nothing"):
        health_preemption.attempt(run)


def test_an_attempt_failed_before_the_term_is_failed_for_no_reason(monkeypatch):
    run, _, _ = _phase(monkeypatch, status=70, ended_at=1000.2)
    health_preemption.attempt(run)
    [judged] = run.result.checks
    assert judged.verdict == "fail" and "returned 70, -0.3s after Slurm's TERM" in judged.observed, judged
