"""The health checks, as pure functions of probe results and the controller's exit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dd_accept.acceptance.results import CheckResult


@dataclass(frozen=True, slots=True)
class Probe:
    status: int | None
    elapsed_s: float
    body: dict[str, Any] | None
    seconds_after_loss: float


def backend_loss_detected(probe: Probe | None, replicas: int, has_monitor: bool) -> CheckResult:
    ready = (probe.body or {}).get("backends_ready") if probe else None
    ok = probe is not None and probe.status == 503 and ready == replicas - 1
    observed = (
        "the proxy's /health never reported the loss"
        if probe is None
        else f"/health {probe.status}, backends_ready {ready}, {probe.seconds_after_loss:.1f}s after the kill"
    )
    detail = "the SUT's profile declares no health monitor; the proxy's /health is the only detector"
    if has_monitor:
        detail = "the profile declares a health monitor; dd-accept observes the proxy's /health and the attempt"
    return CheckResult.judge(
        "health.backend_loss.detected",
        ok,
        f"/health answers 503 with backends_ready {replicas - 1} of {replicas}",
        observed,
        detail,
    )


def attempt_failed(wait_status: int | None, ended_after_loss_s: float | None, client_finished: bool) -> CheckResult:
    failed = wait_status not in (None, 0)
    ok = failed and not client_finished
    if wait_status is None:
        observed = "the controller did not end"
    elif failed:
        observed = f"the controller's wait failed with status {wait_status}, {ended_after_loss_s:.1f}s after the kill"
    else:
        observed = "the attempt finished with fewer replicas (wait status 0)"
    return CheckResult.judge(
        "health.backend_loss.attempt_failed",
        ok,
        "the attempt fails (non-zero) before the client finishes; it does not finish with fewer replicas",
        observed + ("" if not client_finished else "; the client had already finished"),
    )


def probe_isolation(probe: Probe, saturated: int, limit_s: float = 5.0) -> CheckResult:
    ok = probe.status == 200 and probe.elapsed_s <= limit_s
    return CheckResult.judge(
        "health.probe_isolation",
        ok,
        f"/health answers 200 within {limit_s:g}s while upstream connections are saturated",
        f"/health {probe.status} after {probe.elapsed_s:.1f}s with {saturated} streams holding upstream connections",
        metrics={"health_seconds": probe.elapsed_s},
    )
