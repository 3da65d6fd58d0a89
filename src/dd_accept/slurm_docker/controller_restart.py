"""A restart of Slurm's controller while a job runs: slurmctld saves its state and ends
(`scontrol shutdown slurmctld`, as an administrator's upgrade or reconfiguration does), stays
down a while, and starts again from its saved state.

A running job's steps live in slurmd and slurmstepd on its nodes and in their srun launchers:
they go on meanwhile. Only what asks the controller (squeue, scontrol, sbatch, a new srun)
fails or waits until it is back. Only dd-accept's own cluster's controller is restarted (its
entrypoint runs slurmctld as a child it starts again: recipe/dd-node-entrypoint), never a
site's, and only while it serves one job (`serves_only`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from dd_accept.base.errors import ClusterError
from dd_accept.base.waiting import WaitTimeout, wait_for_finding, wait_until
from dd_accept.slurm_docker.allocation import Allocation
from dd_accept.slurm_docker.interface import Cluster
from dd_accept.slurm_docker.step_exit import StepExit

# The entrypoint's handshake: it starts slurmctld again after an end it was told of (the
# restart file), once the held file is gone.
RESTART_FILE = "/run/dd-accept/controller-restart"
HELD_FILE = "/run/dd-accept/controller-held"
# How long a task end may take to reach slurmd's log after squeue stopped listing its step.
STEP_END_LOGGED_WITHIN_S = 5.0


@dataclass(frozen=True, slots=True)
class ControllerRestart:
    """One restart as Slurm showed it: how long the controller did not answer, and the job's
    state and steps before and after it (Slurm's view of the job; the commands' records say
    when, on the run's clock)."""

    down_s: float  # from the shutdown asked to `scontrol ping` answering UP again
    job_state_before: str
    job_state_after: str
    steps_before: tuple[str, ...]
    steps_after: tuple[str, ...]
    asked_at: float  # epoch seconds of the shutdown's ask: an attempt that ended before was not tested
    # steps listed before and not after, with how their tasks ended as the nodes logged it
    # (None: no end logged)
    steps_gone: tuple[tuple[str, StepExit | None], ...] = ()

    def steps_lost(self, wait_returned_at: float | None) -> tuple[str, ...]:
        """The gone steps Slurm itself lost: no task end logged, or killed by a signal before the
        SUT's wait returned (`wait_returned_at`, epoch seconds; None: it never did), so before
        its stop could kill them: a step the restarted controller forgot is killed as an orphan
        when its node registers again. One that exited, or that the SUT's stop killed, is the
        attempt's own doing."""
        return tuple(
            step
            for step, end in self.steps_gone
            if end is None
            or (end.exit_code >= 128 and (wait_returned_at is None or (end.ended_at or 0.0) < wait_returned_at))
        )

    def job_kept(self, wait_returned_at: float | None) -> bool:
        """Slurm still runs the job, and lost none of the steps it ran before (`steps_lost`)."""
        return self.job_state_after == self.job_state_before and not self.steps_lost(wait_returned_at)

    def describe(self) -> str:
        ends = ", ".join(f"{step} {'no end logged' if end is None else f'exit {end.exit_code}'}"
                         for step, end in self.steps_gone)  # fmt: skip
        return (
            f"slurmctld down {self.down_s:.1f}s; job {self.job_state_before} before, {self.job_state_after} after, "
            f"steps {len(self.steps_before)} before, {len(self.steps_after)} after"
            + (f" (gone: {ends})" if ends else "")
        )


def _answers(cluster: Cluster) -> bool:
    record = cluster.exec(["scontrol", "ping"], timeout=20)
    return record.ok and " is UP" in record.stdout


def _wait(cluster: Cluster, *, up: bool, timeout: float) -> None:
    what = "slurmctld to answer again" if up else "slurmctld to stop answering"
    try:
        wait_until(lambda: _answers(cluster), lambda answers: answers == up, timeout=timeout, what=what)
    except WaitTimeout as error:
        raise ClusterError(f"the controller's restart failed: {error}") from error


def serves_only(allocation: Allocation) -> bool:
    """Whether the controller runs no job but the allocation's: a restart is felt by every job
    that asks Slurm meanwhile (a run's scenarios in parallel share one controller)."""
    record = allocation.cluster.exec(["squeue", "-h", "-o", "%i"], timeout=20)
    if not record.ok:
        raise ClusterError(f"could not list the cluster's jobs: {record.describe()}")
    return record.stdout.split() == [allocation.job_id]


def _end_on_a_node(allocation: Allocation, step: str) -> StepExit | None:
    """How a node of the allocation logged `step`'s task ending (slurmstepd logs it as the task
    exits; the wait covers a log line not yet written when squeue stopped listing the step);
    None when none did."""

    def logged() -> StepExit | None:
        ends = (allocation.cluster.step_exit(step, node) for node in allocation.nodes)
        return next((end for end in ends if end is not None), None)

    return wait_for_finding(
        logged, lambda end: end is not None, timeout=STEP_END_LOGGED_WITHIN_S, what=f"{step}'s end in slurmd's log"
    )


def restart_controller(allocation: Allocation, held_s: float, timeout: float = 60.0) -> ControllerRestart:
    """Shut slurmctld down with its state saved, keep it down `held_s` seconds from when it
    stopped answering (a loaded machine may take seconds to save its state), start it again
    and wait until it answers; the allocation's job state and steps are read before and
    after, with how each step gone since ended in slurmd's log (`steps_lost` tells Slurm's
    losses from the attempt's own ends). Whatever fails, the controller is let start again."""
    cluster = allocation.cluster
    state_before, steps_before = allocation.job_state(), tuple(allocation.steps())
    marked = cluster.exec(["sh", "-c", f"mkdir -p /run/dd-accept && touch {RESTART_FILE} {HELD_FILE}"], timeout=10)
    if not marked.ok:
        raise ClusterError(f"could not mark the controller for a restart: {marked.describe()}")
    asked_at = time.time()
    try:
        shutdown = cluster.exec(["scontrol", "shutdown", "slurmctld"], timeout=20)
        if not shutdown.ok:
            raise ClusterError(f"slurmctld refused to shut down: {shutdown.describe()}")
        _wait(cluster, up=False, timeout=timeout)
        time.sleep(held_s)
    finally:
        cluster.exec(["rm", "-f", HELD_FILE], timeout=10)
    _wait(cluster, up=True, timeout=timeout)
    down_s = time.time() - asked_at
    state_after, steps_after = allocation.job_state(), tuple(allocation.steps())
    gone = tuple((step, _end_on_a_node(allocation, step)) for step in steps_before if step not in steps_after)
    return ControllerRestart(round(down_s, 3), state_before, state_after, steps_before, steps_after, asked_at, gone)
