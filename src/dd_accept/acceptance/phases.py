"""A scenario's phases, declared once: the run walks the declaration, and so does the plan.

A phase says what kind of step it is (deploy, hold, drive, relieve, stop, judge), what it
does to a live cluster (`act`) and which Slurm commands it submits (`commands`, what
`--dry-run` prints). The run and the dry-run plan both iterate the same tuple, so a phase
added to a scenario shows up in its plan; one that starts a step without declaring it fails
the test comparing a dry run with a real run's command records (both ways). Before this, the
planner re-walked the scenario by hand and had already missed one step (the replica at the
SUT's default threshold).

Teardown phases (`teardown=True`, such as stopping the proxy and the replicas) run last,
always, in order, also after a failure; a stop that *is* the behaviour under test (drain's
`scancel` of the endpoint) is an ordinary phase. Every phase's start and end go into the
scenario's result, so the evidence shows when each one ran.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from dd_accept.acceptance.plan import BackendKind, PlannedCommand, Planner, backend_kind_of
from dd_accept.acceptance.serving import serving_block
from dd_accept.base import check_selection
from dd_accept.base.errors import SutBehaviourMissing, UsageError
from dd_accept.base.progress import ProgressWriter
from dd_accept.base.results import CheckResult, PhaseRecord, ScenarioResult
from dd_accept.deployment import Proxy, ReplicaSet, RunDirectory, run_directory, start_proxy
from dd_accept.deployment.backends.vllm import VllmBackend
from dd_accept.slurm_docker.allocation import Allocation, scancel_argv
from dd_accept.sut.profile import SutProfile

PhaseKind = Literal["deploy", "hold", "drive", "relieve", "stop", "judge"]
PHASE_KINDS: tuple[PhaseKind, ...] = ("deploy", "hold", "drive", "relieve", "stop", "judge")
EVERY_BACKEND: frozenset[BackendKind] = frozenset({"synthetic", "vllm"})


@dataclass
class ScenarioRun:
    """What every scenario's run state holds (what `scenario_runner` hands it); each
    scenario's state class adds what its phases pass on to each other."""

    allocation: Allocation
    run: RunDirectory
    profile: SutProfile
    options: Any  # the scenario's own options model
    progress: ProgressWriter
    result: ScenarioResult
    backend: VllmBackend | None = None  # None: synthetic replicas (vLLM: overload only)
    # how many run directories this process had made when the scenario began: those made
    # after it are its phases' sub-runs (deployment.run_directory.created_since)
    run_directories_before: int = field(default_factory=lambda: len(run_directory.CREATED))

    @property
    def backend_kind(self) -> BackendKind:
        return backend_kind_of(self.backend)


@dataclass
class DeployedRun(ScenarioRun):
    """A scenario that deploys replicas and the SUT's proxy in front of them, once each
    (overload, drain, streaming); its later phases need both."""

    replicas: ReplicaSet | None = None
    proxy: Proxy | None = None

    @property
    def deployed(self) -> tuple[ReplicaSet, Proxy]:
        assert self.replicas is not None and self.proxy is not None, "deploy phases run first"
        return self.replicas, self.proxy


def deploy_proxy(state: DeployedRun) -> None:
    """The SUT's proxy in front of the deployed replicas, with the profile's own settings."""
    assert state.replicas is not None, "the replicas are deployed first"
    state.proxy = start_proxy(state.allocation, state.replicas, profile=state.profile)


def plan_proxy(planner: Planner) -> list[PlannedCommand]:
    """What `deploy_proxy` submits: the proxy in front of the scenario's replicas."""
    return [planner.proxy("the SUT's proxy in front of every replica", planner.options.replicas)]


def plan_stop(part: str) -> Callable[[Planner], list[PlannedCommand]]:
    """What stopping a deployed part submits (`stop_if_started`): TERM to its step, not its srun."""
    purpose = f"stop the {part}: TERM to its step (not its srun)"
    return lambda planner: [PlannedCommand(purpose, scancel_argv(f"${part.upper()}_STEP", "TERM"))]


S = TypeVar("S", bound=ScenarioRun)


def _no_commands(planner: Planner) -> list[PlannedCommand]:
    return []


