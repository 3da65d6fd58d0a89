"""The health scenario: losing a required replica mid-generation, and probes under saturation.

loss         — replicas run as separate required steps under a drill that waits for the
               client with the SUT's own wait function; one replica is killed mid-generation.
node loss    — the same attempt with every replica on a node of its own job, and that node
               frozen mid-generation (docker pause: no exit, no reset, Slurm learns of it
               only from its pings): the proxy's /health must report it, and the controller
               must do what its profile declares. Only on dd-accept's own cluster.
unresponsive — one replica's process stays alive but stops serving: (a) it accepts
               connections and answers nothing, (b) its /health answers 503 while it still
               generates. The proxy's /health must report it, and the SUT's controller path
               must fail the attempt (the seed's "health failure still permits success").
saturation   — stalled streams hold every upstream connection the proxy allows; its /health
               must still answer.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dd_accept import deployment
from dd_accept.acceptance import health_checks as checks
from dd_accept.acceptance.analysis import requests
from dd_accept.acceptance.declaration import Scenario
from dd_accept.acceptance.phases import Phase, ScenarioRun
from dd_accept.acceptance.plan import JOB, NODE, TOKEN, PlannedCommand, Planner
from dd_accept.base.errors import ClusterError, EnvironmentProblem
from dd_accept.base.events import EventWriter, NodeChange, StepChange
from dd_accept.base.waiting import WaitTimeout, wait_for_finding, wait_until
from dd_accept.node.environment import TOKEN_ENV
from dd_accept.slurm_docker.allocation import Allocation, salloc_argv, scancel_argv, srun_argv, start_background
from dd_accept.slurm_docker.interface import Cluster
from dd_accept.slurm_docker.layout import NodeLayout
from dd_accept.slurm_docker.node_health import NodeCondition, node_condition, slurmd_timeout
from dd_accept.sut.profile import SutProfile

DRILL = "sut_health_drill.sh"
PACED_REPLICAS = ("--ttft-ms", "20", "--itl-ms", "50")  # every health phase: streams long enough to fault


@dataclass(frozen=True, slots=True)
class HealthOptions:
    replicas: int = 4
    saturation_replicas: int = 8
    saturating_over_limit: int = 8  # streams beyond the proxy's upstream connection limit (its profile's)
    loss_detect_timeout_s: float = 15.0
    unresponsive_detect_timeout_s: float = 15.0  # the bound on the proxy's /health reporting it
    node_loss_detect_timeout_s: float = 15.0  # the bound on the proxy's /health reporting a lost node
    node_loss_attempt_bound_s: float = 15.0  # the controller's bound, counted from Slurm setting it DOWN
    # With no health monitor declared: how long after a replica hangs the controller's verdict
    # is waited for (a hung replica never ends the client's requests to it).
    hung_patience_s: float = 15.0
    seed: int = 0


def _probe(proxy: deployment.Proxy, since: float) -> checks.Probe:
    started = time.monotonic()
    row = proxy.get("/health", timeout=30)
    return checks.Probe(row.get("status"), time.monotonic() - started, row.get("json"), time.time() - since)


@dataclass
class HealthRun(ScenarioRun):
    """One health run's state: each phase deploys (and stops) what it needs itself, because
    each fault leaves its replicas unusable; the healthy attempt is the attempts' baseline."""

    options: HealthOptions
    healthy: checks.AttemptOutcome | None = None


# Each attempt's replica ports (another attempt's replicas may still hold theirs).
HEALTHY_PORT_OFFSET, NODE_LOSS_PORT_OFFSET = 300, 400


def _detect_loss(s: HealthRun) -> None:
    s.result.add(_loss_detection(s.allocation, s.run, s.profile, s.options))


def _healthy_attempt(s: HealthRun) -> None:
    s.healthy = _drilled_attempt(
        s.allocation, s.profile, s.options, "healthy", lambda r: None, port_offset=HEALTHY_PORT_OFFSET
    )


def _loss_attempt(s: HealthRun) -> None:
    outcome = _drilled_attempt(s.allocation, s.profile, s.options, "loss", lambda r: r.control([0], "kill"))
    s.result.add(checks.attempt_failed(outcome, s.profile.cleanup.failure_status, s.healthy))


