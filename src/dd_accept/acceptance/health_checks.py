"""The health checks, as pure functions of probe results and the controller's exit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dd_accept.acceptance.registry import check
from dd_accept.base.results import CheckResult
from dd_accept.slurm_docker.controller_restart import ControllerRestart
from dd_accept.slurm_docker.preemption import Preemption


@dataclass(frozen=True, slots=True)
class Probe:
    status: int | None
    elapsed_s: float
    body: dict[str, Any] | None
    seconds_after_loss: float


@check("health.backend_loss.detected")
def backend_loss_detected(probe: Probe | None, replicas: int, has_monitor: bool, bound_s: float = 15.0) -> CheckResult:
    """A replica's process killed is reported by the proxy's /health (503, one backend fewer
    ready) within the bound, with or without a health monitor the profile declares."""
    ready = (probe.body or {}).get("backends_ready") if probe else None
    in_time = probe is not None and probe.seconds_after_loss <= bound_s
    ok = probe is not None and probe.status == 503 and ready == replicas - 1 and in_time
    observed = (
        "the proxy's /health never reported the loss"
        if probe is None
        else f"/health {probe.status}, backends_ready {ready}, {probe.seconds_after_loss:.1f}s after the kill"
    )
    detail = "the SUT's profile declares no health monitor; the proxy's /health is the only detector"
    if has_monitor:
        detail = "the profile declares a health monitor; dd-accept observes the proxy's /health and the attempt"
    return CheckResult.judge(
        backend_loss_detected.check_id,
        ok,
        f"/health answers 503 with backends_ready {replicas - 1} of {replicas} within {bound_s:g}s",
        observed,
        detail,
    )


@dataclass(frozen=True, slots=True)
class AttemptOutcome:
    """How an attempt under the SUT's own controller functions ended after a fault."""

    wait_status: int | None  # what the SUT's wait function returned; None: it never returned
    ended_after_fault_s: float | None
    records_done: int
    records: int
    running_at_fault: bool = True  # the attempt was still under way when the fault was done
    ended_at: float | None = None  # epoch seconds the SUT's wait returned; None: it never did
    replicas_apart: bool = False  # the replicas ran in a job of their own on another node

    @property
    def client_finished(self) -> bool:
        return self.records_done == self.records

    def running_at(self, moment: float) -> bool:
        """Whether the attempt was still under way at `moment` (a fault that strikes after its
        preparations, as the controller's shutdown does, tests nothing after the attempt ended)."""
        return self.running_at_fault and (self.ended_at is None or self.ended_at > moment)


def _attempt_observed(outcome: AttemptOutcome, fault: str) -> str:
    if outcome.wait_status is None:
        text = "the controller did not end"
    elif outcome.wait_status == 0:
        text = f"the attempt succeeded (wait status 0) {outcome.ended_after_fault_s:.1f}s after {fault}"
    else:
        text = f"the controller's wait returned {outcome.wait_status}, {outcome.ended_after_fault_s:.1f}s after {fault}"
    return text + f"; client {outcome.records_done}/{outcome.records} records"


def _baseline_ok(healthy: AttemptOutcome | None) -> bool:
    """The attempt succeeded without the fault. None (no healthy attempt ran) is no baseline:
    a wait that always returns the failure status would pass every attempt check without it."""
    return healthy is not None and healthy.wait_status == 0 and healthy.client_finished


def _baseline_text(healthy: AttemptOutcome | None) -> str:
    if healthy is None:
        return "; no attempt ran without the fault: a SUT that fails every attempt cannot be told apart"
    apart = ", its replicas alike in a job of their own on another node," if healthy.replicas_apart else ""
    return f"; without a fault{apart} the attempt {'succeeded' if _baseline_ok(healthy) else 'did not succeed'} " + (
        f"(wait status {healthy.wait_status}, {healthy.records_done}/{healthy.records} records)"
    )