def _no_numbers(state: Any) -> dict[str, Any]:
    return {}


def _always(state: Any) -> bool:
    return True


@dataclass(frozen=True, slots=True)
class Phase(Generic[S]):
    kind: PhaseKind
    title: str  # the progress line and the plan's heading
    act: Callable[[S], object]
    commands: Callable[[Planner], list[PlannedCommand]] = _no_commands
    backends: frozenset[BackendKind] = EVERY_BACKEND  # where it applies (vLLM has no control plane)
    numbers: Callable[[S], dict[str, Any]] = _no_numbers  # for the progress line
    teardown: bool = False  # runs last and always, also after a failure
    # Whether it can run against this run's cluster (losing a node: only dd-accept's own);
    # one that cannot is left out of the run, and its checks with it.
    applies: Callable[[S], bool] = _always
    # The fault it puts on the SUT's surroundings by design, in words ("" for none): its serving
    # metrics are marked with it, and a gate's demands on serving metrics leave it out (a stalled
    # replica's TTFT is the point of its phase, not the release's latency).
    fault: str = ""
    # The checks it judges, by id: what `--check` reads to run only the phases a chosen check
    # needs. A run refuses a phase that judges a check it does not declare (a harness fault).
    judges: tuple[str, ...] = ()
    # The parts of the scenario that stand alone it belongs to (none: it serves every part):
    # nothing outside a part's phases reads what they leave, so a phase is left out when no
    # part of it judges a chosen check (drain's three cleanup drills, each deploying and
    # stopping its own endpoint; health's healthy attempt, the baseline of two parts).
    segments: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in PHASE_KINDS:
            raise ValueError(f"phase {self.title!r}: kind {self.kind!r} is not one of {', '.join(PHASE_KINDS)}")


def stopping(part: str) -> Phase[Any]:
    """The teardown phase that stops a deployed part (`stop_if_started`), and what it submits."""
    return Phase("stop", f"stopping the {part}", stop_if_started(part), plan_stop(part), teardown=True)


# `run_<name>(allocation, run, profile, options, progress, *, checks=None, **extra)`, as
# `scenario_runner` makes it.
ScenarioRunner = Callable[..., ScenarioResult]


def scenario_runner(name: str, phases: Sequence[Phase[S]], state: Callable[..., S]) -> ScenarioRunner:
    """`run_<name>(allocation, run, profile, options, progress, *, checks=None, **extra)`: a
    fresh result and run state (`state` is the scenario's state class, `extra` its own
    keyword options), then its phases: all of them, or those the `checks` patterns
    (`--check`) need. Every scenario is entered the same way, written once."""

    def run_scenario(
        allocation: Any,
        run: Any,
        profile: Any,
        options: Any,
        progress: ProgressWriter,
        *,
        checks: Sequence[str] | None = None,
        **extra: Any,
    ) -> ScenarioResult:
        result = ScenarioResult(name, started=time.time(), selected=selected_checks(phases, checks))
        try:
            return run_phases(phases, state(allocation, run, profile, options, progress, result, **extra))
        except SutBehaviourMissing as missing:  # a finding about the SUT: a failed check, exit 1
            # kept whatever the selection: it is why the chosen checks were not judged
            result.checks.append(CheckResult.judge(f"{name}.{missing.behaviour}", False, missing.expected,
                                                   missing.observed))  # fmt: skip
            return result

    run_scenario.__name__ = run_scenario.__qualname__ = f"run_{name}"
    return run_scenario


def stop_if_started(attribute: str) -> Callable[[Any], None]:
    """A teardown act: stop what a deploy phase put in `state.<attribute>` (the proxy, the
    replicas), if the run got that far."""

    def stop(state: Any) -> None:
        started = getattr(state, attribute)
        if started is not None:
            started.stop()

    return stop


def declared_checks(phases: Sequence[Phase[Any]]) -> tuple[str, ...]:
    """Every check a scenario's phases judge, in the order they judge them."""
    return tuple(check_id for phase in phases for check_id in phase.judges)


