"""How a drain stop ends an endpoint: one TERM to its step, the KILL once the allowance has
run from that TERM (the controller's escalation, done by the harness), and how the endpoint's
task ended as Slurm recorded it. The drain scenario's stops and telemetry's drain phase use it."""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass

from dd_accept import deployment
from dd_accept.acceptance import drain_checks as checks
from dd_accept.acceptance.plan import PlannedCommand, Planner
from dd_accept.base.drain_outcomes import kill_that_reached
from dd_accept.base.errors import ClusterError, SutBehaviourMissing
from dd_accept.base.waiting import wait_for_finding
from dd_accept.slurm_docker.allocation import Allocation, scancel_argv, scancel_once_argv
from dd_accept.slurm_docker.step_exit import signal_requests
from dd_accept.sut.profile import SutProfile

RECORD_WAIT_S = 45.0  # for slurmstepd's record of a step's end (see endpoint_end)
STEP_LISTED_S = 5.0  # for squeue to list the endpoint's step before its stop (one failed read is no finding)


# The KILL goes out this long after the allowance has run from TERM: an endpoint exiting in
# the allowance's last moment is not killed for the harness's own timing.
KILL_GRACE_S = 0.5


def stop_endpoint_step(
    allocation: Allocation, proxy: deployment.Proxy, profile: SutProfile, behaviour: str
) -> tuple[float, float | None, checks.StepEnd]:
    """TERM the endpoint step; KILL it if it is still running when the allowance has passed
    since TERM reached its task (the controller's escalation, done by the harness). Returns
    when TERM reached the task, when the KILL was sent (None when the endpoint ended by
    itself, a KILL that found it exited 0 included: `kill_that_reached`), and how it ended.
    The allowance runs from TERM, not from when `scancel` and the read of the node's log
    returned: on a loaded machine those took seconds, and an endpoint that never bounds its
    drain outlived its streams' end before the KILL came. An endpoint that ended before its
    stop (it crashed under the streams: its step gone and its srun ended) fails `behaviour`,
    the check the stop was for."""
    running = wait_for_finding(
        lambda: allocation.steps_by_name().get("proxy", []), bool, timeout=STEP_LISTED_S, what="the endpoint's step"
    )
    if not running:
        if not proxy.step.finished:  # squeue failed or lags: Slurm's or the machine's, not the SUT's
            raise ClusterError(f"squeue did not list the endpoint's step within {STEP_LISTED_S:g}s; its srun runs")
        raise SutBehaviourMissing(
            behaviour,
            "the endpoint serves its streams until it is stopped",
            f"the endpoint's step had ended before its stop ({proxy.step.wait(1).describe()}); endpoint log: "
            f"{proxy.log_tail(5) or 'empty'}",
        )
    (step,) = running
    term = allocation.signal_step_once(step, "TERM")
    requests = signal_requests(term.stderr_tail, step, signal.SIGTERM)
    if requests == 0:  # scancel said no request: no TERM to judge a drain by, and no fault of the SUT's
        raise ClusterError(f"the endpoint's TERM was never sent: {term.describe()}")
    stop_at = _term_moment(allocation, step, proxy.node, term.started_at)
    forced_at = None
    kill_at = stop_at + profile.drain.allowance_seconds + KILL_GRACE_S
    try:
        record = proxy.step.wait(timeout=max(KILL_GRACE_S, kill_at - time.time()))
    except TimeoutError:
        forced_at = time.time()
        allocation.scancel_step(step, "KILL")
        record = proxy.step.wait(timeout=30)
    launcher = LauncherEnd(record.exit_code, record.started_at + record.duration_s)
    end = endpoint_end(allocation, step, proxy.node, stop_at, launcher, output=proxy.log_tail(200))
    deliveries = allocation.cluster.signals_sent(step, proxy.node, signal.SIGTERM)
    end = checks.harness_stop(end, deliveries, requests, term.duration_s)
    return stop_at, kill_that_reached(forced_at, stop_at, end.exit_code, end.seconds_after_stop), end


