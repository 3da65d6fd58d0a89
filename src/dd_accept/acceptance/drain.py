"""The drain scenario: stopping endpoints with real `scancel` and through the SUT's cleanup.

  A scancel_step — streams in flight, the endpoint step gets `scancel --signal=TERM JOB.STEP`
  B allowance    — a stream longer than the drain window; TERM, then KILL once the allowance
                   has passed (the controller's escalation, done here by the harness)
  C sut_cleanup  — the SUT's own cleanup stops the endpoint at normal completion, after a
                   failure, and on controller cancellation (`sut_cleanup_drill.sh`)
  D sut_escalation — the same drill with a stream longer than the allowance: the cleanup
                   forces the endpoint at its allowance, not before, and not never
Replicas stay up throughout: only the endpoint is stopped, as in production shutdown order.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dd_accept import deployment
from dd_accept.acceptance import drain_checks as checks
from dd_accept.acceptance.declaration import Scenario
from dd_accept.acceptance.drain_stop import (
    RECORD_WAIT_S,
    LauncherEnd,
    delivered_at,
    endpoint_end,
    plan_endpoint_stop,
    stop_endpoint_step,
)
from dd_accept.acceptance.phases import (
    DeployedRun,
    Phase,
    deploy_proxy,
    plan_proxy,
    stopping,
)
from dd_accept.acceptance.plan import JOB, NODE, PlannedCommand, Planner
from dd_accept.base.drain_outcomes import MARKS
from dd_accept.base.errors import ClusterError, SutBehaviourMissing
from dd_accept.base.events import ClientRequest, Event, UpstreamAttempt, of_type
from dd_accept.base.waiting import WaitTimeout, wait_for_finding, wait_until
from dd_accept.deployment.placement import StepLaunch
from dd_accept.slurm_docker.allocation import (
    Allocation,
    BackgroundCommand,
    start_background,
)
from dd_accept.slurm_docker.layout import NodeLayout
from dd_accept.slurm_docker.step_exit import SACCT
from dd_accept.sut.profile import SutProfile
from dd_accept.sut.runtime_manifest import ENDPOINT_STEP_ID, endpoint_manifest

DRILL = "sut_cleanup_drill.sh"
MANIFEST = "runtime-manifest.json"  # in the drill's state directory; the drill names it to the SUT
DRILL_READY_S = 30.0  # for the drill to launch the endpoint through the SUT's register function and find its step
CLEANUP_RETURN_S = 30.0  # beyond the allowance, for the SUT's stop function to return
ESCALATION_MODE = "completion"  # the controller's exit whose stop meets a stream longer than the allowance


@dataclass(frozen=True, slots=True)
class DrainOptions:
    replicas: int = 2
    streams: int = 4
    itl_ms: int = 50
    short_tokens: int = 80  # 4 s streams: well inside the drain window
    # The cleanup drills' streams: 9 s, stopped 1 s in, so about 8 s of each are left at TERM,
    # inside the window: a cleanup that KILLs any earlier than that (before its allowance) cuts
    # them. With 4 s streams, a KILL 5 s after TERM found the endpoint gone and passed.
    drill_tokens: int = 180
    long_tokens: int = 400  # 20 s streams: longer than the drain window and the allowance
    stop_after_s: float = 1.0
    seed: int = 0


# A stop's streams: how many, and how many tokens each, from the options.
Streams = tuple[Callable[[DrainOptions], int], Callable[[DrainOptions], int]]


def _client(
    allocation: Allocation,
    proxy: deployment.Proxy,
    run: deployment.RunDirectory,
    profile: SutProfile,
    name: str,
    streams: int,
    tokens: int,
) -> BackgroundCommand:
    load = _load(streams, tokens)
    return deployment.run_client(allocation, proxy, run, mode="raw", profile=profile, name=name, **load)


def _load(streams: int, tokens: int) -> dict[str, int]:
    """Streams all in flight at once, each tried once: a cut stream must show as cut (the
    run's and the plan's keywords)."""
    return {"records": streams, "concurrency": streams, "max_tokens": tokens, "max_record_attempts": 1,
            "deadline_s": 60}  # fmt: skip


def _mark(
    run: deployment.RunDirectory, phase: str, profile: SutProfile, stop_at: float, forced_at: float | None = None
) -> None:
    _, path = run.path(MARKS)
    drain = profile.drain
    row = {"phase": phase, "stop_at": stop_at, "forced_at": forced_at}
    row |= {"window_s": drain.window_seconds, "allowance_s": drain.allowance_seconds}
    with open(path, "a") as handle:
        handle.write(json.dumps(row) + "\n")


@dataclass
class DrainRun(DeployedRun):
    """One drain run's state, handed from phase to phase: each stop (A, B) deploys its own
    endpoint, gets streams under way, stops the endpoint and judges what the streams saw."""

    options: DrainOptions
    client: BackgroundCommand | None = None
    stop_at: float = 0.0
    forced_at: float | None = None
    end: checks.StepEnd | None = None


def _replicas(o: DrainOptions) -> dict[str, Any]:
    """How the replicas are started (the run's and the plan's keywords). Stream lengths are
    the drain checks' measuring stick (a 20 s stream against a 10 s window, 4 s streams that
    fit in it): they must be as long as asked, not lognormal."""
    return {"seed": o.seed, "options": ("--ttft-ms", "20", "--itl-ms", str(o.itl_ms)), "exact": True}


def _deploy_replicas(s: DrainRun) -> None:
    o = s.options
    s.replicas = deployment.start_replicas(s.allocation, o.replicas, run=s.run, profile=s.profile, **_replicas(o))


def _plan_replicas(p: Planner) -> list[PlannedCommand]:
    o = p.options
    purpose = f"{o.replicas} synthetic replicas, one task each, exact stream lengths"
    return [p.replicas(purpose, o.replicas, **_replicas(o))]


def _plan_streams(name: str, count: Callable[[DrainOptions], int], tokens: Callable[[DrainOptions], int]):
    def plan(p: Planner) -> list[PlannedCommand]:
        streams = count(p.options)
        purpose = f"{streams} stream(s) of {tokens(p.options)} tokens through the proxy, all in flight"
        return [p.client(purpose, name, mode="raw", **_load(streams, tokens(p.options)))]

    return plan


def _streams(name: str, count: Callable[[DrainOptions], int], tokens: Callable[[DrainOptions], int]):
    def drive(s: DrainRun) -> None:
        replicas, proxy = s.deployed
        streams = count(s.options)
        s.client = _client(s.allocation, proxy, s.run, s.profile, name, streams, tokens(s.options))
        replicas.wait_running(streams)
        time.sleep(s.options.stop_after_s)  # let the streams get under way: work is left when the stop begins

    return drive


def _stop_endpoint(name: str, mark_forced: bool, behaviour: str):
    def stop(s: DrainRun) -> None:
        s.stop_at, s.forced_at, s.end = stop_endpoint_step(s.allocation, s.deployed[1], s.profile, behaviour)
        _mark(s.run, name, s.profile, s.stop_at, s.forced_at if mark_forced else None)

    return stop


def _judged_streams(s: DrainRun, name: str) -> tuple[list[Event], checks.StepEnd]:
    """What the client saw once it ended, and how the endpoint ended."""
    assert s.client is not None and s.end is not None, "the stop phase ran first"
    s.client.wait(timeout=60)
    return deployment.read_events(s.run, name), s.end


def _judge_scancel(s: DrainRun) -> None:
    streams, end = _judged_streams(s, "scancel")
    left = s.allocation.steps_left("proxy")
    upstream = replica_records(s.replicas, streams)
    drain = s.profile.drain
    judged = checks.scancel_step(streams, upstream, s.stop_at, end, left, drain.window_seconds, drain.allowance_seconds)
    checks.judged_on_one_term(s.result, judged, end)


def _judge_allowance(s: DrainRun) -> None:
    (streams, end), drain = _judged_streams(s, "allowance"), s.profile.drain
    upstream = replica_records(s.replicas, streams)
    judged = checks.allowance(
        streams, upstream, s.stop_at, s.forced_at, drain.window_seconds, drain.allowance_seconds, end
    )
    checks.judged_on_one_term(s.result, judged, end)


def replica_records(replicas: deployment.ReplicaSet | None, streams: list[Event]) -> list[UpstreamAttempt]:
    """What the replicas served, once each has written its record of every stream the client
    saw end with [DONE] (a record follows its response by a moment; 5 s at most are waited,
    then what is there is judged)."""
    assert replicas is not None, "the replicas are deployed first"
    wanted = {e.request_id for e in of_type(streams, ClientRequest) if e.done and e.request_id}
    found = wait_for_finding(
        replicas.events,
        lambda rows: wanted <= {row.request_id for row in rows},
        timeout=5,
        what="the replicas' records of the streams",
    )
    return replicas.events() if found is None else found


def _sut_cleanup(mode: str):
    def drill(s: DrainRun) -> None:
        seen = _cleanup_drill(s, mode, mode, *(f(s.options) for f in DRILLED))
        judged = checks.sut_cleanup(
            mode, seen.streams, replica_records(s.replicas, seen.streams), seen.stop_at, seen.end, seen.cleanup,
            s.profile.drain.allowance_seconds, seen.steps_left, seen.killed_after_s, s.profile.drain.window_seconds,
            seen.returned_after_s,
        )  # fmt: skip
        checks.judged_on_one_term(s.result, judged, seen.end)

    return drill


def _sut_escalation(s: DrainRun) -> None:
    seen = _cleanup_drill(s, ESCALATION_MODE, "escalation", *(f(s.options) for f in LONG))
    judged = checks.sut_escalation(
        seen.streams, seen.stop_at, seen.end, seen.cleanup, s.profile.drain.allowance_seconds, seen.steps_left,
        seen.killed_after_s, seen.returned_after_s, seen.term_after_s,
    )  # fmt: skip
    checks.judged_on_one_term(s.result, judged, seen.end)


@dataclass(frozen=True, slots=True)
class DrillSeen:
    """What a cleanup drill saw: the client's streams, the stop's moment, how the endpoint
    ended, the controller's stop function and exit, the endpoint's steps still running, and
    when (from the stop) a KILL reached the endpoint and the stop function returned."""

    streams: list[Event]
    stop_at: float
    end: checks.StepEnd
    cleanup: dict[str, Any]
    steps_left: list[str]
    killed_after_s: float | None
    returned_after_s: float | None
    term_after_s: float = 0.0  # the first TERM's delivery to the endpoint's step (0: not recorded)


def _drilled_endpoint(
    profile: SutProfile, layout: NodeLayout, backends: list[tuple[str, int]], node: str, log: str
) -> StepLaunch:
    """The endpoint the SUT's controller functions launch in a cleanup drill: its proxy."""
    return deployment.proxy_launch(profile, layout, backends, node, log, name=ENDPOINT_STEP_ID)


