"""The telemetry scenario: phases built to produce what the seed pull request says the proxy
reports (retries after 429s and 5xx, failovers, requests that use every attempt and end in
a 5xx, streams cut mid-way, streams still running at the endpoint's drain bound), each read from both
sides: the proxy's metrics before and after and the log records it wrote meanwhile, and
the replicas' and the client's own records of every request.

Replicas are steered through their control plane (forced statuses, cut streams), so the
phases run on synthetic replicas only; vLLM replicas have no control plane to steer.
"""

from __future__ import annotations

import contextlib
import math
import secrets
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from dd_accept import deployment
from dd_accept.acceptance import telemetry_checks as checks
from dd_accept.acceptance import telemetry_counter_checks as counters
from dd_accept.acceptance import telemetry_payload_checks as payloads
from dd_accept.acceptance import telemetry_records
from dd_accept.acceptance.analysis import with_prefix
from dd_accept.acceptance.declaration import Scenario
from dd_accept.acceptance.drain_checks import StepEnd, judged_on_one_term, repeat_may_have_ended_it
from dd_accept.acceptance.drain_stop import plan_endpoint_stop, stop_endpoint_step
from dd_accept.acceptance.phases import (
    DeployedRun,
    Phase,
    deploy_proxy,
    plan_proxy,
    stopping,
)
from dd_accept.acceptance.plan import CANARY_STAND_IN, PlannedCommand, Planner
from dd_accept.acceptance.telemetry_connections import (
    REFUSING,
    RESETTING,
    discarded_phase,
    expired_phase,
    listening,
    stale_phase,
    timed_out_phase,
    timeout_deadline,
    timeouts_drivable,
)
from dd_accept.acceptance.telemetry_driving import (
    client_phase,
    drive_phase,
    load_for,
    phase_seen,
    read_metrics,
    settled_log,
)
from dd_accept.acceptance.telemetry_forcing import exhausting_statuses, forced_5xx
from dd_accept.base.events import SUT_ATTEMPT_RECORDS, EventWriter, UpstreamAttempt
from dd_accept.base.waiting import WaitTimeout, wait_until
from dd_accept.sut.profile import SutProfile


@dataclass(frozen=True, slots=True)
class TelemetryOptions:
    replicas: int = 4
    requests: int = 24  # per phase
    concurrency: int = 4
    tokens: int = 8
    forced_429: int = 6  # replica 0 answers 429 (Retry-After 3) to this many requests
    # replicas 1 and 2 answer a 5xx the proxy retries to this many (`forced_5xx`): unequal, so
    # no two replicas look alike and a record naming the wrong backend shows in every permutation
    forced_failures: tuple[int, int] = (4, 2)
    exhausted_requests: int = 4  # sent one at a time, every replica answering each a 5xx (one per status)
    held_streams: int = 2  # replicas 0 and 1 each hold this many back past the proxy's timeouts
    drain_streams: int = 2  # running when the endpoint gets TERM, each longer than its drain allowance
    drain_itl_ms: int = 100  # their pace: a few hundred events, not thousands, over the allowance
    # The connection-error phase: replica REFUSING's port refuses connections this long (the
    # phase's requests take about a second), replica RESETTING resets this many requests.
    refuse_seconds: float = 6.0
    connection_resets: int = 4
    client_headers: tuple[str, ...] = ()
    seed: int = 0


@dataclass
class TelemetryRun(DeployedRun):
    options: TelemetryOptions
    phases_seen: list[telemetry_records.TelemetryPhase] = field(default_factory=list)
    counted: list[counters.CountedPhase] = field(default_factory=list)  # connection lifecycle
    counted_timeouts: list[counters.CountedPhase] = field(default_factory=list)
    # the timeout phases, judged by the record checks too (each attempt, each stream abandoned mid-way)
    timeout_phases: list[telemetry_records.TelemetryPhase] = field(default_factory=list)
    # what every prompt and a credential carry, new each run: found on the proxy's output, a leak
    canary: str = field(default_factory=lambda: secrets.token_hex(8))
    # the probe-routing phase: the requests the replicas served, and the probe's window on replica 0
    probe_upstream: list[UpstreamAttempt] = field(default_factory=list)
    probe_window: tuple[float, float] | None = None
    timed_out_status: int | None = None  # what the client got for the request whose attempts all timed out
    last_metrics: dict[str, Any] = field(default_factory=dict)  # read before the drain phase stops the proxy
    drain_phase: telemetry_records.TelemetryPhase | None = None
    connection_phase: telemetry_records.TelemetryPhase | None = None
    drain_killed_after_s: float | None = None  # the endpoint still ran at the allowance: KILLed then
    drain_end: StepEnd | None = None  # how the endpoint ended, as Slurm recorded it