def _failed(
    check_id: str, outcome: AttemptOutcome, failure_status: int, healthy: AttemptOutcome | None, loss: str,
    fault: str, slurm: str = "",
) -> CheckResult:  # fmt: skip
    """An attempt that lost required backends (`loss`: how the expectation begins; `fault`: the
    observation's name of the moment) must fail with the status the SUT documents before the client
    finishes, and succeed without the fault (or a wait that always fails would pass)."""
    ok = (
        outcome.wait_status == failure_status
        and not outcome.client_finished
        and outcome.running_at_fault
        and _baseline_ok(healthy)
    )
    return CheckResult.judge(
        check_id,
        ok,
        f"{loss}the attempt fails with status {failure_status} before the client finishes; "
        "it does not finish with fewer replicas; without the fault it succeeds",
        _attempt_observed(outcome, fault) + slurm + _baseline_text(healthy),
        metrics={} if outcome.ended_after_fault_s is None else {"failed_after_s": outcome.ended_after_fault_s},
    )


@check("health.backend_loss.attempt_failed")
def attempt_failed(outcome: AttemptOutcome, failure_status: int, healthy: AttemptOutcome | None = None) -> CheckResult:
    """A required replica's process dies mid-generation: the attempt fails with the status the
    SUT documents, before the client finishes; it never finishes with fewer replicas. The
    same attempt without the fault must succeed, or a wait that always fails would pass."""
    return _failed(attempt_failed.check_id, outcome, failure_status, healthy, "", "the kill")


@check("health.preemption.attempt_failed")
def preemption_attempt_failed(
    outcome: AttemptOutcome, failure_status: int, preemption: Preemption, healthy: AttemptOutcome | None = None
) -> CheckResult:
    """The job running every required replica is preempted mid-generation, as a site's
    higher-priority work does it: Slurm sends each replica step TERM at once, and each ends
    cleanly (exit 0, as a server that stops on TERM does). That is the loss of the service all
    the same (the seed: "runtime service loss fails the attempt; it does not silently accept a
    deployment with fewer healthy replicas"): the attempt fails with the status the SUT
    documents, before the client finishes. A wait that takes a backend's clean exit for work
    done, not for its loss, lets the attempt run on without it."""
    return _failed(
        preemption_attempt_failed.check_id, outcome, failure_status, healthy,
        "with every required replica preempted by Slurm (TERM, each exiting 0), ", "Slurm's TERM",
        f"; Slurm: {preemption.describe()}",
    )  # fmt: skip


def _undisturbed(
    check_id: str, expected: str, outcome: AttemptOutcome, observed: str, mistaken: str, cause: str,
    healthy: AttemptOutcome | None, ran_on: str, slurm: dict[str, float] | None = None,
) -> CheckResult:  # fmt: skip
    """An attempt Slurm kept running through an event (`observed`: the attempt beside Slurm's
    view of it) must succeed as it does undisturbed; where it did not, the same attempt
    without the event says whether the event (`cause`) is what failed it. `ran_on`: the
    metric of how long the attempt ran on after the event; `slurm`: Slurm's numbers of it."""
    ok = outcome.wait_status == 0 and outcome.client_finished
    detail = ""
    if not ok:
        detail = mistaken
        if not _baseline_ok(healthy):
            detail = f"the attempt does not succeed undisturbed either: {cause} is not shown to be the cause"
    metrics = {"records_done": float(outcome.records_done), "records": float(outcome.records)}
    if outcome.ended_after_fault_s is not None:
        metrics[ran_on] = round(outcome.ended_after_fault_s, 3)
    metrics |= slurm or {}
    return CheckResult.judge(check_id, ok, expected, observed + _baseline_text(healthy), detail, metrics)


