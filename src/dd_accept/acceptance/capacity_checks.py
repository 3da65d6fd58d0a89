"""The capacity checks: where the SUT's proxy stops meeting its SLO, what it costs per chunk,
and whether the harness, not the proxy, was what ran out.

A load level is judged from three independent views: the load client's (each chunk's
arrival), the replicas' (each chunk's write, on the same kernel clock: containers share
it), and the kernel's CPU counters of each step on the nodes. So the delay a chunk spends
in the proxy is measured, not inferred from the client's view alone, and the cost per
chunk is the proxy's own CPU time over the chunks the replicas sent through it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from dd_accept.acceptance.analysis import attempts_by_request, chunk_delays, lined_up
from dd_accept.acceptance.registry import check
from dd_accept.base.events import ClientRequest, UpstreamAttempt
from dd_accept.base.percentiles import percentile
from dd_accept.base.regressions import (
    KNEE_THROUGHPUT,
    LIGHT_CHUNK_DELAY,
    PROXY_CPU_PER_CHUNK,
    at_level,
    cheapest_median,
)
from dd_accept.base.results import CheckResult

# The share of the time the proxy may wait for a CPU another process holds, at the knee and
# where the SLO first broke. A proxy that waited w of the time could have run 1/(1-w) as fast
# on a machine of its own: at 25% its knee is understated by at most a third, less than one
# ladder step (x1.5), so the knee found is at most one level below the proxy's own. rc1 waits
# 9.8-18.4% at its knee on 2 cores (benchmarks/capacity.py); two busy loops beside it, 37%.
PROXY_WAIT_LIMIT = 0.25
# A virtual machine whose hypervisor takes this share of its CPU time (steal, in /proc/stat)
# runs every process that much slower, which no run-queue wait of its own shows: on
# 2026-12-02 this machine's steal was 39-52% at rc1's knee, which fell from 8,754 to 2,749
# tokens/s while its proxy waited for a CPU only 13-16% of the time.
STOLEN_LIMIT = 0.25
# The load client is one event loop: at this share of a core it is what limits the load,
# whatever its share of the whole (a proxy with many workers makes the share small).
CLIENT_CORE_LIMIT = 0.85
# Below this the kernel's count (10 ms ticks) cannot tell a proxy's cost from none.
MEASURABLE_CPU_S = 0.05


@dataclass(frozen=True, slots=True)
class LoadLevel:
    """One level of the ladder, as measured."""

    index: int
    load: float  # streams in flight, or requests/s
    requests: int
    failed: int  # attempts that did not end with a whole stream
    chunks: int  # data events the replicas wrote for this level's requests
    window_s: float  # how long the client sent
    output_throughput: float  # chunks the client received whole, per second of the window
    added_ttft_p95_ms: float | None
    chunk_delay_p50_ms: float | None
    chunk_delay_p95_ms: float | None
    proxy_cpu_s: float  # what the load added to the proxy's CPU (its idle use taken off)
    replicas_cpu_s: float  # the same, for the replicas
    client_cpu_s: float  # the load client's CPU while it sent
    proxy_rss_kb: int
    machine_busy: float  # the machine's busy share while the client sent (0-1)
    client_error: str = ""  # the load client did not end well: the level is broken, the curve kept
    # Seconds the proxy was ready to run while another process held the CPU (the kernel's
    # run-queue wait): what the harness, or anything else, took from it.
    proxy_wait_s: float = 0.0
    unpaired: int = 0  # streams whose chunks could not be paired with the replica's (counts differ)
    machine_stolen: float = 0.0  # the share of the machine's CPU time a hypervisor took (steal)

    @property
    def proxy_wait_share(self) -> float:
        """The share of the client's window the proxy spent waiting for a CPU."""
        return self.proxy_wait_s / self.window_s if self.window_s > 0 else 0.0

    @property
    def client_core_share(self) -> float:
        """How much of one core the load client used while it sent."""
        return self.client_cpu_s / self.window_s if self.window_s > 0 else 0.0

    @property
    def proxy_core_share(self) -> float:
        """How much of one core the proxy used while the client sent."""
        return self.proxy_cpu_s / self.window_s if self.window_s > 0 else 0.0

    @property
    def harness_cpu_s(self) -> float:
        return self.replicas_cpu_s + self.client_cpu_s

    @property
    def proxy_cpu_us_per_chunk(self) -> float | None:
        """None when too little CPU or no chunk was measured: never a cost of 0."""
        if not self.chunks or self.proxy_cpu_s < MEASURABLE_CPU_S:
            return None
        return self.proxy_cpu_s / self.chunks * 1e6

    @property
    def harness_share(self) -> float | None:
        used = self.proxy_cpu_s + self.harness_cpu_s
        return self.harness_cpu_s / used if used > 0 else None

    def to_json(self) -> dict[str, object]:
        return asdict(self) | {
            "proxy_cpu_us_per_chunk": self.proxy_cpu_us_per_chunk,
            "harness_share": self.harness_share,
            "harness_cpu_s": self.harness_cpu_s,
            "proxy_wait_share": self.proxy_wait_share,
        }


