"""What a dockerized Slurm cluster is made of, before anything runs: its names, labels and
limits, and `ClusterSpec`, validated on construction. Light: no docker SDK, no templates, so
a plan, a gate file or the pytest plugin can read it without them."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from dd_accept.base.errors import UsageError
from dd_accept.base.options import option
from dd_accept.base.slurm_releases import DEFAULT_PROCTRACK, DEFAULT_RELEASE, PROCTRACK, slurm_release

CONTROLLER = "ctl"
SHARED_PATH = "/shared"  # the cluster's shared filesystem, at the same path on every node
PARTITION = "dd"
# The hidden partition whose jobs preempt the scenarios' (slurm_docker.preemption), and the
# grace time a preempted job gets: longer than a SUT's drain window, whose end is not judged.
PREEMPTOR_PARTITION = "dd-urgent"
PREEMPT_GRACE_S = 30
MAX_NODES = 64
MAX_CPUS_PER_NODE = 1024
DEFAULT_NODES, DEFAULT_CPUS_PER_NODE = 2, 16
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9-]{0,39}$")
LABEL_NODES = "io.dd-accept.nodes"
LABEL_CPUS = "io.dd-accept.cpus-per-node"
LABEL_SLURM = "io.dd-accept.slurm"
LABEL_PROCTRACK = "io.dd-accept.proctrack"

# A node silent this long is set DOWN (the health scenario's node loss waits for it). While a
# frozen node stalls slurmctld's ping agent (2 x MessageTimeout, 21 s measured on 24.11), the
# other nodes' answers wait too: at 30 s a busy node was once set DOWN with the lost one.
# 45 s stays above a ping cycle (15 s) plus that stall.
SLURMD_TIMEOUT_S = 45


def node_names(count: int) -> list[str]:
    return [f"node{index}" for index in range(1, count + 1)]


def _positive_int(value: object, what: str, maximum: int) -> int:
    try:
        number = int(str(value), 10)
    except ValueError:
        raise UsageError(f"{what} must be a whole number, got {value!r}") from None
    if not 1 <= number <= maximum:
        raise UsageError(f"{what} must be between 1 and {maximum}, got {number}")
    return number


@dataclass(frozen=True, slots=True)
class ClusterShape:
    """A dockerized cluster's size, as `cluster up` and the pytest plugin's session cluster
    take it (`--nodes`, `--dd-nodes`): both derive their flags from here."""

    nodes: int = option(DEFAULT_NODES, "compute nodes", minimum=1, maximum=MAX_NODES)
    cpus_per_node: int = option(
        DEFAULT_CPUS_PER_NODE, "CPUs Slurm declares per node", minimum=1, maximum=MAX_CPUS_PER_NODE
    )


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """What to start. Validated on construction, so bad input fails before anything runs."""

    name: str = "dd-accept"
    nodes: int = DEFAULT_NODES
    cpus_per_node: int = DEFAULT_CPUS_PER_NODE
    subnet: str | None = None
    kill_wait: int = 30
    slurm: str = DEFAULT_RELEASE  # the Slurm release of the nodes (base.slurm_releases)
    proctrack: str = DEFAULT_PROCTRACK  # process tracking: linuxproc, or cgroup (with task/cgroup)

    def __post_init__(self) -> None:
        object.__setattr__(self, "slurm", slurm_release(self.slurm).version)
        if self.proctrack not in PROCTRACK:
            raise UsageError(f"--slurm-config must be one of {', '.join(PROCTRACK)}, got {self.proctrack!r}")
        if not NAME_PATTERN.match(self.name):
            raise UsageError(
                f"cluster name must be lower-case letters, digits and '-', starting with a letter "
                f"(at most 40), got {self.name!r}"
            )
        object.__setattr__(self, "nodes", _positive_int(self.nodes, "--nodes", MAX_NODES))
        object.__setattr__(
            self, "cpus_per_node", _positive_int(self.cpus_per_node, "--cpus-per-node", MAX_CPUS_PER_NODE)
        )
        if self.subnet is not None:
            try:
                network = ipaddress.ip_network(self.subnet, strict=True)
            except ValueError:
                raise UsageError(f"--subnet must be a network such as 10.231.0.0/24, got {self.subnet!r}") from None
            if network.version != 4 or not network.is_private:
                raise UsageError(f"--subnet must be a private IPv4 network, got {self.subnet}")
            if network.num_addresses < self.nodes + 4:
                raise UsageError(f"--subnet {self.subnet} is too small for {self.nodes} nodes")

    @property
    def node_range(self) -> str:
        return "node1" if self.nodes == 1 else f"node[1-{self.nodes}]"
