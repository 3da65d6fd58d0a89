"""Routing once the faults are over: least connections gives every idle replica its share.

The brief's proxy routes by least connections, and the seed keeps health probes from
distorting "least-connections activity". A proxy that leaves an attempt counted as active
after it let go of it (a 429 or a 5xx it retried elsewhere, a connection error) routes round
the replicas that failed it from then on: after an overload, the replicas that turned
requests away get less than their share of the load when they are idle again, or none.
Every request still completes, on the others, so no other check sees it.

The round runs after the overload and the lost-backend round, the paths that retry and fail
over, in two parts:

- *before*: two requests a replica go through the proxy at once while every replica holds
  its streams' first byte back, so all are in flight together. A proxy that counts its
  connections truly gives each replica two, whatever order it breaks ties in; one whose
  miscounts so far differ by two or more between replicas cannot.
- the nudge, while the others still hold theirs: replica 0, which holds its two for a
  shorter time, is then the one replica with nothing in flight, so least connections sends
  it each of NUDGE requests one at a time; it answers them 429, then resets as many
  (a backend that crashed mid-request). Each is retried elsewhere. A proxy that miscounts
  either kind of attempt it lets go of keeps counting replica 0 busy by two or more.
- *after*: once every replica is idle, two requests a replica at once again.

Miscounts that differ by one between replicas can hide behind a tie-break; two cannot, so
`before` or `after` shows any proxy that miscounts either kind (modelled for every pre-state,
tie-break and leak in tests/unit/test_overload_routing.py). overload_checks.routing_restored
judges both. Kept apart from overload.py, which declares the phases.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from dd_accept.acceptance.proxy_requests import send_named, settled_attempts
from dd_accept.base.errors import ClusterError
from dd_accept.base.events import RESET_UNANSWERED, ClientRequest, EventWriter, UpstreamAttempt
from dd_accept.deployment import Proxy, ReplicaSet, RunDirectory

PER_REPLICA = 2  # requests sent at once for each replica
ROUTING_HOLD_S = 1.0  # how long every replica holds its streams in `after`
FREED_AFTER_S = 1.5  # in `before`, replica 0 holds its two this long, the others PINNED_S
PINNED_S = 4.0  # the nudge: 0.6 s on an idle machine (four recorded commands, six requests)
NUDGE = 3  # 429s, then as many resets, replica 0 answers in the nudge
ID_PREFIX = "routing-"  # the round's request ids: no other phase's prefix
CLIENT_FILE = "routing"  # its requests, as client events, beside the phases' clients


@dataclass(frozen=True, slots=True)
class AtOnce:
    """Requests sent together: each as the client saw it, every attempt the replicas recorded."""

    name: str
    client: tuple[ClientRequest, ...]
    upstream: tuple[UpstreamAttempt, ...]

    def per_replica(self, replicas: int) -> list[int]:
        return [sum(1 for a in self.upstream if a.replica == index) for index in range(replicas)]


@dataclass(frozen=True, slots=True)
class RoutingRound:
    """The round's evidence: how many replicas there were, the requests sent at once before
    and after the nudge, and every attempt of the nudge's requests at the replicas."""

    replicas: int
    before: AtOnce
    after: AtOnce
    nudge: tuple[UpstreamAttempt, ...]

    def nudge_failures(self) -> list[UpstreamAttempt]:
        """The nudge's attempts replica 0 failed as told: 429, or a reset."""
        return [a for a in self.nudge if a.replica == 0 and (a.status == 429 or a.outcome == RESET_UNANSWERED)]


