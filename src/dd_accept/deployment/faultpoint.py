"""The fault point (`node.faultpoint`) as a step between the SUT's proxy and the replicas:
one port per replica, each relaying to its replica with the phase's fault. The proxy is
started with these ports as its backends, so every byte it reads from a replica has passed
through the fault point, on the scenario's own node."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dd_accept.base.errors import ClusterError
from dd_accept.base.events import RelayedResponse, of_type, read_event_file
from dd_accept.base.waiting import WaitAborted, WaitTimeout, wait_until
from dd_accept.deployment.placement import FAULT_POINT_PORT_BASE, StepLaunch
from dd_accept.deployment.replica_set import ReplicaSet
from dd_accept.deployment.run_directory import RunDirectory
from dd_accept.node.faultpoint import SlowLink
from dd_accept.slurm_docker.allocation import Allocation, BackgroundCommand
from dd_accept.slurm_docker.records import CommandRecord

STEP_NAME = "faultpoint"


def fault_point_launch(
    python: str,
    upstreams: list[tuple[str, int]],
    node: str,
    directory: str,
    fault: str,
    after_events: int,
    port_base: int = FAULT_POINT_PORT_BASE,
    stall_s: float = 0.0,
    link: SlowLink | None = None,
) -> StepLaunch:
    """The fault point's step (`start_fault_point` submits it, a dry run prints it); it writes
    its records and its ready file into `directory`."""
    argv = [python, "-m", "dd_accept.node.faultpoint", "--port-base", str(port_base)]
    for host, port in upstreams:
        argv += ["--upstream", f"{host}:{port}"]
    argv += ["--fault", fault, "--after-events", str(after_events)]
    argv += ["--stall-s", f"{stall_s:g}"] if fault == "stall" else []
    argv += link.argv() if fault == "slow" and link is not None else []
    argv += ["--events", f"{directory}/relayed.jsonl", "--ready-file", f"{directory}/ready.json"]
    options = ["-J", STEP_NAME, "-N1", "-n1", f"--nodelist={node}", "-o", f"{directory}/faultpoint.log"]
    return StepLaunch(argv, options)


@dataclass
class FaultPoint:
    allocation: Allocation
    step: BackgroundCommand
    node: str
    backends: list[tuple[str, int]]  # what the proxy is given instead of the replicas
    host_directory: Path

    def relayed(self) -> list[RelayedResponse]:
        path = self.host_directory / "relayed.jsonl"
        return of_type(read_event_file(path), RelayedResponse) if path.exists() else []

    def stop(self) -> CommandRecord:
        return self.allocation.stop_step(self.step, STEP_NAME)


def start_fault_point(
    allocation: Allocation,
    replicas: ReplicaSet,
    run: RunDirectory,
    *,
    name: str,
    fault: str,
    after_events: int,
    stall_s: float = 0.0,
    link: SlowLink | None = None,
    timeout: float = 30.0,
) -> FaultPoint:
    """Start the fault point in front of every replica, on the scenario's node; return once
    it listens. `name`: its directory in the run (one per phase)."""
    node = allocation.first_node
    directory, host_directory = run.path(name)
    host_directory.mkdir(parents=True, exist_ok=True)
    launch = fault_point_launch(
        allocation.cluster.layout.python,
        replicas.backends,
        node,
        directory,
        fault,
        after_events,
        stall_s=stall_s,
        link=link,
    )
    step = allocation.start_step(launch.argv, options=launch.options)
    ports = [FAULT_POINT_PORT_BASE + index for index in range(len(replicas.backends))]
    point = FaultPoint(allocation, step, node, [(node, port) for port in ports], host_directory)
    try:
        wait_until(
            lambda: (host_directory / "ready.json").exists(),
            bool,
            timeout=timeout,
            what="the fault point to listen",
            terminal=lambda _: f"the fault point step ended: {step.wait(1).describe()}" if step.finished else None,
        )
    except (WaitTimeout, WaitAborted) as error:
        log = (host_directory / "faultpoint.log").read_text(errors="replace")[-2000:] if host_directory.exists() else ""
        raise ClusterError(f"the fault point did not start: {error}\n{log}") from error
    return point
