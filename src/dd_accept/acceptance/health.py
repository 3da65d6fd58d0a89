"""The health scenario: losing a required replica mid-generation, and probes under saturation.

loss         — replicas run as separate required steps under a drill that waits for the
               client with the SUT's own wait function; one replica is killed mid-generation.
node drain   — the same attempt with its node set DRAIN mid-generation (an administrator's
               maintenance ahead): Slurm keeps the running steps, so the attempt must succeed.
               Only on dd-accept's own cluster.
controller restart — the same attempt with Slurm's controller shut down mid-generation (its
               state saved) and started again 5 s later, as an upgrade does: the job and its
               steps run on meanwhile, so the attempt must succeed. Only on dd-accept's own
               cluster, while it runs no other job (no other scenario of the run in parallel).
preemption   — the same attempt with its replicas' job (alone on another node) preempted by
               Slurm mid-generation (TERM; each replica exits 0): the service is lost all the
               same, so the attempt must fail. Only on dd-accept's own cluster.
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

Each attempt that must fail is judged beside a healthy one placed as it is: the node-loss and
preemption attempts' replicas run in a job of their own, and so do their baseline's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dd_accept import deployment
from dd_accept.acceptance import health_checks as checks
from dd_accept.acceptance import health_node_loss as node_loss
from dd_accept.acceptance import health_preemption as preemption
from dd_accept.acceptance.declaration import Scenario
from dd_accept.acceptance.health_drills import (
    DETECT_LOAD,
    DRILLED_CLIENT_STEP,
    attempt_load,
    drill_argv,
    drilled_attempt,
    drilled_replica,
    loss_detection,
    paced,
    probe_isolation,
    saturating_load,
    saturating_replicas,
    saturating_streams,
    unresponsive_detection,
)
from dd_accept.acceptance.health_node_loss import job_on_a_node_to_lose
from dd_accept.acceptance.phases import Phase, ScenarioRun
from dd_accept.acceptance.plan import JOB, NODE, TOKEN, PlannedCommand, Planner
from dd_accept.base.errors import ClusterError
from dd_accept.base.events import EventWriter, NodeChange
from dd_accept.node.environment import TOKEN_ENV
from dd_accept.slurm_docker.allocation import salloc_argv, scancel_argv, srun_argv
from dd_accept.slurm_docker.controller_restart import ControllerRestart, restart_controller, serves_only
from dd_accept.slurm_docker.node_health import NodeCondition, set_node_state
from dd_accept.slurm_docker.preemption import preemptor_argv


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


@dataclass
class HealthRun(ScenarioRun):
    """One health run's state: each phase deploys (and stops) what it needs itself, because
    each fault leaves its replicas unusable; the healthy attempt is the attempts' baseline."""

    options: HealthOptions
    healthy: checks.AttemptOutcome | None = None
    # the baseline of the attempts whose replicas run apart (node loss, preemption): the same
    # placement, undisturbed, so that a placement the SUT mishandles is not taken for the fault
    healthy_apart: checks.AttemptOutcome | None = None


# Each attempt's replica ports (another attempt's replicas may still hold theirs).
HEALTHY_PORT_OFFSET, NODE_DRAIN_PORT_OFFSET, CONTROLLER_RESTART_PORT_OFFSET = 300, 350, 450
HEALTHY_APART_PORT_OFFSET = 550
HEALTHY_APART_JOB = "dd-apart"
# How long slurmctld stays down once it stopped answering: many polls of any wait that asks
# Slurm, and short enough that the attempt (about 12 s) is still generating when it is back.
CONTROLLER_DOWN_S = 5.0
DRAIN_REASON = "dd-accept: maintenance ahead"


def _detect_loss(s: HealthRun) -> None:
    s.result.add(loss_detection(s.allocation, s.run, s.profile, s.options))


def _healthy_attempt(s: HealthRun) -> None:
    s.healthy = drilled_attempt(
        s.allocation, s.profile, s.options, "healthy", lambda r: None, port_offset=HEALTHY_PORT_OFFSET
    )


def _healthy_apart_attempt(s: HealthRun) -> None:
    serving = job_on_a_node_to_lose(s.allocation, HEALTHY_APART_JOB, "the baseline of the attempts run apart")
    try:
        s.healthy_apart = drilled_attempt(s.allocation, s.profile, s.options, "healthy-apart", lambda r: None,
                                          port_offset=HEALTHY_APART_PORT_OFFSET, replicas_in=serving)  # fmt: skip
    finally:
        serving.release()


