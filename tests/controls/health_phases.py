"""The health scenario's phases by title, for controls that run only those their fault is about."""

from dd_accept.acceptance.health import SCENARIO, HealthOptions, HealthRun
from dd_accept.acceptance.phases import scenario_runner

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


def health_phases(*titles):
    """The health scenario's phases whose titles start with `titles` (all when none)."""
    phases = [p for p in SCENARIO.phases if not titles or p.title.startswith(titles)]  # the ledger's with all
    assert not titles or len(phases) == len(titles), f"phases {titles} are not all declared"
    runner = scenario_runner("health", phases, HealthRun)
    return lambda allocation, run, profile, progress: runner(allocation, run, profile, HealthOptions(), progress)