def _replicas(o: TelemetryOptions, canary: str) -> dict[str, Any]:
    """How the replicas are started (the run's and the plan's keywords): exact and fast, a
    connection kept as long as the proxy keeps it, every response carrying the run's canary."""
    return {
        "seed": o.seed, "exact": True,
        "options": ("--ttft-ms", "10", "--itl-ms", "2", "--max-num-seqs", "64", "--keep-alive-s", "3600",
                    "--response-canary", canary),
    }  # fmt: skip


def _deploy_replicas(s: TelemetryRun) -> None:
    o = s.options
    launch = _replicas(o, s.canary)
    s.replicas = deployment.start_replicas(s.allocation, o.replicas, run=s.run, profile=s.profile, **launch)


def _plan_replicas(p: Planner) -> list[PlannedCommand]:
    o = p.options
    return [p.replicas(f"{o.replicas} synthetic replicas, one task each", o.replicas, **_replicas(o, CANARY_STAND_IN))]


def _planned_send(
    p: Planner, name: str, sent: int | None = None, concurrency: int | None = None, deadline_s: float = 60, **more: Any
) -> PlannedCommand:
    o = p.options
    load = load_for(o, CANARY_STAND_IN, sent or o.requests, concurrency, deadline_s, **more)
    return p.client(f"{load['records']} request(s) through the proxy: {name}", name, mode="raw", **load)


def _plan_sends(*names: str) -> Callable[[Planner], list[PlannedCommand]]:
    return lambda p: [_planned_send(p, name) for name in names]


HAS_COUNTERS = "the proxy's metrics have the counters its profile claims"


def _plan_lifecycle(phase: str) -> Callable[[Planner], list[PlannedCommand]]:
    """The connection-lifecycle phases: planned where the profile claims the counters, run
    where the proxy's metrics also have them."""

    def plan(p: Planner) -> list[PlannedCommand]:
        telemetry, replicas = p.profile.telemetry, p.options.replicas
        if not telemetry.claimed("connection_lifecycle"):
            return []
        if phase == "stale":
            commands = [_planned_send(p, "pool-for-stale", 2 * replicas), _planned_send(p, "stale")]
        elif phase == "expired":
            if not counters.drivable(telemetry.keepalive_seconds, counters.EXPIRY_WAITS):
                return []
            commands = [_planned_send(p, "expired", 2 * replicas), _planned_send(p, "after-expiry", replicas)]
        else:
            commands = [_planned_send(p, "discarded")]
        return [command.when(HAS_COUNTERS) for command in commands]

    return plan


def _plan_timeouts(p: Planner) -> list[PlannedCommand]:
    if not timeouts_drivable(p.profile) or not p.profile.telemetry.claimed("timeouts"):
        return []
    deadline, sent = timeout_deadline(p.profile), 2 * p.options.replicas
    commands = [
        _planned_send(p, "timeout-alone", 1, 1, deadline),
        _planned_send(p, "timeouts", sent, sent, deadline),
        _planned_send(p, "timeout-exhausted", 1, 1, deadline),
    ]
    return [command.when(HAS_COUNTERS) for command in commands]


def _plan_probe_routing(p: Planner) -> list[PlannedCommand]:
    if not p.profile.telemetry.claimed("probe_routing"):
        return []
    load = _probe_routing_load(p.options, CANARY_STAND_IN, p.profile)
    return [p.client("requests one at a time, paced, while a probe is held", "probe-routing", mode="raw", **load)]


