"""Overload met on one attempt, a lost backend on the last: what the proxy answers then.

The brief's proxy "answers 429 + Retry-After when overload was seen" (rc1's proxy.py keeps
`overload_seen` across attempts for exactly this). Total overload alone never reaches that
path: every attempt there is answered 429 and the last one is passed on. A proxy that
answered 502 instead would tell the client the service is gone when it is only full: the
client would not wait out the Retry-After, and its admission would not decrease.

The round runs once the overload is lifted: every third replica resets each request it
reads (a backend that crashed mid-request: a connection error, as a refused port is, but
one the replica records, so the order of a request's attempts is known), the others answer
429 with the run's Retry-After (the control plane's forced answer, as the middleware's).
Requests go one at a time; the first whose last attempt was a reset after a 429 shows the
path driven. A proxy that never ends a request that way (its own order of backends) is
asked again with the resetting replicas moved by one, up to its number of attempts.

Kept apart from overload.py, which declares the phases: this is the round's doing and its
evidence; overload_checks.total_unreachable judges it.
"""

from __future__ import annotations

from dataclasses import dataclass

from dd_accept.acceptance.analysis import attempts_by_request
from dd_accept.acceptance.proxy_requests import send_named, settled_attempts
from dd_accept.base.events import RESET_UNANSWERED, ClientRequest, EventWriter, UpstreamAttempt
from dd_accept.deployment import Proxy, ReplicaSet, RunDirectory

# A sub-round's requests, one at a time through the proxy, each its own id: at least one per
# replica, so a ring of backends is gone round whole (at 28 replicas and more, 12 requests
# from some cursors never end a request on a resetting replica, shift as it may).
UNREACHABLE_REQUESTS = 12
ID_PREFIX = "unreachable-"  # the round's request ids: no client phase's prefix (partial-, total-)
CLIENT_FILE = "unreachable"  # its requests, as client events, beside the phases' clients
FORCED_ANSWERS = 1000  # more than a sub-round can consume: each resetting/429 replica's count


@dataclass(frozen=True, slots=True)
class UnreachableRound:
    """The round's evidence: the replicas that reset in each sub-round asked, how many
    attempts the proxy may make per request, and each request as the client saw it."""

    resetting: tuple[tuple[int, ...], ...]
    attempts: int
    client: tuple[ClientRequest, ...]


def resetting_replicas(replicas: int, attempts: int, shift: int = 0) -> tuple[int, ...]:
    """Every `attempts`-th replica, moved by `shift` (2 and 5 of 8, with 3 attempts): a proxy
    that tries its backends in index order from either end, or round a ring as rc1 does,
    meets overload first and a reset last; at least one replica always answers 429."""
    return tuple(index for index in range(replicas) if (index + 1 + shift) % attempts == 0)


def ended_on_a_reset_after_overload(chain: list[UpstreamAttempt]) -> bool:
    """A request's attempts, in order: a 429 on one, then its last reset unanswered."""
    return len(chain) >= 2 and chain[-1].outcome == RESET_UNANSWERED and any(a.status == 429 for a in chain[:-1])


def ask_with_replicas_resetting(
    replicas: ReplicaSet, proxy: Proxy, run: RunDirectory, attempts: int, retry_after: int
) -> UnreachableRound:
    """The round: sub-rounds until one drove the path (or every shift was tried); each
    replica serves as before once it returns."""
    resetting: list[tuple[int, ...]] = []
    client: list[ClientRequest] = []
    writer = EventWriter(run.path(f"{CLIENT_FILE}.jsonl")[1], "client")
    try:
        for shift in range(attempts):
            lost = resetting_replicas(replicas.count, attempts, shift)
            full = [index for index in range(replicas.count) if index not in lost]
            replicas.control(full, "respond", status=429, retry_after=retry_after, count=FORCED_ANSWERS)
            replicas.control(list(lost), "reset", count=FORCED_ANSWERS)
            try:
                count = max(UNREACHABLE_REQUESTS, replicas.count)
                asked = send_named(replicas.cluster, proxy, f"{ID_PREFIX}{shift}-", count)
            finally:
                replicas.control(None, "respond", status=200, count=0)
                replicas.control(list(lost), "reset", count=0)
            resetting.append(lost)
            client += asked
            for request in asked:
                writer.write(request)
            chains = attempts_by_request(settled_attempts(replicas, asked)).values()  # each in order
            if any(ended_on_a_reset_after_overload(chain) for chain in chains):
                break
    finally:
        writer.close()
    return UnreachableRound(tuple(resetting), attempts, tuple(client))