def measure_level(
    index: int,
    load: float,
    client: list[ClientRequest],
    upstream: list[UpstreamAttempt],
    *,
    window_s: float,
    proxy_cpu_s: float,
    replicas_cpu_s: float,
    client_cpu_s: float,
    proxy_rss_kb: int,
    machine_busy: float,
    client_error: str = "",
    proxy_wait_s: float = 0.0,
    machine_stolen: float = 0.0,
) -> LoadLevel:
    attempts = attempts_by_request(upstream)
    added_ttft: list[float] = []
    delays: list[float] = []
    received = unpaired = 0
    for stream in client:
        if stream.outcome != "ok":
            continue
        received += stream.chunks or 0
        sent = [a for a in attempts.get(stream.request_id or "", []) if a.generated_whole]
        # Chunks pair one to one by position: a stream whose counts differ (an event the
        # proxy dropped or added) would shift every later pair, so it is left out, counted.
        if len(sent) != 1 or not lined_up(stream, sent[0]):
            unpaired += 1
            continue
        if stream.ttft_s is not None and sent[0].first_byte_s is not None:
            added_ttft.append(stream.ttft_s - sent[0].first_byte_s)
        delays += chunk_delays(stream, sent[0])

    def ms(value: float | None) -> float | None:
        return None if value is None else round(value * 1000, 3)

    return LoadLevel(
        index=index,
        load=load,
        requests=len(client),
        failed=sum(1 for stream in client if stream.outcome != "ok"),
        chunks=sum(a.data_events for a in upstream),
        window_s=window_s,
        output_throughput=received / window_s if window_s > 0 else 0.0,
        added_ttft_p95_ms=ms(percentile(added_ttft, 0.95)),
        chunk_delay_p50_ms=ms(percentile(delays, 0.5)),
        chunk_delay_p95_ms=ms(percentile(delays, 0.95)),
        proxy_cpu_s=proxy_cpu_s,
        replicas_cpu_s=replicas_cpu_s,
        client_cpu_s=client_cpu_s,
        proxy_rss_kb=proxy_rss_kb,
        machine_busy=machine_busy,
        client_error=client_error,
        proxy_wait_s=proxy_wait_s,
        unpaired=unpaired,
        machine_stolen=machine_stolen,
    )


@dataclass(frozen=True, slots=True)
class Slo:
    """What every request of a level must see for the level to count as served."""

    added_ttft_ms: float
    chunk_delay_ms: float

    def broken_by(self, level: LoadLevel) -> str:
        """Why the level breaks the SLO, or "" when it meets it."""
        if level.client_error:
            return f"the load client failed: {level.client_error}"
        if level.requests == 0:
            return "no request was sent"
        if level.failed:
            return f"{level.failed} of {level.requests} requests failed"
        if level.added_ttft_p95_ms is None or level.chunk_delay_p95_ms is None:
            return "no stream could be matched with the replica that served it"
        if level.added_ttft_p95_ms > self.added_ttft_ms:
            return f"added TTFT p95 {level.added_ttft_p95_ms:.1f} ms > {self.added_ttft_ms:g} ms"
        if level.chunk_delay_p95_ms > self.chunk_delay_ms:
            return f"chunk delay p95 {level.chunk_delay_p95_ms:.1f} ms > {self.chunk_delay_ms:g} ms"
        return ""

    def describe(self) -> str:
        return (
            f"no failed request, added TTFT p95 <= {self.added_ttft_ms:g} ms, "
            f"chunk delay p95 <= {self.chunk_delay_ms:g} ms"
        )


