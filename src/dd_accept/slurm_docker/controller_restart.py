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
from dd_accept.base.waiting import WaitTimeout, wait_until
from dd_accept.slurm_docker.allocation import Allocation
from dd_accept.slurm_docker.interface import Cluster

# The entrypoint's handshake: it starts slurmctld again after an end it was told of (the
# restart file), once the held file is gone.
RESTART_FILE = "/run/dd-accept/controller-restart"
HELD_FILE = "/run/dd-accept/controller-held"


@dataclass(frozen=True, slots=True)
class ControllerRestart:
    """One restart as Slurm showed it: how long the controller did not answer, and the job's
    state and steps before and after it (Slurm's view of the job; the commands' records say
    when, on the run's clock)."""

    down_s: float  # from the shutdown asked to `scontrol ping` answering UP again
    job_state_before: str
    job_state_after: str
    steps_before: int
    steps_after: int

    @property
    def job_kept(self) -> bool:
        """Slurm still runs the job as before (its steps are reported: the attempt may end its
        own meanwhile)."""
        return self.job_state_after == self.job_state_before

    def describe(self) -> str:
        return (
            f"slurmctld down {self.down_s:.1f}s; job {self.job_state_before} before, {self.job_state_after} after, "
            f"steps {self.steps_before} before, {self.steps_after} after"
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


def restart_controller(allocation: Allocation, held_s: float, timeout: float = 60.0) -> ControllerRestart:
    """Shut slurmctld down with its state saved, keep it down `held_s` seconds from when it
    stopped answering (a loaded machine may take seconds to save its state), start it again
    and wait until it answers; the allocation's job state and steps are read before and
    after. Whatever fails, the controller is let start again."""
    cluster = allocation.cluster
    state_before, steps_before = allocation.job_state(), len(allocation.steps())
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
    state_after, steps_after = allocation.job_state(), len(allocation.steps())
    return ControllerRestart(round(down_s, 3), state_before, state_after, steps_before, steps_after)
