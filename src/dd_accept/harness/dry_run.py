"""`dd-accept run overload --dry-run`: print the plan, start nothing, touch no engine.

The SUT's profile decides the proxy's command line and the middleware, so it is needed; it
comes from `--profile`, or from the built-in profiles by the SUT's pinned name and version
(a requirement `name==version`, or the file names of a wheel or a directory of wheels: the
wheel a built-in profile names decides). Nothing is fetched.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from packaging.requirements import Requirement

from dd_accept.acceptance.overload import PHASES
from dd_accept.acceptance.phases import plan_phases
from dd_accept.acceptance.plan import JOB, PlannedCommand, Planner, PlanTarget, render
from dd_accept.base.errors import EXIT_PASS, UsageError
from dd_accept.base.options import BackendOptions, ClusterOptions, OverloadOptions
from dd_accept.fixtures.backends.vllm import vllm_backend
from dd_accept.fixtures.deployment import SCENARIO_ALLOCATION, scenario_job_name
from dd_accept.slurm_docker.allocation import salloc_argv, scancel_argv
from dd_accept.slurm_docker.layout import NodeLayout, docker_layout
from dd_accept.sut.profile import SutProfile, choose_profile, load_profile, profile_for
from dd_accept.sut.spec import SutSpec


def _profile(spec: SutSpec, profile: str | None) -> tuple[SutProfile, str]:
    """The profile, and how it was chosen (as the plan's header says it)."""
    given = load_profile(Path(profile)) if profile else None
    if spec.local_wheels():
        choice = choose_profile(spec.local_wheels(), given, spec.display)
        return choice.profile, choice.describe()
    if given is not None:
        return given, f"profile {given.name} from --profile"
    if spec.kind == "requirement":
        pins = [s.version for s in Requirement(spec.value).specifier if s.operator == "=="]
        if len(pins) == 1:
            chosen = profile_for(spec.names[0], pins[0])
            return chosen, f"profile {chosen.name}"
    raise UsageError(f"--dry-run cannot tell the profile of --sut {spec.display} without fetching it; pass --profile")


def print_plan(
    args: argparse.Namespace, options: OverloadOptions, backend_options: BackendOptions, cluster: ClusterOptions
) -> int:
    if args.scenario != "overload":
        raise UsageError(f"--dry-run plans the overload scenario; got {args.scenario!r}")
    try:
        options.check_partial_overload()
    except ValueError as error:
        raise UsageError(str(error)) from None
    spec = SutSpec.parse(args.sut)
    profile, chosen = _profile(spec, args.profile)
    if cluster.mode == "existing":
        if not cluster.run_dir or not Path(cluster.run_dir).is_absolute():
            raise UsageError("--cluster existing needs --run-dir DIR, an absolute path every node shares")
        base = f"{cluster.run_dir.rstrip('/')}/dd-accept-sut/<sut-and-harness-digest>"
        layout = NodeLayout(venv=f"{base}/venv", harness_dir=f"{base}/harness", sut_only=f"{base}/sut-only")
        run_dir = f"{cluster.run_dir.rstrip('/')}/runs/run-<id>"
    else:
        layout, run_dir = docker_layout(cluster.release), "/shared/runs/run-<id>"
    target = PlanTarget(layout, cluster.salloc_args(), cluster.srun_args, cluster.time)
    backend = vllm_backend(backend_options)
    planner = Planner(target, profile, options, run_dir, backend)
    allocate = PlannedCommand(
        "hold one whole node for the replicas, the proxy and the client",
        salloc_argv(target, nodes=1, job_name=scenario_job_name("overload"), extra=SCENARIO_ALLOCATION),
    )
    sections = [("allocate", [allocate])]
    sections += [(f"{phase.kind}: {phase.title}", commands) for phase, commands in plan_phases(PHASES, planner)]
    sections.append(("release", [PlannedCommand("release the allocation", scancel_argv(JOB))]))
    replicas = f"vLLM ({backend.model}, {backend.gpus_per_replica} GPU(s) each)" if backend else "synthetic"
    header = [
        f"dd-accept dry run: overload against {spec.display} ({chosen})",
        f"{options.replicas} {replicas} replicas on a{'n existing' if cluster.mode == 'existing' else ' docker'} "
        "Slurm cluster; nothing below has been run",
        "$JOB, $NODE and the step ids are known once salloc answers; the token is made per run",
    ]
    print(render(header, sections), end="")
    return EXIT_PASS