def _drill_argv(profile: SutProfile, layout: NodeLayout, mode: str, state: str, srun: list[str]) -> list[str]:
    """The drill on the controller's host: the SUT's cleanup script sourced, the endpoint
    launched through the SUT's own launch path where its profile names one (from the runtime
    manifest in `state`), else with `srun` and the register function, then stopped through
    its stop function (`mode`)."""
    cleanup = profile.cleanup
    paths = (cleanup.script, cleanup.launch_script)
    script, launch = (path.format(site_packages=layout.site_packages) for path in paths)
    functions = [cleanup.register_function, cleanup.stop_function]
    manifest = f"{cleanup.manifest_variable}={state}/{MANIFEST}" if launch else ""
    launched = [launch, cleanup.launch_function, manifest]
    return ["bash", layout.drill(DRILL), mode, script, *functions, state, *launched, "--", *([] if launch else srun)]


def _write_manifest(profile: SutProfile, state: Path, endpoint: StepLaunch, node: str, log: str) -> None:
    """The runtime manifest the SUT's launch path starts the endpoint from (none without one)."""
    if profile.cleanup.launch_function:
        state.mkdir(parents=True, exist_ok=True)
        text = endpoint_manifest(endpoint.argv, node, stdout_path=f"{log}.stdout", stderr_path=log)
        (state / MANIFEST).write_text(text)


