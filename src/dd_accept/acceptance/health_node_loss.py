"""How the health scenario loses a node and sees Slurm see it: a job held on the node to
lose, Slurm's own record of the node going DOWN and of the steps on it ending (read from
`scontrol` and `squeue`, on the harness's clock), and the wait for the node to come back.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from dd_accept import deployment
from dd_accept.acceptance import health_checks as checks
from dd_accept.acceptance.health_drills import drilled_attempt, first_report
from dd_accept.base.errors import ClusterError, EnvironmentProblem
from dd_accept.base.events import EventWriter, NodeChange, StepChange
from dd_accept.base.waiting import WaitTimeout, wait_until
from dd_accept.slurm_docker.allocation import Allocation
from dd_accept.slurm_docker.interface import Cluster
from dd_accept.slurm_docker.node_health import NodeCondition, node_condition, slurmd_timeout

if TYPE_CHECKING:  # the run state is the scenario's (health), which imports this module
    from dd_accept.acceptance.health import HealthOptions, HealthRun


def slurm_detection_bound(slurmd_timeout_s: float) -> float:
    """How long Slurm may take to set a silent node DOWN: SlurmdTimeout, plus up to a ping
    cycle before and after it (measured with SlurmdTimeout 30: 38 s on 22.05, 58 s on 24.11,
    60 s on 26.05)."""
    return 3 * slurmd_timeout_s


NODE_LOSS_JOB = "dd-node-loss"
PORT_OFFSET = 400  # the attempt's replica ports (another attempt's replicas may still hold theirs)


def job_on_a_node_to_lose(
    allocation: Allocation, job_name: str = NODE_LOSS_JOB, purpose: str = "losing a node"
) -> Allocation:
    """A job of its own, alone on a node outside the scenario's allocation: Slurm ends the
    jobs of a node it sets DOWN (and preempts every job on a node a higher-priority one
    needs), and this one must be the only one."""
    cluster = allocation.cluster
    if len(cluster.nodes) <= len(allocation.nodes):
        raise EnvironmentProblem(
            f"{purpose} needs a compute node outside the scenario's allocation: cluster {cluster.name} "
            f"has {len(cluster.nodes)} (start it with --nodes {len(allocation.nodes) + 1} or more)"
        )
    exclude = f"--exclude={','.join(allocation.nodes)}"
    return Allocation.acquire(cluster, job_name=job_name, extra=[*deployment.SCENARIO_ALLOCATION, exclude])


def slurm_sees_loss(job: Allocation, lost_at: float, timeout: float, events: EventWriter) -> checks.SlurmSawLoss:
    """Slurm's view of the lost node, read every second until it sets the node DOWN, then of
    the job's steps until they end; each change goes into the events. A node not DOWN within
    `slurm_detection_bound` is the cluster's fault, never the SUT's."""
    cluster, node = job.cluster, job.first_node
    flagged: list[float] = []
    last = ""
    steps = _StepWatch(job, events)

    def read() -> NodeCondition:
        nonlocal last
        condition = node_condition(cluster, node)
        if condition.state != last:
            events.write(NodeChange(node=node, state=condition.state))
            last = condition.state
        if condition.not_responding and not flagged:
            flagged.append(time.time() - lost_at)
        return condition

    try:
        bound = slurm_detection_bound(timeout)
        wait_until(read, lambda c: c.down, timeout=bound, interval=1.0, what=f"Slurm to set {node} DOWN")
    except WaitTimeout:
        raise ClusterError(
            f"Slurm did not set the lost node {node} DOWN within {bound:g}s (SlurmdTimeout {timeout:g}s)"
        ) from None
    down_after = time.time() - lost_at
    ended = steps.until_ended(_STEPS_END_AFTER_DOWN_S)
    steps_ended_after = None if ended is None else ended - lost_at
    return checks.SlurmSawLoss(node, flagged[0] if flagged else None, down_after, timeout, steps_ended_after)


_STEPS_END_AFTER_DOWN_S = 20.0  # Slurm ends a DOWN node's jobs at once; this only bounds the reading


class _StepWatch:
    """The steps of a job as `squeue -s` lists them: each one's end (it leaves the list) is
    an event with the job's state at that moment, so the report shows when Slurm ended what
    ran on a lost node, not only when it set the node DOWN."""

    def __init__(self, job: Allocation, events: EventWriter) -> None:
        self.job, self.events = job, events
        self.running = set(job.steps())
        for step in sorted(self.running):
            events.write(StepChange(step=step, state="running"))

    def until_ended(self, timeout: float) -> float | None:
        """When the last step ended (epoch seconds); None if one still ran after `timeout`."""
        try:
            wait_until(
                self._note_ends, lambda running: not running, timeout=timeout, what="the lost node's steps to end",
                interval=0.5, max_interval=0.5,
            )  # fmt: skip
        except WaitTimeout:
            return None
        return time.time()

    def _note_ends(self) -> set[str]:
        """The steps still running; each that left the list since the last reading is an event."""
        gone = self.running - set(self.job.steps())
        if gone:
            job_state = self.job.job_state()
            for step in sorted(gone):
                self.events.write(StepChange(step=step, state="ended", job_state=job_state))
            self.running -= gone
        return self.running


def wait_back(cluster: Cluster, node: str, events: EventWriter) -> None:
    """The restored node answering and taken back (ReturnToService=2), or resumed by hand."""

    def back(condition: NodeCondition) -> bool:
        return not condition.down and not condition.not_responding

    try:
        condition = wait_until(lambda: node_condition(cluster, node), back, timeout=30, what=f"{node} to return")
    except WaitTimeout:
        cluster.exec(["scontrol", "update", f"NodeName={node}", "State=RESUME"], timeout=10)
        condition = wait_until(lambda: node_condition(cluster, node), back, timeout=30, what=f"{node} to resume")
    events.write(NodeChange(node=node, state=condition.state))


def attempt(s: HealthRun) -> None:
    """Freeze the node carrying every replica of an attempt (their own job, so that the
    scenario's allocation, with the proxy and the client, survives), judge who noticed and
    what the controller did, and bring the node back."""
    cluster, options = s.allocation.cluster, s.options
    timeout = slurmd_timeout(cluster)
    node_job = job_on_a_node_to_lose(s.allocation)
    node = node_job.first_node
    events = EventWriter(s.run.path("node-loss-nodes.jsonl")[1], "harness")
    watching = ThreadPoolExecutor(max_workers=1, thread_name_prefix="slurm-node")
    seen: dict[str, Any] = {}

    def lose(replicas: deployment.ReplicaSet) -> None:
        cluster.lose_node(node)
        seen["lost"] = True
        events.write(NodeChange(node=node, state="lost"))

    def observe(proxy: deployment.Proxy, lost_at: float) -> float | None:
        slurm = watching.submit(slurm_sees_loss, node_job, lost_at, timeout, events)
        seen["probe"] = first_report(proxy, lost_at, options.node_loss_detect_timeout_s, "the node's loss", 0)
        seen["slurm"] = slurm.result()
        if s.profile.capabilities.node_loss != "fail":
            return None  # a recovering controller is waited for until the client's deadline
        # Past its bound a failing controller has already failed the check: waiting on for the
        # client's deadline would only make a broken SUT's run longer.
        late = lost_at + node_loss_bound(seen["slurm"].down_after_s) + 2.0
        return max(1.0, late - time.time())

    def node_loss_bound(down_after_s: float) -> float:
        """When, after the loss, a failing controller must have failed the attempt: within its
        declared monitor's bound, else within the bound after Slurm set the node DOWN."""
        monitor = s.profile.capabilities
        if monitor.health_monitor:
            return monitor.monitor_detect_seconds
        return down_after_s + options.node_loss_attempt_bound_s

    try:
        outcome = drilled_attempt(
            s.allocation, s.profile, options, "node-loss", lose, port_offset=PORT_OFFSET,
            replicas_in=node_job,
            deadline_s=client_deadline(timeout, options), observe=observe,
        )  # fmt: skip
    finally:
        watching.shutdown(wait=True)
        if seen.get("lost"):
            cluster.restore_node(node)
            events.write(NodeChange(node=node, state="restored"))
            wait_back(cluster, node, events)
        node_job.release()
        events.close()
    if s.allocation.job_state() != "RUNNING":  # Slurm took the scenario's own node down with the lost one
        raise ClusterError(
            f"Slurm ended the scenario's own job {s.allocation.job_id} while {node} was lost "
            f"(its state: {s.allocation.job_state()}): a node that stalls Slurm's pings can take another with it"
        )
    slurm, capabilities = seen["slurm"], s.profile.capabilities
    s.result.add(checks.node_loss_detected(seen["probe"], slurm, options.replicas, options.node_loss_detect_timeout_s))
    failure_status, bound = s.profile.cleanup.failure_status, options.node_loss_attempt_bound_s
    monitor = capabilities.monitor_detect_seconds if capabilities.health_monitor else None
    judged = checks.node_loss_attempt_failed(
        outcome, capabilities.node_loss, failure_status, slurm, bound, s.healthy_apart, monitor_bound_s=monitor
    )
    s.result.add(judged)


def client_deadline(slurmd_timeout_s: float, options: HealthOptions) -> float:
    """The client's deadline in the node-loss attempt: Slurm's detection, then the bound."""
    return slurm_detection_bound(slurmd_timeout_s) + options.node_loss_attempt_bound_s + 10
