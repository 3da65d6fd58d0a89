"""The telemetry scenario's connection and timeout phases: connections a replica closes while
idle (stale), ones idle past the proxy's keep-alive (expired), responses that close their
connection (discarded), and responses a replica holds back past the proxy's timeouts; each
phase brackets its events with the replicas' own connection counts, so the counters are
judged against what happened, not against a number fixed in advance.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dd_accept.acceptance import telemetry_counter_checks as counters
from dd_accept.acceptance import telemetry_records
from dd_accept.acceptance.analysis import attempts_by_request
from dd_accept.acceptance.telemetry_driving import (
    client_phase,
    read_metrics,
    send_load,
    settled_metrics,
)
from dd_accept.base.errors import ClusterError
from dd_accept.base.waiting import WaitTimeout, wait_until
from dd_accept.sut.profile import SutProfile

if TYPE_CHECKING:  # the run state is the scenario's (telemetry), which imports this module
    from dd_accept.acceptance.telemetry import TelemetryRun


REFUSING, RESETTING = 0, 1  # the replicas that fail the connection-error phase's connections


def listening(s: TelemetryRun) -> bool:
    try:
        s.deployed[0].control([REFUSING], "state")
    except ClusterError:  # nothing listens yet: the control request was refused too
        return False
    return True


def _counts(s: TelemetryRun, claim: str, counters: tuple[str, ...]) -> bool:
    """Whether the phases for these counters are worth their time: the SUT claims them and
    its metrics have them (if not, the check fails on that alone)."""
    metrics = read_metrics(s)
    return s.profile.telemetry.claimed(claim) and all(
        isinstance(telemetry_records.find(metrics, path), int | float) for path in counters
    )


_CLOSED_BY_PROXY = ("idle_closed_by_peer_with_requests", "idle_closed_by_peer")


def _replica_totals(s: TelemetryRun, *keys: str) -> list[int]:
    states = s.deployed[0].control(None, "state")
    return [sum(int(state.get(key, 0)) for state in states) for key in keys]


@dataclass(frozen=True, slots=True)
class _Bracketed:
    """The proxy's metrics read between two readings of the replicas' counts: a connection
    the proxy closes as the metrics are read is counted by it at once and seen by a replica
    a moment later, so the replicas' count at the proxy's reading lies between the two."""

    metrics: dict[str, Any]
    first: list[int]
    second: list[int]


def _bracketed(s: TelemetryRun, keys: tuple[str, ...]) -> _Bracketed:
    first = _replica_totals(s, *keys)
    read = read_metrics(s)
    return _Bracketed(read, first, _replica_totals(s, *keys))


def _between(before: _Bracketed, after: _Bracketed) -> tuple[int, ...]:
    """The counts the replicas' view allows for what happened between two bracketed
    readings: at least the connections that carried requests (key 0; a proxy may keep its
    probes apart), at most every connection (key 1)."""
    low = after.first[0] - before.second[0]
    high = after.second[1] - before.first[1]
    return tuple(range(max(low, 0), max(high, 0) + 1)) or (0,)


def stale_phase(s: TelemetryRun) -> None:
    """Requests fill the proxy's pool, every replica at once closes the connections the proxy
    holds idle, and the next requests must find them closed, each once (probe-only ones may
    be counted or not), well within the proxy's keep-alive. A proxy that kept no connection
    for the replicas to close fails. These requests are judged by no other check: a proxy
    may find a closed connection by an attempt that fails, and retry."""
    telemetry = s.profile.telemetry
    if not _counts(s, "connection_lifecycle", telemetry.connection_counters):
        return
    expired, stale, discarded = telemetry.connection_counters
    before = _bracketed(s, _CLOSED_BY_PROXY)
    pool = 2 * s.options.replicas
    send_load(s, "pool-for-stale", pool)
    rows = s.deployed[0].control(None, "close_idle")
    closed, with_requests = sum(r["closed"] for r in rows), sum(r["closed_with_requests"] for r in rows)
    time.sleep(0.2)  # the proxy reads each close before it reuses anything
    send_load(s, "stale", s.options.requests)
    settled_metrics(s, before.metrics, pool + s.options.requests)
    after = _bracketed(s, _CLOSED_BY_PROXY)
    seen = f"the replicas closed {closed} idle connections, {with_requests} that carried requests"
    allowed = tuple(range(with_requests, closed + 1)) if with_requests else (0,)
    also = {expired: _between(before, after), discarded: (0,)}
    s.counted.append(counters.CountedPhase("stale", before.metrics, after.metrics, {stale: allowed}, seen, also))


def _stale_left(s: TelemetryRun) -> int:
    """How many connections the replicas closed that the stale window did not count: a
    proxy may find those later (a sweep), as stale."""
    path = s.profile.telemetry.connection_counters[1]
    window = next((p for p in s.counted if path in p.expected), None)
    if window is None or not isinstance(counted := window.counted(path), int | float):
        return 0
    return max(0, max(window.expected[path]) - int(counted))


def expired_phase(s: TelemetryRun) -> None:
    """Requests, then nothing until the proxy has closed every idle connection that carried
    them (or its keep-alive ran out twice over), then requests again (a pool that expires
    only when it next looks does it now): its expired counter must move by the idle
    connections the replicas saw it close, read on both sides of its metrics."""
    telemetry = s.profile.telemetry
    keepalive = telemetry.keepalive_seconds
    if not counters.drivable(keepalive, counters.EXPIRY_WAITS) or not _counts(
        s, "connection_lifecycle", telemetry.connection_counters
    ):
        return
    assert keepalive is not None
    expired, stale, discarded = telemetry.connection_counters
    before = _bracketed(s, _CLOSED_BY_PROXY)
    phase = client_phase(s, "expired", requests_sent=2 * s.options.replicas, before=before.metrics)
    s.phases_seen.append(phase)
    with contextlib.suppress(WaitTimeout):  # a proxy that expires on its next request: the next ones show it
        wait_until(
            lambda: _replica_totals(s, "open_connections_with_requests")[0],
            lambda still_open: still_open == 0,
            timeout=counters.EXPIRY_WAITS * keepalive + 1,
            interval=0.25,
            what="the proxy to close its idle connections",
        )
    send_load(s, "after-expiry", s.options.replicas)
    after = _bracketed(s, _CLOSED_BY_PROXY)
    allowed = _between(before, after)
    seen = f"the replicas saw the proxy close {counters.allowed_text(allowed)} idle connections"
    if max(allowed) and not min(allowed):  # nothing that carried requests: a proxy counting none would pass
        allowed = (0,)
        seen = "the proxy closed no idle connection that carried requests"
    also = {stale: tuple(range(_stale_left(s) + 1)), discarded: (0,)}
    s.counted.append(counters.CountedPhase("expired", before.metrics, after.metrics, {expired: allowed}, seen, also))


def discarded_phase(s: TelemetryRun) -> None:
    """Every response says `Connection: close`: no connection may go back to the pool."""
    telemetry = s.profile.telemetry
    if not _counts(s, "connection_lifecycle", telemetry.connection_counters):
        return
    expired, stale, discarded = telemetry.connection_counters
    replicas = s.deployed[0]
    (probes_before,) = _replica_totals(s, "probe_requests")
    before = _bracketed(s, _CLOSED_BY_PROXY)
    replicas.control(None, "keepalive", close=True)
    try:
        phase = client_phase(s, "discarded", before=before.metrics)
    finally:
        replicas.control(None, "keepalive", close=False)
    s.phases_seen.append(phase)
    after = _bracketed(s, _CLOSED_BY_PROXY)
    (probes,) = _replica_totals(s, "probe_requests")
    attempts, probes = len(phase.upstream), probes - probes_before
    seen = f"{attempts} responses said Connection: close, and {probes} probe responses"
    allowed = tuple(range(attempts, attempts + probes + 1))
    also = {stale: (0,), expired: _between(before, after)}
    s.counted.append(
        counters.CountedPhase("discarded", before.metrics, after.metrics, {discarded: allowed}, seen, also)
    )


def _hold(s: TelemetryRun, indexes: list[int], seconds: float, count: int, after_chunks: int | None = None) -> None:
    s.deployed[0].control(indexes, "delay", seconds=seconds, count=count, after_chunks=after_chunks)


HELD_BEYOND_TIMEOUT_S = 2.0  # how long past the proxy's timeout a replica holds a response back


def timeouts_drivable(profile: SutProfile) -> bool:
    """Whether the profile's timeouts are short enough to drive past in a run."""
    telemetry = profile.telemetry
    terminal_s, streaming_s = telemetry.terminal_timeout_seconds, telemetry.streaming_timeout_seconds
    return counters.drivable(terminal_s, counters.TIMEOUT_WAITS) and counters.drivable(streaming_s)