def _plan_cleanup(mode: str, label: str, streams: Streams | None = None) -> Callable[[Planner], list[PlannedCommand]]:
    def plan(p: Planner) -> list[PlannedCommand]:
        o, layout, run = p.options, p.target.layout, p.run_path()
        backends = [(NODE, deployment.REPLICA_PORT_BASE + index) for index in range(o.replicas)]
        endpoint = _drilled_endpoint(p.profile, layout, backends, NODE, f"{run}/drill-{label}-endpoint.log")
        inner = p.srun("", endpoint.argv, endpoint.options).argv
        drill = PlannedCommand(
            f"the SUT's controller functions launch the endpoint, then stop it ({label}); on the controller's host",
            _drill_argv(p.profile, layout, mode, f"{run}/drill-{label}", inner),
            {"SLURM_JOB_ID": JOB},
        )
        return [drill, *_plan_streams(f"cleanup-{label}", *(streams or DRILLED))(p)]

    return plan


SHORT = (lambda o: o.streams, lambda o: o.short_tokens)  # streams that fit in the drain window
LONG = (lambda o: 1, lambda o: o.long_tokens)  # one stream longer than the window and the allowance
DRILLED = (lambda o: o.streams, lambda o: o.drill_tokens)  # about 8 s left at TERM: inside the window


