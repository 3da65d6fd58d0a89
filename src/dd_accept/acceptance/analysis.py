"""Reading the evidence: client requests matched with the upstream attempts made for them.

Every client request carries an id (`x-dd-request-id`) that the proxy forwards; every
replica records each request it sees with that id. So the number of upstream attempts a
proxy made for a request is counted from the replicas' side, independently of the
proxy's own accounting.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from dd_accept.base.events import AdmissionChange, ClientRequest, Event, UpstreamAttempt, of_type

R = TypeVar("R", ClientRequest, UpstreamAttempt)


def requests(events: Iterable[Event]) -> list[ClientRequest]:
    return of_type(events, ClientRequest)


def counts_text(counter: Counter[Any]) -> str:
    """`key: count, …` in key order (`none` for none): how the checks show a tally."""
    return ", ".join(f"{key}: {value}" for key, value in sorted(counter.items(), key=lambda kv: str(kv[0]))) or "none"


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
    """The AIMD sequence: each rate-limited round multiplies the limit down (at least 1).

    It ends where the limit can fall no further (2 → 1 → 1): a controller reports a change,
    and a limit that stays where it was is none."""
    values, current = [], limit
    for _ in range(rounds):
        lower = max(1, math.floor(current * factor))
        if lower == current:
            break
        values.append(current := lower)
    return values


def first_arrivals(upstream: Iterable[UpstreamAttempt]) -> list[float]:
    """When each client request first reached a replica (its proxy retries come later)."""
    return sorted(tries[0].started for tries in attempts_by_request(upstream).values())


def decreases_without_a_new_round(decreases: list[AdmissionChange], arrivals: list[float]) -> list[AdmissionChange]:
    """Decreases that no request admitted since the previous one can have caused.

    AIMD lowers the limit once a round ("8 → 6 → 4 takes two rounds"): the requests admitted
    under a limit all meet the same overload, and only one admitted under the lowered limit
    can lower it again. A controller that decreases on every 429 of one round lowers it
    several times before any new request reaches a replica. `arrivals` are the replicas'
    view (first_arrivals), independent of the controller's own events."""
    hasty = []
    for before, after in itertools.pairwise(sorted(decreases, key=lambda e: e.t)):
        if not any(before.t < arrived <= after.t for arrived in arrivals):
            hasty.append(after)
    return hasty


@dataclass(frozen=True, slots=True)
class CooldownBreach:
    window_start: float
    window_end: float
    admitted_at: float


def cooldown_breaches(
    events: list[Event],
    default_s: float,
    upstream: Iterable[UpstreamAttempt] = (),
    tolerance_s: float = 0.05,
) -> list[CooldownBreach]:
    """Leases acquired inside a cooldown that a 429 demanded.

    A window opens when the client saw a 429: its controller learnt of it before that. It
    lasts the Retry-After the 429 carried (the controller's documented default when it
    carried none), counted from the end of the request's last attempt at a replica where
    the replicas saw it: the controller cannot have learnt of the 429 earlier, so a correct
    one never admits before that end, however late the client's own record was written.
    The controller's own idea of its cooldown is deliberately not used: that is what a
    broken controller gets wrong.
    """
    ended = {request: max(a.t for a in tries) for request, tries in attempts_by_request(upstream).items()}
    windows = []
    for event in requests(events):
        if event.status == 429:
            length = float(event.retry_after) if event.retry_after else default_s
            learnt = min(event.t, ended.get(event.request_id or "", event.t))
            windows.append((event.t, learnt + length))
    breaches = []
    for lease in admission(events, "request_lease_acquired"):
        for start, end in windows:
            if start < lease.t < end - tolerance_s:
                breaches.append(CooldownBreach(start, end, lease.t))
                break
    return breaches


# How long after a cooldown has run out, at the latest, the controller's waiting requests must
# reach the replicas again: rc1 re-checks every 0.05 s (measured: 6 to 11 ms); this covers a
# busy machine's event loop, two hops (proxy, replica) and a wall-clock step between the
# client's and the replicas' readings (CI once saw one of 1.04 s, base.wall_clock); a cooldown
# held for twice its Retry-After (3 s late), or Retry-After plus the 2 s default, is later.
COOLDOWN_LINGER_S = 1.5


@dataclass(frozen=True, slots=True)
class CooldownOverrun:
    window_end: float  # the latest the cooldown can have run out: the client's 429 + its Retry-After
    next_attempt: float  # when the replicas next saw a request of this client


def cooldown_overruns(
    events: list[Event], default_s: float, upstream: Iterable[UpstreamAttempt], linger_s: float = COOLDOWN_LINGER_S
) -> list[CooldownOverrun]:
    """Cooldowns held longer than the 429 asked: a cooldown lasts the Retry-After (the brief:
    "a 429 sets cooldown = Retry-After"), and the client's workers wait on it for the record
    they retry at once, so once the last overlapping window has run out (counted, here, from
    the client's own record of each 429: the latest the controller can have learnt of it) the
    replicas see a request of this client within `linger_s`. A window after which no request
    came at all is not judged (the client had nothing left to send), nor one at whose end the
    controller's last report had as many requests in flight as its limit (its waiters then
    wait for capacity, not the cooldown: vLLM replicas still working off the relief)."""
    windows = sorted(
        (e.t, e.t + (float(e.retry_after) if e.retry_after else default_s)) for e in requests(events) if e.status == 429
    )
    merged: list[list[float]] = []
    for start, end in windows:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    arrivals = sorted(a.started for a in upstream)
    reports = [e for e in of_type(events, AdmissionChange) if e.in_flight is not None and e.limit is not None]
    overruns = []
    for _, end in merged:
        last = next((e for e in reversed(reports) if e.t <= end), None)
        if last is not None and last.in_flight >= last.limit:
            continue
        after = next((at for at in arrivals if at >= end - linger_s), None)
        if after is not None and after > end + linger_s:
            overruns.append(CooldownOverrun(end, after))
    return overruns


# Two replicas' clock readings (one kernel clock here; NTP on a site's) and the scheduling
# between a span's last byte and its record: a request that starts this close to another's
# end followed it rather than overlapped it.
SPAN_EDGE_S = 0.005


@dataclass(frozen=True, slots=True)
class LimitBreach:
    at: float
    in_flight: int  # distinct client requests with an upstream attempt under way, replicas' view
    limit: int  # the highest limit the controller reported over the preceding grace period


def limit_breaches(
    client: list[Event],
    upstream: list[UpstreamAttempt],
    initial_limit: int,
    grace_s: float = 2.0,
    overlap_s: float = SPAN_EDGE_S,
) -> list[LimitBreach]:
    """Moments when more of the client's requests were under way at the replicas than its
    admission controller allowed: the controller's reported limit, checked against
    concurrency it does not report. A request admitted under a higher limit may still be
    under way just after a decrease, so the limit compared is the highest of the last
    `grace_s` seconds. A request that starts within `overlap_s` of another's end does not
    overlap it: the next request may follow a response's last byte at once."""
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
        in_flight = sum(1 for s, e in spans.values() if s <= start < e - overlap_s or s == start)
        allowed = limit_at(start)
        if in_flight > allowed:
            breaches.append(LimitBreach(start, in_flight, allowed))
    return breaches
