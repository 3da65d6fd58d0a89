import time

from dd_accept.acceptance import health_checks as checks
from dd_accept.acceptance import health_drills
from dd_accept.acceptance.health import HealthOptions
from dd_accept.acceptance.health_drills import first_report, records_done_by
from dd_accept.base.events import ClientRequest
from dd_accept.deployment import RunDirectory
from dd_accept.slurm_docker.controller_restart import ControllerRestart
from dd_accept.slurm_docker.preemption import Preemption
from dd_accept.slurm_docker.step_exit import StepExit


def test_detected_requires_503_with_exactly_one_backend_missing():
    probe = checks.Probe(503, 0.01, {"backends_ready": 3, "backends": 4}, 0.2)
    assert checks.backend_loss_detected(probe, 4, False).verdict == "pass"
    assert checks.backend_loss_detected(checks.Probe(503, 0.01, {"backends_ready": 0}, 0.2), 4, False).verdict == "fail"
    assert checks.backend_loss_detected(None, 4, False).verdict == "fail"


def outcome(status, after, done, records=24, fault_at=1000.0):
    ended_at = None if after is None else fault_at + after
    return checks.AttemptOutcome(status, after, done, records, ended_at=ended_at)


HEALTHY = outcome(0, 8.0, 24)  # the baseline: the same attempt, no fault, succeeded


def test_attempt_failed_requires_the_documented_status_before_the_client_finished():
    assert checks.attempt_failed(outcome(70, 0.4, 10), 70, HEALTHY).verdict == "pass"
    assert checks.attempt_failed(outcome(137, 9.0, 24), 70, HEALTHY).verdict == "fail"
    assert checks.attempt_failed(outcome(0, 9.0, 24), 70, HEALTHY).verdict == "fail"
    assert checks.attempt_failed(outcome(None, None, 3), 70, HEALTHY).verdict == "fail"
    other = checks.attempt_failed(outcome(1, 0.4, 10), 70, HEALTHY)
    assert other.verdict == "fail" and "returned 1" in other.observed, "not just any non-zero status"


def both(unhealthy, hung=None):
    """The unresponsive attempt's outcomes in its two modes (hung as unhealthy unless given)."""
    return {"/health 503": unhealthy, "hung": hung if hung is not None else unhealthy}


FAILED_FAST = outcome(70, 3.0, 20, 48)


def test_unresponsive_attempt_must_fail_not_succeed():
    """rc1: the replica answers /health 503 but its process lives, so the attempt succeeds;
    hung, its client waits on for the requests the replica never answers."""
    rc1 = checks.unresponsive_attempt_failed(
        both(outcome(0, 22.0, 48, 48), outcome(None, None, 30, 48)), 70, None, HEALTHY
    )
    assert rc1.verdict == "fail" and rc1.observed.startswith("/health 503: the attempt succeeded (wait status 0)")
    assert "hung: the controller did not end; client 30/48 records" in rc1.observed
    assert "no health monitor" in rc1.detail and "not failed as it must be: /health 503, hung" in rc1.detail
    assert checks.unresponsive_attempt_failed(both(FAILED_FAST), 70, None, HEALTHY).verdict == "pass"
    assert checks.unresponsive_attempt_failed(both(outcome(None, None, 20, 48)), 70, None, HEALTHY).verdict == "fail"


def test_a_wait_that_misses_a_hung_backend_fails_though_it_fails_a_503_one():
    """The negative control the issue names: a wait that asks each backend's /health with no
    timeout fails the 503 attempt and waits for ever on the hung one."""
    blind = checks.unresponsive_attempt_failed(both(FAILED_FAST, outcome(None, None, 31, 48)), 70, None, HEALTHY)
    assert blind.verdict == "fail" and blind.detail.endswith("not failed as it must be: hung"), blind
    assert blind.metrics == {"unhealthy_attempt_ended_after_s": 3.0}, "the hung attempt never ended"
    only_one = checks.unresponsive_attempt_failed({"/health 503": FAILED_FAST}, 70, None, HEALTHY)
    assert only_one.verdict == "fail" and "hung (not driven)" in only_one.detail, "a mode not driven never passes"