def _node_loss(s: HealthRun) -> None:
    """Freeze the node carrying every replica of an attempt (their own job, so that the
    scenario's allocation, with the proxy and the client, survives), judge who noticed and
    what the controller did, and bring the node back."""
    cluster, options = s.allocation.cluster, s.options
    timeout = slurmd_timeout(cluster)
    node_job = _job_on_a_node_to_lose(s.allocation)
    node = node_job.first_node
    events = EventWriter(s.run.path("node-loss-nodes.jsonl")[1], "harness")
    watching = ThreadPoolExecutor(max_workers=1, thread_name_prefix="slurm-node")
    seen: dict[str, Any] = {}

    def lose(replicas: deployment.ReplicaSet) -> None:
        cluster.lose_node(node)
        seen["lost"] = True
        events.write(NodeChange(node=node, state="lost"))

    def observe(proxy: deployment.Proxy, lost_at: float) -> float | None:
        slurm = watching.submit(_slurm_sees_loss, node_job, lost_at, timeout, events)
        seen["probe"] = _first_report(proxy, lost_at, options.node_loss_detect_timeout_s, "the node's loss")
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
        outcome = _drilled_attempt(
            s.allocation, s.profile, options, "node-loss", lose, port_offset=NODE_LOSS_PORT_OFFSET,
            replicas_in=node_job,
            deadline_s=_node_loss_deadline(timeout, options), observe=observe,
        )  # fmt: skip
    finally:
        watching.shutdown(wait=True)
        if seen.get("lost"):
            cluster.restore_node(node)
            events.write(NodeChange(node=node, state="restored"))
            _wait_back(cluster, node, events)
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
    attempt = checks.node_loss_attempt_failed(
        outcome, capabilities.node_loss, failure_status, slurm, bound, s.healthy, monitor_bound_s=monitor
    )
    s.result.add(attempt)


def _node_loss_deadline(slurmd_timeout_s: float, options: HealthOptions) -> float:
    """The client's deadline in the node-loss attempt: Slurm's detection, then the bound."""
    return slurm_detection_bound(slurmd_timeout_s) + options.node_loss_attempt_bound_s + 10


def slurm_detection_bound(slurmd_timeout_s: float) -> float:
    """How long Slurm may take to set a silent node DOWN: SlurmdTimeout, plus up to a ping
    cycle before and after it (measured with SlurmdTimeout 30: 38 s on 22.05, 58 s on 24.11,
    60 s on 26.05)."""
    return 3 * slurmd_timeout_s


def _may_lose_nodes(s: HealthRun) -> bool:
    return s.allocation.cluster.may_lose_nodes


NODE_LOSS_JOB = "dd-node-loss"


def _job_on_a_node_to_lose(allocation: Allocation) -> Allocation:
    """A job of its own on a node outside the scenario's allocation: Slurm ends the jobs of
    a node it sets DOWN, and this one must be the only one."""
    cluster = allocation.cluster
    if len(cluster.nodes) <= len(allocation.nodes):
        raise EnvironmentProblem(
            f"losing a node needs a compute node outside the scenario's allocation: cluster {cluster.name} "
            f"has {len(cluster.nodes)} (start it with --nodes {len(allocation.nodes) + 1} or more)"
        )
    exclude = f"--exclude={','.join(allocation.nodes)}"
    return Allocation.acquire(cluster, job_name=NODE_LOSS_JOB, extra=[*deployment.SCENARIO_ALLOCATION, exclude])


def _slurm_sees_loss(job: Allocation, lost_at: float, timeout: float, events: EventWriter) -> checks.SlurmSawLoss:
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


def _wait_back(cluster: Cluster, node: str, events: EventWriter) -> None:
    """The restored node answering and taken back (ReturnToService=2), or resumed by hand."""

    def back(condition: NodeCondition) -> bool:
        return not condition.down and not condition.not_responding

    try:
        condition = wait_until(lambda: node_condition(cluster, node), back, timeout=30, what=f"{node} to return")
    except WaitTimeout:
        cluster.exec(["scontrol", "update", f"NodeName={node}", "State=RESUME"], timeout=10)
        condition = wait_until(lambda: node_condition(cluster, node), back, timeout=30, what=f"{node} to resume")
    events.write(NodeChange(node=node, state=condition.state))


