"""The capacity scenario: raise the load through the SUT's proxy level by level until its SLO
breaks, and report the knee, what the proxy cost per chunk there, and the harness's share.

Each level is one run of the raw load client (streams held in flight, or requests arriving
at a constant or Poisson rate, seeded), sent for `level_seconds`; around it the steps' CPU
is read from the nodes' kernel counters. Each level is a phase of its own in the result, so
its serving metrics (vLLM's names) are in results.json beside every other scenario's, and a
capacity bundle compares and trends like any other. The curve is kept as evidence
(`capacity-curve.jsonl`): one line per level. The ladder stops once two levels in a row
break the SLO: past the knee, more load only costs time.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

from dd_accept import deployment
from dd_accept.acceptance import capacity_checks as checks
from dd_accept.acceptance.analysis import requests, with_prefix
from dd_accept.acceptance.declaration import Scenario
from dd_accept.acceptance.phases import (
    DeployedRun,
    Phase,
    deploy_proxy,
    plan_proxy,
    recorded,
    stopping,
)
from dd_accept.acceptance.plan import PlannedCommand, Planner
from dd_accept.base.capacity_curve import CURVE_FILE, CURVE_KIND
from dd_accept.base.errors import ClusterError
from dd_accept.base.options import option
from dd_accept.base.waiting import WaitTimeout
from dd_accept.deployment.step_usage import UsageSample, sample_usage, sample_while_running
from dd_accept.slurm_docker.records import CommandRecord

MEASURED_STEPS = ("proxy", "replicas")
# The wire client: the raw client's requests and records on bare connections, cheap enough
# that the proxy, not the client, is what saturates (node/loadclient/wire.py).
CLIENT_MODE = "wire"


LOAD_MODES = ("concurrency", "constant", "poisson")


@dataclass(frozen=True, slots=True)
class CapacityOptions:
    """How the capacity scenario raises the load: a ladder of levels, each `--load-factor`
    times the one before, every level held `--level-seconds`, until the SLO breaks; and what
    the scenario fixes: replicas that pace tokens like a fast decoder (20 ms to the first,
    5 ms apart), 32 tokens per stream."""

    load_mode: str = option(
        "concurrency",
        "capacity: streams held in flight (concurrency), or requests arriving at a rate, evenly (constant) "
        "or as a seeded Poisson process (poisson), as vLLM's bench serve and guidellm send them",
        choices=LOAD_MODES,
    )
    load_start: float | None = option(
        None,
        "capacity: the first level, streams in flight or requests/s (default: 8 streams; 40 requests/s)",
        above=0,
        unit="streams or requests/s",
    )
    load_factor: float = option(1.5, "capacity: each level's load over the one before", above=1, unit="times")
    load_levels: int = option(12, "capacity: the most levels the ladder climbs, 2 to 30", minimum=2, maximum=30)
    level_seconds: float = option(3.0, "capacity: seconds each level sends new requests", above=0, maximum=3600)
    slo_added_ttft_ms: float = option(
        150.0,
        "capacity SLO: the proxy's added time to first token, p95 (ms)",
        above=0,
        unit="milliseconds",
    )
    slo_chunk_delay_ms: float = option(
        25.0,
        "capacity SLO: each chunk's delay from the replica's write to the client's read, p95 (ms)",
        above=0,
        unit="milliseconds",
    )

    knee_floor: float | None = option(
        None,
        "capacity: output tokens/s the knee must reach (default: the SUT profile's)",
        above=0,
        unit="tokens/s",
    )
    max_cpu_per_chunk_us: float | None = option(
        None,
        "capacity: the most proxy CPU per forwarded chunk, microseconds (default: the SUT profile's)",
        above=0,
        unit="microseconds",
    )

    replicas: int = 4
    tokens: int = 32
    ttft_ms: int = 20
    itl_ms: int = 5
    seed: int = 0

    def __post_init__(self) -> None:
        if self.load_mode == "concurrency" and self.load_start is not None and self.load_start != int(self.load_start):
            raise ValueError("--load-start must be a whole number of streams with --load-mode concurrency")
        if self.load_start is not None and self.load_start < 0.1:
            raise ValueError("--load-start must be at least 0.1 (requests/s) or 1 (stream)")
        top = self.levels()[-1]
        if top > 100_000:
            raise ValueError(
                f"the ladder would climb to {top:g} {self.unit()}: lower --load-start, --load-factor or --load-levels"
            )

    @property
    def slo(self) -> checks.Slo:
        return checks.Slo(added_ttft_ms=self.slo_added_ttft_ms, chunk_delay_ms=self.slo_chunk_delay_ms)

    @property
    def start(self) -> float:
        return self.load_start if self.load_start is not None else (8 if self.load_mode == "concurrency" else 40)

    def levels(self) -> list[float]:
        """The ladder: whole streams in concurrency mode (each level above the one before),
        requests/s rounded to 0.1 at a rate."""
        found: list[float] = []
        value = self.start
        for _ in range(self.load_levels):
            if self.load_mode == "concurrency":
                level = float(max(round(value), int(found[-1]) + 1 if found else 1))
            else:  # always climbing, by at least 0.1 requests/s
                level = max(round(value, 1), round(found[-1] + 0.1, 1) if found else 0.1)
            found.append(level)
            value = level * self.load_factor
        return found

    def unit(self) -> str:
        return "streams in flight" if self.load_mode == "concurrency" else "requests/s"

    def ladder(self) -> tuple[tuple[str, float], ...]:
        """How the ladder is built, as the knee's metrics carry it (regressions.LADDER): two
        knees compare only when these are equal."""
        return (
            ("ladder_mode", float(LOAD_MODES.index(self.load_mode))),
            ("ladder_start", float(self.start)),
            ("ladder_factor", self.load_factor),
            ("ladder_levels", float(self.load_levels)),
            ("level_seconds", self.level_seconds),
            ("slo_added_ttft_ms", self.slo_added_ttft_ms),
            ("slo_chunk_delay_ms", self.slo_chunk_delay_ms),
        )


IDLE_SECONDS = 2.0


@dataclass
class CapacityRun(DeployedRun):
    options: CapacityOptions
    levels: list[checks.LoadLevel] = field(default_factory=list)
    # CPU seconds per second each measured step spends with no load (health probes, the
    # replicas' queue samplers): taken off each level, so a level's cost is what its load added.
    idle_rate: dict[str, float] = field(default_factory=dict)
    machine_cpus: int = 0

    @property
    def curve(self) -> checks.Curve:
        o = self.options
        ran_on = (
            ("replicas", float(o.replicas)),
            ("tokens_per_stream", float(o.tokens)),
            ("itl_ms", float(o.itl_ms)),
            ("machine_cpus", float(self.machine_cpus)),
        )
        return checks.Curve(tuple(self.levels), o.slo, o.unit(), o.levels()[-1], o.ladder() + ran_on)


def _replicas(o: CapacityOptions) -> dict[str, Any]:
    """How the paced replicas are started (the run's and the plan's keywords)."""
    return {"paced": True, "options": ("--ttft-ms", str(o.ttft_ms), "--itl-ms", str(o.itl_ms))}


def _deploy_replicas(s: CapacityRun) -> None:
    o = s.options
    s.replicas = deployment.start_replicas(s.allocation, o.replicas, run=s.run, profile=s.profile, **_replicas(o))


def _plan_replicas(p: Planner) -> list[PlannedCommand]:
    o = p.options
    return [p.replicas(f"{o.replicas} paced replicas, one task each (no middleware)", o.replicas, **_replicas(o))]


GOES_ON = "no request failed and the SLO held at one of the two levels before"


def _plan_ladder(p: Planner) -> list[PlannedCommand]:
    """One client per level; every level after the first only while the ladder goes on."""
    o, unit = p.options, p.options.unit()
    commands = []
    for index, load in enumerate(o.levels()):
        name = f"capacity-{index}"
        load_of = _client_load(o, index, load)
        command = p.client(f"load level {index + 1}: {load:g} {unit}", name, mode=CLIENT_MODE, **load_of)
        commands.append(command.when(GOES_ON) if index else command)
    return commands


def _measure_idle(s: CapacityRun) -> None:
    before = sample_usage(s.allocation, MEASURED_STEPS)
    started = time.monotonic()
    time.sleep(IDLE_SECONDS)
    after = sample_usage(s.allocation, MEASURED_STEPS)
    elapsed = time.monotonic() - started
    s.idle_rate = {name: after.cpu_since(before, name) / elapsed for name in MEASURED_STEPS}
    s.machine_cpus = after.cpus


def _client_load(o: CapacityOptions, index: int, load: float) -> dict[str, object]:
    seconds = o.level_seconds
    common = {"max_tokens": o.tokens, "max_record_attempts": 1, "duration_s": seconds, "deadline_s": seconds + 60}
    if o.load_mode == "concurrency":
        return common | {"concurrency": int(load), "records": 1_000_000}
    # Poisson arrivals in the window are 1 + Poisson(rate x seconds): the cap sits six standard
    # deviations above, so the duration, not the cap, ends the level.
    expected = load * seconds
    return common | {
        "arrival": o.load_mode,
        "rate": load,
        "records": math.ceil(expected + 6 * math.sqrt(expected)) + 10,
        "seed": o.seed * 1000 + index,
    }


def _level(s: CapacityRun, index: int, load: float) -> checks.LoadLevel:
    """One level: read the steps' CPU, send for `level_seconds`, read it again, judge."""
    replicas, proxy = s.deployed
    name = f"capacity-{index}"
    before = _usage(s)
    started = time.monotonic()
    load_of = _client_load(s.options, index, load)
    client = deployment.run_client(s.allocation, proxy, s.run, mode=CLIENT_MODE, profile=s.profile, name=name,
                                   **load_of)  # fmt: skip
    try:
        record = client.wait(timeout=s.options.level_seconds + 120)
    except WaitTimeout:  # its own deadline did not end it: the SUT holds its streams
        record = client.stop()
    after = _usage(s)
    elapsed = time.monotonic() - started

    def added(name: str) -> float:
        """What the load added to a step's CPU: its use less its idle rate over the level."""
        if before is None or after is None:
            return 0.0  # the proxy is gone: not measured (below MEASURABLE_CPU_S), never a cost of 0
        return max(0.0, after.cpu_since(before, name) - s.idle_rate.get(name, 0.0) * elapsed)

    upstream = with_prefix(replicas.events(), f"{name}-")
    faults = [a for a in upstream if a.outcome == "fault"]
    if faults:  # the paced replicas' own failure: dd-accept's, never the SUT's
        raise ClusterError(
            f"{len(faults)} upstream attempts failed inside dd-accept's paced replicas at {name}; "
            f"replica log: {replicas.log_tail(faults[0].replica, 5)}"
        )

    # A background step keeps its output's tail; the client's summary is its one last line.
    # A client that did not end well breaks its level (the curve below it stands); so does a
    # proxy that ended under the load, the SUT's failure, not the harness's.
    summary, error = _summary(record)
    if after is None or before is None:
        error = f"the SUT's proxy step ended under load: {proxy.step.wait(1).describe()}"
    measured = before is not None and after is not None
    # The machine's busy share over the client's own window (it reads /proc/stat as it starts
    # and ends): the readings around it also span the client's start-up, which would dilute it.
    busy = summary.get("machine_busy")
    if not isinstance(busy, int | float):
        busy = after.busy_since(before) if measured else 0.0  # type: ignore[union-attr]
    return checks.measure_level(
        index,
        load,
        requests(deployment.read_events(s.run, name)),
        upstream,
        window_s=float(summary.get("window_s", s.options.level_seconds)),
        proxy_cpu_s=added("proxy"),
        replicas_cpu_s=added("replicas"),
        client_cpu_s=float(summary.get("cpu_s", 0.0)),
        proxy_rss_kb=after.rss_kb.get("proxy", 0) if after is not None else 0,
        machine_busy=float(busy),
        client_error=error,
        proxy_wait_s=after.wait_since(before, "proxy") if measured else 0.0,  # type: ignore[union-attr]
        machine_stolen=float(summary.get("machine_stolen") or 0.0),
    )


