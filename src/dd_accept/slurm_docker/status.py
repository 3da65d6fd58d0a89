"""What `sinfo` and `squeue` show of a cluster, as typed values (`dd-accept cluster status`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dd_accept.slurm_docker.interface import Cluster


@dataclass(frozen=True, slots=True)
class NodeState:
    name: str
    state: str
    cpus: str


@dataclass(frozen=True, slots=True)
class JobState:
    id: str
    name: str
    state: str
    nodes: str
    nodelist: str


@dataclass(frozen=True, slots=True)
class StepState:
    id: str
    name: str
    nodelist: str


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    """What `sinfo` and `squeue` show of a cluster, field by field (read with `|` separators)."""

    nodes: tuple[NodeState, ...]
    jobs: tuple[JobState, ...]
    steps: tuple[StepState, ...]

    def to_json(self, name: str) -> dict[str, Any]:
        """One cluster of the `dd-accept/cluster-status/v1` document."""
        return {
            "name": name,
            "nodes": [{"name": n.name, "state": n.state, "cpus": _count(n.cpus)} for n in self.nodes],
            "jobs": [
                {"id": j.id, "name": j.name, "state": j.state, "nodes": _count(j.nodes), "nodelist": j.nodelist}
                for j in self.jobs
            ],
            "steps": [{"id": s.id, "name": s.name, "nodelist": s.nodelist} for s in self.steps],
        }


def _count(text: str) -> int:
    return int(text) if text.isdigit() else 0


def reported_versions(cluster: Cluster) -> dict[str, str]:
    """Slurm, the SUT's Python and the kernel, as the cluster itself reports them (recorded
    commands): the same on the docker cluster and on a site's, where nothing else is known."""
    versions = {"slurm": cluster.exec(["sinfo", "--version"], timeout=10).stdout.strip()}
    if cluster.layout is not None:  # a site's cluster has one once the SUT is installed
        versions["node_python"] = cluster.exec([cluster.layout.python, "--version"], timeout=10).stdout.strip()
    versions["kernel"] = cluster.exec(["uname", "-r"], timeout=10).stdout.strip()
    return versions