def _detect_unresponsive(s: HealthRun) -> None:
    s.result.add(_unresponsive_detection(s.allocation, s.profile, s.options))


# Each way a replica stops serving, the fault done to it in the attempt and the run directory
# and replica ports it takes (another attempt's replicas may still hold theirs).
_UNRESPONSIVE_FAULTS: dict[str, tuple[str, Callable[[deployment.ReplicaSet], object], int]] = {
    "/health 503": ("unresponsive", lambda r: r.control([0], "health", ok=False), 200),
    "hung": ("unresponsive-hung", lambda r: r.control([0], "hang", on=True), 250),
}


UNRESPONSIVE_RECORDS = 48


def _unresponsive_attempt(s: HealthRun) -> None:
    """The attempt under the SUT's own wait, once per mode a replica stops serving in. A hung
    replica never ends the client's requests to it: past the monitor's bound (or, with none
    declared, the bound a monitor has by default) the controller's verdict is not waited for."""
    monitor = s.profile.capabilities
    bound = monitor.monitor_detect_seconds if monitor.health_monitor else None
    patience = (bound if bound is not None else s.options.hung_patience_s) + 2.0
    outcomes = {}
    for mode, (name, fault, offset) in _UNRESPONSIVE_FAULTS.items():
        observe = None if mode == "/health 503" else (lambda proxy, at: max(1.0, at + patience - time.time()))
        outcomes[mode] = _drilled_attempt(
            s.allocation,
            s.profile,
            s.options,
            name,
            fault,
            records=UNRESPONSIVE_RECORDS,
            port_offset=offset,
            observe=observe,
        )
    s.result.add(checks.unresponsive_attempt_failed(outcomes, s.profile.cleanup.failure_status, bound, s.healthy))


def _saturation(s: HealthRun) -> None:
    s.result.add(_probe_isolation(s.allocation, s.run, s.profile, s.options))


def saturating_streams(profile: SutProfile, options: HealthOptions) -> int:
    """Streams enough to hold every upstream connection the proxy allows, and some over."""
    return profile.proxy.upstream_connection_limit + options.saturating_over_limit


def _saturating(s: HealthRun) -> dict[str, int]:
    return {"streams": saturating_streams(s.profile, s.options)}


def _replicas(s: HealthRun) -> dict[str, int]:
    return {"replicas": s.options.replicas}


# -- what each phase submits: one builder for the run and the plan -----------------------------

DETECT_LOAD = {"records": 16, "concurrency": 8, "max_tokens": 80, "max_record_attempts": 3, "deadline_s": 60}


def DRILLED_CLIENT_STEP(node: str) -> list[str]:
    return ["-J", "client", "-N1", "-n1", f"--nodelist={node}"]


def _paced(options: HealthOptions) -> dict[str, Any]:
    """The detection phases' replicas (the run's and the plan's keywords)."""
    return {"options": PACED_REPLICAS, "seed": options.seed}


def _saturating_replicas(options: HealthOptions) -> dict[str, Any]:
    return {"options": ("--ttft-ms", "5", "--itl-ms", "5", "--max-num-seqs", "64"), "seed": options.seed}


def _saturating_load(streams: int) -> dict[str, Any]:
    return {"records": streams, "concurrency": streams, "max_tokens": 4, "max_record_attempts": 1, "deadline_s": 90}


def _attempt_load(records: int, deadline_s: float) -> dict[str, Any]:
    """The client of a drilled attempt: up to three attempts a record."""
    return {"records": records, "concurrency": 8, "max_tokens": 80, "max_record_attempts": 3, "deadline_s": deadline_s}