@dataclass(frozen=True, slots=True)
class Curve:
    """The ladder as climbed: every level measured, in order, and the SLO they were held to."""

    levels: tuple[LoadLevel, ...]
    slo: Slo
    unit: str  # "streams in flight" or "requests/s"
    top: float  # the last level the ladder holds
    # How the ladder was built (base.regressions.LADDER): two knees compare only when equal.
    ladder: tuple[tuple[str, float], ...] = ()

    @property
    def knee(self) -> LoadLevel | None:
        """The highest level that met the SLO before it broke at two levels in a row (one
        level late by its latency between two served ones is noise, not the knee). A level
        with a failed request is never noise: the knee is below it."""
        best = None
        broken_run = 0
        for level in self.levels:
            if level.failed or level.client_error:
                break
            if self.slo.broken_by(level):
                broken_run += 1
                if broken_run >= 2:
                    break
            else:
                broken_run = 0
                best = level
        return best

    @property
    def stopped_by_failure(self) -> LoadLevel | None:
        return next((lvl for lvl in self.levels if lvl.failed or lvl.client_error), None)

    @property
    def first_broken(self) -> LoadLevel | None:
        knee = self.knee
        after = [lvl for lvl in self.levels if knee is None or lvl.index > knee.index]
        return next((lvl for lvl in after if self.slo.broken_by(lvl)), None)

    @property
    def judged(self) -> LoadLevel | None:
        """Where cost and headroom are read: at the knee, or at the first level when none met the SLO."""
        return self.knee or (self.levels[0] if self.levels else None)

    def show(self, level: LoadLevel) -> str:
        return f"level {level.index + 1} ({level.load:g} {self.unit})"

    @property
    def light(self) -> LoadLevel | None:
        """The lightest level: where a chunk's delay is the proxy's own, not queueing."""
        return self.levels[0] if self.levels else None

    def where_it_broke(self) -> str:
        broken = self.first_broken
        if broken is None:
            return f"the SLO held up to the ladder's top ({self.top:g} {self.unit})"
        return f"broke at {self.show(broken)}: {self.slo.broken_by(broken)}"


@check("capacity.knee")
def knee(curve: Curve, floor: float) -> CheckResult:
    """The highest load that meets the SLO carries at least `floor` output tokens per second.

    A proxy that blocks its event loop for a moment per chunk, or that burns CPU per chunk,
    serves every single stream correctly and passes every behavioural check; under load its
    knee comes early. The floor is the profile's (rc1's measured knee less its spread) or
    the one a gate sets."""
    found = curve.knee
    ok = found is not None and found.output_throughput >= floor
    # Below the floor on a machine that starved the proxy, the knee is the machine's: the
    # check still fails (there is no knee to vouch for), as "not judged", never as the SUT's.
    starved = [] if ok else harness_bound(curve)
    metrics: dict[str, float] = {"levels_run": float(len(curve.levels)), **dict(curve.ladder)}
    light = curve.light
    if light is not None and light.chunk_delay_p50_ms is not None:
        metrics[LIGHT_CHUNK_DELAY] = light.chunk_delay_p50_ms
    if found is not None:
        observed = (
            f"knee at {curve.show(found)}: {found.output_throughput:.0f} output tokens/s, "
            f"chunk delay p95 {found.chunk_delay_p95_ms:.1f} ms; {curve.where_it_broke()}"
        )
        metrics |= {
            "knee_load": found.load,
            KNEE_THROUGHPUT: round(found.output_throughput, 1),
            "knee_chunk_delay_p95_ms": found.chunk_delay_p95_ms or 0.0,
        }
    else:
        first = curve.levels[0] if curve.levels else None
        observed = "no load level met the SLO" + (
            f"; {curve.show(first)}: {curve.slo.broken_by(first)}" if first is not None else ""
        )
        metrics[KNEE_THROUGHPUT] = 0.0
    return CheckResult.judge(
        knee.check_id,
        ok,
        f"the SLO ({curve.slo.describe()}) holds up to at least {floor:g} output tokens/s",
        observed,
        (not_judged(starved) + "; " if starved else "")
        + "; ".join(
            f"{lvl.load:g}: {lvl.output_throughput:.0f} tok/s, delay p95 {lvl.chunk_delay_p95_ms} ms"
            + (f" ({curve.slo.broken_by(lvl)})" if curve.slo.broken_by(lvl) else "")
            for lvl in curve.levels
        ),
        metrics,
    )


