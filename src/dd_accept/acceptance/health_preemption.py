"""The health scenario's preemption: the job running every required replica is preempted by
Slurm mid-generation, as a site's higher-priority work does it (slurm_docker.preemption).

The replicas run in a job of their own, alone on a node outside the scenario's allocation
(the SUT's controller, its proxy and its client stay in the scenario's, which nothing
preempts). Slurm sends every replica step TERM at once; each replica stops as a server does
on TERM, exiting 0. Only dd-accept's own cluster has the partition that preempts.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from dd_accept.acceptance import health_checks as checks
from dd_accept.acceptance.health_drills import drilled_attempt
from dd_accept.acceptance.health_node_loss import job_on_a_node_to_lose
from dd_accept.base.errors import ClusterError
from dd_accept.slurm_docker.preemption import Preemption, preempt, with_exits

if TYPE_CHECKING:  # the run state is the scenario's (health), which imports this module
    from dd_accept.acceptance.health import HealthRun

REPLICAS_JOB = "dd-preempted"
PORT_OFFSET = 500
# The client's attempts at each record (0.1 s apart): with every replica gone it keeps trying
# for seconds (24 records on 8 connections: 3 each, about 9 s), as a user's client would, not
# for the fraction of one that its usual 3 take, so a wait that polls is not outrun by it.
CLIENT_ATTEMPTS = 30
# How soon after Slurm's TERM a replica (--exit-on-term) has ended: a fraction of a second.
STOPPED_WITHIN_S = 5.0


def _unclean_stop(preemption: Preemption, wait_returned_at: float | None) -> bool:
    """Whether a replica ended otherwise than with exit 0 before the SUT's wait returned (its
    stop may then kill the rest, as rc1's does; the harness KILLs what is left at the end):
    what the wait reacted to was then not the clean stop the check names. Where the wait
    never returned, the ends within STOPPED_WITHIN_S of the TERM are what it saw."""
    by = wait_returned_at if wait_returned_at is not None else preemption.term_at + STOPPED_WITHIN_S
    return any(
        end.exit_code != 0
        for end in preemption.exits
        if end is not None and end.ended_at is not None and end.ended_at <= by
    )


def attempt(s: HealthRun) -> None:
    """The attempt with its replicas' job preempted mid-generation; the preempted job is
    cancelled however it ended (`preempt` cancels its preemptor)."""
    serving = job_on_a_node_to_lose(s.allocation, REPLICAS_JOB, "preempting the replicas' job")
    seen: dict[str, Preemption] = {}

    def preempted(replicas: object) -> None:
        seen["preemption"] = preempt(serving)

    try:
        outcome = drilled_attempt(s.allocation, s.profile, s.options, "preemption", preempted,
                                  port_offset=PORT_OFFSET, replicas_in=serving,
                                  record_attempts=CLIENT_ATTEMPTS)  # fmt: skip
        preemption = with_exits(seen["preemption"], serving)
    finally:
        serving.release()
    if _unclean_stop(preemption, outcome.ended_at):  # the fault judged is a clean stop: the harness's replicas
        raise ClusterError(f"the replicas did not stop as a preempted server does (exit 0): {preemption.describe()}")
    running = outcome.running_at(preemption.term_at)
    if not running and outcome.wait_status == 0:
        raise RuntimeError("the attempt had ended before Slurm preempted its replicas: the phase tested nothing")
    # counted from the node's TERM, not from the preemptor's submission; a wait that failed the
    # attempt before the TERM failed it for no reason (the check fails: it did not run at the fault)
    ended_after = None if outcome.ended_at is None else round(outcome.ended_at - preemption.term_at, 3)
    outcome = dataclasses.replace(outcome, ended_after_fault_s=ended_after, running_at_fault=running)
    failure_status = s.profile.cleanup.failure_status
    s.result.add(checks.preemption_attempt_failed(outcome, failure_status, preemption, s.healthy_apart))
