"""Where a run happens: a dockerized Slurm cluster on this machine (its Slurm release and
process tracking), or the Slurm cluster this machine is a login node of (what a site needs
on its allocations and steps)."""

from __future__ import annotations

from dataclasses import dataclass

from dd_accept.base.options import option, refuse_given
from dd_accept.base.slurm_releases import DEFAULT_PROCTRACK, DEFAULT_RELEASE, PROCTRACK, RELEASES


@dataclass(frozen=True, slots=True)
class ClusterOptions:
    """Where to run, and what a site needs on its allocations and steps."""

    mode: str = option(
        "docker",
        "existing: this machine is a login node of a real Slurm cluster (srun, salloc, scancel on PATH)",
        choices=("docker", "existing"),
        flag="cluster",
        pytest_flag="cluster-mode",
    )
    run_dir: str | None = option(
        None, "existing cluster: absolute path of a directory every node shares", metavar="DIR"
    )
    partition: str | None = option(
        None, "existing cluster: partition of the allocations (default: the site's)", metavar="NAME"
    )
    account: str | None = option(
        None, "existing cluster: account of the allocations (default: the user's)", metavar="NAME"
    )
    time: str | None = option(
        None, "existing cluster: time limit of the allocations, e.g. 30:00 (default: the partition's)", metavar="LIMIT"
    )
    gres: str | None = option(
        None, "existing cluster: generic resources of the allocations, e.g. gpu:8", metavar="TYPE:N"
    )
    srun_args: tuple[str, ...] = option((), "existing cluster: extra srun argument", flag="srun-arg", metavar="ARG")
    slurm: str | None = option(
        None,
        "docker cluster: Slurm release of the nodes, from the Debian suite that carries it: "
        + ", ".join(f"{r.version} ({r.suite})" for r in RELEASES.values())
        + f" (default: {DEFAULT_RELEASE})",
        choices=tuple(RELEASES),
        metavar="RELEASE",
    )
    slurm_config: str | None = option(
        None,
        "docker cluster: process tracking, a site setting: linuxproc (task/none) or cgroup "
        f"(proctrack/cgroup with task/cgroup; needs a cgroup v1 host) (default: {DEFAULT_PROCTRACK})",
        choices=PROCTRACK,
    )

    def __post_init__(self) -> None:
        if self.mode == "docker":
            refuse_given(self, ("run_dir", "partition", "account", "time", "gres", "srun_args"), "--cluster existing")
        else:
            refuse_given(self, ("slurm", "slurm_config"), "--cluster docker")

    @property
    def release(self) -> str:
        """The docker cluster's Slurm release (the default when none was chosen)."""
        return self.slurm or DEFAULT_RELEASE

    @property
    def proctrack(self) -> str:
        """The docker cluster's process tracking (linuxproc when none was chosen)."""
        return self.slurm_config or DEFAULT_PROCTRACK

    def salloc_args(self) -> tuple[str, ...]:
        pairs = (("--partition", self.partition), ("--account", self.account), ("--gres", self.gres))
        return tuple(f"{option_flag}={value}" for option_flag, value in pairs if value)