def _loss_attempt(s: HealthRun) -> None:
    outcome = drilled_attempt(s.allocation, s.profile, s.options, "loss", lambda r: r.control([0], "kill"))
    s.result.add(checks.attempt_failed(outcome, s.profile.cleanup.failure_status, s.healthy))


def _node_drain(s: HealthRun) -> None:
    """Set the node carrying the whole attempt (replicas, proxy, client) DRAIN mid-generation,
    as an administrator does ahead of maintenance, and RESUME it however the attempt ended."""
    cluster, node = s.allocation.cluster, s.allocation.first_node
    events = EventWriter(s.run.path("node-drain-nodes.jsonl")[1], "harness")
    # "drained": None once the update is sent (resumed whatever came of it: it may have taken
    # effect before an error), then what Slurm reported after it
    seen: dict[str, NodeCondition | None] = {}

    def drain(replicas: deployment.ReplicaSet) -> None:
        seen["drained"] = None
        condition = seen["drained"] = set_node_state(cluster, node, "DRAIN", DRAIN_REASON)
        events.write(NodeChange(node=node, state=condition.state))

    try:
        outcome = drilled_attempt(s.allocation, s.profile, s.options, "node-drain", drain,
                                  port_offset=NODE_DRAIN_PORT_OFFSET)  # fmt: skip
    finally:
        try:
            if "drained" in seen:
                events.write(NodeChange(node=node, state=set_node_state(cluster, node, "RESUME").state))
        finally:
            events.close()
    drained = seen["drained"]
    assert drained is not None, "the attempt does the fault, or raises"
    if not drained.drained:
        raise ClusterError(f"Slurm did not drain {node}: its State is {drained.state}")
    if not outcome.running_at_fault:
        raise RuntimeError(f"the attempt had ended before {node} was set DRAIN: the phase tested nothing")
    s.result.add(checks.node_drain_attempt_undisturbed(outcome, node, drained.state, s.healthy))


def _controller_restart(s: HealthRun) -> None:
    """Restart Slurm's controller mid-generation (its state saved, down CONTROLLER_DOWN_S),
    as an administrator's upgrade or reconfiguration does."""
    seen: dict[str, ControllerRestart | None] = {}

    def restart(replicas: deployment.ReplicaSet) -> None:
        # asked again at the moment: a scenario that started since the phase began (another
        # worker of the run, between its scenarios then) would meet the silence too
        seen["restart"] = restart_controller(s.allocation, CONTROLLER_DOWN_S) if serves_only(s.allocation) else None

    outcome = drilled_attempt(s.allocation, s.profile, s.options, "controller-restart", restart,
                              port_offset=CONTROLLER_RESTART_PORT_OFFSET)  # fmt: skip
    restart = seen["restart"]
    if restart is None:  # not judged, as where the phase does not apply from the start
        s.progress.emit("controller restart: not done, another job shares the controller")
        return
    if not restart.job_kept(outcome.ended_at):  # the gone steps' ends are in the description
        raise ClusterError(f"Slurm did not keep the job across its controller's restart: {restart.describe()}")
    if not outcome.running_at(restart.asked_at) and outcome.wait_status == 0:  # one that failed is judged
        raise RuntimeError("the attempt had ended before the controller was shut down: the phase tested nothing")
    s.result.add(checks.controller_restart_attempt_undisturbed(outcome, restart, s.healthy))


def _node_loss_deadline(p: Planner) -> float:
    return node_loss.client_deadline(p.target.slurmd_timeout_s or 0, p.options)


def _may_lose_nodes(s: HealthRun) -> bool:
    return s.allocation.cluster.may_lose_nodes


def _controller_to_itself(s: HealthRun) -> bool:
    """dd-accept's own cluster, running this scenario's job alone: the run's other scenarios,
    in parallel allocations, would meet the controller's silence too."""
    return s.allocation.cluster.may_lose_nodes and serves_only(s.allocation)


