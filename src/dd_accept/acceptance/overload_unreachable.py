"""Total overload with some replicas unreachable: what the proxy answers a request that met
overload on one attempt and found no backend listening on another.

The brief's proxy "answers 429 + Retry-After when overload was seen" (rc1's proxy.py keeps
`overload_seen` across attempts for exactly this). Total overload alone never reaches that
path: every attempt there is answered 429 and the last one is passed on. A proxy that
answered 502 instead would tell the client the service is gone when it is only full: the
client would not wait out the Retry-After, and its admission would not decrease.

Kept apart from overload.py, which declares the phases: this is the round's doing (refuse,
ask, wait) and its evidence; overload_checks.total_unreachable judges it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from dd_accept.base.errors import ClusterError
from dd_accept.base.events import ADMISSION_PROBE_PATH, ClientRequest, EventWriter
from dd_accept.base.waiting import wait_until
from dd_accept.deployment import Proxy, ReplicaSet, RunDirectory, json_lines

UNREACHABLE_REQUESTS = 12  # one at a time through the proxy, each its own request id
# How long the refused replicas refuse: the round (well under 1 s on an idle machine) must end
# inside it, or it is asked again with the next, longer one (a busy machine, not the SUT).
REFUSE_SECONDS = (3.0, 6.0, 12.0)
ID_PREFIX = "unreachable-"  # the round's request ids: no client phase's prefix (partial-, total-)
CLIENT_FILE = "unreachable"  # its requests, as client events, beside the phases' clients


@dataclass(frozen=True, slots=True)
class UnreachableRound:
    """The round's evidence: which replicas refused connections, how many attempts the proxy
    may make per request, and each request as the client saw it."""

    refused: tuple[int, ...]
    attempts: int
    client: tuple[ClientRequest, ...]  # the requests that ended while the replicas refused
    late: int = 0  # requests that ended after the refusal did: not judged


def refused_replicas(replicas: int, attempts: int) -> tuple[int, ...]:
    """Every `attempts`-th replica (2 and 5 of 8, with 3 attempts): a proxy that tries its
    backends in index order from either end, or round a ring as rc1 does, meets overload
    first and a refused connection last; replica 0 always listens, so no policy can miss
    overload on every request."""
    return tuple(index for index in range(replicas) if (index + 1) % attempts == 0)


def ask_with_replicas_refusing(
    replicas: ReplicaSet, proxy: Proxy, run: RunDirectory, attempts: int
) -> UnreachableRound:
    """Refuse connections on `refused_replicas` (every replica is held in overload), send the
    round's requests through the proxy from its own node, and return once the refused
    replicas listen again, so the phases after see every replica as before. Only requests
    that ended while the replicas refused are judged; a round none of which did (the node was
    slow to start it) is asked again, refusing longer."""
    refused = refused_replicas(replicas.count, attempts)
    for number, seconds in enumerate(REFUSE_SECONDS):
        began = time.time()
        replicas.control(list(refused), "refuse", seconds=seconds)
        client = _ask(replicas, proxy, f"{ID_PREFIX}{number}-")  # a round's ids are its own
        _wait_listening(replicas, refused, seconds)
        inside = tuple(request for request in client if request.t < began + seconds)
        if inside:  # else the node took the whole refusal to start the round: a busy machine
            break
    else:
        raise ClusterError(
            f"no request through the proxy ended within {REFUSE_SECONDS[-1]:g}s of replicas refusing connections: "
            "the machine is too busy to drive them"
        )
    _, path = run.path(f"{CLIENT_FILE}.jsonl")
    writer = EventWriter(path, "client")
    for request in client:
        writer.write(request)
    writer.close()
    return UnreachableRound(refused, attempts, inside, late=len(client) - len(inside))


def _ask(replicas: ReplicaSet, proxy: Proxy, prefix: str) -> tuple[ClientRequest, ...]:
    cluster = replicas.cluster
    argv = [cluster.layout.python, "-m", "dd_accept.node.probe", "--admission", "--timeout", "10"]
    argv += ["--id", prefix, *[f"{proxy.url}{ADMISSION_PROBE_PATH}"] * UNREACHABLE_REQUESTS]
    rows = json_lines(cluster.exec(argv, node=proxy.node, timeout=UNREACHABLE_REQUESTS * 12 + 30))
    return tuple(_as_client_request(index, row) for index, row in enumerate(rows))


def _wait_listening(replicas: ReplicaSet, refused: tuple[int, ...], seconds: float) -> None:
    wait_until(
        lambda: _listening(replicas, refused),
        bool,
        timeout=seconds + 15,
        interval=0.5,
        what=f"replicas {', '.join(map(str, refused))} to listen again",
    )


def _as_client_request(index: int, row: dict[str, object]) -> ClientRequest:
    status = row.get("status")
    status = status if isinstance(status, int) else None
    outcome = "rate_limited" if status == 429 else "error" if status is None else "http_error"
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


def _listening(replicas: ReplicaSet, refused: tuple[int, ...]) -> bool:
    try:
        replicas.control(list(refused), "state")
    except ClusterError:  # nothing listens yet: the control request was refused too
        return False
    return True