def _harness_stop(
    segment: str,
    drive: str,
    streams: Streams,
    stop: str,
    judge: tuple[str, Callable[[DrainRun], None], str],
    *,
    forced: bool,
    fault: str = "",
) -> tuple[Phase[DrainRun], ...]:
    """A stop the harness makes (A, B): its own endpoint deployed, streams under way, the
    endpoint's step stopped, what the streams saw judged by `judge` (title, act, check id).
    `forced`: the stop's KILL is marked on the drain chart (the allowance's is by design)."""
    title, act, check_id = judge
    return (
        Phase("deploy", f"{segment}: deploying the SUT's proxy", deploy_proxy, plan_proxy, segments=(segment,)),
        Phase("drive", f"{segment}: {drive}", _streams(segment, *streams), _plan_streams(segment, *streams),
              fault=fault, segments=(segment,)),
        Phase("stop", stop, _stop_endpoint(segment, mark_forced=forced, behaviour=check_id.removeprefix("drain.")),
              plan_endpoint_stop, segments=(segment,)),
        Phase("judge", f"{segment}: {title}", act, judges=(check_id,), segments=(segment,)),
    )  # fmt: skip


PHASES: tuple[Phase[DrainRun], ...] = (
    Phase("deploy", "deploying replicas", _deploy_replicas, _plan_replicas,
          numbers=lambda s: {"replicas": s.options.replicas}),
    # -- A: scancel --signal=TERM JOB.STEP with short streams in flight
    *_harness_stop("scancel", "streams under way", SHORT, "scancel TERM to the endpoint step",
                   ("what the streams saw", _judge_scancel, "drain.scancel_step"), forced=False),
    # -- B: a stream longer than the window and the allowance
    *_harness_stop("allowance", "one stream longer than the allowance", LONG,
                   "allowance: TERM, then KILL after the allowance",
                   ("what the stream saw", _judge_allowance, "drain.allowance"), forced=True,
                   fault="a stream longer than the drain allowance: forced by design"),
    # -- C: the SUT's own cleanup stops an endpoint it launched (deploy, drive, stop, judge in one)
    *(Phase("stop", f"SUT cleanup: {mode}", _sut_cleanup(mode), _plan_cleanup(mode, mode),
            judges=(f"drain.sut_cleanup.{mode}",), segments=(f"cleanup-{mode}",)) for mode in checks.CLEANUP_MODES),
    # -- D: the SUT's own cleanup with a stream longer than the allowance: it must force, then and not before
    Phase("stop", "SUT cleanup: a stream longer than the allowance", _sut_escalation,
          _plan_cleanup(ESCALATION_MODE, "escalation", LONG), judges=("drain.sut_escalation",),
          segments=("cleanup-escalation",), fault="a stream longer than the drain allowance: forced by design"),
    stopping("replicas"),
)  # fmt: skip