def _drilled_replica(
    profile: SutProfile, python: str, replica_dir: str, options: HealthOptions, port_base: int, index: int, node: str
) -> tuple[list[str], list[str]]:
    """One replica of a drilled attempt, a step of its own (the SUT's register function
    launches it): its command and its srun options."""
    replica = deployment.replica_command(
        profile, replica_dir, python=python, seed=options.seed, options=deployment.replica_options(PACED_REPLICAS),
        port=port_base + index, port_base=port_base,
    )  # fmt: skip
    return replica, ["-J", "replicas", "-N1", "-n1", f"--nodelist={node}", "-o", f"{replica_dir}/replica-{index}.log"]


def _drill_argv(profile: SutProfile, layout: NodeLayout, state: str) -> list[str]:
    """The attempt's drill on the controller's host: the SUT's cleanup script sourced, its
    register, wait and stop functions run on the command files in `state`."""
    cleanup = profile.cleanup
    script = cleanup.script.format(site_packages=layout.site_packages)
    functions = [cleanup.register_function, cleanup.wait_function, cleanup.stop_function]
    return ["bash", layout.drill(DRILL), script, *functions, state]


KILL_STEPS = "its replica and client steps KILLed, the proxy's too: only the attempt's end is judged"


def _plan_serving(run: str, count: Callable[[HealthOptions], int] = lambda o: o.replicas, **launch: Any):
    """Replicas and a proxy of their own (`_serving`, `_probe_isolation`), their stops."""

    def plan(p: Planner, extra: Callable[[Planner], list[PlannedCommand]] = lambda p: []) -> list[PlannedCommand]:
        replicas = count(p.options)
        keywords = launch or _paced(p.options)
        return [
            p.replicas(f"{replicas} replicas of their own", replicas, run=run, **keywords),
            p.proxy("the SUT's proxy in front of them", replicas, run=run),
            *extra(p),
            PlannedCommand("stop the proxy: TERM to its step", scancel_argv("$PROXY_STEP", "TERM")),
            PlannedCommand("stop the replicas: KILL to their step", scancel_argv("$REPLICAS_STEP", "KILL")),
        ]

    return plan


def _plan_loss_detection(p: Planner) -> list[PlannedCommand]:
    client = p.client("16 requests through the proxy while replica 0 is killed", "detect", mode="raw", run="loss",
                      **DETECT_LOAD)  # fmt: skip
    return _plan_serving("loss")(p, lambda p: [client])


def _plan_attempt(
    name: str, port_offset: int = 0, records: int = 24, lost: bool = False
) -> Callable[[Planner], list[PlannedCommand]]:
    """A drilled attempt (`_drilled_attempt`): the drill, what the SUT's functions launch from
    its command files, the proxy, and the steps KILLed at its end."""

    def plan(p: Planner) -> list[PlannedCommand]:
        o, layout, run = p.options, p.target.layout, p.run_path(name)
        commands: list[PlannedCommand] = []
        node, job = (NODE, JOB)
        if lost:
            if p.target.slurmd_timeout_s is None:
                return []  # an existing cluster: dd-accept never takes a site's node down
            node, job = "$LOST_NODE", "$NODE_JOB"
            exclude = [*deployment.SCENARIO_ALLOCATION, f"--exclude={NODE}"]
            salloc = salloc_argv(p.target, nodes=1, job_name=NODE_LOSS_JOB, extra=exclude)
            commands.append(PlannedCommand("a job of its own on another node, the one to lose", salloc))
        drill = PlannedCommand(
            f"the SUT's controller functions run the attempt ({name}); on the controller's host",
            _drill_argv(p.profile, layout, f"{run}/health-drill"), {"SLURM_JOB_ID": JOB, TOKEN_ENV: TOKEN},
        )  # fmt: skip
        commands.append(drill)
        port_base = deployment.REPLICA_PORT_BASE + port_offset
        for index in range(o.replicas):
            argv, step = _drilled_replica(p.profile, layout.python, f"{run}/replicas", o, port_base, index, node)
            command = PlannedCommand(f"replica {index}", srun_argv(job, argv, step, p.target.srun_args))
            commands.append(command.by("the SUT's register function"))
        proxy = p.proxy("the SUT's proxy in front of them", o.replicas, run=name, port_base=port_base, replicas_on=node)
        commands.append(proxy)
        deadline = _node_loss_deadline(p.target.slurmd_timeout_s or 0, o) if lost else 60.0
        client = p.client(f"{records} records through the proxy", name, mode="raw", run=name,
                          step=DRILLED_CLIENT_STEP(NODE), **_attempt_load(records, deadline))  # fmt: skip
        commands.append(client.by("the SUT's register function"))
        commands.append(PlannedCommand(f"at the attempt's end, {KILL_STEPS}", scancel_argv("$ATTEMPT_STEPS", "KILL")))
        if lost:
            commands.append(PlannedCommand("release the lost node's job", scancel_argv("$NODE_JOB")))
        return commands

    return plan