def test_a_declared_monitor_adds_its_time_bound():
    assert checks.unresponsive_attempt_failed(both(FAILED_FAST), 70, 15.0, HEALTHY).verdict == "pass"
    late = checks.unresponsive_attempt_failed(both(FAILED_FAST, outcome(70, 18.0, 40, 48)), 70, 15.0, HEALTHY)
    assert late.verdict == "fail" and "within the health monitor's 15s" in late.expected
    assert late.metrics["hung_attempt_ended_after_s"] == 18.0


def test_unresponsive_detected_needs_both_modes_reported_in_time():
    hung = checks.Probe(503, 5.0, {"backends_ready": 3}, 5.1)
    failing = checks.Probe(503, 0.01, {"backends_ready": 3}, 0.2)
    good = checks.unresponsive_detected({"hung": hung, "/health 503": failing}, 4, 15)
    assert good.verdict == "pass" and "hung: /health 503, backends_ready 3, 5.1s after" in good.observed
    missed = checks.unresponsive_detected({"hung": hung, "/health 503": None}, 4, 15)
    assert missed.verdict == "fail" and "/health 503: not reported within 15s" in missed.observed
    wrong_count = checks.unresponsive_detected({"hung": checks.Probe(503, 5.0, {"backends_ready": 4}, 5.1)}, 4, 15)
    assert wrong_count.verdict == "fail"
    assert checks.unresponsive_detected({}, 4, 15).verdict == "fail"


def test_probe_isolation_needs_200_within_the_limit():
    assert checks.probe_isolation(checks.Probe(200, 0.1, {}, 0), 256).verdict == "pass"
    assert checks.probe_isolation(checks.Probe(503, 5.2, {}, 0), 256).verdict == "fail"
    assert checks.probe_isolation(checks.Probe(200, 6.0, {}, 0), 256).verdict == "fail"


def test_an_attempt_check_without_a_healthy_attempt_cannot_pass():
    """No baseline ran: a wait that always returns the failure status looks like detection."""
    alone = checks.attempt_failed(outcome(70, 0.4, 10), 70, None)
    assert alone.verdict == "fail" and "no attempt ran without the fault" in alone.observed, alone
    assert checks.unresponsive_attempt_failed(both(FAILED_FAST), 70, None, None).verdict == "fail"


def test_an_attempt_check_needs_a_healthy_attempt_that_succeeds():
    """A wait that fails every attempt (even without a fault) would otherwise pass."""
    healthy = outcome(0, 12.0, 24)
    assert checks.attempt_failed(outcome(70, 0.4, 10), 70, healthy).verdict == "pass"
    always_failing = checks.attempt_failed(outcome(70, 0.4, 10), 70, outcome(70, 2.0, 5))
    assert always_failing.verdict == "fail" and "without a fault the attempt did not succeed" in always_failing.observed
    unresponsive = checks.unresponsive_attempt_failed(both(FAILED_FAST), 70, None, outcome(70, 1.0, 3))
    assert unresponsive.verdict == "fail"


def test_a_fault_done_after_the_attempt_ended_proves_nothing():
    late = checks.AttemptOutcome(70, 0.1, 10, 24, running_at_fault=False)
    assert checks.attempt_failed(late, 70, HEALTHY).verdict == "fail"


def test_detection_must_come_within_the_bound():
    slow = checks.Probe(503, 0.01, {"backends_ready": 3}, 16.0)
    assert checks.backend_loss_detected(slow, 4, False, 15.0).verdict == "fail"
    assert checks.unresponsive_detected({"hung": slow}, 4, 15).verdict == "fail"


SLURM = checks.SlurmSawLoss("node2", 18.1, 40.5, 30.0)


