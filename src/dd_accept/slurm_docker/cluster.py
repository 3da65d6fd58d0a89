"""A Slurm cluster (slurmctld + N slurmd + munge) in Docker, with a lifecycle that cleans up.

Every object it creates carries `io.dd-accept.cluster=<name>`, cleanup is registered before
anything is acquired, and a failed or interrupted `up` removes what it had started. The
munge key is generated in memory and exists only inside the cluster's containers.
"""

from __future__ import annotations

import ipaddress
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Self

from dd_accept.base.errors import ClusterError, EnvironmentProblem, UsageError
from dd_accept.base.interrupts import deferred_interrupts
from dd_accept.base.slurm_releases import DEFAULT_PROCTRACK, DEFAULT_RELEASE, slurm_release
from dd_accept.base.state import cluster_dir
from dd_accept.base.waiting import WaitAborted, WaitTimeout, wait_until
from dd_accept.slurm_docker import engine, step_exit
from dd_accept.slurm_docker.images import ensure_images
from dd_accept.slurm_docker.layout import NodeLayout, docker_layout
from dd_accept.slurm_docker.networks import free_subnets
from dd_accept.slurm_docker.ownership import LABEL_KEEP, LABEL_OWNER, Owner, Reaper, orphaned, ownership_labels
from dd_accept.slurm_docker.records import CommandLog, CommandRecord
from dd_accept.slurm_docker.sdk import docker
from dd_accept.slurm_docker.slurm_conf import CGROUP_CONF, render_slurm_conf
from dd_accept.slurm_docker.spec import (
    CONTROLLER,
    LABEL_CPUS,
    LABEL_NODES,
    LABEL_PROCTRACK,
    LABEL_SLURM,
    PARTITION,
    SHARED_PATH,
    ClusterSpec,
    node_names,
)
from dd_accept.slurm_docker.status import ClusterStatus, JobState, NodeState, StepState, reported_versions
from dd_accept.slurm_docker.step_exit import SLURMD_LOG, StepExit
from dd_accept.slurm_docker.sweep import remove_cluster, sweep_orphans, views_of

if TYPE_CHECKING:
    from docker.models.containers import Container

# proctrack/cgroup tracks a step's processes in the freezer hierarchy, which Docker mounts
# read-only. A compute node (only) starts with its own cgroup namespace, so the hierarchy it
# can mount is rooted at its own cgroup and no other, and with CAP_SYS_ADMIN for that one
# mount; the capability is then dropped from the bounding set before anything else runs, so
# neither slurmd nor any job step (the SUT's code) ever holds it. Creating cgroups and
# moving tasks below the mount needs only file permissions.
CGROUP_NODE_START = """\
set -euo pipefail
umount /sys/fs/cgroup/freezer
mount -t cgroup -o freezer cgroup /sys/fs/cgroup/freezer
exec setpriv --bounding-set -sys_admin --inh-caps -sys_admin -- /usr/local/bin/dd-node-entrypoint
"""


def _cgroup_tracking() -> dict[str, object]:
    """docker create options of a compute node under proctrack/cgroup (see CGROUP_NODE_START)."""
    return {"cgroupns": "private", "cap_add": ["SYS_ADMIN"], "entrypoint": ["/bin/bash", "-c", CGROUP_NODE_START]}


