"""The wire scenario: faults between the SUT's proxy and the replicas, at the stream's units.

  split — every SSE frame reaches the proxy in two TCP segments
  reset — every stream's connection is reset after a few events (a replica or link lost)
  error — every stream is ended after a few events by an in-stream error event and [DONE],
          as vLLM ends a generation that failed
  stall — every stream goes silent for 10 s after a few events (well inside the proxy's declared
          streaming timeout), then goes on
  hangup — the client hangs up on every stream after a few events (the fault point relays
          untouched): the generation behind it must stop, not run on for nobody
  slowread — the client reads every stream at 256 KiB/s while the replicas offer 16 KiB tokens
          as fast as they can be taken (the fault point relays untouched): the proxy must hold
          back what its client has not taken, its resident memory read before and at its peak
  slowlink — every stream crosses a slow, jittery link (each chunk held 50 ± 40 ms, then sent
          at a rate such that a stream takes about 8 s whole, or half the proxy's declared
          streaming timeout where that is shorter): slow but alive, it must arrive whole
Each part puts the fault point (`node.faultpoint`) in front of the replicas and a proxy of its
own in front of the fault point, sends its streams through it, and stops both; the replicas
stay up. What the fault point forwarded is set beside what the client got and what the
replicas served (`wire_checks`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from dd_accept import deployment
from dd_accept.acceptance import wire_checks as checks
from dd_accept.acceptance.analysis import requests, with_prefix
from dd_accept.acceptance.declaration import Scenario
from dd_accept.acceptance.phases import Phase, ScenarioRun, stopping
from dd_accept.acceptance.plan import NODE, PlannedCommand, Planner
from dd_accept.base.events import Event, RelayedResponse, UpstreamAttempt
from dd_accept.base.results import CheckResult
from dd_accept.base.waiting import wait_for_finding
from dd_accept.deployment.faultpoint import FaultPoint, fault_point_launch, start_fault_point
from dd_accept.deployment.placement import FAULT_POINT_PORT_BASE, REPLICA_PORT_BASE
from dd_accept.deployment.step_usage import sample_usage, sample_while_running
from dd_accept.node.faultpoint import SlowLink
from dd_accept.slurm_docker.allocation import scancel_argv
from dd_accept.sut.profile import SutProfile

FAULTS = {  # part: what the fault point does to every stream of it
    "split": "every SSE frame reaches the proxy in two TCP segments",
    "reset": "every stream's connection is reset after a few events",
    "error": "every stream is ended after a few events by an in-stream error event",
    "stall": "every stream goes silent mid-way, for less than the proxy's streaming timeout",
    "hangup": "the client hangs up on every stream after a few events",
    "slowread": "the client reads every stream slower than the replicas write it",
    "slowlink": "every stream crosses a slow link: each chunk held a jittered latency, the connection's rate low",
}
# The fault point's fault in a part not named after it ("none": the part's fault is not the
# fault point's, it relays untouched).
POINT_FAULT = {"hangup": "none", "slowread": "none", "slowlink": "slow"}
T = TypeVar("T", RelayedResponse, UpstreamAttempt)  # a record that names its request
# Far above scheduling noise, far below rc1's 3600 s streaming timeout, and longer than the read
# timeouts a proxy written on a client's defaults ends up with (httpx's 5 s): a model pauses
# for seconds mid-stream while a long prompt is prefilled beside it or its batch is preempted.
STALL_S = 10.0
# How long past its own length (a stall included) the client waits for a stream in the parts it
# reads whole: a proxy that holds a cut stream open, keep-alive comments and all, is then a hang
# the client records (`wire.cut_visible`), not one the run waits on until the harness gives up.
STREAM_BOUND_S = 15.0


def stall_seconds(profile: SutProfile) -> float:
    """How long a stream goes silent in the stall part."""
    return profile.telemetry.within_streaming_timeout(STALL_S)


JUDGES = {
    "split": checks.split_frames,
    "reset": checks.cut_visible,
    "error": checks.error_event,
    "stall": checks.stall_survived,  # judged against the proxy's declared streaming timeout
    "hangup": checks.cancel_stops_generation,  # judged on the replicas' records
    "slowread": checks.slow_reader_bounded,  # judged on the proxy's resident memory
    "slowlink": checks.slow_link_survived,  # judged against the proxy's declared streaming timeout
}


@dataclass(frozen=True, slots=True)
class SlowReaderPart:
    """slowread: streams of 4096 tokens of 16 KiB (64 MiB each), read at 256 KiB/s and left
    after 96 events (1.5 MiB, about 6 s): a proxy that gathers holds far more than one that
    waits. What it gathers is what its replicas wrote meanwhile, and a busy machine writes
    slower: in 2 s (32 events), beside a loaded CI stage, a gathering proxy held only 15.7 MiB,
    under the 32 MiB bound; the longer read leaves it no such margin."""

    streams: int = 3
    tokens: int = 4096
    token_bytes: int = 16384
    read_kib_s: int = 256
    events: int = 96


@dataclass(frozen=True, slots=True)
class SlowLinkPart:
    """slowlink: streams of 64 tokens of 2 KiB (128 KiB each) through a link that holds each
    chunk 50 ± 40 ms, then sends it at a rate that makes a stream take about `stream_s` whole
    (the fault point reads a replica's next chunk once it has sent the last: each chunk pays
    its latency and its time on the wire in turn). No silence lasts more than a fraction of a
    second; each stream lasts far longer than a proxy that bounds a whole response (not its
    silences) would let it."""

    tokens: int = 64
    token_bytes: int = 2048
    latency_ms: int = 50
    jitter_ms: int = 40
    stream_s: float = 8.0

    def link(self, profile: SutProfile, seed: int) -> SlowLink:
        """The fault point's link, scaled down where half the proxy's declared streaming
        timeout is shorter than `stream_s`: a stream must take less than what it declares."""
        scale = profile.telemetry.within_streaming_timeout(self.stream_s) / self.stream_s
        latency_s = self.latency_ms / 1000 * scale
        sending_s = self.stream_s * scale - self.tokens * latency_s  # what is left of it for the rate
        return SlowLink(latency_s, self.jitter_ms / 1000 * scale, self.tokens * self.token_bytes / sending_s, seed)


@dataclass(frozen=True, slots=True)
class WireOptions:
    replicas: int = 2
    streams: int = 12
    concurrency: int = 6
    tokens: int = 16  # longer than `after_events`: every stream is faulted mid-way
    itl_ms: int = 20
    after_events: int = 4  # data events forwarded before a reset or an error event, or the client hangs up
    hangup_tokens: int = 300  # 6 s at 20 ms: a generation left running is far longer than one stopped
    slow_reader: SlowReaderPart = SlowReaderPart()
    slow_link: SlowLinkPart = SlowLinkPart()
    seed: int = 0


@dataclass
class WireRun(ScenarioRun):
    """One wire run's state: the replicas for every part, and each part's fault point, proxy
    and what its streams saw (client events, the fault point's records)."""

    options: WireOptions
    replicas: deployment.ReplicaSet | None = None
    point: FaultPoint | None = None
    proxy: deployment.Proxy | None = None
    seen: dict[str, tuple[list[Event], list[RelayedResponse]]] = field(default_factory=dict)
    # by part: the replicas' records of the streams the client left
    left: dict[str, list[UpstreamAttempt]] = field(default_factory=dict)
    # slowread: the proxy's RSS before its streams, its peak after (None: its step had ended)
    proxy_memory_kb: tuple[int, int | None] = (0, 0)


def _replicas(o: WireOptions) -> dict[str, Any]:
    """How the replicas are started (the run's and the plan's keywords): exact streams, so
    every one is longer than the events the fault point lets through."""
    return {"seed": o.seed, "options": ("--ttft-ms", "20", "--itl-ms", str(o.itl_ms)), "exact": True}


def _deploy_replicas(s: WireRun) -> None:
    s.replicas = deployment.start_replicas(s.allocation, s.options.replicas, run=s.run, profile=s.profile,
                                           **_replicas(s.options))  # fmt: skip


def _plan_replicas(p: Planner) -> list[PlannedCommand]:
    o = p.options
    return [p.replicas(f"{o.replicas} synthetic replicas, one task each, exact stream lengths", o.replicas,
                       **_replicas(o))]  # fmt: skip


def _deploy(part: str) -> Callable[[WireRun], None]:
    def deploy(s: WireRun) -> None:
        assert s.replicas is not None, "the replicas are deployed first"
        s.point = start_fault_point(s.allocation, s.replicas, s.run, name=f"faultpoint-{part}",
                                    fault=POINT_FAULT.get(part, part), after_events=s.options.after_events,
                                    stall_s=stall_seconds(s.profile),
                                    link=s.options.slow_link.link(s.profile, s.options.seed))  # fmt: skip
        s.proxy = deployment.start_proxy(s.allocation, s.replicas, profile=s.profile, backends=s.point.backends,
                                         log_name=f"proxy-{part}.log")  # fmt: skip

    return deploy


def _plan_deploy(part: str) -> Callable[[Planner], list[PlannedCommand]]:
    def plan(p: Planner) -> list[PlannedCommand]:
        o = p.options
        upstreams = [(NODE, REPLICA_PORT_BASE + index) for index in range(o.replicas)]
        point = fault_point_launch(p.target.layout.python, upstreams, NODE, f"{p.run_path()}/faultpoint-{part}",
                                   POINT_FAULT.get(part, part), o.after_events, stall_s=stall_seconds(p.profile),
                                   link=o.slow_link.link(p.profile, o.seed))  # fmt: skip
        return [
            p.srun(f"the fault point in front of every replica: {FAULTS[part]}", point.argv, point.options),
            p.proxy("the SUT's proxy in front of the fault point", o.replicas, port_base=FAULT_POINT_PORT_BASE,
                    log=f"proxy-{part}.log"),
        ]  # fmt: skip

    return plan


def _load(o: WireOptions, part: str, profile: SutProfile) -> dict[str, Any]:
    """What the client sends in a part (the run's and the plan's keywords): one attempt per
    stream, so what a fault did to it is what the client records, each given up on
    STREAM_BOUND_S past its length. In the hangup part the streams are long and the client
    leaves each after `after_events`; in the slowread part, after a few of its slow reads."""
    load = {"records": o.streams, "concurrency": o.concurrency, "max_tokens": o.tokens, "max_record_attempts": 1,
            "deadline_s": 60, "stream_deadline_s": STREAM_BOUND_S}  # fmt: skip
    if part == "hangup":
        load |= {"max_tokens": o.hangup_tokens, "hang_up_after": o.after_events, "stream_deadline_s": 0}
    if part in ("stall", "slowlink"):  # every stream at once: one slow stretch to wait out, not one per wave
        load |= {"concurrency": o.streams}
    if part == "stall":
        load |= {"stream_deadline_s": stall_seconds(profile) + STREAM_BOUND_S}
    if part == "slowlink":  # a stream takes the link's time whole (at most stream_s; twice it for the noise)
        load |= {"max_tokens": o.slow_link.tokens, "stream_deadline_s": 2 * o.slow_link.stream_s + STREAM_BOUND_S}
    if part == "slowread":
        slow = o.slow_reader
        load |= {"records": slow.streams, "concurrency": slow.streams, "max_tokens": slow.tokens,
                 "hang_up_after": slow.events, "read_bytes_per_s": slow.read_kib_s * 1024,
                 "stream_deadline_s": 0}  # fmt: skip
    return load


def _drive(part: str) -> Callable[[WireRun], None]:
    def drive(s: WireRun) -> None:
        assert s.proxy is not None and s.point is not None, "the part's proxy is deployed first"
        client = deployment.run_client(s.allocation, s.proxy, s.run, mode="raw", profile=s.profile, name=part,
                                       **_load(s.options, part, s.profile))  # fmt: skip
        record = client.wait(timeout=120)
        if not record.ok:
            raise RuntimeError(f"load client failed: {record.describe()}")
        client_events = deployment.read_events(s.run, part)
        if part in LEFT_WITHIN_S:  # before the part's proxy is stopped: its stop would end a runaway generation
            s.left[part] = _served(s, client_events, LEFT_WITHIN_S[part](s.options))
        s.seen[part] = (client_events, _relayed_of(s.point, client_events, stall_seconds(s.profile) + 5))

    return drive


# The parts whose client leaves its streams, and how long after that a generation left
# running for nobody ends by itself at the replica (its records are waited for that long).
LEFT_WITHIN_S: dict[str, Callable[[WireOptions], float]] = {
    "hangup": lambda o: o.hangup_tokens * o.itl_ms / 1000 + 5,
    "slowread": lambda o: 15.0,  # unpaced: 64 MiB a stream go in seconds where nothing holds them back
}


@contextmanager
def _large_tokens(s: WireRun, itl_ms: int, token_bytes: int) -> Iterator[None]:
    """The replicas writing tokens of `token_bytes` every `itl_ms` meanwhile, then as they
    started (for the parts after this one)."""
    assert s.replicas is not None, "the replicas are deployed first"
    s.replicas.control(None, "pace", itl_ms=itl_ms, exact=True, token_bytes=token_bytes)
    try:
        yield
    finally:
        s.replicas.control(None, "pace")


def _drive_slow_reader(part: str) -> Callable[[WireRun], None]:
    """The part's streams with the replicas writing large tokens unpaced, the proxy step's
    memory read before them and at its peak after (the kernel's VmHWM)."""
    streams = _drive(part)

    def drive(s: WireRun) -> None:
        with _large_tokens(s, 0, s.options.slow_reader.token_bytes):
            before = sample_usage(s.allocation, ("proxy",))
            streams(s)
            # the peak so far, not the size now: a proxy's start-up peak is no growth under the reader
            s.proxy_memory_kb = (max(before.rss_kb["proxy"], before.peak_rss_kb.get("proxy", 0)), _peak_after(s))

    return drive


def _drive_slow_link(part: str) -> Callable[[WireRun], None]:
    """The part's streams with the replicas writing tokens large enough for the link's rate,
    not its latency, to set how long a stream takes."""
    streams = _drive(part)

    def drive(s: WireRun) -> None:
        with _large_tokens(s, s.options.itl_ms, s.options.slow_link.token_bytes):
            streams(s)

    return drive


def _peak_after(s: WireRun) -> int | None:
    """The proxy step's peak resident kB; None where its step ended during the streams (a
    proxy killed for the memory it gathered is the check's finding, not the harness's)."""
    assert s.proxy is not None
    after = sample_while_running(s.allocation, ("proxy",), s.proxy.step)
    return None if after is None else after.peak_rss_kb["proxy"]


DRIVES = {"slowread": _drive_slow_reader, "slowlink": _drive_slow_link}


def _relayed_of(point: FaultPoint, client: list[Event], timeout: float) -> list[RelayedResponse]:
    """The fault point's records of the client's requests. A response is recorded when it
    ends at the fault point, which can be after the client has its answer (a proxy that gave
    up during a stall leaves the fault point asleep): waited for, briefly; a request the
    fault point never saw is never waited out longer than `timeout`."""
    sent = {e.request_id for e in requests(client) if e.request_id}
    return _records_of(point.relayed, sent, timeout, "the fault point's record of every request")


def _records_of(read: Callable[[], list[T]], ids: set[str | None], timeout: float, what: str) -> list[T]:
    """What `read` returns once it holds a record of every id in `ids`, or after `timeout`
    whatever it then holds: a record that never comes is evidence for a check, not an error."""
    found = wait_for_finding(read, lambda got: ids <= {r.request_id for r in got}, timeout=timeout, what=what)
    return read() if found is None else found


def _plan_drive(part: str) -> Callable[[Planner], list[PlannedCommand]]:
    return lambda p: [
        p.client(
            f"{p.options.streams} streams through the proxy", part, mode="raw", **_load(p.options, part, p.profile)
        )
    ]


def _stop_part(s: WireRun) -> None:
    """The part's proxy, then its fault point (TERM to their steps); the replicas stay."""
    for attribute in ("proxy", "point"):
        started = getattr(s, attribute)
        if started is not None:
            started.stop()
            setattr(s, attribute, None)


def _plan_stop_part(p: Planner) -> list[PlannedCommand]:
    return [
        PlannedCommand("stop the proxy: TERM to its step", scancel_argv("$PROXY_STEP", "TERM")),
        PlannedCommand("stop the fault point: TERM to its step", scancel_argv("$FAULTPOINT_STEP", "TERM")),
    ]


def _judge(part: str) -> Callable[[WireRun], None]:
    return lambda s: s.result.add(JUDGED[part](s))


def _judge_slow_reader(s: WireRun) -> CheckResult:
    slow = s.options.slow_reader
    before, peak = s.proxy_memory_kb
    offered = slow.tokens * slow.token_bytes / 2**20
    client, left = s.seen["slowread"][0], s.left["slowread"]
    return checks.slow_reader_bounded(client, left, before, peak, offered, slow.read_kib_s)


# Each part's check, given what its streams saw (JUDGES names which check it is).
JUDGED: dict[str, Callable[[WireRun], CheckResult]] = {
    "split": lambda s: checks.split_frames(*s.seen["split"]),
    "reset": lambda s: checks.cut_visible(*s.seen["reset"]),
    "error": lambda s: checks.error_event(*s.seen["error"]),
    "stall": lambda s: checks.stall_survived(*s.seen["stall"], s.profile.telemetry.streaming_timeout_seconds),
    "hangup": lambda s: checks.cancel_stops_generation(
        s.seen["hangup"][0], s.left["hangup"], s.options.hangup_tokens, s.options.after_events
    ),
    "slowread": _judge_slow_reader,
    "slowlink": lambda s: checks.slow_link_survived(*s.seen["slowlink"], s.profile.telemetry.streaming_timeout_seconds),
}


def _served(s: WireRun, client: list[Event], longest: float) -> list[UpstreamAttempt]:
    """The replicas' records of the streams the client hung up on, waited for while the
    part's proxy still runs. A replica records a stream when it ends: one left generating for
    nobody ends by itself at its last token, so the records are waited for `longest`; one
    still missing then never ended at a replica (held open unread, or its request id was not
    forwarded)."""
    assert s.replicas is not None
    replicas = s.replicas
    left = {e.request_id for e in requests(client) if e.outcome == "hung_up" and e.request_id}

    def served() -> list[UpstreamAttempt]:
        return [a for a in replicas.events() if isinstance(a, UpstreamAttempt) and a.request_id in left]

    return _records_of(served, left, longest, "the replicas' record of every stream the client left")


def _judge_no_retry(s: WireRun) -> None:
    assert s.replicas is not None
    client = [event for part in ("reset", "error") for event in s.seen[part][0]]
    relayed = [record for part in ("reset", "error") for record in s.seen[part][1]]
    upstream = [a for part in ("reset", "error") for a in with_prefix(s.replicas.events(), f"{part}-")]
    s.result.add(checks.no_retry_after_first_byte(client, relayed, upstream))


def _part(part: str) -> tuple[Phase[WireRun], ...]:
    judged = JUDGES[part].check_id
    return (
        Phase("deploy", f"{part}: the fault point and a proxy in front of it", _deploy(part), _plan_deploy(part),
              segments=(part,)),
        Phase("drive", f"{part}: streams through the fault point", DRIVES.get(part, _drive)(part), _plan_drive(part),
              fault=FAULTS[part], segments=(part,)),
        Phase("stop", f"{part}: stopping its proxy and fault point", _stop_part, _plan_stop_part, segments=(part,)),
        Phase("judge", f"{part}: what the streams saw", _judge(part), judges=(judged,), segments=(part,)),
    )  # fmt: skip


PHASES: tuple[Phase[WireRun], ...] = (
    Phase("deploy", "deploying replicas", _deploy_replicas, _plan_replicas,
          numbers=lambda s: {"replicas": s.options.replicas}),
    *(phase for part in FAULTS for phase in _part(part)),
    Phase("judge", "no retry after the first byte", _judge_no_retry, judges=("wire.no_retry_after_first_byte",),
          segments=("reset", "error")),
    Phase("stop", "stopping a part's proxy and fault point", _stop_part, teardown=True),
    stopping("replicas"),
)  # fmt: skip

SCENARIO = Scenario(
    "wire",
    "faults between the proxy and the replicas: split frames, cut streams, in-stream errors, slow readers and links",
    WireOptions,
    PHASES,
    WireRun,
)
run_wire = SCENARIO.run