@check("health.node_drain.attempt_undisturbed")
def node_drain_attempt_undisturbed(
    outcome: AttemptOutcome, node: str, state: str, healthy: AttemptOutcome | None = None
) -> CheckResult:
    """The node carrying an attempt is set DRAIN mid-generation (`state`: what Slurm then
    reported), as an administrator does ahead of maintenance: Slurm starts no new job there
    and lets the running steps go on, so nothing is lost. The attempt must succeed as it does
    undisturbed (wait status 0, every record answered); a controller or monitor that takes a
    drained node for a lost one fails work that nothing failed."""
    return _undisturbed(
        node_drain_attempt_undisturbed.check_id,
        "with the attempt's node set DRAIN mid-generation (its steps keep running), the attempt succeeds: "
        "wait status 0, every record answered",
        outcome,
        _attempt_observed(outcome, f"{node} was set DRAIN") + f"; Slurm: {node} {state}",
        "a drained node was taken for a lost one: Slurm kept its steps running",
        "the drain",
        healthy,
        "drained_s",
    )


@check("health.controller_restart.attempt_undisturbed")
def controller_restart_attempt_undisturbed(
    outcome: AttemptOutcome, restart: ControllerRestart, healthy: AttemptOutcome | None = None
) -> CheckResult:
    """Slurm's controller is restarted mid-generation (`scontrol shutdown slurmctld`, its state
    saved, started again seconds later), as an administrator's upgrade or reconfiguration
    does. A running job's steps live on its nodes and go on meanwhile, and Slurm keeps the
    job (`restart`: its state and steps before and after). The attempt must succeed as it does
    undisturbed (wait status 0, every record answered); a controller path that takes Slurm's
    silence for its job's loss fails work that nothing failed."""
    return _undisturbed(
        controller_restart_attempt_undisturbed.check_id,
        "with Slurm's controller restarted mid-generation (the job and its steps keep running), the attempt "
        "succeeds: wait status 0, every record answered",
        outcome,
        _attempt_observed(outcome, "slurmctld was shut down") + f"; Slurm: {restart.describe()}",
        "the controller's restart was taken for the job's loss: Slurm kept the job and its steps running",
        "the restart",
        healthy,
        "ran_after_restart_s",
        {"controller_down_s": restart.down_s},
    )


# How a required replica stops serving while it stays alive, by the words the check says it in:
# its /health answers 503 (it knows it is sick), or it hangs (accepts connections, answers
# nothing, /health included: a wait that asks it without a timeout waits for ever).
UNRESPONSIVE_MODES = {"/health 503": "replica 0's /health began answering 503", "hung": "replica 0 hung"}


@check("health.unresponsive.attempt_failed")
def unresponsive_attempt_failed(
    outcomes: dict[str, AttemptOutcome],
    failure_status: int,
    monitor_bound_s: float | None,
    healthy: AttemptOutcome | None = None,
) -> CheckResult:
    """A required replica stays alive but stops serving while it generates, in each of
    UNRESPONSIVE_MODES: the SUT's controller path must fail the attempt (with the status it
    documents) rather than let it succeed or wait on — the seed's "health failure still
    permits success". With a declared health monitor the failure must also come within the
    monitor's bound. A mode the run did not drive fails: never a pass on less."""

    def failed_right(outcome: AttemptOutcome) -> bool:
        in_time = monitor_bound_s is None or (
            outcome.ended_after_fault_s is not None and outcome.ended_after_fault_s <= monitor_bound_s
        )
        return (
            outcome.wait_status == failure_status
            and not outcome.client_finished
            and in_time
            and outcome.running_at_fault
        )

    missing = [mode for mode in UNRESPONSIVE_MODES if mode not in outcomes]
    wrong = [mode for mode, outcome in outcomes.items() if not failed_right(outcome)]
    ok = not missing and not wrong and _baseline_ok(healthy)
    expected = (
        f"with replica 0's /health answering 503, and with replica 0 hung, the attempt fails with status "
        f"{failure_status} instead of succeeding or waiting on; without the fault it succeeds"
    )
    if monitor_bound_s is not None:
        expected += f"; each within the health monitor's {monitor_bound_s:g}s"
    detail = (
        "the profile declares no health monitor: nothing in the SUT watches a backend that is alive but unhealthy"
        if monitor_bound_s is None
        else "the profile declares a health monitor"
    )
    if wrong or missing:
        detail += "; not failed as it must be: " + ", ".join(wrong + [f"{m} (not driven)" for m in missing])
    observed = "; ".join(
        f"{mode}: {_attempt_observed(outcome, UNRESPONSIVE_MODES.get(mode, mode))}"
        for mode, outcome in outcomes.items()
    )
    metrics = {
        f"{'hung' if mode == 'hung' else 'unhealthy'}_attempt_ended_after_s": outcome.ended_after_fault_s
        for mode, outcome in outcomes.items()
        if outcome.ended_after_fault_s is not None
    }
    return CheckResult.judge(
        unresponsive_attempt_failed.check_id, ok, expected, observed + _baseline_text(healthy), detail, metrics
    )


