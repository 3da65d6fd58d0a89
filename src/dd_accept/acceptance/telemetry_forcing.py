"""What the telemetry scenario's replicas are made to answer, status by status: each status
the proxy retries must reach the replicas in a way no correct proxy can route around, or
telemetry.status_failover would find the rule unexercised and fail a correct release."""

from __future__ import annotations

from dd_accept.sut.profile import SutProfile


def forced_5xx(profile: SutProfile, counts: tuple[int, int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """What replicas 1 and 2 answer in the failover phase, in order: each 5xx status the proxy
    retries (the profile's), replica 1 every one of them at least once (rc1: 500, 502, 503,
    504), replica 2 from the last (504, 503): telemetry.status_failover judges each retried."""
    statuses = _retried_5xx(profile)
    first = tuple(statuses[i % len(statuses)] for i in range(max(counts[0], len(statuses))))
    return first, tuple(statuses[-1 - i % len(statuses)] for i in range(counts[1]))


def _retried_5xx(profile: SutProfile) -> list[int]:
    return [status for status in profile.proxy.retried_statuses if status >= 500] or [503]


def exhausting_statuses(profile: SutProfile, requests: int) -> tuple[tuple[str, int], ...]:
    """The exhausted phase, request by request: (its name, the status every replica answers
    it), each 5xx the proxy retries (rc1: 500, 502, 503, 504) in turn, as many requests as
    `requests` or one per status if there are more. Every backend answers the request's
    status to each attempt, so the proxy meets it whichever backends it tries, whatever its
    tie-break and whichever it has set aside for a while (passive ejection, nginx's
    max_fails, Envoy's outlier detection; a backend still set aside from the failover phase
    too), and meets it at every attempt number. A status met only as some replica's second
    answer, or only on one replica, can be routed around by a correct proxy, and
    telemetry.status_failover would then fail it for a rule it never had the chance to keep."""
    statuses = _retried_5xx(profile)
    plan = []
    for index in range(max(requests, len(statuses))):
        status, round_ = statuses[index % len(statuses)], index // len(statuses)
        plan.append((f"exhausted-{status}" + (f"-{round_ + 1}" if round_ else ""), status))
    return tuple(plan)