def test_node_loss_is_detected_when_the_proxy_reports_none_ready_in_time():
    seen = checks.node_loss_detected(checks.Probe(503, 2.0, {"backends_ready": 0}, 3.2), SLURM, 4, 15.0)
    assert seen.verdict == "pass" and "3.2s after the node was lost" in seen.observed
    assert (
        "Slurm: node2 not responding 18.1s, DOWN 40.5s" in seen.observed and seen.metrics["slurm_down_after_s"] == 40.5
    )
    late = checks.node_loss_detected(checks.Probe(503, 2.0, {"backends_ready": 0}, 16.0), SLURM, 4, 15.0)
    assert late.verdict == "fail"
    some = checks.node_loss_detected(checks.Probe(503, 2.0, {"backends_ready": 1}, 3.0), SLURM, 4, 15.0)
    assert some.verdict == "fail", "a lost node carried every replica"
    never = checks.node_loss_detected(None, SLURM, 4, 15.0)
    assert never.verdict == "fail" and never.observed.startswith("the proxy's /health did not report the loss")
    assert "detected_after_s" not in never.metrics


def test_a_declared_failure_must_come_with_the_status_and_by_slurms_time_plus_the_bound():
    rc1 = checks.node_loss_attempt_failed(outcome(70, 41.0, 0), "fail", 70, SLURM, 15.0, HEALTHY)
    assert rc1.verdict == "pass" and rc1.metrics == {"slurm_down_after_s": 40.5, "attempt_ended_after_s": 41.0}
    early = checks.node_loss_attempt_failed(outcome(70, 3.0, 0), "fail", 70, SLURM, 15.0, HEALTHY)
    assert early.verdict == "pass", "a controller that watches health may fail it before Slurm knows"
    late = checks.node_loss_attempt_failed(outcome(70, 56.0, 0), "fail", 70, SLURM, 15.0, HEALTHY)
    assert late.verdict == "fail" and "within 15s of Slurm setting the node DOWN" in late.expected
    waited = checks.node_loss_attempt_failed(outcome(0, 85.0, 0), "fail", 70, SLURM, 15.0, HEALTHY)
    assert waited.verdict == "fail" and waited.observed.startswith("the attempt succeeded (wait status 0)")
    finished = checks.node_loss_attempt_failed(outcome(70, 41.0, 24), "fail", 70, SLURM, 15.0, HEALTHY)
    assert finished.verdict == "fail", "finished with its replicas gone"
    broken_baseline = checks.node_loss_attempt_failed(outcome(70, 41.0, 0), "fail", 70, SLURM, 15.0, outcome(70, 1, 3))
    assert (
        broken_baseline.verdict == "fail" and "without a fault the attempt did not succeed" in broken_baseline.observed
    )


def test_a_declared_recovery_must_produce_every_record():
    recovered = checks.node_loss_attempt_failed(outcome(0, 50.0, 24), "recover", 70, SLURM, 15.0, HEALTHY)
    assert recovered.verdict == "pass" and "node_loss = 'recover'" in recovered.detail
    failed = checks.node_loss_attempt_failed(outcome(70, 41.0, 3), "recover", 70, SLURM, 15.0, HEALTHY)
    assert failed.verdict == "fail" and "every record is produced" in failed.expected


def test_a_declared_monitor_bounds_node_loss_from_the_loss_not_from_slurms_down():
    """With a health monitor declared, a controller that fails the attempt only when Slurm
    ends its launchers (rc1's 41 s) has missed its own monitor's bound: the node's replicas
    stopped serving at the loss, and the monitor watches them, not Slurm."""
    slurm_paced = checks.node_loss_attempt_failed(
        outcome(70, 41.0, 0), "fail", 70, SLURM, 15.0, HEALTHY, monitor_bound_s=15.0
    )
    assert slurm_paced.verdict == "fail", slurm_paced
    assert "within the declared health monitor's 15s of the node's loss" in slurm_paced.expected
    watched = checks.node_loss_attempt_failed(
        outcome(70, 6.0, 0), "fail", 70, SLURM, 15.0, HEALTHY, monitor_bound_s=15.0
    )
    assert watched.verdict == "pass" and watched.metrics["attempt_ended_after_s"] == 6.0
    undeclared = checks.node_loss_attempt_failed(outcome(70, 41.0, 0), "fail", 70, SLURM, 15.0, HEALTHY)
    assert undeclared.verdict == "pass", "no monitor declared: Slurm's DOWN plus the bound, as before"