@check("health.unresponsive.detected")
def unresponsive_detected(
    found: dict[str, Probe | None], replicas: int, bound_s: float, unrecovered: str | None = None
) -> CheckResult:
    """Each way of being alive but not serving is reported by the proxy's /health (503 with
    one backend fewer ready) within the bound, and /health answers 200 again once the replica
    serves, so the next way is seen on its own (`unrecovered`: what it did instead)."""

    def fine(probe: Probe | None) -> bool:
        ready = (probe.body or {}).get("backends_ready") if probe else None
        return (
            probe is not None and probe.status == 503 and ready == replicas - 1 and probe.seconds_after_loss <= bound_s
        )

    def shown(mode: str, probe: Probe | None) -> str:
        if probe is None:
            return f"{mode}: not reported within {bound_s:g}s"
        ready = (probe.body or {}).get("backends_ready")
        return f"{mode}: /health {probe.status}, backends_ready {ready}, {probe.seconds_after_loss:.1f}s after"

    ok = bool(found) and all(fine(probe) for probe in found.values()) and unrecovered is None
    slowest = max((p.seconds_after_loss for p in found.values() if p is not None), default=None)
    return CheckResult.judge(
        unresponsive_detected.check_id,
        ok,
        f"/health answers 503 with backends_ready {replicas - 1} of {replicas} within {bound_s:g}s, "
        "for a hung replica and for one whose /health fails, and 200 again once each serves again",
        "; ".join([*(shown(mode, probe) for mode, probe in found.items()), *([unrecovered] if unrecovered else [])]),
        metrics={} if slowest is None else {"detected_after_s": slowest},
    )


@check("health.probe_isolation")
def probe_isolation(probe: Probe, saturated: int, limit_s: float = 5.0) -> CheckResult:
    """/health answers 200 in time while every upstream connection is held by a stream: its
    probes do not queue behind the traffic they watch."""
    ok = probe.status == 200 and probe.elapsed_s <= limit_s
    return CheckResult.judge(
        probe_isolation.check_id,
        ok,
        f"/health answers 200 within {limit_s:g}s while upstream connections are saturated",
        f"/health {probe.status} after {probe.elapsed_s:.1f}s with {saturated} streams holding upstream connections",
        metrics={"health_seconds": probe.elapsed_s},
    )


@dataclass(frozen=True, slots=True)
class SlurmSawLoss:
    """When Slurm's controller showed the lost node, in seconds after it was frozen."""

    node: str
    not_responding_after_s: float | None  # flagged NOT_RESPONDING (a ping went unanswered)
    down_after_s: float  # set DOWN: its jobs end and their launchers are told
    slurmd_timeout_s: float
    steps_ended_after_s: float | None = None  # the node's steps left squeue (None: not seen to end)

    def text(self) -> str:
        flagged = "" if self.not_responding_after_s is None else f"not responding {self.not_responding_after_s:.1f}s, "
        ended = "" if self.steps_ended_after_s is None else f", its steps ended {self.steps_ended_after_s:.1f}s"
        return f"Slurm: {self.node} {flagged}DOWN {self.down_after_s:.1f}s{ended} after it was lost"


