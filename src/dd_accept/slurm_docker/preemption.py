"""Preemption of a running job by Slurm itself, as a site's higher-priority work does it.

dd-accept's own cluster has a hidden partition of a higher priority tier over the same nodes
(PREEMPTOR_PARTITION in spec.py, slurm.conf.j2); the scenarios' partition preempts with
PreemptMode=CANCEL and a GraceTime (PREEMPT_GRACE_S). A job submitted there for a node a
running job holds makes slurmctld pick that job for preemption: at once it sends SIGCONT and
SIGTERM to every step of it, and cancels it once the grace time is over (at its next periodic
check: up to tens of seconds later, measured). Only dd-accept's own cluster is set up so.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from dd_accept.base.errors import ClusterError
from dd_accept.base.waiting import WaitTimeout, wait_for_finding, wait_until
from dd_accept.slurm_docker.allocation import Allocation
from dd_accept.slurm_docker.interface import first_delivery
from dd_accept.slurm_docker.spec import PREEMPTOR_PARTITION
from dd_accept.slurm_docker.step_exit import StepExit

PREEMPTOR_JOB = "dd-accept-preemptor"
SIGTERM = 15
ALL_TERMS_WITHIN_S = 5.0  # after the first step's TERM is logged, how long the others' may take


def preemptor_argv(node: str) -> list[str]:
    """The higher-priority job: the whole of `node`, which only preempting its job frees. It is
    cancelled once Slurm has preempted (a pending job of the higher tier holds back the main
    scheduler's pass for the nodes of its partition); one that starts all the same ends at once."""
    return [
        "sbatch", "--parsable", f"--partition={PREEMPTOR_PARTITION}", f"--nodelist={node}", "--exclusive",
        f"--job-name={PREEMPTOR_JOB}", "--time=1", "--wrap=true",
    ]  # fmt: skip


@dataclass(frozen=True, slots=True)
class Preemption:
    """One preemption as Slurm showed it: when it was asked (the preemptor's submission), when
    the preempted job's node sent its steps TERM (slurmd's log, the node's own clock), and the
    job's state then; `exits`, read once the attempt is over, how each step's task ended."""

    preemptor_job: str
    asked_at: float  # epoch seconds
    term_after_s: float  # from the ask to the first step's TERM
    steps_signalled: tuple[str, ...]
    job_state: str
    # per signalled step, its task's end (exit code, epoch seconds); None: no end logged
    exits: tuple[StepExit | None, ...] = ()

    @property
    def term_at(self) -> float:
        return self.asked_at + self.term_after_s

    def describe(self) -> str:
        ended = ""
        if self.exits:
            codes = sorted({"none logged" if end is None else f"exit {end.exit_code}" for end in self.exits})
            ended = f", which ended: {', '.join(codes)}"
        return (
            f"the job preempted {self.term_after_s:.1f}s after a higher-priority job was submitted for its node: "
            f"TERM to its steps {', '.join(self.steps_signalled)}{ended}; job {self.job_state}"
        )


def preempt(job: Allocation, timeout: float = 30.0) -> Preemption:
    """Submit the preemptor for `job`'s node, wait until Slurm has sent TERM to the job's
    steps there (the first, then the others for a few seconds), and cancel the preemptor
    (whatever happened, once submitted)."""
    cluster = job.cluster
    steps = job.steps()
    if not steps:
        raise ClusterError(f"job {job.job_id} lists no step to preempt")
    asked_at = time.time()
    preemptor: str | None = None
    try:
        submitted = cluster.exec(preemptor_argv(job.first_node), timeout=30)
        if not submitted.ok:
            raise ClusterError(
                f"could not submit a job to preempt {job.job_id}: {submitted.describe()} (a cluster made by an older "
                f"dd-accept has no {PREEMPTOR_PARTITION} partition: `dd-accept cluster down` it and run again)"
            )
        preemptor = submitted.stdout.strip().split(";")[0]

        def signalled() -> dict[str, float]:
            node = job.first_node
            return {step: at for step in steps if (at := first_delivery(cluster, step, node, SIGTERM)) is not None}

        try:
            sent = wait_until(signalled, bool, timeout=timeout, what="Slurm to preempt")
        except WaitTimeout as error:
            raise ClusterError(f"Slurm did not preempt job {job.job_id} for a higher-priority one: {error}") from error
        # the other steps' TERM lines follow within moments (CI once saw one of two not logged
        # in 30 s on a loaded machine, its task stopped all the same): what was logged is told
        every = wait_for_finding(signalled, lambda s: len(s) == len(steps), timeout=ALL_TERMS_WITHIN_S, what="TERM")
        sent = every or signalled()
    finally:  # by id; by name where the submission's answer was lost
        cancel = [preemptor] if preemptor else [f"--name={PREEMPTOR_JOB}"]
        cluster.exec(["scancel", *cancel], timeout=10)
    assert preemptor is not None, "submitted, or raised"
    term_after_s = min(sent.values()) - asked_at
    if term_after_s < -1.0:  # the node's clock is the host's: a TERM before the ask is an older log line
        raise ClusterError(f"slurmd logged TERM to job {job.job_id} {-term_after_s:.1f}s before it was preempted")
    return Preemption(preemptor, asked_at, round(max(0.0, term_after_s), 3), tuple(sorted(sent)), job.job_state())


def with_exits(preemption: Preemption, job: Allocation) -> Preemption:
    """The preemption with how each signalled step's task ended, from the node's slurmd log."""
    ended = tuple(job.cluster.step_exit(step, job.first_node) for step in preemption.steps_signalled)
    return dataclasses.replace(preemption, exits=ended)