def _term_moment(allocation: Allocation, step: str, node: str, fallback: float) -> float:
    """When slurmstepd delivered TERM to the endpoint's task (the node's own log line), or,
    where the node's log cannot be read, when `scancel` was started: the earliest moment the
    TERM can have arrived, so no stream cut by it is missed as 'ended before the stop'."""
    at = delivered_at(allocation, step, node, signal.SIGTERM, wait_s=3)
    return fallback if at is None else at


def delivered_at(allocation: Allocation, step: str, node: str, signal_number: int, wait_s: float) -> float | None:
    """When slurmstepd first delivered `signal_number` to `step`, its line in the node's log
    waited for up to `wait_s` (it is written a moment after the delivery). None: none came,
    or the log cannot be read (a login node), which is not waited for: it will not become
    readable."""
    sent = wait_for_finding(
        lambda: allocation.cluster.signals_sent(step, node, signal_number),
        lambda sent: sent is None or bool(sent),
        timeout=wait_s,
        what=f"Slurm's record of signal {signal_number} reaching step {step}",
    )
    return sent[0] if sent else None


def plan_endpoint_stop(p: Planner) -> list[PlannedCommand]:
    """What `stop_endpoint_step` submits: TERM to the endpoint's step, KILL at the allowance."""
    allowance = p.profile.drain.allowance_seconds
    return [
        PlannedCommand(
            "TERM to the endpoint's step (not its srun), sent once (scancel repeats it while a later job pends)",
            scancel_once_argv("$PROXY_STEP", "TERM"),
        ),
        PlannedCommand("KILL, the controller's escalation", scancel_argv("$PROXY_STEP", "KILL")).when(
            f"the endpoint still runs {allowance:g}s after TERM"
        ),
    ]


@dataclass(frozen=True, slots=True)
class LauncherEnd:
    """How and when the srun launching the endpoint ended, as its parent (the harness, or
    the drill standing in for the SUT's controller) saw it."""

    exit_code: int | None
    ended_at: float  # epoch seconds
    # The SUT's cleanup may signal srun itself (rc1 TERMs its launchers): srun's status is then
    # its own. The harness never does (it signals the step).
    may_be_signalled: bool = False

    @property
    def task_exit(self) -> int | None:
        """The task's exit status as srun passed it on; None where it may be srun's own: a
        status over 125 is also what srun shows when a signal ended *it* (a cleanup that TERMs
        or KILLs a launcher lingering after its task exited 0)."""
        if self.exit_code is None or (self.may_be_signalled and not 0 <= self.exit_code <= 125):
            return None
        return self.exit_code


def endpoint_end(
    allocation: Allocation,
    step: str | None,
    node: str,
    stop_at: float,
    launcher: LauncherEnd | None = None,
    record_wait_s: float | None = None,
    output: str = "",
) -> checks.StepEnd:
    """The endpoint task's exit status and time as Slurm recorded them. Without a record,
    the status srun passed on to its parent, at the moment srun ended; otherwise unknown
    (never assumed 0: a launcher nobody waited for tells the harness nothing). The record is
    waited for `record_wait_s` (by default briefly when srun's status is known, else
    RECORD_WAIT_S). `output`: the end of the endpoint's output, for the exception it raised."""
    raised = checks.raised_in(output)
    launcher_exit = None if launcher is None else launcher.task_exit
    found = None
    if step is not None:
        # slurmstepd writes the record as the task ends; on a loaded machine (CI: two
        # scenarios at once on two cores) that took over 10 s once, and a correct endpoint
        # was reported "exit unknown". Waiting costs nothing when the record is there.
        found = wait_for_finding(
            lambda: allocation.cluster.step_exit(step, node),
            lambda exit_: exit_ is not None,
            timeout=record_wait_s or (RECORD_WAIT_S if launcher_exit is None else 3),
            what=f"Slurm's record of how step {step} ended",
        )
    if found is None and launcher is not None and launcher_exit is not None:
        return checks.StepEnd(launcher_exit, max(0.0, launcher.ended_at - stop_at), "srun launcher", raised)
    if found is None:
        where = f"nowhere: Slurm kept no record of the end of step {step} within {RECORD_WAIT_S:.0f}s"
        return checks.StepEnd(None, time.time() - stop_at, where, raised)
    ended = found.ended_at if found.ended_at is not None else time.time()
    return checks.StepEnd(found.exit_code, max(0.0, ended - stop_at), found.source, raised)
