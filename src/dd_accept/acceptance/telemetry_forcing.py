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


def exhausting_statuses(profile: SutProfile, replicas: int, count: int) -> tuple[tuple[int, ...], ...]:
    """What each replica answers in the exhausted phase, in order: replica i the i-th 5xx the
    proxy retries (rc1: 500, 502, 503, 504), then every `replicas`-th after it. Each status is
    some replica's first answer of the phase, so a proxy that sets a failing backend aside
    for a while (passive ejection, as nginx's max_fails does) still meets every one of them:
    with every backend failing it must try them all. A status met only as a replica's second
    answer would never be met there, and telemetry.status_failover would fail a correct proxy."""
    statuses = _retried_5xx(profile)
    return tuple(
        tuple(statuses[(replica + k * replicas) % len(statuses)] for k in range(count)) for replica in range(replicas)
    )
