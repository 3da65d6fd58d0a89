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

from dd_accept.base.events import Event


def of_kind(events: Iterable[Event], kind: str) -> list[Event]:
    return [event for event in events if event.get("kind") == kind]


def with_prefix(events: Iterable[Event], prefix: str) -> list[Event]:
    return [event for event in events if str(event.get("request_id") or "").startswith(prefix)]


def attempts_by_request(upstream: Iterable[Event]) -> dict[str, list[Event]]:
    grouped: dict[str, list[Event]] = defaultdict(list)
    for event in upstream:
        if event.get("request_id"):
            grouped[event["request_id"]].append(event)
    for attempts in grouped.values():
        attempts.sort(key=lambda e: e.get("started") or e["t"])
    return dict(grouped)


def admission(events: Iterable[Event], name: str) -> list[Event]:
    return [e for e in events if e.get("kind") == "admission" and e.get("event") == name]


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
    for event in of_kind(events, "request"):
        if event.get("status") == 429:
            length = float(event["retry_after"]) if event.get("retry_after") else default_s
            windows.append((event["t"], event["t"] + length))
    breaches = []
    for lease in admission(events, "request_lease_acquired"):
        for start, end in windows:
            if start < lease["t"] < end - tolerance_s:
                breaches.append(CooldownBreach(start, end, lease["t"]))
                break
    return breaches


def percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


@dataclass(frozen=True, slots=True)
class LimitBreach:
    at: float
    in_flight: int  # distinct client requests with an upstream attempt under way, replicas' view
    limit: int  # the highest limit the controller reported over the preceding grace period


def limit_breaches(
    client: list[Event], upstream: list[Event], initial_limit: int, grace_s: float = 2.0
) -> list[LimitBreach]:
    """Moments when more of the client's requests were under way at the replicas than its
    admission controller allowed: the controller's reported limit, checked against
    concurrency it does not report. A request admitted under a higher limit may still be
    under way just after a decrease, so the limit compared is the highest of the last
    `grace_s` seconds."""
    limits = sorted((e["t"], int(e["limit"])) for e in of_kind(client, "admission") if e.get("limit") is not None)
    spans: dict[str, tuple[float, float]] = {}
    for event in upstream:
        request = event.get("request_id")
        if not request or event.get("started") is None:
            continue
        start, end = event["started"], event["started"] + float(event.get("duration_s") or 0.0)
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
