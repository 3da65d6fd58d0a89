"""What scenarios need of a Slurm cluster, whichever kind it is.

Two implementations: `SlurmCluster` (the dockerized cluster; commands by `docker exec`) and
`ExistingCluster` (a real cluster from its login node; commands as local processes and
`srun --overlap` steps). Allocations, deployments and scenarios are written against this.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from dd_accept.slurm_docker.layout import NodeLayout
from dd_accept.slurm_docker.records import CommandLog, CommandRecord
from dd_accept.slurm_docker.step_exit import StepExit


class AllocationSite(Protocol):
    """What an allocation request needs of a cluster: the site's options (also a dry run's plan)."""

    @property
    def salloc_args(self) -> tuple[str, ...]: ...

    @property
    def time_limit(self) -> str | None: ...


class Cluster(Protocol):
    name: str
    records: CommandLog  # every command run, in order: evidence
    salloc_args: tuple[str, ...]  # the site's allocation options (partition, account, gres)
    srun_args: tuple[str, ...]  # the site's extra step options
    time_limit: str | None
    allocation_timeout: float
    may_lose_nodes: bool  # whether dd-accept may take a node down (never a site's)

    @property
    def layout(self) -> NodeLayout: ...  # where the SUT and dd-accept's code live on the nodes

    @property
    def nodes(self) -> list[str]: ...

    @property
    def host_shared_dir(self) -> Path: ...

    def exec(
        self,
        argv: Sequence[str],
        *,
        node: str = ...,
        timeout: float = ...,
        environment: Mapping[str, str] | None = ...,
    ) -> CommandRecord: ...

    def start_detached(
        self, report_dir: str, argv: Sequence[str], *, node: str = ..., environment: Mapping[str, str] | None = ...
    ) -> None: ...

    def shared_path(self, *parts: str) -> tuple[str, Path]: ...  # (as the nodes see it, as this machine does)

    def allocated(self, job_id: str, nodes: Sequence[str]) -> None: ...

    def daemon_logs(self, lines: int = ...) -> dict[str, str]: ...

    def step_exit(self, step: str, node: str) -> StepExit | None: ...  # as Slurm recorded it; None: unknown

    def signals_sent(self, step: str, node: str, signal: int) -> tuple[float, ...] | None: ...  # None: unknown

    def versions(self) -> dict[str, str]: ...

    def lose_node(self, node: str) -> CommandRecord: ...  # only where may_lose_nodes

    def restore_node(self, node: str) -> CommandRecord: ...

    def node_freeze(self) -> str: ...


def first_delivery(cluster: Cluster, step: str, node: str, signal: int) -> float | None:
    """When slurmstepd first delivered `signal` to `step`: the node's own moment (None: unknown)."""
    sent = cluster.signals_sent(step, node, signal)
    return sent[0] if sent else None  # none delivered, or the node's log unreadable
