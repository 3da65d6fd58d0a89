"""The overload scenario: partial overload absorbed by failover, total overload answered
with 429 + Retry-After and met by client admission (AIMD decrease, cooldown), recovery.

Phases, each with its own client run so the evidence of one cannot leak into another:
  partial — K of N replicas held at queue depth D (> threshold); the SUT's real client
            drives R records through the proxy.
  total   — every replica held; the client drives records until two admission decreases
            are seen, then the overload is lifted and the same client recovers.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dd_accept import deployment
from dd_accept.acceptance import overload_admission, overload_routing, overload_unreachable
from dd_accept.acceptance import overload_checks as checks
from dd_accept.acceptance.analysis import admission, expected_decreases, requests, with_prefix
from dd_accept.acceptance.declaration import Scenario
from dd_accept.acceptance.overload_routing_checks import routing_restored
from dd_accept.acceptance.phases import DeployedRun, Phase, stop_if_started
from dd_accept.acceptance.plan import NODE, BackendKind, PlannedCommand, Planner
from dd_accept.acceptance.proxy_metrics import metric_value
from dd_accept.base.events import AdmissionChange, Event, of_type
from dd_accept.base.options import option
from dd_accept.base.progress import ProgressWriter
from dd_accept.base.waiting import WaitTimeout, wait_until
from dd_accept.slurm_docker.allocation import BackgroundCommand, scancel_argv


def _watch(
    command: BackgroundCommand,
    run: deployment.RunDirectory,
    name: str,
    progress: ProgressWriter,
    phase: str,
    timeout: float,
) -> list[Event]:
    """Follow a client run to its end, reporting requests, 429s and the admission limit."""
    deadline = time.monotonic() + timeout
    while not command.finished and time.monotonic() < deadline:
        events = deployment.read_events(run, name)
        _report(events, progress, phase)
        time.sleep(0.5)
    record = command.wait(timeout=max(1.0, deadline - time.monotonic()))
    events = deployment.read_events(run, name)
    _report(events, progress, phase)
    if not record.ok:
        raise RuntimeError(f"load client failed: {record.describe()}")
    return events


def _report(events: list[Event], progress: ProgressWriter, phase: str) -> None:
    made = requests(events)
    limits = [e.limit for e in of_type(events, AdmissionChange) if e.limit is not None]
    progress.emit(
        phase,
        requests=len(made),
        done=sum(1 for e in made if e.outcome == "ok"),
        rate_limited=sum(1 for e in made if e.status == 429),
        limit=limits[-1] if limits else None,
    )


@dataclass(frozen=True, slots=True)
class OverloadOptions:
    replicas: int = option(8, "synthetic replicas behind the proxy", minimum=1)
    overloaded: int | None = option(
        None, "replicas held in overload during partial overload (default: 2, at most --replicas minus 1)", minimum=1
    )
    queue_depth: int = option(
        7, "waiting requests held on each overloaded replica (the seed's acceptance ran at 7)", minimum=1
    )
    threshold: int = option(0, "queue admission threshold, the SUT's override (its own default is 128)", minimum=0)
    retry_after: int = option(3, "Retry-After seconds the replicas' queue admission sends", minimum=1)
    admission_limit: int = option(
        8, "the SUT client's initial admission limit (2 or more: a limit of 1 has nothing to decrease)", minimum=2
    )
    records: int = option(32, "records per client run", minimum=1)
    recovery_records: int = 40
    decrease_wait_s: float = 30.0  # two rounds take ~2 x Retry-After on a correct SUT
    # The load client's own deadline per phase: what a SUT that never lets a record through
    # costs the run before its checks judge what it did.
    partial_deadline_s: float = 120.0
    total_deadline_s: float = 150.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.replicas <= 64:
            raise ValueError("--replicas must be between 1 and 64")
        if self.overloaded is not None and not 1 <= self.overloaded < self.replicas:
            raise ValueError(
                "--overloaded must be at least 1 and below --replicas: partial overload needs a replica left"
            )
        if self.queue_depth <= self.threshold:
            raise ValueError("--queue-depth must be above --threshold, or nothing is overloaded")
        if self.retry_after < 1 or self.admission_limit < 2 or self.records < 1 or self.threshold < 0:
            raise ValueError("--retry-after and --records must be positive, --admission-limit >= 2, --threshold >= 0")

    @property
    def partial_overloaded(self) -> int:
        """Replicas held in partial overload: as given, else 2, leaving at least one serving
        (so `--replicas 2` alone is a valid run, and scenarios that never overload never fail
        on it). 0 only at one replica, where partial overload cannot run."""
        return self.overloaded if self.overloaded is not None else max(0, min(2, self.replicas - 1))

    def check_runnable(self) -> None:
        """For a run of the scenario (never another's): partial overload needs a replica left
        to fail over to."""
        if self.partial_overloaded < 1:
            raise ValueError("the overload scenario needs --replicas 2 or more: partial overload keeps one serving")


WATCH_MARGIN_S = 30.0  # how long past the client's own deadline dd-accept waits for it to end


def deadline(options: OverloadOptions, phase: str) -> float:
    """The load client's own deadline in a phase ("partial" or "total"), seconds."""
    return options.partial_deadline_s if phase == "partial" else options.total_deadline_s


# Synthetic replicas answer fast here: overload is about admission and retries, not speed.
FAST_REPLICAS = ("--ttft-ms", "5", "--itl-ms", "1")


@dataclass
class OverloadRun(DeployedRun):
    """One overload run's state, handed from phase to phase."""

    options: OverloadOptions
    fast: tuple[str, ...] = FAST_REPLICAS
    client: BackgroundCommand | None = None
    samples: list[deployment.AdmissionSample] = field(default_factory=list)
    relieved_at: float = 0.0
    cold_start: deployment.ColdStart | None = None  # synthetic replicas only (exact depths)
    exempt: deployment.ExemptAnswers | None = None  # the exempt paths, asked under total overload
    unreachable: overload_unreachable.UnreachableRound | None = None  # synthetic replicas only (control plane)
    client_events: dict[str, list[Event]] = field(default_factory=dict)  # by phase
    partial_retries_429: float | None = None  # the proxy's own count, where its profile names one

    @property
    def max_attempts(self) -> int:
        return self.profile.proxy.max_upstream_attempts

    def start_client(self, name: str, records: int) -> BackgroundCommand:
        """The SUT's own client through the proxy, at full admission, for one phase."""
        replicas, proxy = self.deployed
        load = client_load(self.options, records, deadline(self.options, name), replicas.model)
        self.client = deployment.run_client(
            self.allocation, proxy, self.run, mode="sut", profile=self.profile, name=name, **load
        )
        return self.client


# -- deploy -------------------------------------------------------------------------------------


def _deploy_replicas(s: OverloadRun) -> None:
    s.replicas = deployment.deploy_replicas(
        s.allocation, s.options.replicas, run=s.run, profile=s.profile, backend=s.backend,
        threshold=s.options.threshold, retry_after=s.options.retry_after, options=s.fast, seed=s.options.seed,
    )  # fmt: skip


def _fast(o: OverloadOptions) -> dict[str, Any]:
    """What every overload replica set is started with (the run's and the plan's keywords)."""
    return {"options": FAST_REPLICAS, "retry_after": o.retry_after, "seed": o.seed}


def _plan_replicas(p: Planner) -> list[PlannedCommand]:
    o, layout, replica_dir = p.options, p.target.layout, f"{p.run_dir}/replicas"
    if p.backend is None:
        purpose = f"{o.replicas} synthetic replicas, one task each, behind the SUT's queue admission"
        return [p.replicas(purpose, o.replicas, **_fast(o), threshold=o.threshold)]
    environment = deployment.admission_environment(p.profile, o.threshold, o.retry_after)
    return [
        p.srun(
            f"vLLM replica {index} ({p.backend.model}) behind the SUT's queue admission",
            p.backend.command(layout, p.profile, deployment.REPLICA_PORT_BASE + index),
            p.backend.step_options(index, NODE, replica_dir),
            {**environment, **p.backend.environment(index, replica_dir, layout)},
        )
        for index in range(o.replicas)
    ]


def _deploy_proxy(s: OverloadRun) -> None:
    # The proxy's own Retry-After (used when an upstream 429 carries none) differs from the
    # replicas' on purpose: a client seeing the replicas' value proves it was passed through.
    assert s.replicas is not None
    fallback = proxy_fallback_retry_after(s.options.retry_after)
    s.proxy = deployment.start_proxy(s.allocation, s.replicas, profile=s.profile, retry_after=fallback)


def _plan_proxy(p: Planner) -> list[PlannedCommand]:
    retry_after = proxy_fallback_retry_after(p.options.retry_after)
    return [p.proxy("the SUT's proxy in front of every replica", p.options.replicas, retry_after=retry_after)]


# -- partial overload ---------------------------------------------------------------------------


def _partial(o: OverloadOptions) -> range:
    return range(o.partial_overloaded)


def _hold_partial(s: OverloadRun) -> None:
    replicas, o = s.deployed[0], s.options
    if replicas.exact_depths:  # first: the middleware admits at the threshold itself
        s.samples.append(replicas.hold_at(_partial(o), depth=o.threshold, threshold=o.threshold))
    s.samples.append(replicas.overload(_partial(o), depth=o.queue_depth, threshold=o.threshold))


def _drive_partial(s: OverloadRun) -> None:
    proxy, metric = s.deployed[1], s.profile.proxy.retry_429_metric
    before = metric_value(proxy.get(s.profile.proxy.metrics_path).get("json"), metric)
    client = s.start_client("partial", s.options.records)
    timeout = s.options.partial_deadline_s + WATCH_MARGIN_S
    s.client_events["partial"] = _watch(client, s.run, "partial", s.progress, "partial overload", timeout=timeout)
    after = metric_value(proxy.get(s.profile.proxy.metrics_path).get("json"), metric)
    s.partial_retries_429 = None if after is None else after - (before or 0.0)


def _judge_partial(s: OverloadRun) -> None:
    upstream = with_prefix(s.deployed[0].events(), "partial-")
    partial, o = s.client_events["partial"], s.options
    s.result.add(checks.partial_completes(partial, o.records, o.partial_overloaded, s.max_attempts))
    s.result.add(checks.partial_failover(upstream, s.partial_retries_429, s.max_attempts))


def _relieve_partial(s: OverloadRun) -> None:
    s.samples.append(s.deployed[0].relieve(_partial(s.options), threshold=s.options.threshold))


# -- total overload and recovery ------------------------------------------------------------------


def _hold_total(s: OverloadRun) -> None:
    o, replicas = s.options, s.deployed[0]
    sample = replicas.overload(None, depth=o.queue_depth, threshold=o.threshold)
    s.samples.append(sample)
    s.exempt = replicas.exempt_answers(sample, s.profile.queue_admission.exempt_paths)


def _judge_exempt(s: OverloadRun) -> None:
    s.result.add(checks.admission_exempt(s.exempt, s.profile.queue_admission.exempt_paths))
    if s.exempt is not None:
        _, path = s.run.path("admission-exempt.json")
        path.write_text(json.dumps(s.exempt.to_json()) + "\n")


def _drive_unreachable(s: OverloadRun) -> None:
    attempts, retry_after = min(s.max_attempts, s.options.replicas), s.options.retry_after
    s.unreachable = overload_unreachable.ask_with_replicas_resetting(*s.deployed, s.run, attempts, retry_after)


def _judge_unreachable(s: OverloadRun) -> None:
    upstream = with_prefix(s.deployed[0].events(), overload_unreachable.ID_PREFIX)
    retry_after = s.options.retry_after
    s.result.add(
        checks.total_unreachable(s.unreachable, upstream, retry_after, proxy_fallback_retry_after(retry_after))
    )


def _judge_routing(s: OverloadRun) -> None:
    s.result.add(routing_restored(overload_routing.route_round(*s.deployed, s.run, s.profile.proxy.retried_statuses)))


def _drive_total(s: OverloadRun) -> None:
    client = s.start_client("total", s.options.recovery_records)
    factor = s.profile.client.decrease_factor
    wanted = len(expected_decreases(s.options.admission_limit, factor, checks.DECREASE_ROUNDS))
    # A SUT that never decreases is a finding for the checks below, not an error here.
    with contextlib.suppress(WaitTimeout):
        wait_until(
            lambda: deployment.read_events(s.run, "total"),
            lambda events: len(admission(events, "request_limit_decreased")) >= wanted or client.finished,
            timeout=s.options.decrease_wait_s,
            what=f"{wanted} admission decrease(s) under total overload",
        )


def _relieve_total(s: OverloadRun) -> None:
    s.relieved_at = time.time()
    s.samples.append(s.deployed[0].relieve(threshold=s.options.threshold))


def _drive_recovery(s: OverloadRun) -> None:
    assert s.client is not None, "the total phase started the client"
    timeout = s.options.total_deadline_s + WATCH_MARGIN_S
    s.client_events["total"] = _watch(s.client, s.run, "total", s.progress, "recovery", timeout=timeout)


def _judge_total(s: OverloadRun) -> None:
    o, total = s.options, s.client_events["total"]
    upstream = with_prefix(s.deployed[0].events(), "total-")
    s.result.add(checks.total_attempts(total, upstream, o.replicas, s.max_attempts))
    s.result.add(checks.total_retry_after(total, o.retry_after, proxy_fallback_retry_after(o.retry_after)))
    client, limit = s.profile.client, o.admission_limit
    s.result.add(
        checks.total_admission_decrease(total, limit, client.decrease_factor, upstream=upstream, until=s.relieved_at)
    )
    s.result.add(checks.total_cooldown(total, client.cooldown_seconds, upstream))
    s.result.add(
        checks.recovery(
            total, o.recovery_records, s.relieved_at, upstream=upstream, limit=limit,
            successes_until_increase=client.successes_until_increase, increase_step=client.increase_step,
        )
    )  # fmt: skip


def _plan_client(name: str, records: str, purpose: str) -> Callable[[Planner], list[PlannedCommand]]:
    def plan(p: Planner) -> list[PlannedCommand]:
        o = p.options
        load = client_load(o, getattr(o, records), deadline(o, name), p.backend.model if p.backend else None)
        return [p.client(purpose, name, mode="sut", **load)]

    return plan


def _plan_pressure(which: Callable[[OverloadOptions], range]) -> Callable[[Planner], list[PlannedCommand]]:
    """vLLM has no control plane: real load holds its queue (one pressure step per replica)."""

    def plan(p: Planner) -> list[PlannedCommand]:
        if p.backend is None:
            return []
        commands = []
        for index in which(p.options):
            argv = deployment.pressure_command(
                p.target.layout.python, f"http://{NODE}:{deployment.REPLICA_PORT_BASE + index}",
                f"{p.run_dir}/pressure", p.profile, p.backend, index, p.options.queue_depth,
            )  # fmt: skip
            purpose = f"pressure on replica {index}: {p.backend.max_num_seqs} running + {p.options.queue_depth} waiting"
            commands.append(p.srun(purpose, argv, deployment.client_step_options(f"pressure-{index}", NODE)))
        return commands

    return plan


def _plan_lift(which: Callable[[OverloadOptions], range]) -> Callable[[Planner], list[PlannedCommand]]:
    def plan(p: Planner) -> list[PlannedCommand]:
        if p.backend is None:  # synthetic replicas are released through their control plane
            return []
        return [
            PlannedCommand(
                f"lift the overload on replica {i}: TERM its pressure step", scancel_argv(f"$PRESSURE_STEP_{i}", "TERM")
            )
            for i in which(p.options)
        ]

    return plan


def _every(o: OverloadOptions) -> range:
    return range(o.replicas)


# -- queue admission at the SUT's default threshold ------------------------------------------------


def _hold_default_threshold(s: OverloadRun) -> None:
    o = s.options
    s.cold_start, samples = overload_admission.at_default_threshold(
        s.allocation, s.profile, o.retry_after, o.seed, s.fast
    )
    s.samples += samples


def _plan_default_threshold(p: Planner) -> list[PlannedCommand]:
    purpose = f"one replica at the SUT's default threshold ({p.profile.queue_admission.default_threshold}), no override"
    return [
        p.replicas(
            purpose,
            1,
            run=overload_admission.DEFAULT_THRESHOLD_RUN,
            **_fast(p.options),
            port_base=overload_admission.DEFAULT_THRESHOLD_PORT_BASE,
        ),
        PlannedCommand("and its stop once sampled: TERM to its step", scancel_argv("$DEFAULT_REPLICA_STEP", "TERM")),
    ]


def _judge_admission(s: OverloadRun) -> None:
    stale_after_s = s.profile.queue_admission.stale_after_seconds
    s.result.add(checks.admission_rejects(s.samples, s.options.retry_after, s.cold_start, stale_after_s))
    overload_admission.save_admission(s.run, s.samples, s.cold_start)


# -- stop ---------------------------------------------------------------------------------------


def _scancel(purpose: str, steps: str) -> Callable[[Planner], list[PlannedCommand]]:
    return lambda p: [PlannedCommand(purpose, scancel_argv(steps, "TERM"))]


PARTIAL_CLIENT = "partial overload: the SUT's client through the proxy"
TOTAL_CLIENT = "total overload, then recovery: the SUT's client through the proxy"
SYNTHETIC_ONLY: frozenset[BackendKind] = frozenset({"synthetic"})  # exact depths: vLLM's queue is held by real load


PHASES: tuple[Phase[OverloadRun], ...] = (
    Phase("deploy", "deploying replicas", _deploy_replicas, _plan_replicas,
          numbers=lambda s: {"replicas": s.options.replicas}),
    Phase("deploy", "deploying the SUT's proxy", _deploy_proxy, _plan_proxy),
    Phase("hold", "partial overload", _hold_partial, _plan_pressure(_partial),
          numbers=lambda s: {"overloaded": s.options.partial_overloaded}),
    Phase("drive", PARTIAL_CLIENT, _drive_partial, _plan_client("partial", "records", PARTIAL_CLIENT),
          fault="replicas overloaded past the queue threshold: 429s the proxy fails over"),
    Phase("judge", "partial overload: completion and failover", _judge_partial,
          judges=("overload.partial.completes", "overload.partial.failover")),
    Phase("relieve", "partial overload lifted", _relieve_partial, _plan_lift(_partial)),
    Phase("hold", "total overload", _hold_total, _plan_pressure(_every),
          numbers=lambda s: {"overloaded": s.options.replicas}),
    Phase("judge", "total overload: the paths queue admission exempts", _judge_exempt,
          judges=("overload.admission.exempt",)),
    Phase("drive", "total overload: until two admission decreases", _drive_total,
          _plan_client("total", "recovery_records", TOTAL_CLIENT),
          fault="every replica overloaded: 429s with Retry-After reach the client"),
    Phase("relieve", "total overload lifted", _relieve_total, _plan_lift(_every)),
    Phase("drive", "recovery", _drive_recovery),
    Phase("judge", "total overload and recovery", _judge_total,
          judges=("overload.total.attempts", "overload.total.retry_after", "overload.total.admission_decrease",
                  "overload.total.cooldown", "overload.recovery")),
    Phase("drive", "overload with backends lost", _drive_unreachable, backends=SYNTHETIC_ONLY,
          fault="every third replica resets each request, the others answer 429: 429s by design"),
    Phase("judge", "overload with backends lost: what the proxy answers", _judge_unreachable,
          judges=("overload.total.unreachable",), backends=SYNTHETIC_ONLY),
    Phase("judge", "routing once the faults are over: requests at once to idle replicas", _judge_routing,
          judges=("overload.routing_restored",), backends=SYNTHETIC_ONLY, applies=lambda s: s.options.replicas > 1,
          fault="replicas pin streams until released, replica 0 fails requests as told: by design"),
    Phase("hold", "queue admission at the SUT's default threshold, from a cold start", _hold_default_threshold,
          _plan_default_threshold, backends=SYNTHETIC_ONLY),
    Phase("judge", "queue admission", _judge_admission, judges=("overload.admission.rejects",)),
    Phase("stop", "stopping the proxy", stop_if_started("proxy"),
          _scancel("drain the proxy: TERM to its step (not its srun)", "$PROXY_STEP"), teardown=True),
    Phase("stop", "stopping the replicas", stop_if_started("replicas"),
          _scancel("drain the replicas the same way", "$REPLICA_STEPS"), teardown=True),
)  # fmt: skip


def proxy_fallback_retry_after(retry_after: int) -> int:
    """The proxy's own Retry-After: never the replicas' value, so the two can be told apart."""
    return retry_after + 4


def client_load(options: OverloadOptions, records: int, deadline_s: float, model: str | None = None) -> dict[str, Any]:
    """The SUT client at full admission: as many workers as the initial limit, short answers;
    against vLLM replicas it asks for the model they serve."""
    return {
        **({"model": model} if model else {}),
        "records": records,
        "concurrency": options.admission_limit,
        "admission_limit": options.admission_limit,
        "max_tokens": 4,
        "stream": False,
        "deadline_s": deadline_s,
    }


SCENARIO = Scenario(
    "overload",
    "partial and total overload through the SUT's proxy, admission and client",
    OverloadOptions,
    PHASES,
    OverloadRun,
    options_title="overload scenario: replicas, queue depth and the admission it drives",
    backends=frozenset({"synthetic", "vllm"}),
)
run_overload = SCENARIO.run
