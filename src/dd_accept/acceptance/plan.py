"""The overload scenario's Slurm commands, planned without running anything (`--dry-run`).

Before a site lends dd-accept GPU nodes, someone reads exactly what it will submit: every
salloc, srun and scancel with its environment. The plan is built from the same builders the
scenario uses (salloc/srun argv, replica, proxy and client command lines, step options), so
it cannot drift from what a run does; values only known at run time are placeholders
(`$JOB`, `$NODE`, `<per-run token>`).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from dd_accept.acceptance.overload import (
    DEADLINES,
    FAST_REPLICAS,
    OverloadOptions,
    client_load,
    proxy_fallback_retry_after,
)
from dd_accept.fixtures import deployment
from dd_accept.fixtures.backends.vllm import VllmBackend
from dd_accept.node.environment import TOKEN_ENV
from dd_accept.slurm_docker.allocation import salloc_argv, scancel_argv, srun_argv
from dd_accept.slurm_docker.layout import NodeLayout
from dd_accept.sut.profile import SutProfile

JOB, NODE, TOKEN = "$JOB", "$NODE", "<per-run token>"


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


def overload_plan(
    target: PlanTarget,
    profile: SutProfile,
    options: OverloadOptions,
    run_dir: str,
    backend: VllmBackend | None = None,
) -> list[PlannedCommand]:
    """Every Slurm command of one overload scenario, in the order a run issues them."""
    admission = deployment.admission_environment(profile, options.threshold, options.retry_after)
    replica_dir = f"{run_dir}/replicas"
    plan = [
        PlannedCommand(
            "hold one whole node for the replicas, the proxy and the client",
            salloc_argv(target, nodes=1, job_name="dd-overload", extra=("--exclusive",)),
        )
    ]
    backends = []
    if backend is None:
        command = deployment.replica_command(
            profile,
            replica_dir,
            python=target.layout.python,
            seed=options.seed,
            options=deployment.replica_options(FAST_REPLICAS),
        )
        step = deployment.replica_step_options(options.replicas, NODE, replica_dir)
        plan.append(
            PlannedCommand(
                f"{options.replicas} synthetic replicas, one task each, behind the SUT's queue admission",
                srun_argv(JOB, command, step, target.srun_args),
                {TOKEN_ENV: TOKEN, **admission},
            )
        )
        backends = [(NODE, deployment.REPLICA_PORT_BASE + index) for index in range(options.replicas)]
    else:
        for index in range(options.replicas):
            port = deployment.REPLICA_PORT_BASE + index
            step = backend.step_options(index, NODE, replica_dir)
            plan.append(
                PlannedCommand(
                    f"vLLM replica {index} ({backend.model}) behind the SUT's queue admission",
                    srun_argv(JOB, backend.command(target.layout, profile, port), step, target.srun_args),
                    {**admission, **backend.environment(index, replica_dir, target.layout)},
                )
            )
            backends.append((NODE, port))
    proxy = profile.proxy_argv(
        python=target.layout.python,
        site_packages=target.layout.site_packages,
        port=deployment.PROXY_PORT,
        backends=backends,
        retry_after=proxy_fallback_retry_after(options.retry_after),
    )
    plan.append(
        PlannedCommand(
            "the SUT's proxy in front of every replica",
            srun_argv(JOB, proxy, deployment.proxy_step_options(NODE, f"{run_dir}/proxy.log"), target.srun_args),
        )
    )
    endpoint = f"http://127.0.0.1:{deployment.PROXY_PORT}"
    held = {"partial": range(options.overloaded), "total": range(options.overloaded, options.replicas)}
    for name, records, purpose in (
        ("partial", options.records, f"partial overload: {options.overloaded} replica(s) held at queue depth "),
        ("total", options.recovery_records, "total overload, then recovery: every replica held at queue depth "),
    ):
        if backend is not None:  # vLLM has no control plane: real load holds its queue
            for index in held[name]:
                argv = deployment.pressure_command(
                    target.layout.python, f"http://{NODE}:{deployment.REPLICA_PORT_BASE + index}",
                    f"{run_dir}/pressure", profile, backend, index, options.queue_depth,
                )  # fmt: skip
                step = deployment.client_step_options(f"pressure-{index}", NODE)
                plan.append(
                    PlannedCommand(
                        f"pressure on replica {index}: {backend.max_num_seqs} running + {options.queue_depth} waiting",
                        srun_argv(JOB, argv, step, target.srun_args),
                    )
                )
        load = client_load(options, records, DEADLINES[name], backend.model if backend else None)
        client = deployment.load_client_argv(
            target.layout.python, endpoint, f"{run_dir}/{name}.jsonl", mode="sut", profile=profile, name=name, **load
        )
        plan.append(
            PlannedCommand(
                purpose + f"{options.queue_depth}; the SUT's client through the proxy",
                srun_argv(JOB, client, deployment.client_step_options(name, NODE), target.srun_args),
            )
        )
    if backend is not None:
        plan.append(
            PlannedCommand("lift the overload: TERM the pressure steps", scancel_argv("$PRESSURE_STEPS", "TERM"))
        )
    plan += [
        PlannedCommand("drain the proxy: TERM to its step (not its srun)", scancel_argv("$PROXY_STEP", "TERM")),
        PlannedCommand("drain the replicas the same way", scancel_argv("$REPLICA_STEPS", "TERM")),
        PlannedCommand("release the allocation", scancel_argv(JOB)),
    ]
    return plan


def render(plan: list[PlannedCommand], header: list[str]) -> str:
    lines = [f"# {line}" for line in header]
    for command in plan:
        lines += [f"# {command.purpose}", command.shell()]
    return "\n".join(lines) + "\n"
