"""Every check id dd-accept can report, by scenario.

Gate files name checks (which may be `unsupported`, which thresholds apply); a typo there
must be a usage error, not a silently ignored line, so names are validated against this.
"""

from __future__ import annotations

CHECKS: dict[str, tuple[str, ...]] = {
    "overload": (
        "overload.admission.rejects",
        "overload.partial.completes",
        "overload.partial.failover",
        "overload.total.attempts",
        "overload.total.retry_after",
        "overload.total.admission_decrease",
        "overload.total.cooldown",
        "overload.recovery",
    ),
    "drain": (
        "drain.scancel_step",
        "drain.allowance",
        "drain.sut_cleanup.completion",
        "drain.sut_cleanup.failure",
        "drain.sut_cleanup.cancel",
    ),
    "health": (
        "health.backend_loss.detected",
        "health.backend_loss.attempt_failed",
        "health.unresponsive.detected",
        "health.unresponsive.attempt_failed",
        "health.probe_isolation",
    ),
    "streaming": (
        "streaming.integrity",
        "streaming.no_buffering",
        "streaming.connection_accounting",
        "streaming.least_connections",
    ),
}

# Every scenario needs the SUT's proxy to serve first; one that never does fails this check.
for _scenario, _checks in list(CHECKS.items()):
    CHECKS[_scenario] = (f"{_scenario}.endpoint_starts", *_checks)

ALL_CHECKS = frozenset(check for checks in CHECKS.values() for check in checks)
