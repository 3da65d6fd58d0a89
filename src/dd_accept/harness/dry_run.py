"""`dd-accept run SCENARIO --dry-run`: print the plan, start nothing, touch no engine.

Every scenario's phases declare the Slurm commands they submit (`Phase.commands`); the plan
walks them with the scenario's own options (`options_from`, as its run builds them), each
scenario in its own allocation, in the order `run` would take them. The SUT's profile
decides the proxy's command line and the middleware, so it is needed; it comes from
`--profile`, or from the built-in profiles by the SUT's pinned name and version (a
requirement `name==version`, or the file names of a wheel or a directory of wheels: the
wheel a built-in profile names decides). Nothing is fetched. The values of `--client-header`
are not printed: they may be secrets.
"""

from __future__ import annotations

from pathlib import Path

from packaging.requirements import Requirement

from dd_accept.acceptance.phases import plan_phases
from dd_accept.acceptance.plan import JOB, PlannedCommand, Planner, PlanTarget, render
from dd_accept.acceptance.request import RunRequest
from dd_accept.acceptance.scenarios import BY_NAME
from dd_accept.base.errors import EXIT_PASS, UsageError
from dd_accept.deployment import SCENARIO_ALLOCATION, scenario_job_name
from dd_accept.deployment.backends.vllm import vllm_backend
from dd_accept.slurm_docker.allocation import salloc_argv, scancel_argv
from dd_accept.slurm_docker.layout import NodeLayout, docker_layout
from dd_accept.slurm_docker.spec import SLURMD_TIMEOUT_S
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


def _layout(request: RunRequest) -> tuple[NodeLayout, str]:
    """Where the SUT is installed on the nodes, and where a run writes (placeholders for
    what a run makes: the install digest, the run's id)."""
    cluster = request.cluster
    if cluster.mode != "existing":
        return docker_layout(cluster.release), "/shared/runs/run-<id>"
    if not cluster.run_dir or not Path(cluster.run_dir).is_absolute():
        raise UsageError("--cluster existing needs --run-dir DIR, an absolute path every node shares")
    base = f"{cluster.run_dir.rstrip('/')}/dd-accept-sut/<sut-and-harness-digest>"
    layout = NodeLayout(venv=f"{base}/venv", harness_dir=f"{base}/harness", sut_only=f"{base}/sut-only")
    return layout, f"{cluster.run_dir.rstrip('/')}/runs/run-<id>"


def _unshown_headers(headers: tuple[str, ...]) -> tuple[str, ...]:
    """Each header the client would send, its value left out of the plan."""
    return tuple(f"{header.partition(':')[0].strip()}: <value given>" for header in headers)


def print_plan(request: RunRequest) -> int:
    names = request.scenarios()  # the run's own validation: unknown names, vLLM beyond overload, ...
    spec = SutSpec.parse(request.sut)
    profile, chosen = _profile(spec, request.profile)
    layout, run_dir = _layout(request)
    cluster = request.cluster
    slurmd_timeout = None if cluster.mode == "existing" else SLURMD_TIMEOUT_S
    target = PlanTarget(layout, cluster.salloc_args(), cluster.srun_args, cluster.time, slurmd_timeout)
    backend = vllm_backend(request.backend)
    inputs = request.inputs(_unshown_headers(request.general.client_headers))
    sections: list[tuple[str, list[PlannedCommand]]] = []
    for name in names:
        declared = BY_NAME[name]
        planner = Planner(target, profile, declared.options_from(inputs), run_dir, backend)
        allocate = PlannedCommand(
            "hold one whole node for the replicas, the proxy and the client",
            salloc_argv(target, nodes=1, job_name=scenario_job_name(name), extra=SCENARIO_ALLOCATION),
        )
        scenario = [("allocate", [allocate])]
        planned = plan_phases(declared.phases, planner, inputs.checks)
        scenario += [(f"{p.kind}: {p.title}", commands) for p, commands in planned]
        scenario.append(("release", [PlannedCommand("release the allocation", scancel_argv(JOB))]))
        sections += [(f"{name}: {heading}" if len(names) > 1 else heading, c) for heading, c in scenario]
    replicas = f"vLLM ({backend.model}, {backend.gpus_per_replica} GPU(s) each)" if backend else "synthetic"
    where = "an existing" if cluster.mode == "existing" else "a docker"
    header = [
        f"dd-accept dry run: {', '.join(names)} against {spec.display} ({chosen})",
        f"{replicas} replicas on {where} Slurm cluster, one allocation per scenario; nothing below has been run",
        "$JOB, $NODE and the step ids are known once salloc answers; the token and the canary are made per run",
    ]
    if request.checks is not None:
        header.append(f"only the phases the checks {', '.join(request.checks)} need")
    print(render(header, sections), end="")
    return EXIT_PASS