@dataclass
class SlurmCluster:
    """One dockerized Slurm cluster. Use as a context manager, or call `up()` and `down()`."""

    spec: ClusterSpec
    image: str | None = None
    client: docker.DockerClient | None = None
    records: CommandLog = field(default_factory=CommandLog)
    # Kept clusters (`cluster up`, --keep-cluster) outlive this process; any other is removed
    # by its reaper when this process ends without removing it (see ownership, reaper).
    keep: bool = False
    owner: Owner | None = None  # whose life bounds the cluster (default: this process)
    _containers: dict[str, Container] = field(default_factory=dict)
    _host_shared: Path | None = None
    _reaper: Reaper | None = None
    _ownership: dict[str, str] = field(default_factory=dict)
    # Site options an existing cluster needs; the docker cluster needs none.
    salloc_args: ClassVar[tuple[str, ...]] = ()
    srun_args: ClassVar[tuple[str, ...]] = ()
    time_limit: ClassVar[str | None] = None
    allocation_timeout: ClassVar[float] = 60.0  # an idle private cluster grants at once
    may_lose_nodes: ClassVar[bool] = True  # its nodes are dd-accept's own: a scenario may freeze one

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def attach(cls, name: str, client: docker.DockerClient | None = None) -> Self:
        """Reattach to a running cluster by name (for `status`, `exec` and `down`)."""
        client = client or engine.connect()
        objects = engine.find_labelled(client, name)
        if not objects.containers:
            raise UsageError(f"no dd-accept cluster named {name!r} (see `dd-accept cluster status`)")
        controller = next(
            (c for c in objects.containers if c.labels.get(engine.LABEL_ROLE) == "controller"),
            objects.containers[0],
        )
        spec = ClusterSpec(
            name=name,
            nodes=int(controller.labels.get(LABEL_NODES, "1")),
            cpus_per_node=int(controller.labels.get(LABEL_CPUS, "1")),
            slurm=controller.labels.get(LABEL_SLURM, DEFAULT_RELEASE),
            proctrack=controller.labels.get(LABEL_PROCTRACK, DEFAULT_PROCTRACK),
        )
        cluster = cls(spec=spec, client=client)
        for mount in controller.attrs.get("Mounts", []):
            if mount.get("Destination") == SHARED_PATH:
                cluster._host_shared = Path(mount["Source"])
        for container in objects.containers:
            cluster._containers[container.labels.get("io.dd-accept.node", container.name)] = container
        return cluster

    @property
    def layout(self) -> NodeLayout:
        return docker_layout(self.spec.slurm)

    @property
    def engine(self) -> docker.DockerClient:
        if self.client is None:
            self.client = engine.connect()
        return self.client

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def nodes(self) -> list[str]:
        return node_names(self.spec.nodes)

    @property
    def network_name(self) -> str:
        return f"{self.name}-net"

    @property
    def host_shared_dir(self) -> Path:
        """The host side of the shared filesystem (never written into evidence).

        A reattached cluster takes it from the bind mount, since the process that started
        the cluster may have had another state directory.
        """
        return self._host_shared or cluster_dir(self.name) / "shared"

    def __enter__(self) -> Self:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    # ---- lifecycle ----------------------------------------------------------------------
    def up(self, ready_timeout: float = 60.0) -> Self:
        """Start the cluster and return once every node is idle; on any failure, tear down."""
        if self.image is None:
            self.image = ensure_images(self.engine, version=self.spec.slurm)
        sweep_orphans(self.engine)
        self._remove_stale()  # before anything is created: refusing a name in use tears nothing down
        try:
            self._ownership = ownership_labels(self.keep, self.owner)
            if LABEL_OWNER in self._ownership:
                self._reaper = Reaper.watch(self.name, self._ownership[LABEL_OWNER])
            self._start()
            self.wait_ready(timeout=ready_timeout)
        except BaseException:
            self.down()
            raise
        return self

    def _remove_stale(self) -> None:
        """A killed earlier run may have left a cluster of this name: remove it first. A
        cluster of this name that is kept, or whose owner still runs, is someone's: refused."""
        objects = engine.find_labelled(self.engine, self.name)
        views = views_of(objects)
        legacy = all(LABEL_OWNER not in labels and LABEL_KEEP not in labels for labels, _ in views)
        if views and not legacy and not orphaned(views):
            raise UsageError(
                f"a cluster named {self.name} is in use (kept, or its owner still runs): "
                f"`dd-accept cluster down --name {self.name}`, or choose another --name"
            )
        remove_cluster(self.engine, self.name)

    def _start(self) -> None:
        if self.spec.proctrack == "cgroup":
            version = str(self.engine.info().get("CgroupVersion", "1"))
            if version != "1":
                raise EnvironmentProblem(
                    f"--slurm-config cgroup needs a cgroup v1 host; this Docker engine reports cgroup v{version}"
                )
        shared = self.host_shared_dir
        shared.mkdir(parents=True, exist_ok=True)
        network = self._create_network()
        addresses = self._assign_addresses(network)
        munge_key = secrets.token_bytes(1024)
        slurm_conf = render_slurm_conf(self.spec).encode()
        for host, role in [(CONTROLLER, "controller"), *((n, "compute") for n in self.nodes)]:
            with deferred_interrupts():
                container = self._create_container(host, role, shared, addresses)
                self._containers[host] = container
                engine.put_file(container, "/etc/munge/munge.key", munge_key, mode=0o400)
                engine.put_file(container, "/etc/slurm/slurm.conf", slurm_conf)
                if self.spec.proctrack == "cgroup":
                    engine.put_file(container, "/etc/slurm/cgroup.conf", CGROUP_CONF.encode())
        del munge_key
        for container in self._containers.values():
            with deferred_interrupts():
                container.start()

    def _create_network(self) -> object:
        """The internal network, on the user's subnet or on a free one dd-accept picks.

        Fixed member addresses need a user-configured subnet; two clusters starting at once
        may pick the same free one, so an overlap is retried on the next candidate.
        """
        candidates = [self.spec.subnet] if self.spec.subnet else free_subnets(self.engine)
        last_error: docker.errors.APIError | None = None
        for subnet in candidates[:8]:
            ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=subnet)])
            # Engine mutations run with interrupts deferred: an abandoned create would still
            # complete on the engine after teardown had looked for it (see harness.interrupts).
            with deferred_interrupts():
                try:
                    return self.engine.networks.create(
                        self.network_name,
                        driver="bridge",
                        internal=True,
                        ipam=ipam,
                        labels={**engine.cluster_labels(self.name, "network"), **self._ownership},
                    )
                except docker.errors.APIError as error:
                    last_error = error
                    if "overlap" not in str(error.explanation) or self.spec.subnet:
                        break
        detail = last_error.explanation if last_error is not None else "no free subnet"
        raise ClusterError(f"cannot create network for cluster {self.name}: {detail}")

    def _assign_addresses(self, network: object) -> dict[str, str]:
        """Fixed addresses for every member, so names resolve from /etc/hosts alone.

        The image resolves hosts from files only: Docker's embedded DNS does not answer
        unknown names on an internal network, and each such lookup (slurmctld makes one at
        start) otherwise costs the full resolver timeout. No lookup ever leaves the cluster.
        """
        network.reload()  # type: ignore[attr-defined]
        ipam = network.attrs["IPAM"]["Config"][0]  # type: ignore[attr-defined]
        subnet = ipaddress.ip_network(ipam["Subnet"])
        gateway = ipam.get("Gateway") or str(next(subnet.hosts()))
        free = (str(ip) for ip in subnet.hosts() if str(ip) != gateway)
        return {host: next(free) for host in [CONTROLLER, *self.nodes]}

    def _create_container(self, host: str, role: str, shared: Path, addresses: dict[str, str]) -> Container:
        labels = {**engine.cluster_labels(self.name, role), **self._ownership}
        labels.update(
            {
                "io.dd-accept.node": host,
                LABEL_NODES: str(self.spec.nodes),
                LABEL_CPUS: str(self.spec.cpus_per_node),
                LABEL_SLURM: self.spec.slurm,
                LABEL_PROCTRACK: self.spec.proctrack,
            }
        )
        isolation = _cgroup_tracking() if self.spec.proctrack == "cgroup" and role == "compute" else {}
        assert self.image is not None
        return self.engine.containers.create(
            self.image,
            name=f"{self.name}-{host}",
            hostname=host,
            labels=labels,
            environment={"DD_ROLE": role},
            network=self.network_name,
            networking_config={
                self.network_name: docker.types.EndpointConfig(
                    self.engine.api._version, aliases=[host], ipv4_address=addresses[host]
                )
            },
            extra_hosts={name: address for name, address in addresses.items() if name != host},
            init=True,
            volumes={str(shared): {"bind": SHARED_PATH, "mode": "rw"}},
            detach=True,
            **isolation,
        )

    def down(self) -> list[str]:
        """Remove every object labelled with this cluster's name, and its run directory."""
        self._containers.clear()
        removed = remove_cluster(self.engine, self.name)
        if self._reaper is not None:
            self._reaper.release()
            self._reaper = None
        return removed

    # ---- readiness ----------------------------------------------------------------------
    def _exited_container(self) -> str | None:
        for host, container in self._containers.items():
            container.reload()
            if container.status in {"exited", "dead"}:
                return f"container {host} exited: {engine.container_log_tail(container, 10).strip()[-400:]}"
        return None

    def _node_states(self) -> dict[str, str]:
        record = self.exec(["sinfo", "-N", "-h", "-p", PARTITION, "-o", "%N %T"], timeout=10)
        if not record.ok:
            return {}
        states: dict[str, str] = {}
        for line in record.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2:
                states[parts[0]] = parts[1]
        return states

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Poll `scontrol ping` then `sinfo` until every node is idle; errors carry log tails."""
        try:
            wait_until(
                lambda: self.exec(["scontrol", "ping"], timeout=10),
                lambda record: record.ok and "UP" in record.stdout_tail,
                timeout=timeout,
                what="slurmctld to answer `scontrol ping`",
                terminal=lambda _: self._exited_container(),
            )
            wanted = set(self.nodes)
            wait_until(
                self._node_states,
                lambda states: set(states) >= wanted and all(states[n] == "idle" for n in wanted),
                timeout=timeout,
                what=f"{len(wanted)} node(s) idle in sinfo",
                terminal=lambda _: self._exited_container(),
            )
        except (WaitTimeout, WaitAborted) as error:
            raise ClusterError(f"cluster {self.name} not ready: {error}\n{self.log_tails()}") from error

    def log_tails(self, lines: int = 15) -> str:
        parts = []
        for host, container in self._containers.items():
            parts.append(f"--- {host} log (last {lines} lines) ---\n{engine.container_log_tail(container, lines)}")
        return "\n".join(parts)

    # ---- commands -----------------------------------------------------------------------
    def container(self, node: str = CONTROLLER) -> Container:
        try:
            return self._containers[node]
        except KeyError:
            raise UsageError(f"cluster {self.name} has no node {node!r}") from None

    def exec(
        self,
        argv: Sequence[str],
        *,
        node: str = CONTROLLER,
        timeout: float = 60.0,
        environment: Mapping[str, str] | None = None,
    ) -> CommandRecord:
        """Run a command on a node; every call is recorded in `self.records`."""
        return engine.exec_command(
            self.container(node), argv, node=node, log=self.records, timeout=timeout, environment=environment
        )

    def lose_node(self, node: str) -> CommandRecord:
        """Freeze a compute node (docker pause): its slurmd stops answering, so Slurm learns
        of the loss only from its pings (SlurmdTimeout), as from a machine that died."""
        if node not in self.nodes:
            raise UsageError(f"cluster {self.name}: only a compute node can be lost, not {node!r}")
        record = engine.freeze(self.container(node), node=node, log=self.records)
        if not record.ok:  # a node still running would be judged as lost
            raise ClusterError(f"could not freeze {node}: {record.describe()}")
        return record

    def restore_node(self, node: str) -> CommandRecord:
        """Thaw a node frozen by `lose_node`; its slurmd answers again and (ReturnToService=2)
        Slurm takes it back once it registers."""
        return engine.set_frozen(self.container(node), node=node, log=self.records, frozen=False)

    def start_detached(
        self,
        report_dir: str,
        argv: Sequence[str],
        *,
        node: str = CONTROLLER,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        """Start a command without waiting; `dd-bg` reports its pid, output and exit in `report_dir`."""
        engine.exec_detached(self.container(node), ["dd-bg", report_dir, *argv], environment=environment)

    def allocated(self, job_id: str, nodes: Sequence[str]) -> None:
        """Told of each allocation; the docker cluster reaches its nodes by `docker exec` instead."""

    def daemon_logs(self, lines: int = 2000) -> dict[str, str]:
        """The Slurm daemons' output, per node (evidence)."""
        return {node: engine.container_log_tail(self.container(node), lines) for node in [CONTROLLER, *self.nodes]}

    def step_exit(self, step: str, node: str) -> StepExit | None:
        """How `step` ended on `node`, from slurmstepd's own record in the node's slurmd log."""
        record = self.exec(["grep", "-F", f"] [{step}] task ", SLURMD_LOG], node=node, timeout=15)
        return step_exit.from_slurmd_log(record.stdout, step)

    def signals_sent(self, step: str, node: str, signal: int) -> tuple[float, ...] | None:
        """Every delivery of `signal` to `step` by slurmstepd on `node`, from the node's slurmd log;
        None where the log could not be read (grep's exit 2, or no answer): unknown, not none."""
        record = self.exec(["grep", "-F", f"] [{step}] Sent signal ", SLURMD_LOG], node=node, timeout=15)
        if record.timed_out or record.exit_code not in (0, 1):  # grep: 1 is no line, 2 an error
            return None
        return step_exit.signals_sent(record.stdout, step, signal)

    def node_freeze(self) -> str:
        """`pip freeze` of the SUT's environment on the nodes, as installed (the node lock)."""
        record = self.exec(["cat", f"{self.layout.venv}/dd-accept-freeze.txt"], timeout=10)
        return record.stdout if record.ok else ""

    def versions(self) -> dict[str, str]:
        """What the nodes run, as they report it, and what this cluster was built as (the
        release decides the suite and so the SUT's Python)."""
        return {
            **reported_versions(self),
            "slurm_release": self.spec.slurm,
            "proctrack": self.spec.proctrack,
            "debian_suite": slurm_release(self.spec.slurm).suite,
        }

    def status(self) -> ClusterStatus:
        states = self.exec(["sinfo", "-N", "-h", "-p", PARTITION, "-o", "%N|%T|%c"], timeout=10)
        jobs = self.exec(["squeue", "-h", "-o", "%i|%j|%T|%D|%N"], timeout=10)
        steps = self.exec(["squeue", "-h", "-s", "-o", "%i|%j|%N"], timeout=10)
        return ClusterStatus(
            nodes=tuple(NodeState(*line.split("|")) for line in states.stdout.splitlines() if line.count("|") == 2),
            jobs=tuple(JobState(*line.split("|")) for line in jobs.stdout.splitlines() if line.count("|") == 4),
            steps=tuple(StepState(*line.split("|")) for line in steps.stdout.splitlines() if line.count("|") == 2),
        )

    def shared_path(self, *parts: str) -> tuple[str, Path]:
        """A path in the shared filesystem: (as the cluster sees it, as the host sees it)."""
        relative = "/".join(parts)
        return f"{SHARED_PATH}/{relative}", self.host_shared_dir.joinpath(*parts)