def timeout_deadline(profile: SutProfile) -> float:
    """The client's deadline in the timeout phases: every attempt may wait out a timeout."""
    telemetry = profile.telemetry
    longest = max(telemetry.terminal_timeout_seconds or 0, telemetry.streaming_timeout_seconds or 0)
    return counters.TIMEOUT_WAITS * (longest + HELD_BEYOND_TIMEOUT_S) + 30


def timed_out_phase(s: TelemetryRun) -> None:
    """Replicas hold responses back 2 s beyond the proxy's timeouts: first every replica its
    next one before the first byte, for one request sent alone (each of its attempts times
    out, the last with no retry left); then replica 0 two more before the first byte (each
    retried elsewhere) and replica 1 two after two chunks (mid-stream), while replica 2 cuts
    one stream; last, one request every replica answers 503. The counters must move by the
    held responses the replicas saw the proxy abandon, and by nothing else."""
    telemetry = s.profile.telemetry
    terminal_s, streaming_s = telemetry.terminal_timeout_seconds, telemetry.streaming_timeout_seconds
    if not timeouts_drivable(s.profile) or not _counts(s, "timeouts", telemetry.timeout_counters):
        return
    assert terminal_s is not None and streaming_s is not None
    replicas, held, margin = s.deployed[0], s.options.held_streams, HELD_BEYOND_TIMEOUT_S
    deadline = timeout_deadline(s.profile)
    before = read_metrics(s)
    everyone = list(range(replicas.count))
    try:
        _hold(s, everyone, terminal_s + margin, 1)
        alone = client_phase(s, "timeout-alone", requests_sent=1, concurrency=1, deadline_s=deadline)
        (unused,) = _replica_totals(s, "delay_remaining")
        _hold(s, everyone, 0, 0)
        _hold(s, [0], terminal_s + margin, held)
        _hold(s, [1], streaming_s + margin, held, after_chunks=2)
        replicas.control([2], "cut", after_chunks=2, count=1)  # a stream broken, not timed out
        sent = 2 * s.options.replicas  # all at once: least-connections gives each replica two
        timed = client_phase(s, "timeouts", requests_sent=sent, concurrency=sent, deadline_s=deadline)
        (left,) = _replica_totals(s, "delay_remaining")
        _hold(s, everyone, 0, 0)
        replicas.control(None, "cut", after_chunks=None)
        # a request whose every attempt is answered 503: exhausted, and no timeout
        replicas.control(None, "respond", status=503, count=1)
        last = client_phase(s, "timeout-exhausted", requests_sent=1, concurrency=1, deadline_s=deadline)
    finally:
        _hold(s, everyone, 0, 0)
        replicas.control(None, "cut", after_chunks=None)
        replicas.control(None, "respond", status=200, count=0)
    s.timeout_phases += [alone, timed, last]
    upstream = alone.upstream + timed.upstream
    s.timed_out_status = next((r.status for r in alone.client), None)
    held_total = replicas.count - unused + 2 * held - left
    chains = attempts_by_request(upstream)
    final = {id(sorted(chain, key=lambda a: a.started)[-1]) for chain in chains.values()}
    abandoned = [a for a in upstream if a.outcome == "abandoned"]
    first_byte = [a for a in abandoned if a.status is None]
    mid_stream = [a for a in abandoned if a.status is not None]
    with_no_retry = [a for a in first_byte if id(a) in final]
    terminal, streaming = telemetry.timeout_counters
    seen = (
        f"the replicas held {held_total} responses back {margin:g} s beyond the profile's timeouts; "
        f"the proxy abandoned {len(first_byte)} before the first byte "
        f"({len(with_no_retry)} with no retry after) and {len(mid_stream)} mid-stream; a stream cut and a request "
        f"answered 503 by every replica are no timeout; the request sent alone got {s.timed_out_status}"
    )
    expected = {terminal: (len(first_byte), len(with_no_retry)), streaming: (len(mid_stream),)}
    s.counted_timeouts.append(counters.CountedPhase("timeouts", before, last.metrics_after, expected, seen))