def _detect_unresponsive(s: HealthRun) -> None:
    s.result.add(unresponsive_detection(s.allocation, s.profile, s.options))


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
        outcomes[mode] = drilled_attempt(
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
    s.result.add(probe_isolation(s.allocation, s.run, s.profile, s.options))


def _saturating(s: HealthRun) -> dict[str, int]:
    return {"streams": saturating_streams(s.profile, s.options)}


def _replicas(s: HealthRun) -> dict[str, int]:
    return {"replicas": s.options.replicas}


# -- what each phase submits: one builder for the run and the plan -----------------------------


KILL_STEPS = "its replica and client steps KILLed, the proxy's too: only the attempt's end is judged"


def _plan_serving(run: str, count: Callable[[HealthOptions], int] = lambda o: o.replicas, **launch: Any):
    """Replicas and a proxy of their own (`_serving`, `probe_isolation`), their stops."""

    def plan(p: Planner, extra: Callable[[Planner], list[PlannedCommand]] = lambda p: []) -> list[PlannedCommand]:
        replicas = count(p.options)
        keywords = launch or paced(p.options)
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


@dataclass(frozen=True, slots=True)
class Apart:
    """An attempt's replicas in a job of their own (`job`), alone on another node (`why`)."""

    job: str
    why: str


NODE_LOSS_APART = Apart(node_loss.NODE_LOSS_JOB, "on another node, the one to lose")
PREEMPTED_APART = Apart(preemption.REPLICAS_JOB, "alone on another node, for Slurm to preempt")
HEALTHY_APART = Apart(HEALTHY_APART_JOB, "alone on another node, as the node-loss and preemption attempts' are")


def _plan_attempt(
    name: str, port_offset: int = 0, records: int = 24, apart: Apart | None = None, attempts: int = 3,
    deadline: Callable[[Planner], float] = lambda p: 60.0,
) -> Callable[[Planner], list[PlannedCommand]]:  # fmt: skip
    """A drilled attempt (`drilled_attempt`): the drill, what the SUT's functions launch from
    its command files, the proxy, and the steps KILLed at its end; the replicas with the proxy
    and the client, or `apart`."""

    def plan(p: Planner) -> list[PlannedCommand]:
        o, layout, run = p.options, p.target.layout, p.run_path(name)
        commands: list[PlannedCommand] = []
        node, job = (NODE, JOB)
        if apart:
            if p.target.slurmd_timeout_s is None:
                return []  # an existing cluster: dd-accept never takes a site's node down nor preempts
            node, job = "$REPLICAS_NODE", "$REPLICAS_JOB"
            exclude = [*deployment.SCENARIO_ALLOCATION, f"--exclude={NODE}"]
            salloc = salloc_argv(p.target, nodes=1, job_name=apart.job, extra=exclude)
            commands.append(PlannedCommand(f"the replicas' job of its own {apart.why}", salloc))
        drill = PlannedCommand(
            f"the SUT's controller functions run the attempt ({name}); on the controller's host",
            drill_argv(p.profile, layout, f"{run}/health-drill"), {"SLURM_JOB_ID": JOB, TOKEN_ENV: TOKEN},
        )  # fmt: skip
        commands.append(drill)
        port_base = deployment.REPLICA_PORT_BASE + port_offset
        for index in range(o.replicas):
            argv, step = drilled_replica(p.profile, layout.python, f"{run}/replicas", o, port_base, index, node)
            command = PlannedCommand(f"replica {index}", srun_argv(job, argv, step, p.target.srun_args))
            commands.append(command.by("the SUT's register function"))
        proxy = p.proxy("the SUT's proxy in front of them", o.replicas, run=name, port_base=port_base, replicas_on=node)
        commands.append(proxy)
        client = p.client(f"{records} records through the proxy", name, mode="raw", run=name,
                          step=DRILLED_CLIENT_STEP(NODE), **attempt_load(records, deadline(p), attempts))  # fmt: skip
        commands.append(client.by("the SUT's register function"))
        commands.append(PlannedCommand(f"at the attempt's end, {KILL_STEPS}", scancel_argv("$ATTEMPT_STEPS", "KILL")))
        if apart:
            commands.append(PlannedCommand("release the replicas' job", scancel_argv("$REPLICAS_JOB")))
        return commands

    return plan


def _plan_node_drain(p: Planner) -> list[PlannedCommand]:
    """The attempt, with its node set DRAIN mid-generation and resumed at its end."""
    if p.target.slurmd_timeout_s is None:
        return []  # an existing cluster: dd-accept never changes a site's nodes
    update = ["scontrol", "update", f"NodeName={NODE}"]
    drain = [*update, "State=DRAIN", f"Reason={DRAIN_REASON}"]
    *attempt, ending = _plan_attempt("node-drain", NODE_DRAIN_PORT_OFFSET)(p)
    return [
        *attempt,
        PlannedCommand("mid-generation, set the attempt's node DRAIN", drain),
        ending,
        PlannedCommand("then resume the node", [*update, "State=RESUME"]),
    ]


def _plan_controller_restart(p: Planner) -> list[PlannedCommand]:
    """The attempt, with Slurm's controller restarted mid-generation."""
    if p.target.slurmd_timeout_s is None:
        return []  # an existing cluster: dd-accept never restarts a site's controller
    *attempt, ending = _plan_attempt("controller-restart", CONTROLLER_RESTART_PORT_OFFSET)(p)
    shutdown = ["scontrol", "shutdown", "slurmctld"]
    return [
        *attempt,
        PlannedCommand(f"mid-generation, shut Slurm's controller down (its state saved); it starts again "
                       f"{CONTROLLER_DOWN_S:g} s after (only if the cluster runs no other scenario's job)",
                       shutdown),
        ending,
    ]  # fmt: skip


def _plan_preemption(p: Planner) -> list[PlannedCommand]:
    """The attempt, with its replicas' job preempted mid-generation by a higher-priority one."""
    planned = _plan_attempt("preemption", preemption.PORT_OFFSET, apart=PREEMPTED_APART,
                            attempts=preemption.CLIENT_ATTEMPTS)(p)  # fmt: skip
    if not planned:
        return []  # an existing cluster: dd-accept never preempts a site's jobs
    *attempt, ending, release = planned
    return [
        *attempt,
        PlannedCommand("mid-generation, a higher-priority job for the replicas' node: Slurm preempts their job "
                       "(TERM to each of its steps)", preemptor_argv("$REPLICAS_NODE")),
        PlannedCommand("once Slurm has sent the TERM, cancel the higher-priority job", scancel_argv("$PREEMPTOR_JOB")),
        ending,
        release,
    ]  # fmt: skip


def _plan_unresponsive_attempt(p: Planner) -> list[PlannedCommand]:
    return [
        command
        for name, _, offset in _UNRESPONSIVE_FAULTS.values()
        for command in _plan_attempt(name, offset, records=UNRESPONSIVE_RECORDS)(p)
    ]


def _plan_saturation(p: Planner) -> list[PlannedCommand]:
    streams = saturating_streams(p.profile, p.options)
    client = p.client(f"{streams} streams, more than the proxy's upstream connections", "saturate", mode="raw",
                      run="saturation", **saturating_load(streams))  # fmt: skip
    replicas = _plan_serving("saturation", lambda o: o.saturation_replicas, **saturating_replicas(p.options))
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
          segments=("backend loss attempt", "unresponsive attempt", "node drain", "controller restart")),
    Phase("drive", "a healthy attempt, its replicas apart (the baseline of the preemption and node-loss attempts)",
          _healthy_apart_attempt, _plan_attempt("healthy-apart", HEALTHY_APART_PORT_OFFSET, apart=HEALTHY_APART),
          numbers=_replicas, applies=_may_lose_nodes, segments=("preemption", "node loss")),
    Phase("judge", "backend loss: the attempt", _loss_attempt, _plan_attempt("loss"), numbers=_replicas,
          fault="a backend killed", judges=("health.backend_loss.attempt_failed",), segments=("backend loss attempt",)),
    Phase("judge", "node drain: the attempt", _node_drain, _plan_node_drain, numbers=_replicas,
          applies=_may_lose_nodes, fault="the attempt's node set DRAIN",
          judges=("health.node_drain.attempt_undisturbed",), segments=("node drain",)),
    Phase("judge", "controller restart: the attempt", _controller_restart, _plan_controller_restart,
          numbers=_replicas, applies=_controller_to_itself, fault="Slurm's controller restarted",
          judges=("health.controller_restart.attempt_undisturbed",), segments=("controller restart",)),
    Phase("judge", "preemption: the attempt", preemption.attempt, _plan_preemption, numbers=_replicas,
          applies=_may_lose_nodes, fault="the replicas' job preempted by Slurm",
          judges=("health.preemption.attempt_failed",), segments=("preemption",)),
    Phase(
        "judge",
        "node loss: detection and the attempt",
        node_loss.attempt,
        _plan_attempt("node-loss", node_loss.PORT_OFFSET, apart=NODE_LOSS_APART, deadline=_node_loss_deadline),
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


SCENARIO = Scenario(
    "health",
    "backend and node loss, unresponsive backends: detected and failing the attempt",
    HealthOptions,
    PHASES,
    HealthRun,
    spare_nodes=1,
)
run_health = SCENARIO.run