def _plan_drain_bound(p: Planner) -> list[PlannedCommand]:
    if not p.profile.telemetry.claimed("incomplete_streams"):
        return []
    load = _drain_load(p.options, CANARY_STAND_IN, p.profile)
    purpose = f"{p.options.drain_streams} streams longer than the drain allowance"
    return [p.client(purpose, checks.DRAIN_PHASE, mode="raw", **load), *plan_endpoint_stop(p)]


def _steady(s: TelemetryRun) -> None:
    drive_phase(s, "steady")


def _force_429(s: TelemetryRun) -> None:
    s.deployed[0].control([0], "respond", status=429, retry_after=3, count=s.options.forced_429)


def _retry_429(s: TelemetryRun) -> None:
    drive_phase(s, "retry-429")


def _force_5xx(s: TelemetryRun) -> None:
    for replica, statuses in zip((1, 2), forced_5xx(s.profile, s.options.forced_failures), strict=True):
        s.deployed[0].control([replica], "respond", statuses=list(statuses))


def _failover_5xx(s: TelemetryRun) -> None:
    drive_phase(s, "failover-5xx")


def _stop_forcing(s: TelemetryRun) -> None:
    """What the proxy did not send to a forced replica must not reach the next phase."""
    s.deployed[0].control(None, "respond", status=200, count=0)


def _exhausted(s: TelemetryRun) -> None:
    """One request at a time, each while every replica answers it a 5xx the proxy retries
    (`exhausting_statuses`): each request uses every attempt the proxy makes, and the client
    gets the last one's status. Each replica answers one request so, and what a replica the
    proxy did not try still holds is taken back before the next."""
    for name, status in exhausting_statuses(s.profile, s.options.exhausted_requests):
        s.deployed[0].control(None, "respond", status=status, count=1)
        drive_phase(s, name, requests_sent=1, concurrency=1)
        _stop_forcing(s)


def _plan_exhausted(p: Planner) -> list[PlannedCommand]:
    return [_planned_send(p, name, 1, 1) for name, _ in exhausting_statuses(p.profile, p.options.exhausted_requests)]


def _cut(s: TelemetryRun) -> None:
    """Replica 3 cuts two streams after 2 chunks, replica 2 one after 5: cut streams of
    different sizes, so a record's bytes must be its own stream's."""
    replicas = s.deployed[0]
    replicas.control([3], "cut", after_chunks=2, count=2)
    replicas.control([2], "cut", after_chunks=5, count=1)


def _cut_streams(s: TelemetryRun) -> None:
    drive_phase(s, "cut")


def _stop_cutting(s: TelemetryRun) -> None:
    s.deployed[0].control(None, "cut", after_chunks=None)


def _break_connections(s: TelemetryRun) -> None:
    """Replica 0's port refuses connections (nothing listens) and replica 1 resets each of
    the next requests it reads: the proxy's connection-error retry, both ways."""
    replicas = s.deployed[0]
    replicas.control([RESETTING], "reset", count=s.options.connection_resets)
    replicas.control([REFUSING], "refuse", seconds=s.options.refuse_seconds)


def _connection_errors(s: TelemetryRun) -> None:
    s.connection_phase = client_phase(s, "connection-errors")


def _mend_connections(s: TelemetryRun) -> None:
    """Both replicas serve again before the next phase: replica 0 listens once its time is
    up (the control plane answers again), replica 1 resets nothing more."""
    replicas = s.deployed[0]
    wait_until(
        lambda: listening(s),
        bool,
        timeout=s.options.refuse_seconds + 10,
        interval=0.5,
        what=f"replica {REFUSING} to listen again",
    )
    replicas.control([RESETTING], "reset", count=0)


PROBE_HOLD_S = 4.0  # under rc1's 5 s probe timeout: the probe stays in flight while the requests run
PROBE_ROUTING_RATE = 6.0  # requests a second: 24 over 4 s, the probe's window well inside them
PROBE_WAIT_S = 5.0  # rc1's /health probes every backend when asked: its probe arrives at once


