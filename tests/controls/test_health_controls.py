"""Controls for the health checks: rc1, and faults of detection and of the process watch.

rc1 is the positive control of backend_loss.detected, backend_loss.attempt_failed,
node_loss.detected, node_loss.attempt_failed, unresponsive.detected,
node_drain.attempt_undisturbed (its wait watches processes only),
controller_restart.attempt_undisturbed and preemption.attempt_failed (any required process
gone fails the attempt), and the negative control of probe_isolation (its probes share the
inference pool: a true finding) and of unresponsive.attempt_failed (its wait checks only that
processes live: the seed's "health failure still permits success"). rc1 with probes on their
own pool is the positive control of probe_isolation; a /health that ignores its probes is the
negative control of the detection checks, and a wait that ignores a required step's end
(test_health_step_controls.py) of the attempt checks. The controls of waits that watch more
than rc1's are in test_health_wait_controls.py.

Each control runs the phases its fault is about, plus one whose check the fault must leave
passing; rc1 runs them all. A lost node needs a cluster with a node beyond the allocation.
"""

import pytest

from dd_accept.acceptance.health_node_loss import slurm_detection_bound
from tests.controls.controls import OWN_JOB, run_on_own_cluster, run_with_fault
from tests.controls.health_phases import (
    HEALTHY_APART,
    LOSS_DETECTION,
    NODE_LOSS,
    PROBE_ISOLATION,
    UNRESPONSIVE_DETECTION,
    health_phases,
)
from tests.helpers import assert_the_dry_run_planned_what_the_run_did

pytestmark = pytest.mark.cluster


def test_rc1_detects_loss_fails_the_attempt_and_starves_its_probes(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    records = []
    checks = run_on_own_cluster(
        health_phases(), sut_image, sut_wheelhouse, sut_profile, tmp_path, "rc1-health", nodes=2, records=records
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
    health = health_phases(LOSS_DETECTION, PROBE_ISOLATION)
    checks = run_with_fault(health, "probe-capacity", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    isolation = checks["health.probe_isolation"]
    assert isolation.verdict == "pass" and isolation.observed.startswith("/health 200"), isolation
    assert checks["health.backend_loss.detected"].verdict == "pass"


def test_a_health_endpoint_that_ignores_probes_is_caught_by_detected(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    # the node-loss attempt is the check it must leave passing (the controller learns of the
    # loss from Slurm); the backend-loss attempt, judged alike, would only add its 25 s
    health = health_phases(LOSS_DETECTION, HEALTHY_APART, NODE_LOSS, UNRESPONSIVE_DETECTION)
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