def route_round(replicas: ReplicaSet, proxy: Proxy, run: RunDirectory) -> RoutingRound:
    """The round (each replica serves as before once it returns); every request is written
    as a client event, so the ledger reconciles them."""
    writer = EventWriter(run.path(f"{CLIENT_FILE}.jsonl")[1], "client")
    try:
        others = list(range(1, replicas.count))
        replicas.control([0], "delay", seconds=FREED_AFTER_S, count=PER_REPLICA)
        replicas.control(others, "delay", seconds=PINNED_S, count=PER_REPLICA)
        try:
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="routing") as pool:
                pinned = pool.submit(_at_once, replicas, proxy, "before the nudge", f"{ID_PREFIX}a-", PINNED_S)
                nudge = _nudge(replicas, proxy, writer, pinned)
                before = pinned.result()
        finally:
            replicas.control(None, "delay", seconds=0, count=0)
        if before.per_replica(replicas.count) == [PER_REPLICA] * replicas.count:  # else `before` fails already
            _pinned_throughout(before, nudge)
        for request in before.client:
            writer.write(request)
        replicas.control(None, "delay", seconds=ROUTING_HOLD_S, count=PER_REPLICA)
        try:
            after = _at_once(replicas, proxy, "after it", f"{ID_PREFIX}b-", ROUTING_HOLD_S)
        finally:
            replicas.control(None, "delay", seconds=0, count=0)
        for request in after.client:
            writer.write(request)
    finally:
        writer.close()
    return RoutingRound(replicas.count, before, after, tuple(sorted(nudge, key=lambda a: a.started)))


def _at_once(replicas: ReplicaSet, proxy: Proxy, name: str, prefix: str, held_s: float) -> AtOnce:
    asked = send_named(
        replicas.cluster, proxy, prefix, PER_REPLICA * replicas.count, stream=True, at_once=True,
        timeout_s=held_s + 10,
    )  # fmt: skip
    sent = [request.started for request in asked if request.started is not None]
    if sent and max(sent) - min(sent) >= FREED_AFTER_S / 2:  # the node, not the proxy, spread them
        raise ClusterError(
            f"the requests sent at once left the proxy's node over {max(sent) - min(sent):.2f}s, "
            f"too far apart to be in flight together (each is held {FREED_AFTER_S:g}s at the least)"
        )
    return AtOnce(name, tuple(asked), tuple(settled_attempts(replicas, asked)))


def _nudge(replicas: ReplicaSet, proxy: Proxy, writer: EventWriter, pinned: Future[AtOnce]) -> list[UpstreamAttempt]:
    """Once replica 0 has ended its two pinned streams (or `before` is over: a proxy that did
    not send it two fails there): NUDGE requests one at a time while it answers 429, then
    NUDGE while it resets; what the replicas recorded of them."""
    while not pinned.done():  # replica 0's pinned streams end FREED_AFTER_S after they came
        ended = [a for a in replicas.events() if a.replica == 0 and (a.request_id or "").startswith(f"{ID_PREFIX}a-")]
        if len(ended) >= PER_REPLICA:
            break
        time.sleep(0.1)
    asked: list[ClientRequest] = []
    try:
        for action, body in (("respond", {"status": 429, "retry_after": 1}), ("reset", {})):
            replicas.control([0], action, count=NUDGE, **body)
            asked += send_named(replicas.cluster, proxy, f"{ID_PREFIX}n{action}-", NUDGE, stream=True)
    finally:
        replicas.control([0], "respond", status=200, count=0)
        replicas.control([0], "reset", count=0)
    for request in asked:
        writer.write(request)
    return settled_attempts(replicas, asked)


def _pinned_throughout(before: AtOnce, nudge: list[UpstreamAttempt]) -> None:
    """The nudge reached the replicas while the others still held their pinned streams, as
    the round needs: else the machine was too slow for it, which says nothing of the SUT."""
    pinned_ends = [a.started + a.duration_s for a in before.upstream if a.replica != 0]
    if nudge and pinned_ends and max(a.started for a in nudge) >= min(pinned_ends):
        raise ClusterError(
            f"the nudge's requests reached the replicas after their pinned streams ended ({PINNED_S:g}s held): "
            "the machine was too slow for the routing round"
        )