def selected_checks(phases: Sequence[Phase[Any]], patterns: Sequence[str] | None) -> tuple[str, ...] | None:
    """The checks `patterns` choose of a scenario's (None: no selection, every check). A
    pattern that chooses none of them is a usage error: a run that judges nothing is no run."""
    if patterns is None:
        return None
    declared = declared_checks(phases)
    picked = check_selection.chosen(patterns, declared)
    if not picked:
        raise UsageError(f"--check {', '.join(patterns)} chooses none of this scenario's checks")
    return picked


def chosen_phases(phases: Sequence[Phase[S]], checks: Collection[str] | None) -> list[Phase[S]]:
    """The phases a run of the `checks` needs (all, for None), in order: each phase up to the
    last one that judges a chosen check, but those of parts that stand alone and judge none
    of them, and the teardown phases always. What a chosen check's judge reads is made by
    exactly the phases that make it in a whole run, so its verdict is the one a whole run gives."""
    if checks is None:
        return list(phases)
    wanted = set(checks)
    judging = [index for index, phase in enumerate(phases) if wanted & set(phase.judges)]
    last = max(judging, default=-1)
    kept = {segment for index in judging for segment in phases[index].segments}
    return [
        phase
        for index, phase in enumerate(phases)
        if phase.teardown or (index <= last and (not phase.segments or kept & set(phase.segments)))
    ]


def run_phases(phases: Sequence[Phase[S]], state: S) -> ScenarioResult:
    """Every phase that applies (of those the result's chosen checks need), in order; the
    teardown phases last and always."""
    result = state.result
    work, stops = _applying(chosen_phases(phases, result.selected), state.backend_kind)
    work = [phase for phase in work if phase.applies(state)]
    failed = False
    try:
        for phase in work:
            _run(phase, state)
    except BaseException:
        failed = True
        raise
    finally:
        problems: list[Exception] = []
        for phase in stops:
            try:
                _run(phase, state)
            except Exception as error:  # the other stops still run
                problems.append(error)
        result.ended = time.time()
        if problems and not failed:  # never replace the failure that brought us here
            raise problems[0]
    faults = {phase.title: phase.fault for phase in work if phase.fault}
    result.serving = serving_block(state.run.host_path, result.phases, faults)
    state.progress.emit("done", verdict=result.verdict())
    return result


def _run(phase: Phase[S], state: S) -> None:
    state.progress.emit(phase.title, **phase.numbers(state))
    with recorded(state.result, phase.kind, phase.title):
        before = len(state.result.checks)
        phase.act(state)
        undeclared = [c.id for c in state.result.checks[before:] if c.id not in phase.judges]
        if undeclared:  # `--check` would leave this phase out for the checks it judges
            raise AssertionError(f"phase {phase.title!r} judged {', '.join(undeclared)}, which it does not declare")


@contextlib.contextmanager
def recorded(result: ScenarioResult, kind: PhaseKind, title: str) -> Iterator[PhaseRecord]:
    """A phase's start and end on the scenario's timeline, and "interrupted" if it raised:
    for each declared phase, and for the phases a scenario opens as it goes (a capacity
    run's load levels, one per level reached)."""
    record = PhaseRecord(kind, title, started=time.time())
    result.phases.append(record)
    before = len(result.checks)
    try:
        yield record
    except BaseException:
        record.outcome = "interrupted"
        raise
    finally:
        record.ended = time.time()
        record.judged = [check.id for check in result.checks[before:]]


def plan_phases(
    phases: Sequence[Phase[Any]], planner: Planner, checks: Sequence[str] | None = None
) -> list[tuple[Phase[Any], list[PlannedCommand]]]:
    """The commands each phase that applies would submit (of those the `checks` patterns
    need), in the order a run submits them."""
    work, teardown = _applying(chosen_phases(phases, selected_checks(phases, checks)), planner.backend_kind)
    return [(phase, phase.commands(planner)) for phase in work + teardown]


def _applying(phases: Sequence[Phase[S]], backend: BackendKind) -> tuple[list[Phase[S]], list[Phase[S]]]:
    """The phases that apply to `backend`, in the order a run takes them: work, then teardown."""
    chosen = [p for p in phases if backend in p.backends]
    return [p for p in chosen if not p.teardown], [p for p in chosen if p.teardown]