def probe_wait_s(profile: SutProfile) -> float:
    """How long the proxy may take to probe replica 0 once `/health` is asked: at once where
    it probes on demand (rc1); a SUT that declares a health monitor may answer from its last
    round and probe on the monitor's schedule, within its declared detection bound."""
    capabilities = profile.capabilities
    return max(PROBE_WAIT_S, capabilities.monitor_detect_seconds) if capabilities.health_monitor else PROBE_WAIT_S


def _probe_routing_load(o: TelemetryOptions, canary: str, profile: SutProfile) -> dict[str, Any]:
    """Requests for as long as the probe may take to arrive and is then held: a probe that
    comes late still has requests one at a time around it."""
    sent = max(o.requests, math.ceil(PROBE_ROUTING_RATE * (probe_wait_s(profile) + PROBE_HOLD_S)))
    return load_for(o, canary, sent, 1, arrival="constant", rate=PROBE_ROUTING_RATE)


def _probe_routing(s: TelemetryRun) -> None:
    """Replica 0 holds the proxy's health probe in flight while requests go one at a time:
    a proxy whose probes count as requests in least-connections sends replica 0 none.

    The requests are paced (PROBE_ROUTING_RATE a second, each over in a few milliseconds:
    still one at a time) and the probe is held only once the first of them has reached a
    replica: a client step that starts late on a loaded machine (srun, the interpreter)
    would otherwise begin after the probe's window and leave nothing to judge."""
    if not s.profile.telemetry.claimed("probe_routing"):
        return
    replicas, proxy = s.deployed
    name = "probe-routing"
    load = _probe_routing_load(s.options, s.canary, s.profile)
    client = deployment.run_client(s.allocation, proxy, s.run, mode="raw", profile=s.profile, name=name, **load)
    try:
        with contextlib.suppress(WaitTimeout):  # no request arrived: the check finds none in the window
            wait_until(
                lambda: len(with_prefix(replicas.events(), f"{name}-")), bool, timeout=30, interval=0.05,
                what="the first probe-routing request at a replica",
                terminal=lambda _: "the load client ended" if client.finished else None,
            )  # fmt: skip
        replicas.control([0], "health_delay", seconds=PROBE_HOLD_S)
        with ThreadPoolExecutor(max_workers=1) as pool:
            probe = pool.submit(proxy.get, "/health", 15)
            try:
                with contextlib.suppress(WaitTimeout):  # no probe arrived: the check says so
                    wait_until(
                        lambda: replicas.control([0], "state")[0].get("probe_window"), bool,
                        timeout=probe_wait_s(s.profile),
                        interval=0.1, what="the proxy's health probe on replica 0",
                    )  # fmt: skip
                record = client.wait(timeout=120)
                if not record.ok:
                    raise RuntimeError(f"load client failed: {record.describe()}")
            finally:
                replicas.control([0], "health_delay", seconds=0)  # and the probe held now is answered
                probe.result()
    finally:
        replicas.control([0], "health_delay", seconds=0)
    window = replicas.control([0], "state")[0].get("probe_window")
    if window and window[1] is not None:
        s.probe_window = (float(window[0]), float(window[1]))
    s.probe_upstream = with_prefix(replicas.events(), f"{name}-")


def _read_counters(s: TelemetryRun) -> None:
    """The proxy's counters as the phases left them: the drain phase stops the proxy."""
    s.last_metrics = read_metrics(s)


# A drain stream outlasts the allowance by this much, counted from its start: TERM comes about
# a second in, Slurm's record of it up to 3 s later starts the allowance, and only a stop may end it.
STREAM_BEYOND_ALLOWANCE_S = 10.0


def _drain_load(o: TelemetryOptions, canary: str, profile: SutProfile) -> dict[str, Any]:
    """Streams that outlast the drain allowance, all in flight at once."""
    stream_s = profile.drain.allowance_seconds + STREAM_BEYOND_ALLOWANCE_S
    tokens = math.ceil(stream_s * 1000 / o.drain_itl_ms)
    more = {"max_tokens": tokens, "deadline_s": stream_s + 30}
    return load_for(o, canary, o.drain_streams, o.drain_streams, **more)