def _plan_unresponsive_attempt(p: Planner) -> list[PlannedCommand]:
    return [
        command
        for name, _, offset in _UNRESPONSIVE_FAULTS.values()
        for command in _plan_attempt(name, offset, records=UNRESPONSIVE_RECORDS)(p)
    ]


def _plan_saturation(p: Planner) -> list[PlannedCommand]:
    streams = saturating_streams(p.profile, p.options)
    client = p.client(f"{streams} streams, more than the proxy's upstream connections", "saturate", mode="raw",
                      run="saturation", **_saturating_load(streams))  # fmt: skip
    replicas = _plan_serving("saturation", lambda o: o.saturation_replicas, **_saturating_replicas(p.options))
    return replicas(p, lambda p: [client])


# Each judging phase deploys its own replicas and endpoint (its own ports and run directory),
# injects its fault, drives the SUT's client or probes, judges, and stops what it started (the
# faults leave replicas unusable): each stands alone. The healthy attempt is the baseline the
# two attempt checks read (`s.healthy`).
PHASES: tuple[Phase[HealthRun], ...] = (
    Phase("judge", "backend loss: detection", _detect_loss, _plan_loss_detection, numbers=_replicas,
          judges=("health.backend_loss.detected",), segments=("backend loss detection",)),
    Phase("drive", "a healthy attempt (the baseline of the attempt checks)", _healthy_attempt,
          _plan_attempt("healthy", HEALTHY_PORT_OFFSET), numbers=_replicas,
          segments=("backend loss attempt", "unresponsive attempt")),
    Phase("judge", "backend loss: the attempt", _loss_attempt, _plan_attempt("loss"), numbers=_replicas,
          fault="a backend killed", judges=("health.backend_loss.attempt_failed",), segments=("backend loss attempt",)),
    Phase(
        "judge",
        "node loss: detection and the attempt",
        _node_loss,
        _plan_attempt("node-loss", NODE_LOSS_PORT_OFFSET, lost=True),
        numbers=_replicas,
        applies=_may_lose_nodes,
        fault="a node frozen",
        judges=("health.node_loss.detected", "health.node_loss.attempt_failed"),
        segments=("node loss",),
    ),
    Phase("judge", "unresponsive backend: detection", _detect_unresponsive, _plan_serving("unresponsive-detect"),
          numbers=_replicas, judges=("health.unresponsive.detected",), segments=("unresponsive detection",)),
    Phase(
        "judge",
        "unresponsive backend: the attempt",
        _unresponsive_attempt,
        _plan_unresponsive_attempt,
        numbers=_replicas,
        fault="a backend that stops serving",
        judges=("health.unresponsive.attempt_failed",),
        segments=("unresponsive attempt",),
    ),
    Phase("judge", "probe isolation", _saturation, _plan_saturation, numbers=_saturating,
          fault="inference saturated on purpose", judges=("health.probe_isolation",), segments=("probe isolation",)),
)  # fmt: skip


def _serving(
    allocation: Allocation, run: deployment.RunDirectory, profile: SutProfile, options: HealthOptions
) -> tuple[deployment.ReplicaSet, deployment.Proxy]:
    """N paced replicas and the SUT's proxy in front of them (the detection phases' setting)."""
    replicas = deployment.start_replicas(allocation, options.replicas, run=run, profile=profile, **_paced(options))
    try:
        return replicas, deployment.start_proxy(allocation, replicas, profile=profile)
    except BaseException:
        replicas.stop("KILL")
        raise


