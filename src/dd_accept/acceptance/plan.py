"""A scenario's Slurm commands, planned without running anything (`--dry-run`).

Before a site lends dd-accept GPU nodes, someone reads exactly what it will submit: every
salloc, srun and scancel with its environment. Each phase of a scenario declares its commands
(`phases.Phase.commands`) with the same builders the run uses (srun argv, replica, proxy
and client command lines, step options), and the plan walks the same phases the run walks,
so it cannot drift from what a run does; values only known at run time are placeholders
(`$JOB`, `$NODE`, `<per-run token>`).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any, Literal

from dd_accept.fixtures.backends.vllm import VllmBackend
from dd_accept.slurm_docker.allocation import srun_argv
from dd_accept.slurm_docker.layout import NodeLayout
from dd_accept.sut.profile import SutProfile

JOB, NODE, TOKEN = "$JOB", "$NODE", "<per-run token>"
BackendKind = Literal["synthetic", "vllm"]


def backend_kind_of(backend: VllmBackend | None) -> BackendKind:
    """Which kind of replica a run deploys: the phases that apply, and what a plan shows."""
    return "synthetic" if backend is None else "vllm"


@dataclass(frozen=True, slots=True)
class PlannedCommand:
    purpose: str
    argv: list[str]
    environment: dict[str, str] = field(default_factory=dict)

    def shell(self) -> str:
        prefix = ["env", *(f"{key}={value}" for key, value in sorted(self.environment.items()))]
        return shlex.join([*(prefix if self.environment else []), *self.argv])


@dataclass(frozen=True, slots=True)
class PlanTarget:
    """Enough of a cluster for the builders: its layout and the site's Slurm options."""

    layout: NodeLayout
    salloc_args: tuple[str, ...] = ()
    srun_args: tuple[str, ...] = ()
    time_limit: str | None = None


@dataclass(frozen=True, slots=True)
class Planner:
    """What a phase needs to say which commands it would submit: the cluster's shape, the
    SUT's profile, the scenario's options, where the run writes, and the replica backend."""

    target: PlanTarget
    profile: SutProfile
    options: Any
    run_dir: str
    backend: VllmBackend | None = None

    @property
    def backend_kind(self) -> BackendKind:
        return backend_kind_of(self.backend)

    def srun(
        self, purpose: str, argv: list[str], step: list[str], environment: dict[str, str] | None = None
    ) -> PlannedCommand:
        return PlannedCommand(purpose, srun_argv(JOB, argv, step, self.target.srun_args), dict(environment or {}))


def render(header: list[str], sections: list[tuple[str, list[PlannedCommand]]]) -> str:
    """The plan as a shell script a person reads: a heading per phase, each command after
    its purpose (phases that submit nothing, such as judging, show as headings only)."""
    lines = [f"# {line}" for line in header]
    for heading, commands in sections:
        lines += ["", f"# == {heading}"]
        if not commands:
            lines.append("# (no new Slurm command: done through the steps already running)")
        for command in commands:
            lines += [f"# {command.purpose}", command.shell()]
    return "\n".join(lines) + "\n"