def _drain_bound(s: TelemetryRun) -> None:
    """Streams longer than the drain allowance are running when the endpoint step gets TERM
    (`scancel --signal=TERM JOB.STEP`, as the seed's cleanup sends it). An endpoint that bounds
    its drain ends them at its window, and each must be logged as incomplete with its bytes;
    one still running at the allowance is KILLed (the controller's last resort), and a killed
    process logs nothing. The proxy is gone after this phase: it runs last."""
    if not s.profile.telemetry.claimed("incomplete_streams"):
        return
    o, replicas, proxy = s.options, *s.deployed
    replicas.control(None, "pace", itl_ms=o.drain_itl_ms, exact=True)
    stream_s = s.profile.drain.allowance_seconds + STREAM_BEYOND_ALLOWANCE_S
    lines_before = len(settled_log(s))
    name = checks.DRAIN_PHASE
    load = _drain_load(o, s.canary, s.profile)
    client = deployment.run_client(s.allocation, proxy, s.run, mode="raw", profile=s.profile, name=name, **load)
    replicas.wait_running(o.drain_streams)
    time.sleep(1.0)  # the streams under way: each has sent some bytes when TERM comes
    stop_at, forced_at, s.drain_end = stop_endpoint_step(s.allocation, proxy, s.profile, "incomplete_streams")
    client.wait(timeout=stream_s + 60)
    s.drain_killed_after_s = None if forced_at is None else forced_at - stop_at
    with contextlib.suppress(WaitTimeout):  # a replica records a stream when it next tries to write
        wait_until(
            lambda: len(with_prefix(replicas.events(), f"{name}-")), lambda seen: seen >= o.drain_streams,
            timeout=5, interval=0.2, what="the replicas' records of the drain streams",
        )  # fmt: skip
    s.drain_phase = phase_seen(s, name, lines_before, {}, {})  # no metrics: the proxy is gone


def _place_records(s: TelemetryRun) -> None:
    """The SUT's attempt records, placed on the requests they were for: evidence the report
    draws beside the replicas' attempts."""
    writer = EventWriter(s.run.path(*SUT_ATTEMPT_RECORDS)[1], source="harness")
    try:
        for phase in s.phases_seen + s.timeout_phases:
            for record in checks.placed_attempt_records(phase, s.profile.telemetry):
                writer.write(record)
    finally:
        writer.close()


def _judge(s: TelemetryRun) -> None:
    telemetry, phases = s.profile.telemetry, s.phases_seen
    _place_records(s)
    s.result.add(checks.attempt_counters(phases, telemetry))
    s.result.add(checks.request_log(phases, telemetry))
    s.result.add(checks.attempt_log(phases + s.timeout_phases, telemetry))
    drained = [s.drain_phase] if s.drain_phase is not None else []
    judged = checks.incomplete_streams(
        phases + s.timeout_phases + drained,
        telemetry,
        drain_killed_after_s=s.drain_killed_after_s,
        drain_end=s.drain_end,
    )
    repeated = drained and s.drain_end is not None and repeat_may_have_ended_it(s.drain_end)
    if repeated and checks.incomplete_streams(phases + s.timeout_phases, telemetry).verdict == "pass":
        judged_on_one_term(s.result, judged, s.drain_end)  # its drain phase alone decides it: judged on one TERM
    else:
        s.result.add(judged)
    last = s.last_metrics
    s.result.add(counters.connection_lifecycle(last, telemetry, s.counted))
    s.result.add(counters.timeouts(last, telemetry, s.counted_timeouts, s.timed_out_status, quiet=phases))
    s.result.add(checks.probe_routing(s.probe_upstream, s.probe_window, 0, s.options.replicas, telemetry))
    if s.connection_phase is not None:
        phase = s.connection_phase
        counted = (
            (phase.delta(telemetry.attempts_metric), phase.delta(telemetry.retries_metric))
            if telemetry.claimed("attempt_counters")
            else None
        )
        s.result.add(checks.connection_errors(phase.client, phase.upstream, counted, REFUSING, RESETTING))
    limit = min(s.profile.proxy.max_upstream_attempts, s.options.replicas)
    s.result.add(checks.status_failover(phases, s.profile.proxy.retried_statuses, limit))
    s.result.add(payloads.no_payloads(settled_log(s), s.canary, payloads.sent_secrets(s.options.client_headers)))


