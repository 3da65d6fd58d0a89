"""The negative control of the attempt checks: a wait that ignores a required step's end
(rc1 wheel variant). A file of its own so that `make test`'s workers, handed whole files,
share the health controls (test_health_controls.py was one worker's longest file).
"""

import pytest

from tests.controls.controls import run_with_fault
from tests.controls.health_phases import HEALTHY, HEALTHY_APART, LOSS_ATTEMPT, NODE_LOSS, health_phases

pytestmark = pytest.mark.cluster


def test_an_ignored_required_step_is_caught_by_attempt_failed(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    # node_loss.detected is the check it must leave passing (backend loss's detection, judged
    # the same way, would only add its 14 s)
    health = health_phases(HEALTHY, HEALTHY_APART, LOSS_ATTEMPT, NODE_LOSS)
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