def test_node_drain_requires_the_attempt_to_succeed_whole():
    healthy = outcome(0, 8.0, 24)
    passed = checks.node_drain_attempt_undisturbed(outcome(0, 7.5, 24), "node1", "ALLOCATED+DRAIN", healthy)
    assert passed.verdict == "pass" and passed.observed.startswith(
        "the attempt succeeded (wait status 0) 7.5s after"
    ), passed
    assert "; Slurm: node1 ALLOCATED+DRAIN; without a fault the attempt succeeded" in passed.observed
    failed = checks.node_drain_attempt_undisturbed(outcome(70, 0.6, 9), "node1", "ALLOCATED+DRAIN", healthy)
    assert failed.verdict == "fail" and "returned 70, 0.6s after node1 was set DRAIN; client 9/24" in failed.observed
    assert failed.detail == "a drained node was taken for a lost one: Slurm kept its steps running"
    # a wait that returned 0 with records missing, or never returned, did not succeed either
    assert checks.node_drain_attempt_undisturbed(outcome(0, 7.5, 20), "node1", "MIXED+DRAIN").verdict == "fail"
    assert checks.node_drain_attempt_undisturbed(outcome(None, None, 24), "node1", "MIXED+DRAIN").verdict == "fail"
    assert passed.metrics["drained_s"] == 7.5, "how long the attempt ran drained"
    # where the attempt fails undisturbed too, the drain is not named as the cause
    broken = checks.node_drain_attempt_undisturbed(outcome(70, 0.6, 9), "node1", "MIXED+DRAIN", outcome(70, 1.0, 9))
    assert broken.verdict == "fail" and broken.detail.startswith("the attempt does not succeed undisturbed either")


STEPS = tuple(f"7.{n}" for n in range(6))


def _restart(after="RUNNING", steps_after=STEPS, gone=()):
    return ControllerRestart(
        down_s=6.2, job_state_before="RUNNING", job_state_after=after, steps_before=STEPS,
        steps_after=steps_after, asked_at=1000.0, steps_gone=gone,
    )  # fmt: skip


def test_a_controller_restart_requires_the_attempt_to_succeed_whole():
    healthy = outcome(0, 8.0, 24)
    passed = checks.controller_restart_attempt_undisturbed(outcome(0, 9.1, 24), _restart(), healthy)
    assert passed.verdict == "pass" and passed.observed.startswith(
        "the attempt succeeded (wait status 0) 9.1s after slurmctld was shut down; client 24/24 records"
    ), passed
    assert "; Slurm: slurmctld down 6.2s; job RUNNING before, RUNNING after, steps 6 before, 6 after" in passed.observed
    assert passed.metrics["ran_after_restart_s"] == 9.1 and passed.metrics["controller_down_s"] == 6.2
    failed = checks.controller_restart_attempt_undisturbed(outcome(70, 2.4, 11), _restart(), healthy)
    assert (
        failed.verdict == "fail" and "returned 70, 2.4s after slurmctld was shut down; client 11/24" in failed.observed
    )
    assert (
        failed.detail
        == "the controller's restart was taken for the job's loss: Slurm kept the job and its steps running"
    )
    assert checks.controller_restart_attempt_undisturbed(outcome(0, 9.1, 20), _restart()).verdict == "fail"
    broken = checks.controller_restart_attempt_undisturbed(outcome(70, 2.4, 11), _restart(), outcome(70, 1.0, 9))
    assert broken.detail.startswith("the attempt does not succeed undisturbed either: the restart is not shown")


def test_slurm_kept_the_job_only_if_its_state_is_unchanged_and_it_lost_no_step():
    ended = tuple((step, StepExit(0, 1005.0, "slurmd step record")) for step in STEPS[2:])
    assert _restart().job_kept(None) and _restart(steps_after=STEPS[:2], gone=ended).job_kept(None), (
        "the attempt's steps may end meanwhile"
    )
    assert not _restart(after="gone").job_kept(None) and not _restart(after="PENDING").job_kept(None)
    lost = _restart(steps_after=STEPS[:4], gone=(("7.4", None), ("7.5", StepExit(0, 1005.0, "slurmd step record"))))
    assert not lost.job_kept(2000.0) and lost.steps_lost(2000.0) == ("7.4",)
    assert "steps 6 before, 4 after (gone: 7.4 no end logged, 7.5 exit 0)" in lost.describe()


