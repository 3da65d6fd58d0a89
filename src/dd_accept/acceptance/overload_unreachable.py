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

import time
from dataclasses import dataclass

from dd_accept.acceptance.analysis import attempts_by_request
from dd_accept.base.errors import ClusterError
from dd_accept.base.events import ADMISSION_PROBE_PATH, RESET_UNANSWERED, ClientRequest, EventWriter, UpstreamAttempt
from dd_accept.deployment import Proxy, ReplicaSet, RunDirectory, json_lines

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
                asked = _ask(replicas, proxy, f"{ID_PREFIX}{shift}-", max(UNREACHABLE_REQUESTS, replicas.count))
            finally:
                replicas.control(None, "respond", status=200, count=0)
                replicas.control(list(lost), "reset", count=0)
            resetting.append(lost)
            client += asked
            for request in asked:
                writer.write(request)
            if any(ended_on_a_reset_after_overload(chain) for chain in _settled_chains(replicas, _ids(asked))):
                break
    finally:
        writer.close()
    return UnreachableRound(tuple(resetting), attempts, tuple(client))


def _settled_chains(replicas: ReplicaSet, ids: set[str]) -> list[list[UpstreamAttempt]]:
    """Each request's attempts as the replicas recorded them, in order, once their records
    stop growing: a replica writes its record as it ends the attempt, around when the client
    gets its answer."""
    seen: list[UpstreamAttempt] = []
    for _ in range(10):
        found = [a for a in replicas.events() if a.request_id in ids]
        if found and len(found) == len(seen):
            break
        seen = found
        time.sleep(0.2)
    return list(attempts_by_request(seen).values())  # each in the order it began


def _ids(requests: list[ClientRequest]) -> set[str]:
    return {request.request_id for request in requests if request.request_id}


def _ask(replicas: ReplicaSet, proxy: Proxy, prefix: str, count: int) -> list[ClientRequest]:
    cluster = replicas.cluster
    argv = [cluster.layout.python, "-m", "dd_accept.node.probe", "--admission", "--timeout", "10"]
    argv += ["--id", prefix, *[f"{proxy.url}{ADMISSION_PROBE_PATH}"] * count]
    record = cluster.exec(argv, node=proxy.node, timeout=count * 12 + 30)
    rows = json_lines(record)
    if not record.ok or len(rows) != count:
        raise ClusterError(f"the requests through the proxy could not be sent: {record.describe()}")
    return [_as_client_request(index, row) for index, row in enumerate(rows)]


def _as_client_request(index: int, row: dict[str, object]) -> ClientRequest:
    status = row.get("status")
    status = status if isinstance(status, int) else None
    outcome = {429: "rate_limited", 200: "ok", None: "error"}.get(status, "http_error")
    sent = float(row.get("sent") or 0.0)  # type: ignore[arg-type]
    retry_after = row.get("retry_after")
    return ClientRequest(
        t=sent + float(row.get("elapsed_s") or 0.0),  # type: ignore[arg-type]
        mode="raw",
        record=index,
        attempt=1,
        outcome=outcome,
        request_id=str(row.get("request_id") or ""),
        started=sent,
        status=status,
        retry_after=retry_after if isinstance(retry_after, str) else None,
        error=str(row["error"]) if row.get("error") else None,
    )