def _usage(s: CapacityRun) -> UsageSample | None:
    """The steps' usage; None when the SUT's proxy step has ended (its failure, judged as such)."""
    return sample_while_running(s.allocation, MEASURED_STEPS, s.deployed[1].step)


def _summary(record: CommandRecord) -> tuple[dict[str, object], str]:
    """The load client's summary line, and "" or what went wrong."""
    lines = record.stdout_tail.strip().splitlines()
    try:
        summary = json.loads(lines[-1]) if lines else {}
    except ValueError:
        summary = {}
    if not isinstance(summary, dict) or "cpu_s" not in summary:
        return {}, f"no summary ({record.describe()})"
    if not record.ok:
        return summary, f"exit {record.exit_code}" + (" (timed out)" if record.timed_out else "")
    return summary, ""


def _climb(s: CapacityRun) -> None:
    """Every level of the ladder, each a phase of its own, until the SLO breaks twice in a row
    or a request fails."""
    slo, unit = s.options.slo, s.options.unit()
    _, curve_host = s.run.path(CURVE_FILE)
    broken_run = 0
    for index, load in enumerate(s.options.levels()):
        title = f"load level {index + 1}: {load:g} {unit}"
        s.progress.emit(title, load=load)
        with recorded(s.result, "drive", title):
            level = _level(s, index, load)
        s.levels.append(level)
        broken = slo.broken_by(level)
        with curve_host.open("a") as curve:
            line = {"kind": CURVE_KIND, **level.to_json(), "unit": unit, "slo_broken": broken}
            curve.write(json.dumps(line) + "\n")
        s.progress.emit(
            title,
            output_tokens_per_s=round(level.output_throughput),
            chunk_delay_p95_ms=level.chunk_delay_p95_ms,
            slo="broken" if broken else "met",
        )
        broken_run = broken_run + 1 if broken else 0
        if broken_run >= 2 or level.failed or level.client_error:  # a failure is never noise (Curve.knee)
            break


