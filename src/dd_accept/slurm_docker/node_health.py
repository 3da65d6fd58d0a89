"""A compute node as Slurm's controller sees it: the Slurm side of a node loss.

Slurm learns that a node died only from its pings: the node is flagged NOT_RESPONDING when a
ping goes unanswered, and set DOWN once it has been silent for `SlurmdTimeout` (counted from
its last answer); only then are its jobs ended and their `srun` launchers told. Measured
with the node frozen and SlurmdTimeout=45: DOWN 41 s after the loss on 22.05, 51 s on 24.11,
50 s on 26.05 (docs/cluster-and-sut.md, "Node loss"). A controller that watches its launchers learns of the
loss at that moment, not before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dd_accept.base.errors import ClusterError
from dd_accept.slurm_docker.interface import Cluster

_STATE = re.compile(r"\bState=(\S+)")
_SLURMD_TIMEOUT = re.compile(r"^SlurmdTimeout\s*=\s*(\d+)\s*sec", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class NodeCondition:
    """One reading of `scontrol show node` (its State field: a base state and + flags)."""

    node: str
    state: str  # e.g. "ALLOCATED", "IDLE+NOT_RESPONDING", "DOWN+NOT_RESPONDING"

    @property
    def base(self) -> str:
        return self.state.split("+", 1)[0].rstrip("*")

    @property
    def not_responding(self) -> bool:
        return "NOT_RESPONDING" in self.state.split("+")[1:] or self.state.endswith("*")

    @property
    def down(self) -> bool:
        return self.base == "DOWN"

    @property
    def drained(self) -> bool:
        """Set DRAIN by an administrator: no new job starts on it, its running steps go on."""
        return any(flag in ("DRAIN", "DRAINING", "DRAINED") for flag in self.state.rstrip("*").split("+"))


def node_condition(cluster: Cluster, node: str) -> NodeCondition:
    record = cluster.exec(["scontrol", "-o", "show", "node", node], timeout=10)
    match = _STATE.search(record.stdout)
    if not record.ok or match is None:
        raise ClusterError(f"could not read the state of node {node}: {record.describe()}")
    return NodeCondition(node, match.group(1))


def set_node_state(cluster: Cluster, node: str, state: str, reason: str = "") -> NodeCondition:
    """An administrator's `scontrol update` of a node (State=DRAIN with a reason, RESUME), and
    the condition Slurm then reports for it."""
    argv = ["scontrol", "update", f"NodeName={node}", f"State={state}", *([f"Reason={reason}"] if reason else [])]
    record = cluster.exec(argv, timeout=10)
    if not record.ok:
        raise ClusterError(f"could not set node {node} {state}: {record.describe()}")
    return node_condition(cluster, node)


def slurmd_timeout(cluster: Cluster) -> float:
    """The cluster's SlurmdTimeout in seconds, as its controller runs with it."""
    record = cluster.exec(["scontrol", "show", "config"], timeout=10)
    match = _SLURMD_TIMEOUT.search(record.stdout)
    if not record.ok or match is None:
        raise ClusterError(f"could not read SlurmdTimeout from the controller: {record.describe()}")
    return float(match.group(1))
