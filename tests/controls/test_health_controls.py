"""Controls for the health checks.

rc1 is the positive control of backend_loss.detected, backend_loss.attempt_failed,
node_loss.detected, node_loss.attempt_failed and unresponsive.detected, and the negative
control of probe_isolation (its probes share the inference pool: a true finding) and of
unresponsive.attempt_failed (its wait checks only that processes live: the seed's "health
failure still permits success"). rc1 with probes on their own pool is the positive control of
probe_isolation; rc1 whose wait also watches /health is the positive control of
unresponsive.attempt_failed, and fails an attempt on a lost node before Slurm does. rc1 is
the positive control of node_drain.attempt_undisturbed (its wait watches processes only); a
wait that also watches the job's nodes in Slurm and takes DRAIN for loss is its negative one.
That same wait, which takes a query Slurm does not answer for no verdict, is a positive control
of controller_restart.attempt_undisturbed beside rc1; a wait that asks Slurm whether its job
runs, with a 2 s bound, and takes no answer for a lost job is its negative one. rc1 is the
positive control of preemption.attempt_failed (any required process gone fails the attempt);
a wait that takes a required step's exit 0 for work done is its negative one.

Each control runs the phases its fault is about, plus one whose check the fault must leave
passing; rc1 runs them all. A lost node needs a cluster with a node beyond the allocation.
"""

import pytest

from dd_accept.acceptance.health import SCENARIO, HealthOptions, HealthRun
from dd_accept.acceptance.health_node_loss import slurm_detection_bound
from dd_accept.acceptance.phases import scenario_runner
from tests.controls.controls import OWN_JOB, run_on_own_cluster, run_with_fault
from tests.helpers import assert_the_dry_run_planned_what_the_run_did

pytestmark = pytest.mark.cluster

LOSS_DETECTION = "backend loss: detection"
HEALTHY = "a healthy attempt ("
HEALTHY_APART = "a healthy attempt, its replicas apart"
LOSS_ATTEMPT = "backend loss: the attempt"
NODE_LOSS = "node loss"
NODE_DRAIN = "node drain"
CONTROLLER_RESTART = "controller restart"
PREEMPTION = "preemption"
UNRESPONSIVE_DETECTION = "unresponsive backend: detection"
UNRESPONSIVE_ATTEMPT = "unresponsive backend: the attempt"
PROBE_ISOLATION = "probe isolation"


def _health(*titles):
    """The health scenario's phases whose titles start with `titles` (all when none)."""
    phases = [p for p in SCENARIO.phases if not titles or p.title.startswith(titles)]  # the ledger's with all
    assert not titles or len(phases) == len(titles), f"phases {titles} are not all declared"
    runner = scenario_runner("health", phases, HealthRun)
    return lambda allocation, run, profile, progress: runner(allocation, run, profile, HealthOptions(), progress)