def _judge(s: CapacityRun) -> None:
    curve = s.curve
    bounds = s.profile.capacity
    floor = s.options.knee_floor if s.options.knee_floor is not None else bounds.knee_floor
    limit = (
        s.options.max_cpu_per_chunk_us
        if s.options.max_cpu_per_chunk_us is not None
        else bounds.max_proxy_cpu_us_per_chunk
    )
    judged, s.result.error = checks.verdicts(
        checks.knee(curve, floor), checks.proxy_cpu_per_chunk(curve, limit), checks.harness_headroom(curve)
    )
    for check in judged:
        s.result.add(check)


PHASES: tuple[Phase[CapacityRun], ...] = (
    Phase("deploy", "deploying replicas", _deploy_replicas, _plan_replicas,
          numbers=lambda s: {"replicas": s.options.replicas}),
    Phase("deploy", "deploying the SUT's proxy", deploy_proxy, plan_proxy),
    Phase("hold", "measuring the steps' idle CPU", _measure_idle, numbers=lambda s: {"seconds": IDLE_SECONDS}),
    Phase(
        "drive",
        "climbing the load ladder",
        _climb,
        _plan_ladder,
        numbers=lambda s: {"levels": len(s.options.levels()), "mode": s.options.load_mode},
    ),
    Phase("judge", "knee, cost per chunk, harness headroom", _judge,
          judges=("capacity.knee", "capacity.proxy_cpu_per_chunk", "capacity.harness_headroom")),
    stopping("proxy"),
    stopping("replicas"),
)  # fmt: skip

SCENARIO = Scenario(
    "capacity",
    "rising load through the proxy until its SLO breaks: the knee, CPU per chunk, headroom",
    CapacityOptions,
    PHASES,
    CapacityRun,
    options_title="capacity scenario: the load ladder and its SLO",
    in_all=False,
)
run_capacity = SCENARIO.run
