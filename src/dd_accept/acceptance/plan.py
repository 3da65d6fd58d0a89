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

from dd_accept.deployment.backends.vllm import VllmBackend
from dd_accept.deployment.clients import client_step_options, load_client_argv
from dd_accept.deployment.placement import PROXY_PORT, REPLICA_PORT_BASE
from dd_accept.deployment.proxy import proxy_launch
from dd_accept.deployment.synthetic_replicas import synthetic_launch
from dd_accept.slurm_docker.allocation import srun_argv
from dd_accept.slurm_docker.layout import NodeLayout
from dd_accept.sut.profile import SutProfile

JOB, NODE, TOKEN, CANARY = "$JOB", "$NODE", "<per-run token>", "<per-run canary>"
# What a planned command carries where the run passes its own canary (a command line checks
# that a canary is hex): shown as CANARY in the plan.
CANARY_STAND_IN = "0" * 16
BackendKind = Literal["synthetic", "vllm"]


def backend_kind_of(backend: VllmBackend | None) -> BackendKind:
    """Which kind of replica a run deploys: the phases that apply, and what a plan shows."""
    return "synthetic" if backend is None else "vllm"


@dataclass(frozen=True, slots=True)
class PlannedCommand:
    purpose: str
    argv: list[str]
    environment: dict[str, str] = field(default_factory=dict)
    # A command the run submits only when something it finds then says so (a KILL when the
    # endpoint still runs at the allowance): the condition, in words; "" for always.
    only_if: str = ""
    # Who submits it where dd-accept does not: the SUT's own controller functions, run by a
    # drill from a command file dd-accept writes ("" for dd-accept itself).
    launched_by: str = ""

    def when(self, condition: str) -> PlannedCommand:
        return PlannedCommand(self.purpose, self.argv, self.environment, condition, self.launched_by)

    def by(self, launcher: str) -> PlannedCommand:
        return PlannedCommand(self.purpose, self.argv, self.environment, self.only_if, launcher)

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
    # The cluster's SlurmdTimeout where dd-accept made the cluster (it may then lose a node on
    # purpose); None on an existing cluster, whose nodes it never takes down.
    slurmd_timeout_s: float | None = None


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
        argv = [CANARY if word == CANARY_STAND_IN else word for word in argv]
        return PlannedCommand(purpose, srun_argv(JOB, argv, step, self.target.srun_args), dict(environment or {}))

    def run_path(self, run: str | None = None) -> str:
        """The run's directory, or a sub-run's of that name (a scenario's own part, such as
        a replica set deployed for one phase), as the run names them."""
        return self.run_dir if run is None else f"{self.run_dir.rsplit('/', 1)[0]}/{run}-<id>"

    def replicas(self, purpose: str, count: int, *, run: str | None = None, **launch: Any) -> PlannedCommand:
        """Synthetic replicas as `start_replicas` starts them (`launch`: its keywords)."""
        step = synthetic_launch(
            self.profile, f"{self.run_path(run)}/replicas", python=self.target.layout.python, count=count, node=NODE,
            token=TOKEN, **launch,
        )  # fmt: skip
        return self.srun(purpose, step.argv, step.options, step.environment)

    def proxy(
        self,
        purpose: str,
        replicas: int,
        *,
        run: str | None = None,
        port_base: int = REPLICA_PORT_BASE,
        retry_after: int | None = None,
        replicas_on: str = NODE,
        log: str = "proxy.log",
    ) -> PlannedCommand:
        """The SUT's proxy as `start_proxy` starts it, in front of `replicas` replicas (or of
        the fault point's ports for them, `port_base`)."""
        backends = [(replicas_on, port_base + index) for index in range(replicas)]
        step = proxy_launch(
            self.profile, self.target.layout, backends, NODE, f"{self.run_path(run)}/{log}", retry_after=retry_after
        )
        return self.srun(purpose, step.argv, step.options)

    def client(
        self,
        purpose: str,
        name: str,
        *,
        mode: str,
        run: str | None = None,
        step: list[str] | None = None,
        **workload: Any,
    ) -> PlannedCommand:
        """The load client as `run_client` starts it against the proxy (`workload`: its keywords)."""
        argv = load_client_argv(
            self.target.layout.python, f"http://127.0.0.1:{PROXY_PORT}", f"{self.run_path(run)}/{name}.jsonl",
            mode=mode, profile=self.profile, name=name, **workload,
        )  # fmt: skip
        return self.srun(purpose, argv, client_step_options(name, NODE) if step is None else step)


def render(header: list[str], sections: list[tuple[str, list[PlannedCommand]]]) -> str:
    """The plan as a shell script a person reads: a heading per phase, each command after
    its purpose (phases that submit nothing, such as judging, show as headings only)."""
    lines = [f"# {line}" for line in header]
    for heading, commands in sections:
        lines += ["", f"# == {heading}"]
        if not commands:
            lines.append("# (no new Slurm command)")
        for command in commands:
            notes = [f"only if {command.only_if}"] * bool(command.only_if)
            notes += [f"launched by {command.launched_by}"] * bool(command.launched_by)
            lines.append(f"# {command.purpose}" + "".join(f" ({note})" for note in notes))
            lines.append(command.shell())
    return "\n".join(lines) + "\n"
