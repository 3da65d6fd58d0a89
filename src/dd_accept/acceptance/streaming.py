"""The streaming scenario: integrity and buffering of SSE through the proxy, and its
connection accounting with keep-alive kept and with replicas closing every connection."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

from dd_accept.acceptance import streaming_checks as checks
from dd_accept.acceptance.analysis import of_kind, with_prefix
from dd_accept.base.progress import ProgressWriter
from dd_accept.base.results import ScenarioResult
from dd_accept.base.waiting import WaitTimeout, wait_until
from dd_accept.fixtures import deployment
from dd_accept.slurm_docker.allocation import Allocation
from dd_accept.sut.profile import SutProfile


@dataclass(frozen=True, slots=True)
class StreamingOptions:
    replicas: int = 8
    streams: int = 64
    concurrency: int = 32
    tokens: int = 64
    itl_ms: int = 10
    client_headers: tuple[str, ...] = ()
    seed: int = 0


def _accepted(replicas: deployment.ReplicaSet) -> int:
    """Connections the replicas accepted, minus the one each state read itself opened."""
    return sum(state["connections_accepted"] - 1 for state in replicas.control(None, "state"))


def _phase(allocation, proxy, replicas, run, profile, options, name, *, streams=None, concurrency=None):
    metrics_path = profile.proxy.metrics_path
    before_proxy = proxy.get(metrics_path)["json"]["connections"]
    before_replicas = _accepted(replicas)
    client = deployment.run_client(
        allocation,
        proxy,
        run,
        mode="raw",
        profile=profile,
        name=name,
        headers=options.client_headers,
        records=streams or options.streams,
        concurrency=concurrency or options.concurrency,
        max_tokens=options.tokens,
        max_record_attempts=1,
        deadline_s=120,
    )
    record = client.wait(timeout=180)
    if not record.ok:
        raise RuntimeError(f"load client failed: {record.describe()}")
    after_proxy = proxy.get(metrics_path)["json"]["connections"]
    # each state read opens one connection per replica; the second read's own is subtracted in _accepted
    accepted = _accepted(replicas) - before_replicas - options.replicas
    events = deployment.read_events(run, name)
    upstream = with_prefix(replicas.events(), f"{name}-")
    phase = checks.ConnectionPhase(
        proxy_opened=after_proxy["opened"] - before_proxy["opened"],
        proxy_reused=after_proxy["reused"] - before_proxy["reused"],
        proxy_idle_before=before_proxy["idle"],
        replicas_accepted=accepted,
        upstream_requests=len(upstream),
        client_errors=sum(1 for e in of_kind(events, "request") if e.get("outcome") != "ok"),
    )
    return events, upstream, phase


ROUTING_STREAMS = 32


def _routing(allocation, proxy, replicas, run, profile, options) -> checks.CheckResult:
    """Replica 0's streams stall; 32 short streams, 8 at a time: least-connections must steer
    new requests away from it. Released once every stream not stuck on it has finished."""
    replicas.control([0], "stall", on=True)
    try:
        client = deployment.run_client(
            allocation, proxy, run, mode="raw", profile=profile, name="routing",
            records=ROUTING_STREAMS, concurrency=8, max_tokens=20, max_record_attempts=1, deadline_s=120,
        )  # fmt: skip

        def settled() -> int:
            done = sum(
                1 for e in of_kind(deployment.read_events(run, "routing"), "request") if e.get("outcome") == "ok"
            )
            (state,) = replicas.control([0], "state")
            return done + state["running"] + state["waiting"]

        with contextlib.suppress(WaitTimeout):
            wait_until(settled, lambda n: n >= ROUTING_STREAMS, timeout=60, what="every stream not stuck to end")
    finally:
        replicas.control([0], "stall", on=False)
    record = client.wait(timeout=120)
    if not record.ok:
        raise RuntimeError(f"load client failed: {record.describe()}")
    upstream = with_prefix(replicas.events(), "routing-")
    return checks.least_connections(upstream, replicas.count, 0, ROUTING_STREAMS)


def run_streaming(
    allocation: Allocation,
    run: deployment.RunDirectory,
    profile: SutProfile,
    options: StreamingOptions,
    progress: ProgressWriter,
) -> ScenarioResult:
    result = ScenarioResult("streaming", started=time.time())
    progress.emit("deploying", replicas=options.replicas)
    replicas = deployment.start_replicas(
        allocation,
        options.replicas,
        run=run,
        profile=profile,
        options=("--ttft-ms", "20", "--itl-ms", str(options.itl_ms), "--max-num-seqs", "64"),
        seed=options.seed,
    )
    proxy = deployment.start_proxy(allocation, replicas, profile=profile)
    try:
        progress.emit("streams through the proxy", streams=options.streams)
        events, upstream, kept = _phase(allocation, proxy, replicas, run, profile, options, "stream")
        result.add(checks.integrity(events, upstream))
        result.add(checks.no_buffering(events, upstream))
        # One stream at a time over a warm pool: every request reuses, none opens, so the
        # opened and reused counters differ by construction.
        progress.emit("one stream at a time over kept-alive connections")
        _, _, sequential = _phase(
            allocation, proxy, replicas, run, profile, options, "sequential", streams=16, concurrency=1
        )
        progress.emit("replicas close every keep-alive connection")
        replicas.control(None, "keepalive", close=True)
        _, _, closing = _phase(allocation, proxy, replicas, run, profile, options, "closing")
        result.add(checks.connection_accounting({"keep-alive": kept, "sequential": sequential, "closing": closing}))
        replicas.control(None, "keepalive", close=False)
        progress.emit("routing with one replica stalled")
        result.add(_routing(allocation, proxy, replicas, run, profile, options))
    finally:
        proxy.stop()
        replicas.stop()
        result.ended = time.time()
    progress.emit("done", verdict=result.verdict())
    return result