def test_an_attempt_is_tested_by_a_fault_only_while_it_runs():
    running = outcome(0, 9.1, 24)  # ended 9.1 s after the fault began (its ended_at: 1009.1)
    assert running.running_at(1005.0) and not running.running_at(1010.0)
    assert outcome(None, None, 3).running_at(2000.0), "an attempt that never ended ran at any moment"


def test_a_preemption_must_fail_the_attempt_as_a_loss_does():
    preemption = Preemption("99", 1000.0, 1.2, ("7.1", "7.2"), "RUNNING")
    healthy = outcome(0, 8.0, 24)
    passed = checks.preemption_attempt_failed(outcome(70, 0.6, 9), 70, preemption, healthy)
    assert passed.verdict == "pass" and passed.observed.startswith(
        "the controller's wait returned 70, 0.6s after Slurm's TERM; client 9/24 records; Slurm: the job preempted "
        "1.2s after a higher-priority job was submitted for its node: TERM to its steps 7.1, 7.2; job RUNNING"
    ), passed
    assert passed.expected.startswith("with every required replica preempted by Slurm (TERM, each exiting 0), ")
    assert passed.metrics["failed_after_s"] == 0.6
    # a wait that takes the clean exits for work done: the attempt runs on and "succeeds" with fewer
    ran_on = checks.preemption_attempt_failed(outcome(0, 4.0, 9), 70, preemption, healthy)
    assert ran_on.verdict == "fail" and "succeeded (wait status 0) 4.0s after Slurm's TERM; client 9/24" in (
        ran_on.observed
    )
    assert checks.preemption_attempt_failed(outcome(None, None, 9), 70, preemption, healthy).verdict == "fail"
    assert checks.preemption_attempt_failed(outcome(1, 2.0, 9), 70, preemption, healthy).verdict == "fail"
    # a wait that always fails passes nothing: the same attempt without the fault must succeed
    assert checks.preemption_attempt_failed(outcome(70, 0.6, 9), 70, preemption, outcome(70, 1, 9)).verdict == "fail"
    # the baseline placed as the preempted replicas are (a job of their own on another node): a
    # wait that fails whenever its replicas run apart fails there too, and is not judged as one
    # that failed for the preemption
    apart = checks.AttemptOutcome(0, 8.0, 24, 24, ended_at=1008.0, replicas_apart=True)
    placed = checks.preemption_attempt_failed(outcome(70, 0.6, 9), 70, preemption, apart)
    assert placed.verdict == "pass" and placed.observed.endswith(
        "; without a fault, its replicas alike in a job of their own on another node, the attempt succeeded "
        "(wait status 0, 24/24 records)"
    ), placed
    apart_fails = checks.AttemptOutcome(70, 1.0, 3, 24, ended_at=1001.0, replicas_apart=True)
    misplaced = checks.preemption_attempt_failed(outcome(70, 0.6, 9), 70, preemption, apart_fails)
    assert misplaced.verdict == "fail" and "on another node, the attempt did not succeed (wait status 70, 3/24" in (
        misplaced.observed
    ), misplaced
    # backend loss judges the same way and its expectation did not change
    loss = checks.attempt_failed(outcome(70, 0.4, 10), 70, HEALTHY)
    assert loss.expected.startswith("the attempt fails with status 70 before the client finishes")


class _ReportingProxy:
    """A proxy whose /health gives the answers listed, one a call, then the last for ever."""

    def __init__(self, answers):
        self.answers = list(answers)

    def get(self, path, timeout=15):
        status, ready = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return {"status": status, "json": {"backends_ready": ready, "backends": 4}, "elapsed_s": 0.01}