PHASES: tuple[Phase[TelemetryRun], ...] = (
    Phase("deploy", "deploying replicas", _deploy_replicas, _plan_replicas,
          numbers=lambda s: {"replicas": s.options.replicas}),
    Phase("deploy", "deploying the SUT's proxy", deploy_proxy, plan_proxy),
    Phase("drive", "requests through the proxy, every replica serving", _steady, _plan_sends("steady")),
    Phase("hold", "replica 0 answers 429 with Retry-After", _force_429),
    Phase("drive", "requests while replica 0 answers 429", _retry_429, _plan_sends("retry-429"), fault="forced 429s"),
    Phase("hold", "replicas 1 and 2 answer the 5xx statuses the proxy retries", _force_5xx),
    Phase("drive", "requests while replicas 1 and 2 answer 5xx", _failover_5xx, _plan_sends("failover-5xx"),
          fault="forced 5xx answers"),
    Phase("relieve", "replicas answer what they serve again", _stop_forcing),
    Phase("drive", "requests one at a time, every replica answering each a 5xx the proxy retries", _exhausted,
          _plan_exhausted, fault="every replica answers 5xx"),
    Phase("hold", "replicas 2 and 3 cut streams mid-way", _cut),
    Phase("drive", "requests while replicas 2 and 3 cut streams", _cut_streams, _plan_sends("cut"),
          fault="streams cut mid-way"),
    Phase("relieve", "replicas stream whole again", _stop_cutting),
    Phase("drive", "replicas close the proxy's idle connections, then requests", stale_phase, _plan_lifecycle("stale")),
    Phase("drive", "idle past the proxy's keep-alive, then requests", expired_phase, _plan_lifecycle("expired")),
    Phase("drive", "requests whose responses close their connection", discarded_phase, _plan_lifecycle("discarded")),
    Phase("drive", "requests while replicas hold streams back past the proxy's timeouts", timed_out_phase,
          _plan_timeouts, fault="streams held back past the proxy's timeouts"),
    Phase("drive", "requests one at a time while replica 0 holds the proxy's health probe", _probe_routing,
          _plan_probe_routing, fault="a health probe held on replica 0"),
    Phase("hold", "replica 0 refuses connections, replica 1 resets each request it reads", _break_connections),
    Phase("drive", "requests while replicas refuse and reset connections", _connection_errors,
          _plan_sends("connection-errors"), fault="connections refused and reset"),
    Phase("relieve", "replicas 0 and 1 serve again", _mend_connections),
    Phase("drive", "reading the proxy's counters before it is stopped", _read_counters),
    Phase("stop", "TERM to the endpoint while streams longer than its drain allowance run", _drain_bound,
          _plan_drain_bound, fault="streams longer than the drain allowance, cut by the drain bound"),
    # every check reads every phase before it: a selection runs them all
    Phase("judge", "the SUT's telemetry against the replicas' and the client's", _judge,
          judges=("telemetry.attempt_counters", "telemetry.request_log", "telemetry.attempt_log",
                  "telemetry.incomplete_streams", "telemetry.connection_lifecycle", "telemetry.timeouts",
                  "telemetry.probe_routing", "telemetry.connection_errors", "telemetry.status_failover",
                  "telemetry.no_payloads")),
    stopping("proxy"),
    stopping("replicas"),
)  # fmt: skip

SCENARIO = Scenario(
    "telemetry",
    "the proxy's request records, attempt and retry counters against what replicas saw",
    TelemetryOptions,
    PHASES,
    TelemetryRun,
)
run_telemetry = SCENARIO.run