@check("capacity.proxy_cpu_per_chunk")
def proxy_cpu_per_chunk(curve: Curve, limit_us: float) -> CheckResult:
    """The proxy's own CPU time (the kernel's count for its step, its idle use taken off) per
    chunk the replicas sent through it, where forwarding was cheapest (the median of the three
    cheapest levels, so one level's reading error does not decide): a release that makes
    forwarding a token cost more shows here even where the machine still had CPU to spare.

    Why the cheapest level and not the knee: at light load every chunk wakes an idle event
    loop, and the wake-ups cost more than the forwarding (rc1: 170 us per chunk at 8 streams,
    40-65 us from 60 streams up); that cost is the machine's, and only adds. Per-event work a
    release adds is paid at every level, the busiest too."""
    costs = {lvl.load: c for lvl in curve.levels if (c := lvl.proxy_cpu_us_per_chunk) is not None}
    read = cheapest_median(costs)
    level = next((lvl for lvl in curve.levels if read is not None and lvl.load == read[0]), None)
    cost = read[1] if read is not None else None
    ok = cost is not None and cost <= limit_us
    if level is None or cost is None:
        observed = "no level measured the proxy's CPU (no chunk went through it, or too little CPU to count)"
        metrics: dict[str, float] = {}
    else:
        observed = (
            f"{cost:.1f} us of proxy CPU per chunk at {curve.show(level)} (median of its cheapest): "
            f"{level.proxy_cpu_s:.2f} s "
            f"for {level.chunks} chunks; proxy RSS {level.proxy_rss_kb / 1024:.0f} MiB"
        )
        metrics = {
            PROXY_CPU_PER_CHUNK: round(cost, 2),
            "proxy_rss_mib": round(level.proxy_rss_kb / 1024, 1),
            # each level's, so a comparison reads both runs on the levels both reached
            **{at_level(PROXY_CPU_PER_CHUNK, load): round(value, 2) for load, value in costs.items()},
        }
    return CheckResult.judge(
        proxy_cpu_per_chunk.check_id,
        ok,
        f"the proxy spends at most {limit_us:g} us of CPU per chunk it forwards, where it forwards most cheaply",
        observed,
        "per level: "
        + "; ".join(
            f"{lvl.load:g}: " + (f"{c:.1f} us" if (c := lvl.proxy_cpu_us_per_chunk) is not None else "not measured")
            for lvl in curve.levels
        ),
        metrics,
    )


def placing_levels(curve: Curve) -> list[LoadLevel]:
    """The levels that place the knee (the knee and where the SLO first broke) whose CPU was
    measured."""
    levels = [curve.judged, curve.first_broken]
    watched = [lvl for i, lvl in enumerate(levels) if lvl is not None and lvl not in levels[:i]]
    return [lvl for lvl in watched if lvl.harness_share is not None]


def harness_bound(
    curve: Curve, wait_limit: float = PROXY_WAIT_LIMIT, client_limit: float = CLIENT_CORE_LIMIT
) -> list[str]:
    """Why the knee is the harness's rather than the proxy's, one reason per level that
    places it: the machine's hypervisor took its CPU (steal), the proxy waited for a CPU
    another process held, or the load client neared a full core. Empty when the proxy bounded
    it (or nothing was measured)."""

    def bound(level: LoadLevel) -> str:
        if level.machine_stolen > STOLEN_LIMIT:
            return f"the machine's hypervisor took {level.machine_stolen:.0%} of its CPU time at {curve.show(level)}"
        if level.client_core_share >= client_limit:
            return f"the load client used {level.client_core_share:.0%} of a core at {curve.show(level)}"
        if level.proxy_wait_share > wait_limit:
            return f"the proxy waited for a CPU {level.proxy_wait_share:.0%} of the time at {curve.show(level)}"
        return ""

    return [reason for lvl in placing_levels(curve) if (reason := bound(lvl))]