def test_a_proxy_that_learns_of_a_lost_node_backend_by_backend_is_judged_on_its_full_report():
    """A monitor per backend reports 503 with 2 of 4 ready first, then 0: the first answer
    other than 200 ends no wait; the one the check asks for (0 ready) is judged."""
    stepwise = _ReportingProxy([(200, 4), (503, 2), (503, 1), (503, 0)])
    report = first_report(stepwise, time.time(), 5.0, "the node's loss", 0)
    assert report is not None and report.status == 503 and report.body["backends_ready"] == 0
    slurm = checks.SlurmSawLoss("node2", None, 45.0, 45.0)
    assert checks.node_loss_detected(report, slurm, 4, 15.0).verdict == "pass"
    assert report.elapsed_s == 0.01, "timed on the node, not around the exec"
    partial = first_report(_ReportingProxy([(503, 2)]), time.time(), 0.5, "the node's loss", 0)
    assert partial is not None and partial.body["backends_ready"] == 2, "what it did report is kept for the evidence"
    judged = checks.node_loss_detected(partial, slurm, 4, 15.0)
    assert judged.verdict == "fail" and "backends_ready 2" in judged.observed
    assert first_report(_ReportingProxy([(200, 4)]), time.time(), 0.3, "the loss", 3) is None


def test_records_done_are_counted_when_the_sut_s_wait_returned():
    """The client goes on after the controller failed the attempt (nothing stops it): its
    later records are not the attempt's, so a wait that failed in time is not blamed for a
    client that finished afterwards."""
    rows = [ClientRequest(t=float(t), mode="raw", record=t, attempt=0, outcome="ok") for t in range(10, 58)]
    assert records_done_by(rows, 22.0) == 13 and records_done_by(rows, None) == 48
    outcome = checks.AttemptOutcome(70, 2.0, records_done_by(rows, 22.0), 48)
    assert not outcome.client_finished


class _StuckProxy:
    """A proxy whose /health reports one replica not ready long after it serves again (a
    backend set aside for a while), recording the requests made of it."""

    def __init__(self, recovers_after: int) -> None:
        self.asked, self.recovers_after, self.stopped = 0, recovers_after, False

    def get(self, path, timeout=30):
        self.asked += 1
        ready = self.asked > self.recovers_after
        return {"status": 200 if ready else 503, "body": {"backends_ready": 4 if ready else 3}, "t": time.time()}

    def stop(self):
        self.stopped = True


class _Replicas:
    def control(self, indices, action, **values):
        pass

    def stop(self, signal_name):
        pass


def test_a_health_that_never_recovers_fails_detected_by_name_not_the_harness(monkeypatch):
    """unresponsive_detection waits for /health to answer 200 again after the first fault is
    lifted: where it never does (within RECOVERY_WAIT_S), that is the SUT's /health, a failed
    health.unresponsive.detected naming it, and the scenario goes on (never a harness error);
    nothing waits after the last fault; one that recovers late but within the wait is judged
    as usual."""
    monkeypatch.setattr(RunDirectory, "create", staticmethod(lambda cluster, name: None))
    monkeypatch.setattr(health_drills, "RECOVERY_WAIT_S", 0.5)
    probe = checks.Probe(503, 0.01, {"status": "degraded", "backends_ready": 3}, 0.5)
    monkeypatch.setattr(health_drills, "first_report", lambda *args: probe)

    class Allocation:
        cluster = None

    stuck = _StuckProxy(recovers_after=10**6)
    monkeypatch.setattr(health_drills, "_serving", lambda *args: (_Replicas(), stuck))
    failed = health_drills.unresponsive_detection(Allocation(), None, HealthOptions())
    assert failed.verdict == "fail", failed
    assert failed.observed.endswith("/health not 200 again 0.5s after replica 0 served again"), failed
    assert stuck.stopped, "the proxy is stopped all the same"
    late = _StuckProxy(recovers_after=2)
    monkeypatch.setattr(health_drills, "_serving", lambda *args: (_Replicas(), late))
    judged = health_drills.unresponsive_detection(Allocation(), None, HealthOptions())
    assert judged.verdict == "pass" and "not 200 again" not in judged.observed, judged
    asked = late.asked
    assert asked == 3, "asked until it answered 200, and not after the last fault"