def _cleanup_drill(s: DrainRun, mode: str, label: str, count: int, tokens: int) -> DrillSeen:
    """The SUT's controller functions launch the endpoint, `count` streams of `tokens` get
    under way through it, and its stop function stops it by way of `mode` (the controller's
    exit); `label` names the drill's files and its streams' segment (`cleanup-LABEL`)."""
    allocation, replicas, run, profile, options = s.allocation, s.replicas, s.run, s.profile, s.options
    assert replicas is not None, "the replicas are deployed first"
    layout = allocation.cluster.layout
    state_cluster, state_host = run.path(f"drill-{label}")
    log_cluster, log_host = run.path(f"drill-{label}-endpoint.log")
    node = allocation.first_node
    endpoint = _drilled_endpoint(profile, layout, replicas.backends, node, log_cluster)
    srun = allocation.srun_argv(endpoint.argv, endpoint.options)
    _write_manifest(profile, state_host, endpoint, node, log_cluster)
    drill = start_background(
        allocation.cluster,
        _drill_argv(profile, layout, mode, state_cluster, srun),
        environment={"SLURM_JOB_ID": allocation.job_id},
    )
    argv, cleanup = endpoint.argv, profile.cleanup
    script = cleanup.script.format(site_packages=layout.site_packages)
    allocation.background.append(drill)
    behaviour = f"sut_cleanup.{mode}" if label == mode else f"sut_{label}"
    _drill_ready(drill, state_host, f"{Path(script).name} sources and its {cleanup.register_function} returns",
                 behaviour)  # fmt: skip
    proxy = deployment.Proxy(allocation, drill, node, deployment.PROXY_PORT, argv, log_cluster, log_host)
    try:
        wait_until(lambda: proxy.get("/health").get("status"), lambda s: s == 200, timeout=30, what="drilled endpoint")
    except WaitTimeout as error:
        raise SutBehaviourMissing(
            deployment.ENDPOINT_STARTS,
            "the endpoint launched under the SUT's own controller functions answers /health 200 within 30s",
            f"{error}; endpoint log: {proxy.log_tail(5) or 'empty'}",
        ) from error
    client = _client(allocation, proxy, run, profile, f"cleanup-{label}", count, tokens)
    replicas.wait_running(count)
    time.sleep(options.stop_after_s)
    stop_at = time.time()  # replaced by the controller's own mark once it has written one
    go = drill.signal("TERM") if mode == "cancel" else allocation.cluster.exec(["touch", f"{state_cluster}/go"])
    if not go.ok:
        raise ClusterError(f"the drill's stop could not be started: {go.describe()}")
    returns_s = profile.drain.allowance_seconds + CLEANUP_RETURN_S
    try:
        record = drill.wait(timeout=returns_s)
    except TimeoutError:
        if (state_host / "cleanup-status").exists():  # the stop function returned: the drill's own wait is slow
            raise ClusterError(f"the cleanup drill did not end {returns_s:g}s after its stop") from None
        raise SutBehaviourMissing(
            behaviour,
            f"{cleanup.stop_function} returns once the endpoint is stopped, forced after the "
            f"{profile.drain.allowance_seconds:g}s allowance at the latest",
            f"it had not returned {returns_s:g}s after the stop began; endpoint log: {proxy.log_tail(5) or 'empty'}",
        ) from None
    stop_at = _node_mark(state_host / "stop-started", stop_at)
    returned_at = _node_mark(state_host / "cleanup-returned", 0.0)
    _mark(run, f"cleanup-{label}", profile, stop_at)
    client.wait(timeout=60)
    step = _drilled_step(state_host)
    steps_left = allocation.steps_left(ENDPOINT_STEP_ID) if step is None else allocation.step_left(step)
    status, ended = _node_status(state_host / "launcher-status"), _node_mark(state_host / "launcher-ended", 0.0)
    launcher = LauncherEnd(status, ended, may_be_signalled=True) if status is not None and ended else None
    end = endpoint_end(allocation, step, node, stop_at, launcher, RECORD_WAIT_S, proxy.log_tail(200))
    # an endpoint that died by KILL has its KILL's line coming (a control once read "KILL never"
    # beside "exit 137 after 4.5s"): waited for, so an early KILL is not missed for a read that came first
    killed_wait_s = 3.0 if end.exit_code == checks.KILLED_EXIT else 0.0
    killed_at = None if step is None else delivered_at(allocation, step, node, signal.SIGKILL, killed_wait_s)
    term_after = 0.0  # when the first TERM reached the endpoint's step, from the stop (0: not recorded)
    if step is not None:  # the SUT's own scancel: the node's log says how many TERMs came (a login node: the queue)
        deliveries = allocation.cluster.signals_sent(step, node, signal.SIGTERM)
        end = checks.cleanup_stop(end, deliveries, deliveries is None and allocation.later_job_pending())
        term_after = max(0.0, deliveries[0] - stop_at) if deliveries else 0.0
    details = {"function": cleanup.stop_function, "script": Path(script).name, "exit": record.exit_code}
    streams = deployment.read_events(run, f"cleanup-{label}")
    killed_after = None if killed_at is None else max(0.0, killed_at - stop_at)
    returned_after = _returned_after(returned_at, stop_at, end)
    return DrillSeen(streams, stop_at, end, details, steps_left, killed_after, returned_after, term_after)