def not_judged(reasons: list[str]) -> str:
    """How a capacity check says its number is the harness's (empty when it is the proxy's)."""
    return f"not judged: the knee is bounded by the harness, not by the proxy ({'; '.join(reasons)})" if reasons else ""


@check("capacity.harness_headroom")
def harness_headroom(
    curve: Curve, wait_limit: float = PROXY_WAIT_LIMIT, client_limit: float = CLIENT_CORE_LIMIT
) -> CheckResult:
    """The harness did not bound the knee: at the knee and where the SLO first broke (the two
    levels that place it), the proxy waited for a CPU another process held (the kernel's
    run-queue wait of its threads) at most `wait_limit` of the time, and the load client (one
    event loop) used less than `client_limit` of a core.

    Why run-queue wait and not the harness's share of the CPU: the harness slows the proxy
    only by holding a CPU when the proxy is ready to run, and the kernel counts exactly that
    time. The share says what the harness spends beside the proxy (rc1: 43-47%, each token a
    send on the replica and a receive on the client), not whether the proxy waited for it.
    Past the bound, or with the client near a full core, this check fails as "not judged":
    the knee is not the proxy's alone. The share, the machine's busy share over the client's
    window and the proxy's share of a core are reported beside it."""
    measured = placing_levels(curve)
    expected = (
        f"at the knee and where the SLO first broke, the proxy waits for a CPU another process holds at most "
        f"{wait_limit:.0%} of the time, the load client uses under {client_limit:.0%} of a core, and the "
        f"machine's hypervisor takes at most {STOLEN_LIMIT:.0%} of its CPU time"
    )
    if not measured:
        return CheckResult.judge(
            harness_headroom.check_id, False, expected, "no CPU was measured", "not judged: the cost is unknown", {}
        )

    reasons = harness_bound(curve, wait_limit, client_limit)
    level = measured[0]
    observed = "; ".join(
        f"{curve.show(lvl)}: the proxy waited for a CPU {lvl.proxy_wait_share:.1%} of the time and ran "
        f"{lvl.proxy_core_share:.0%} of a core; harness {lvl.harness_share:.0%} of the run's CPU (replicas "
        f"{lvl.replicas_cpu_s:.2f} s, load client {lvl.client_cpu_s:.2f} s, proxy {lvl.proxy_cpu_s:.2f} s); "
        f"machine busy {lvl.machine_busy:.0%} (stolen by its hypervisor {lvl.machine_stolen:.0%}); load client at "
        f"{lvl.client_core_share:.0%} of a core"
        for lvl in measured
    )
    return CheckResult.judge(
        harness_headroom.check_id,
        not reasons,
        expected,
        observed,
        not_judged(reasons),
        {
            "proxy_wait_share": round(max(lvl.proxy_wait_share for lvl in measured), 4),
            "client_core_share": round(max(lvl.client_core_share for lvl in measured), 3),
            "harness_share": round(level.harness_share or 0.0, 3),
            "machine_busy": round(level.machine_busy, 3),
            "machine_stolen": round(max(lvl.machine_stolen for lvl in measured), 3),
            "proxy_core_share": round(level.proxy_core_share, 3),
        },
    )


def verdicts(knee_check: CheckResult, cost: CheckResult, headroom: CheckResult) -> tuple[list[CheckResult], str | None]:
    """What a capacity run reports: its checks, and why it could not be judged, if so.

    A machine short of CPU (its hypervisor took it, the harness held it, nothing could be
    measured) is the machine's trouble, not the SUT's: the run is not judged (exit 2, its
    `error` carries headroom's numbers), and no check it made meaningless is reported as a
    failure of the SUT. What such a machine cannot make wrong stays: the cost per chunk (read
    at the cheapest levels, the proxy's own CPU) and a knee that met its floor all the same."""
    if headroom.verdict == "pass":
        return [knee_check, cost, headroom], None
    kept = [cost] + ([knee_check] if knee_check.verdict == "pass" else [])
    why = f"capacity {headroom.detail}; {headroom.observed}"
    return kept, why