def test_rc1_detects_loss_fails_the_attempt_and_starves_its_probes(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    records = []
    checks = run_on_own_cluster(
        _health(), sut_image, sut_wheelhouse, sut_profile, tmp_path, "rc1-health", nodes=2, records=records
    )
    assert checks["health.backend_loss.detected"].verdict == "pass", checks["health.backend_loss.detected"]
    # the ledger reads the drills' sub-runs too: every attempt's requests, none generated twice or lost
    for ledger in ("health.ledger.answered_once", "health.ledger.delivered"):
        assert checks[ledger].verdict == "pass" and checks[ledger].metrics["requests"] >= 48, checks[ledger]
    loss = checks["health.backend_loss.attempt_failed"]
    assert loss.verdict == "pass" and loss.observed.startswith("the controller's wait returned 70"), loss
    detected = checks["health.unresponsive.detected"]
    assert detected.verdict == "pass", detected
    assert "hung: /health 503, backends_ready 3" in detected.observed and detected.metrics["detected_after_s"] < 15
    unresponsive = checks["health.unresponsive.attempt_failed"]
    assert unresponsive.verdict == "fail", unresponsive
    assert unresponsive.observed.startswith("/health 503: the attempt succeeded (wait status 0)"), unresponsive
    assert "48/48 records" in unresponsive.observed, unresponsive
    # hung: its wait checks processes only, and the client's requests to the hung replica never end
    assert "; hung: the controller did not end; client " in unresponsive.observed, unresponsive
    assert unresponsive.detail.endswith("not failed as it must be: /health 503, hung"), unresponsive
    isolation = checks["health.probe_isolation"]
    assert isolation.verdict == "fail" and not isolation.observed.startswith("/health 200")
    # a node set DRAIN mid-generation keeps its steps: rc1's attempt succeeds, every record answered
    drained = checks["health.node_drain.attempt_undisturbed"]
    assert drained.verdict == "pass" and drained.observed.startswith("the attempt succeeded (wait status 0)"), drained
    assert "+DRAIN" in drained.observed and drained.metrics["records_done"] == drained.metrics["records"] == 24
    # Slurm's controller restarted mid-generation (down 5 s): the job and its steps run on
    restarted = checks["health.controller_restart.attempt_undisturbed"]
    print("rc1 controller restart:", restarted.observed)
    assert restarted.verdict == "pass" and restarted.observed.startswith("the attempt succeeded (wait status 0)")
    assert "job RUNNING before, RUNNING after" in restarted.observed and restarted.metrics["records_done"] == 24
    # the replicas' job preempted mid-generation: each replica exits 0 on Slurm's TERM, a loss all the same
    preempted = checks["health.preemption.attempt_failed"]
    print("rc1 preemption:", preempted.observed)
    assert preempted.verdict == "pass" and preempted.observed.startswith("the controller's wait returned 70"), preempted
    assert "Slurm: the job preempted" in preempted.observed and preempted.metrics["failed_after_s"] < 5, preempted
    # judged beside the same attempt undisturbed, its replicas apart as these are (and node loss's)
    placed = "without a fault, its replicas alike in a job of their own on another node, the attempt succeeded"
    assert placed in preempted.observed, preempted
    node_seen = checks["health.node_loss.detected"]
    assert node_seen.verdict == "pass" and "backends_ready 0" in node_seen.observed, node_seen
    assert node_seen.metrics["detected_after_s"] < 15 and "DOWN" in node_seen.observed
    # Slurm sets a node DOWN once it has been silent for SlurmdTimeout, counted from its last
    # answer, which may come before the loss (23.5 s after it with 30 s, under proctrack/cgroup).
    timeout = node_seen.metrics["slurmd_timeout_s"]
    assert timeout / 2 <= node_seen.metrics["slurm_down_after_s"] <= slurm_detection_bound(timeout), node_seen
    # Slurm ends the lost node's steps when it sets the node DOWN (their end is in the events).
    steps_ended = node_seen.metrics["slurm_steps_ended_after_s"]
    assert node_seen.metrics["slurm_down_after_s"] - 2 <= steps_ended <= node_seen.metrics["slurm_down_after_s"] + 20
    node_attempt = checks["health.node_loss.attempt_failed"]
    assert node_attempt.verdict == "pass", node_attempt
    assert node_attempt.observed.startswith("the controller's wait returned 70"), node_attempt
    assert placed in node_attempt.observed, node_attempt
    # rc1 watches its launchers only: it learns of the loss when Slurm ends their steps.
    ended, down = node_attempt.metrics["attempt_ended_after_s"], node_attempt.metrics["slurm_down_after_s"]
    assert down - 2 <= ended <= down + 15, node_attempt
    # what `run health --dry-run` prints is what this run submitted, both ways (its second
    # job, on the node it loses, included; what the SUT's functions launch is in no record)
    assert_the_dry_run_planned_what_the_run_did(records, scenario="health", job=OWN_JOB)


def test_probes_on_their_own_pool_are_the_positive_control_of_probe_isolation(
    sut_wheelhouse, sut_image, sut_profile, tmp_path
):
    health = _health(LOSS_DETECTION, PROBE_ISOLATION)
    checks = run_with_fault(health, "probe-capacity", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    isolation = checks["health.probe_isolation"]
    assert isolation.verdict == "pass" and isolation.observed.startswith("/health 200"), isolation
    assert checks["health.backend_loss.detected"].verdict == "pass"


def test_a_health_endpoint_that_ignores_probes_is_caught_by_detected(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    # the node-loss attempt is the check it must leave passing (the controller learns of the
    # loss from Slurm); the backend-loss attempt, judged alike, would only add its 25 s
    health = _health(LOSS_DETECTION, HEALTHY_APART, NODE_LOSS, UNRESPONSIVE_DETECTION)
    checks = run_with_fault(health, "health-always-ok", sut_wheelhouse, sut_image, sut_profile, tmp_path, nodes=2)
    detected = checks["health.backend_loss.detected"]
    assert detected.verdict == "fail" and detected.observed == "the proxy's /health never reported the loss"
    unresponsive = checks["health.unresponsive.detected"]
    assert unresponsive.verdict == "fail" and "hung: not reported within 15s" in unresponsive.observed
    assert "/health 503: not reported within 15s" in unresponsive.observed
    node_seen = checks["health.node_loss.detected"]
    assert node_seen.verdict == "fail", node_seen
    assert node_seen.observed.startswith("the proxy's /health did not report the loss within 15s; Slurm: node2")
    assert checks["health.node_loss.attempt_failed"].verdict == "pass", "the controller still learns it from Slurm"


def test_an_ignored_required_step_is_caught_by_attempt_failed(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    # node_loss.detected is the check it must leave passing (backend loss's detection, judged
    # the same way, would only add its 14 s)
    health = _health(HEALTHY, HEALTHY_APART, LOSS_ATTEMPT, NODE_LOSS)
    fault = "require-running-ignored"
    checks = run_with_fault(health, fault, sut_wheelhouse, sut_image, sut_profile, tmp_path, nodes=2)
    failed = checks["health.backend_loss.attempt_failed"]
    assert failed.verdict == "fail", failed
    assert "client 24/24 records" in failed.observed and "returned 70" not in failed.observed, failed
    # Slurm ends the lost node's steps; a wait that ignores them is still waiting for the
    # client when the bound after Slurm's DOWN has passed.
    node_attempt = checks["health.node_loss.attempt_failed"]
    assert node_attempt.verdict == "fail" and node_attempt.observed.startswith("the controller did not end"), (
        node_attempt
    )
    assert "attempt_ended_after_s" not in node_attempt.metrics and "DOWN" in node_attempt.observed
    assert checks["health.node_loss.detected"].verdict == "pass"


def test_a_wait_that_takes_a_clean_exit_for_work_done_is_caught_by_preemption(
    sut_wheelhouse, sut_image, sut_profile, tmp_path
):
    """Negative control of preemption.attempt_failed: rc1's wait failing the attempt only for a
    required step that failed. Preempted replicas exit 0 on Slurm's TERM, and the attempt runs
    on without them; a killed replica still fails it (backend loss keeps passing)."""
    health = _health(HEALTHY, HEALTHY_APART, LOSS_ATTEMPT, PREEMPTION)
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
    health = _health(HEALTHY, LOSS_ATTEMPT, UNRESPONSIVE_DETECTION, UNRESPONSIVE_ATTEMPT)
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
    health = _health(HEALTHY, LOSS_ATTEMPT, UNRESPONSIVE_ATTEMPT)
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
    health = _health(HEALTHY, LOSS_ATTEMPT, NODE_DRAIN, CONTROLLER_RESTART)
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
    health = _health(HEALTHY, LOSS_ATTEMPT, CONTROLLER_RESTART)
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