def _returned_after(returned_at: float, stop_at: float, end: checks.StepEnd) -> float | None:
    """When the SUT's stop function returned, from the stop, where the endpoint's end is known
    to a fraction of a second on a clock the drill's shares (the node's record, the launcher's
    end); None (not judged) for an unknown end or sacct's whole seconds on another host."""
    if not returned_at or end.exit_code is None or end.source == SACCT:
        return None
    return returned_at - stop_at


def _drill_ready(drill: BackgroundCommand, state: Path, launches: str, behaviour: str) -> None:
    """Wait for the drill to launch the endpoint through the SUT's register function and look
    up its step. What the SUT's script did is the SUT's (`behaviour` fails, exit 1): it did not
    source, or its register function ended the drill or never returned (the drill writes
    `launcher-pid` as it returns). After that, the drill and Slurm are dd-accept's (exit 2)."""
    try:
        wait_until(lambda: (state / "ready").exists() or drill.finished, bool, timeout=DRILL_READY_S,
                   what="the drill to launch the endpoint")  # fmt: skip
    except WaitTimeout as error:
        _harness_error(state)
        if (state / "launcher-pid").exists():
            raise ClusterError(f"the drill did not find the endpoint's step: {error}") from error
        raise SutBehaviourMissing(behaviour, f"{launches} within {DRILL_READY_S:g}s", str(error)) from error
    if drill.finished:
        _harness_error(state)
        ended = f"the controller ended first: {drill.wait(1).describe()}"
        if (state / "launcher-pid").exists():
            raise ClusterError(f"the cleanup drill ended after launching the endpoint: {ended}")
        raise SutBehaviourMissing(behaviour, launches, ended)


def _harness_error(state: Path) -> None:
    """The drill's own failure before the SUT's functions ran (squeue, the launched step not
    found, a tool the manifest needs), as the drill named it: the harness's (exit 2)."""
    if (state / "harness-error").exists():
        raise ClusterError(f"the cleanup drill: {(state / 'harness-error').read_text().strip()}")


def _node_mark(path: Path, fallback: float) -> float:
    """The controller's own timestamp of when its stop began (written on the node)."""
    try:
        return float(path.read_text().strip())
    except (OSError, ValueError):
        return fallback


def _node_status(path: Path) -> int | None:
    """An exit status the drill wrote on the node; None when it wrote none."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _drilled_step(state: Path) -> str | None:
    """The endpoint's JOB.STEP, as the drill recorded it for a step-aware cleanup."""
    for path in (state / "identities").glob("*"):
        step = path.read_text().strip()
        if step:
            return step
    return None


SCENARIO = Scenario(
    "drain",
    "graceful drain with real srun and scancel, and the SUT's own cleanup",
    DrainOptions,
    PHASES,
    DrainRun,
)
run_drain = SCENARIO.run