@check("health.node_loss.detected")
def node_loss_detected(probe: Probe | None, slurm: SlurmSawLoss, replicas: int, bound_s: float) -> CheckResult:
    """A node carrying every replica of the attempt dies (frozen: no reset, no exit): the
    proxy's /health must report none ready within the bound. Slurm's own detection is
    recorded on the same clock; it is the cluster's, so it is never what fails this check."""
    ready = (probe.body or {}).get("backends_ready") if probe else None
    ok = probe is not None and probe.status == 503 and ready == 0 and probe.seconds_after_loss <= bound_s
    proxy = (
        f"the proxy's /health did not report the loss within {bound_s:g}s"
        if probe is None
        else f"/health {probe.status}, backends_ready {ready}, {probe.seconds_after_loss:.1f}s after the node was lost"
    )
    metrics = {"slurm_down_after_s": slurm.down_after_s, "slurmd_timeout_s": slurm.slurmd_timeout_s}
    if slurm.steps_ended_after_s is not None:
        metrics["slurm_steps_ended_after_s"] = slurm.steps_ended_after_s
    if probe is not None:
        metrics["detected_after_s"] = probe.seconds_after_loss
    return CheckResult.judge(
        node_loss_detected.check_id,
        ok,
        f"/health answers 503 with backends_ready 0 of {replicas} within {bound_s:g}s of the node's loss",
        f"{proxy}; {slurm.text()}",
        f"the node was frozen (docker pause); Slurm's SlurmdTimeout is {slurm.slurmd_timeout_s:g}s",
        metrics,
    )


@check("health.node_loss.attempt_failed")
def node_loss_attempt_failed(
    outcome: AttemptOutcome,
    declared: str,
    failure_status: int,
    slurm: SlurmSawLoss,
    bound_s: float,
    healthy: AttemptOutcome | None = None,
    monitor_bound_s: float | None = None,
) -> CheckResult:
    """The node carrying the attempt's required replicas dies mid-generation. What the
    controller must do is the profile's declaration: "fail" — the attempt fails with the
    documented status, never finishing with the replicas gone: within its declared health
    monitor's bound of the loss (`monitor_bound_s`: a monitor watches the replicas, not
    Slurm), or, with no monitor declared, at the latest `bound_s` after Slurm set the node
    DOWN (a controller that watches only its launchers learns of the loss then); "recover" —
    every record is still produced and the attempt succeeds. Either way the same attempt
    without the fault must succeed."""
    ended = outcome.ended_after_fault_s
    if declared == "recover":
        ok = outcome.wait_status == 0 and outcome.client_finished
        expected = "the attempt recovers: every record is produced and the controller's wait returns 0"
    else:
        limit = monitor_bound_s if monitor_bound_s is not None else slurm.down_after_s + bound_s
        in_time = ended is not None and ended <= limit
        ok = outcome.wait_status == failure_status and not outcome.client_finished and in_time
        within = (
            f"within the declared health monitor's {monitor_bound_s:g}s of the node's loss"
            if monitor_bound_s is not None
            else f"within {bound_s:g}s of Slurm setting the node DOWN"
        )
        expected = f"the attempt fails with status {failure_status}, before the client finishes, {within}"
    ok = ok and outcome.running_at_fault and _baseline_ok(healthy)
    metrics = {"slurm_down_after_s": slurm.down_after_s}
    if ended is not None:
        metrics["attempt_ended_after_s"] = ended
    return CheckResult.judge(
        node_loss_attempt_failed.check_id,
        ok,
        expected + "; without the fault it succeeds",
        f"{_attempt_observed(outcome, 'the node was lost')}; {slurm.text()}{_baseline_text(healthy)}",
        f"the profile declares node_loss = {declared!r}",
        metrics,
    )