def _first_report(proxy: deployment.Proxy, since: float, bound_s: float, what: str) -> checks.Probe | None:
    """The first /health answer other than 200 within the bound; None if none came (a
    finding for the check, not an error)."""
    return wait_for_finding(
        lambda: _probe(proxy, since),
        lambda p: p.status != 200,
        timeout=bound_s,
        what=f"the proxy's /health to report {what}",
    )


def _write_command(path: Path, argv: list[str]) -> None:
    path.write_bytes(b"".join(part.encode() + b"\0" for part in argv))


def _drilled_attempt(
    allocation: Allocation,
    profile: SutProfile,
    options: HealthOptions,
    name: str,
    fault: Callable[[deployment.ReplicaSet], object],
    *,
    records: int = 24,
    port_offset: int = 0,
    deadline_s: float = 60.0,
    replicas_in: Allocation | None = None,
    observe: Callable[[deployment.Proxy, float], float | None] | None = None,
) -> checks.AttemptOutcome:
    """An attempt under the SUT's own controller functions (required replica steps, its wait
    function), in a run directory of its own named `name`, on replica ports shifted by
    `port_offset` (a previous attempt's replicas may still hold theirs): `fault` is done to
    replica 0 mid-generation; returns how the attempt ended. The replicas run in
    `replicas_in` (another job, on a node the fault may take down) or with the proxy and
    the client; `observe(proxy, fault_time)` watches what follows the fault and may say how
    much longer the controller's verdict is worth waiting for; the client gives up after
    `deadline_s`."""
    run = deployment.RunDirectory.create(allocation.cluster, name)
    port_base = deployment.REPLICA_PORT_BASE + port_offset
    placement = replicas_in or allocation
    node = placement.first_node
    layout = allocation.cluster.layout
    state_cluster, state_host = run.path("health-drill")
    replica_dir, replica_host = run.path("replicas")
    state_host.mkdir(parents=True, exist_ok=True)
    replica_host.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(16)
    for index in range(options.replicas):
        replica, step = _drilled_replica(profile, layout.python, replica_dir, options, port_base, index, node)
        _write_command(state_host / f"replica-{index}.cmd", placement.srun_argv(replica, step))
    urls = [f"http://{node}:{port_base + index}/health" for index in range(options.replicas)]
    (state_host / "health-urls").write_text(" ".join(urls))
    drill = start_background(
        allocation.cluster,
        _drill_argv(profile, layout, state_cluster),
        environment={"SLURM_JOB_ID": allocation.job_id, TOKEN_ENV: token},
    )
    allocation.background.append(drill)
    wait_until(
        lambda: len(list(replica_host.glob("ready-*.json"))),
        lambda n: n == options.replicas,
        timeout=60,
        what="replica steps to be ready",
        terminal=lambda _: "the drill ended" if drill.finished else None,
    )
    info = deployment.read_ready_files(replica_host)
    replicas = deployment.SyntheticReplicas(allocation, run, options.replicas, info, step=drill, token=token)
    proxy = deployment.start_proxy(allocation, replicas, profile=profile)
    client = deployment.client_command(
        proxy, run, mode="raw", profile=profile, name=name, **_attempt_load(records, deadline_s)
    )
    _write_command(state_host / "client.cmd", allocation.srun_argv(client, DRILLED_CLIENT_STEP(proxy.node)))
    allocation.cluster.exec(["touch", f"{state_cluster}/go"])
    replicas.wait_running(4)
    time.sleep(1.0)
    lost_at = time.time()
    running_at_fault = not drill.finished and not (state_host / "wait-status").exists()
    fault(replicas)
    patience = observe(proxy, lost_at) if observe is not None else None
    try:
        record = drill.wait(timeout=deadline_s + 30 if patience is None else patience)
        ended_after = time.time() - lost_at
    except TimeoutError:
        record, ended_after = None, None
    wait_file = state_host / "wait-status"
    status_text = wait_file.read_text().strip() if wait_file.exists() else ""
    if wait_file.exists():  # the moment the SUT's wait returned, not when dd-accept looked
        ended_after = wait_file.stat().st_mtime - lost_at
    wait_status = int(status_text) if status_text.lstrip("-").isdigit() else (record.exit_code if record else None)
    client_rows = deployment.read_events(run, name)
    done = len({e.record for e in requests(client_rows) if e.outcome == "ok"})
    for job in [allocation] if placement is allocation else [allocation, placement]:
        named = job.steps_by_name()
        for step in named.get("replicas", []) + named.get("client", []):
            job.scancel_step(step, "KILL")
    proxy.stop("KILL")  # its shutdown is not what this judges; streams to a lost node never end
    return checks.AttemptOutcome(wait_status, ended_after, done, records, running_at_fault)


