"""The streaming scenario: integrity and buffering of SSE through the proxy, and its
connection accounting with keep-alive kept and with replicas closing every connection."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dd_accept import deployment
from dd_accept.acceptance import streaming_checks as checks
from dd_accept.acceptance.analysis import requests, with_prefix
from dd_accept.acceptance.declaration import Scenario
from dd_accept.acceptance.phases import (
    DeployedRun,
    Phase,
    deploy_proxy,
    plan_proxy,
    stopping,
)
from dd_accept.acceptance.plan import PlannedCommand, Planner
from dd_accept.acceptance.telemetry_records import find
from dd_accept.base.waiting import WaitTimeout, wait_until
from dd_accept.slurm_docker.allocation import BackgroundCommand
from dd_accept.sut.profile import SutProfile


@dataclass(frozen=True, slots=True)
class StreamingOptions:
    replicas: int = 8
    streams: int = 64
    concurrency: int = 32
    # The dense streams are long (about 2.6 s) so that a held stream stands far above a busy
    # machine's scheduling noise (no_buffering's held share: a stall must last 1.3 s to hold
    # one); 20 ms apart, the proxy forwards 1,600 events a second, which a starved machine
    # still keeps up with. The connection-accounting phases count connections, not tokens,
    # and stay short.
    tokens: int = 128
    accounting_tokens: int = 16
    itl_ms: int = 20
    # The sparse streams: events further apart than any scheduling noise measured (0.48 s per
    # event at most in CI, beside 0.28 s of added TTFT), each of which must reach the client
    # before the replica sends the next; started evenly over one gap, so that one stall of the
    # machine meets a part of each event position's.
    sparse_streams: int = 48
    sparse_tokens: int = 5
    sparse_itl_ms: int = 1500
    client_headers: tuple[str, ...] = ()
    seed: int = 0


@dataclass(frozen=True, slots=True)
class _ReplicaConnections:
    """Summed over the replicas at one state read."""

    accepted: int  # connections accepted, minus the one each state read itself opened
    with_requests: int  # connections that carried a request other than a health probe
    probes: int  # health-probe requests
    open: int  # connections open now, minus the state read's own


def _connection_counts(replicas: deployment.ReplicaSet) -> _ReplicaConnections:
    states = replicas.control(None, "state")
    return _ReplicaConnections(
        accepted=sum(state["connections_accepted"] - 1 for state in states),
        with_requests=sum(state["connections_with_requests"] for state in states),
        probes=sum(state["probe_requests"] for state in states),
        open=sum(state["open_connections"] - 1 for state in states),
    )


def sparse_gap_ms(o: StreamingOptions, profile: SutProfile) -> int:
    """The sparse streams' gap between events: theirs, or half the proxy's declared streaming
    timeout where that is shorter (a proxy may end a stream silent longer than it says; the
    wire scenario's stall keeps within it alike). no_buffering judges in shares of the gap
    the replicas kept, but never of less than this default one (its `least_gap_s`)."""
    return round(profile.telemetry.within_streaming_timeout(o.sparse_itl_ms / 1000) * 1000)


def _workload(o: StreamingOptions, name: str, profile: SutProfile) -> dict[str, Any]:
    """What the load client sends in each client phase (the run's and the plan's keywords):
    dense streams unless the phase says otherwise, one attempt each."""
    load: dict[str, Any] = {
        "headers": o.client_headers, "records": o.streams, "concurrency": o.concurrency, "max_tokens": o.tokens,
        "max_record_attempts": 1, "deadline_s": 120,
    }  # fmt: skip
    load.update(_PHASE_LOADS.get(name, lambda o, profile: {})(o, profile))
    return load


_PHASE_LOADS: dict[str, Any] = {
    # each event before the next: started evenly over one gap
    "sparse": lambda o, profile: {
        "records": o.sparse_streams,
        "concurrency": o.sparse_streams,
        "max_tokens": o.sparse_tokens,
        "arrival": "constant",
        "rate": o.sparse_streams / (sparse_gap_ms(o, profile) / 1000),
    },
    # One stream at a time over a warm pool: every request reuses, none opens, so the opened
    # and reused counters differ by construction.
    "sequential": lambda o, _: {"records": 16, "concurrency": 1, "max_tokens": o.accounting_tokens},
    "closing": lambda o, _: {"max_tokens": o.accounting_tokens},
    "routing": lambda o, _: {"records": ROUTING_STREAMS, "concurrency": 8, "max_tokens": 20},
}


def _pool_paths(profile: SutProfile) -> dict[str, str]:
    """Where the proxy's metrics hold its pool's counts (the profile's dotted paths)."""
    named = profile.telemetry
    return {
        "opened": named.connections_opened_metric,
        "reused": named.connections_reused_metric,
        "idle": named.connections_idle_metric,
    }


def _count(value: Any) -> int | None:
    """A count as a metrics document writes it: an integer, or a float that is one (what
    Prometheus-style counters serialise to); None for anything else (a flag is no count)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if float(value).is_integer() else None


def _pool_counts(proxy: Any, profile: SutProfile) -> dict[str, int | None]:
    """The proxy's pool counts now (None: not in its metrics, or not a count)."""
    document = proxy.get(profile.proxy.metrics_path)["json"]
    return {name: _count(find(document, path)) for name, path in _pool_paths(profile).items()}


def _moved(after: int | None, before: int | None) -> int | None:
    return None if after is None or before is None else after - before


def _phase(allocation, proxy, replicas, run, profile, options, name):
    before_proxy = _pool_counts(proxy, profile)
    before_replicas = _connection_counts(replicas)
    client = deployment.run_client(
        allocation, proxy, run, mode="raw", profile=profile, name=name, **_workload(options, name, profile)
    )
    record = client.wait(timeout=180)
    if not record.ok:
        raise RuntimeError(f"load client failed: {record.describe()}")
    after_proxy = _pool_counts(proxy, profile)
    after_replicas = _connection_counts(replicas)
    # each state read opens one connection per replica; the second read's own is subtracted in
    # _connection_counts, the first's here (state reads carry no request the others count)
    accepted = after_replicas.accepted - before_replicas.accepted - options.replicas
    events = deployment.read_events(run, name)
    upstream = with_prefix(replicas.events(), f"{name}-")
    phase = checks.ConnectionPhase(
        proxy_opened=_moved(after_proxy["opened"], before_proxy["opened"]),
        proxy_reused=_moved(after_proxy["reused"], before_proxy["reused"]),
        proxy_idle_before=before_proxy["idle"],
        unreported=tuple(  # the idle gauge is rc1's addition, not the brief's: the replicas bound reuse without it
            path
            for name, path in _pool_paths(profile).items()
            if name != "idle" and None in (after_proxy[name], before_proxy[name])
        ),
        replicas_open_before=before_replicas.open,
        replicas_accepted=accepted,
        replicas_with_requests=after_replicas.with_requests - before_replicas.with_requests,
        probe_requests=after_replicas.probes - before_replicas.probes,
        upstream_requests=len(upstream),
        client_errors=sum(1 for e in requests(events) if e.outcome != "ok"),
    )
    return events, upstream, phase


def _replicas(o: StreamingOptions) -> dict[str, Any]:
    """How the replicas are started (the run's and the plan's keywords)."""
    return {"seed": o.seed, "options": ("--ttft-ms", "20", "--itl-ms", str(o.itl_ms), "--max-num-seqs", "64")}


def _deploy_replicas(s: StreamingRun) -> None:
    s.replicas = deployment.start_replicas(
        s.allocation, s.options.replicas, run=s.run, profile=s.profile, **_replicas(s.options)
    )


def _plan_replicas(p: Planner) -> list[PlannedCommand]:
    return [
        p.replicas(
            f"{p.options.replicas} synthetic replicas, one task each", p.options.replicas, **_replicas(p.options)
        )
    ]


def _plan_client(name: str) -> Callable[[Planner], list[PlannedCommand]]:
    return lambda p: [p.client(f"the load client: {name}", name, mode="raw", **_workload(p.options, name, p.profile))]


@dataclass
class StreamingRun(DeployedRun):
    """One streaming run's state, handed from phase to phase."""

    options: StreamingOptions
    connections: dict[str, checks.ConnectionPhase] = field(default_factory=dict)
    routing: BackgroundCommand | None = None
    dense: tuple[list, list] = ([], [])

    def client_phase(self, name: str, *, key: str | None = None, accounted: bool = True):
        """One client run through the proxy (its load as `_workload` says); its connection
        numbers are kept under `key` (those of a phase not `accounted` are not judged)."""
        replicas, proxy = self.deployed
        found = _phase(self.allocation, proxy, replicas, self.run, self.profile, self.options, name)
        if accounted:
            self.connections[key or name] = found[2]
        return found


def _streams(s: StreamingRun) -> None:
    events, upstream, _ = s.client_phase("stream", key="keep-alive")
    s.dense = (events, upstream)


def _pace_sparse(s: StreamingRun) -> None:
    # exact: the gaps must be the gap (a realistic replica's long-tailed ones reach 0.6 s)
    s.deployed[0].control(None, "pace", itl_ms=sparse_gap_ms(s.options, s.profile), exact=True)


def _sparse(s: StreamingRun) -> None:
    events, upstream, _ = s.client_phase("sparse", accounted=False)
    dense_events, dense_upstream = s.dense
    s.result.add(checks.integrity([*dense_events, *events], [*dense_upstream, *upstream]))
    least_gap_s = s.options.sparse_itl_ms / 1000  # the default gap: a shorter one is judged no stricter in seconds
    s.result.add(checks.no_buffering(dense_events, dense_upstream, events, upstream, least_gap_s=least_gap_s))


def _restore_pacing(s: StreamingRun) -> None:
    s.deployed[0].control(None, "pace")


def _sequential(s: StreamingRun) -> None:
    s.client_phase("sequential")


def _close_keepalive(s: StreamingRun) -> None:
    s.deployed[0].control(None, "keepalive", close=True)


def _closing(s: StreamingRun) -> None:
    s.client_phase("closing")


def _keep_keepalive(s: StreamingRun) -> None:
    s.deployed[0].control(None, "keepalive", close=False)


def _judge_connections(s: StreamingRun) -> None:
    s.result.add(checks.connection_accounting(dict(s.connections)))


ROUTING_STREAMS = 32


def _stall_first(s: StreamingRun) -> None:
    """Replica 0's streams stall after their first token: the proxy has each response's
    headers and first bytes, so only a proxy that counts a stream until it ends (not until
    its headers came) sees replica 0 busy."""
    s.deployed[0].control([0], "stall", on=True, after_tokens=1)


def _drive_routing(s: StreamingRun) -> None:
    """Replica 0's streams stall; 32 short streams, 8 at a time: least-connections must steer
    new requests away from it. Relieved once every stream not stuck on it has finished."""
    replicas, proxy = s.deployed
    load = _workload(s.options, "routing", s.profile)
    s.routing = deployment.run_client(s.allocation, proxy, s.run, mode="raw", profile=s.profile, name="routing", **load)

    def settled() -> int:
        # every stream that ended, whatever its outcome: a proxy that cuts or truncates them
        # (their integrity's finding, not routing's) must not hold the phase for its timeout
        done = len(requests(deployment.read_events(s.run, "routing")))
        (state,) = replicas.control([0], "state")
        return done + state["running"] + state["waiting"]

    with contextlib.suppress(WaitTimeout):
        wait_until(settled, lambda n: n >= ROUTING_STREAMS, timeout=60, what="every stream not stuck to end")


def _unstall_first(s: StreamingRun) -> None:
    s.deployed[0].control([0], "stall", on=False)


def _judge_routing(s: StreamingRun) -> None:
    assert s.routing is not None
    record = s.routing.wait(timeout=120)
    if not record.ok:
        raise RuntimeError(f"load client failed: {record.describe()}")
    upstream = with_prefix(s.deployed[0].events(), "routing-")
    s.result.add(checks.least_connections(upstream, s.deployed[0].count, 0, ROUTING_STREAMS))


PHASES: tuple[Phase[StreamingRun], ...] = (
    Phase("deploy", "deploying replicas", _deploy_replicas, _plan_replicas,
          numbers=lambda s: {"replicas": s.options.replicas}),
    Phase("deploy", "deploying the SUT's proxy", deploy_proxy, plan_proxy),
    Phase("drive", "streams through the proxy", _streams, _plan_client("stream"),
          numbers=lambda s: {"streams": s.options.streams}),
    Phase("hold", "replicas space their events", _pace_sparse,
          numbers=lambda s: {"ms": sparse_gap_ms(s.options, s.profile)}),
    Phase(
        "drive",
        "sparse streams: each event before the next",
        _sparse,
        _plan_client("sparse"),
        numbers=lambda s: {"streams": s.options.sparse_streams},
        fault="replicas space their events far apart on purpose (the inter-token latency is theirs)",
        judges=("streaming.integrity", "streaming.no_buffering"),
    ),
    Phase("relieve", "replicas pace their events as before", _restore_pacing),
    Phase("drive", "one stream at a time over kept-alive connections", _sequential, _plan_client("sequential")),
    Phase("hold", "replicas close every keep-alive connection", _close_keepalive),
    Phase("drive", "streams while every connection is closed after its response", _closing, _plan_client("closing")),
    Phase("relieve", "replicas keep connections alive again", _keep_keepalive),
    Phase("judge", "connection accounting", _judge_connections, judges=("streaming.connection_accounting",)),
    Phase("hold", "replica 0 stalls its streams", _stall_first),
    Phase("drive", "routing with one replica stalled", _drive_routing, _plan_client("routing"),
          fault="replica 0 stalls its streams"),
    Phase("relieve", "replica 0 streams again", _unstall_first),
    Phase("judge", "least-connections routing", _judge_routing, judges=("streaming.least_connections",)),
    stopping("proxy"),
    stopping("replicas"),
)  # fmt: skip

SCENARIO = Scenario(
    "streaming",
    "streams passed through whole, unbuffered, with honest connection accounting",
    StreamingOptions,
    PHASES,
    StreamingRun,
)
run_streaming = SCENARIO.run
