"""Reading the evidence: client requests matched with the upstream attempts made for them.

Every client request carries an id (`x-dd-request-id`) that the proxy forwards; every
replica records each request it sees with that id. So the number of upstream attempts a
proxy made for a request is counted from the replicas' side, independently of the
proxy's own accounting.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

from dd_accept.base.events import AdmissionChange, ClientRequest, Event, UpstreamAttempt, of_type

R = TypeVar("R", ClientRequest, UpstreamAttempt)


def requests(events: Iterable[Event]) -> list[ClientRequest]:
    return of_type(events, ClientRequest)


def with_prefix(events: Iterable[R], prefix: str) -> list[R]:
    return [event for event in events if (event.request_id or "").startswith(prefix)]


def attempts_by_request(upstream: Iterable[UpstreamAttempt]) -> dict[str, list[UpstreamAttempt]]:
    grouped: dict[str, list[UpstreamAttempt]] = defaultdict(list)
    for event in upstream:
        if event.request_id:
            grouped[event.request_id].append(event)
    for attempts in grouped.values():
        attempts.sort(key=lambda e: e.started)
    return dict(grouped)


def chunk_delays(stream: ClientRequest, sent: UpstreamAttempt) -> list[float]:
    """Seconds from the replica's write of each chunk to the client's read of it, on the wall
    clock the client and the replica share (one kernel on dd-accept's cluster; NTP on a site's)."""
    if stream.started is None or stream.ttft_s is None or sent.first_byte_s is None:
        return []
    read = [stream.started + stream.ttft_s + offset for offset in (stream.chunk_offsets_s or [0.0])]
    written = [sent.started + sent.first_byte_s + offset for offset in (sent.chunk_offsets_s or [0.0])]
    return [got - put for got, put in zip(read, written, strict=False)]


def lined_up(stream: ClientRequest, sent: UpstreamAttempt) -> bool:
    """The client read as many events as the replica wrote, so the i-th of each are one
    event: an event added or lost on the way would shift every later pairing."""
    return stream.chunks == sent.data_events


def admission(events: Iterable[Event], name: str) -> list[AdmissionChange]:
    return [e for e in of_type(events, AdmissionChange) if e.event == name]


def expected_decreases(limit: int, factor: float, rounds: int) -> list[int]:
    """The AIMD sequence: each rate-limited round multiplies the limit down (at least 1)."""
    values, current = [], limit
    for _ in range(rounds):
        current = max(1, math.floor(current * factor))
        values.append(current)
    return values


@dataclass(frozen=True, slots=True)
class CooldownBreach:
    window_start: float
    window_end: float
    admitted_at: float


def cooldown_breaches(events: list[Event], default_s: float, tolerance_s: float = 0.05) -> list[CooldownBreach]:
    """Leases acquired inside a cooldown that a 429 demanded.

    Each window starts when the client saw a 429 and lasts the Retry-After it carried (the
    controller's documented default when it carried none). The controller's own idea of
    its cooldown is deliberately not used: that is what a broken controller gets wrong.
    """
    windows = []
    for event in requests(events):
        if event.status == 429:
            length = float(event.retry_after) if event.retry_after else default_s
            windows.append((event.t, event.t + length))
    breaches = []
    for lease in admission(events, "request_lease_acquired"):
        for start, end in windows:
            if start < lease.t < end - tolerance_s:
                breaches.append(CooldownBreach(start, end, lease.t))
                break
    return breaches


@dataclass(frozen=True, slots=True)
class LimitBreach:
    at: float
    in_flight: int  # distinct client requests with an upstream attempt under way, replicas' view
    limit: int  # the highest limit the controller reported over the preceding grace period


def limit_breaches(
    client: list[Event], upstream: list[UpstreamAttempt], initial_limit: int, grace_s: float = 2.0
) -> list[LimitBreach]:
    """Moments when more of the client's requests were under way at the replicas than its
    admission controller allowed: the controller's reported limit, checked against
    concurrency it does not report. A request admitted under a higher limit may still be
    under way just after a decrease, so the limit compared is the highest of the last
    `grace_s` seconds."""
    limits = sorted((e.t, int(e.limit)) for e in of_type(client, AdmissionChange) if e.limit is not None)
    spans: dict[str, tuple[float, float]] = {}
    for event in upstream:
        request = event.request_id
        if not request:
            continue
        start, end = event.started, event.started + event.duration_s
        old = spans.get(request)
        spans[request] = (min(start, old[0]), max(end, old[1])) if old else (start, end)

    def limit_at(t: float) -> int:
        recent = [limit for at, limit in limits if t - grace_s <= at <= t]
        before = [limit for at, limit in limits if at < t - grace_s]
        return max([before[-1] if before else initial_limit, *recent])

    breaches = []
    for start, _ in spans.values():
        in_flight = sum(1 for s, e in spans.values() if s <= start < e or s == start)
        allowed = limit_at(start)
        if in_flight > allowed:
            breaches.append(LimitBreach(start, in_flight, allowed))
    return breaches