def _loss_detection(
    allocation: Allocation, run: deployment.RunDirectory, profile: SutProfile, options: HealthOptions
) -> checks.CheckResult:
    """Kill one of N replicas under load: the proxy's /health must report N-1 ready."""
    loss_run = deployment.RunDirectory.create(allocation.cluster, "loss")
    replicas, proxy = _serving(allocation, loss_run, profile, options)
    try:
        client = deployment.run_client(
            allocation, proxy, loss_run, mode="raw", profile=profile, name="detect", **DETECT_LOAD
        )
        replicas.wait_running(4)
        lost_at = time.time()
        replicas.control([0], "kill")
        probe = _first_report(proxy, lost_at, options.loss_detect_timeout_s, "the loss")
        client.wait(timeout=90)
        return checks.backend_loss_detected(
            probe, options.replicas, profile.capabilities.health_monitor, options.loss_detect_timeout_s
        )
    finally:
        proxy.stop()
        replicas.stop("KILL")


def _unresponsive_detection(allocation: Allocation, profile: SutProfile, options: HealthOptions) -> checks.CheckResult:
    """A replica that stops answering, then one whose /health fails while it generates: the
    proxy's /health must report each within the bound."""
    unresponsive_run = deployment.RunDirectory.create(allocation.cluster, "unresponsive-detect")
    replicas, proxy = _serving(allocation, unresponsive_run, profile, options)
    bound = options.unresponsive_detect_timeout_s
    found: dict[str, checks.Probe | None] = {}
    try:
        for mode, index, action, on, off in (
            ("hung", 0, "hang", {"on": True}, {"on": False}),
            ("/health 503", 1, "health", {"ok": False}, {"ok": True}),
        ):
            since = time.time()
            replicas.control([index], action, **on)
            found[mode] = _first_report(proxy, since, bound, f"a {mode} replica")
            replicas.control([index], action, **off)
            wait_until(
                lambda: proxy.get("/health", timeout=30).get("status"),
                lambda status: status == 200,
                timeout=30,
                what="the proxy's /health to recover",
            )
        return checks.unresponsive_detected(found, options.replicas, bound)
    finally:
        proxy.stop()
        replicas.stop("KILL")


def _probe_isolation(
    allocation: Allocation, run: deployment.RunDirectory, profile: SutProfile, options: HealthOptions
) -> checks.CheckResult:
    saturation_run = deployment.RunDirectory.create(allocation.cluster, "saturation")
    limit, streams = profile.proxy.upstream_connection_limit, saturating_streams(profile, options)
    replicas = deployment.start_replicas(
        allocation, options.saturation_replicas, run=saturation_run, profile=profile, **_saturating_replicas(options)
    )
    proxy = deployment.start_proxy(allocation, replicas, profile=profile)
    try:
        replicas.control(None, "stall", on=True)
        load = _saturating_load(streams)
        client = deployment.run_client(
            allocation, proxy, saturation_run, mode="raw", profile=profile, name="saturate", **load
        )
        held = wait_until(
            lambda: sum(s["running"] + s["waiting"] for s in replicas.control(None, "state")),
            lambda n: n >= limit,
            timeout=60,
            what=f"{limit} streams holding upstream connections",
        )
        probe = _probe(proxy, time.time())
        replicas.control(None, "stall", on=False)
        client.wait(timeout=120)
        return checks.probe_isolation(probe, held)
    finally:
        proxy.stop()
        replicas.stop()


SCENARIO = Scenario(
    "health",
    "backend and node loss, unresponsive backends: detected and failing the attempt",
    HealthOptions,
    PHASES,
    HealthRun,
    spare_nodes=1,
)
run_health = SCENARIO.run
