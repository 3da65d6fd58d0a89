"""Routing once the faults are over: least connections gives every idle replica its share.

The brief's proxy routes by least connections, and the seed keeps health probes from
distorting "least-connections activity". A proxy that leaves an attempt counted as active
after it let go of it (a 429 or a 5xx it retried elsewhere, a connection error) routes round
the replicas that failed it from then on: after an overload, the replicas that turned
requests away get less than their share of the load when they are idle again, or none.
Every request still completes, on the others, so no other check sees it.

The round runs once the overload and the lost backends are over, in three parts:

- *before*: two requests a replica go through the proxy at once while every replica pins
  its streams (no first byte until the harness releases them, once all have come), so all
  are in flight together. A proxy that counts its connections truly gives each replica two,
  whatever order it breaks ties in; one whose miscounts so far differ by two or more
  between replicas cannot.
- the nudge, while the others still pin theirs: replica 0's two are released first, so it
  is the one replica with nothing in flight and least connections sends it the nudge's
  requests one at a time. First it streams three whose client leaves after the first line
  (a user who stops reading), holding the rest of each back HANGUP_DELAY_S so the proxy is
  still relaying when its client goes (three: a miscount of one before, on every replica
  but 0, would otherwise hide the two that leak; first: a proxy that sets a failing
  backend aside still sends them there). Then three more whose client gives up before the
  first byte (replica 0 holds it back GIVEUP_HOLD_S, the client waits GIVEUP_AFTER_S): a
  proxy that cancels its handler when its client goes meets that while it waits for the
  replica. Then it answers requests with each status the proxy retries (429 and 5xx, two
  of each kind retried), then resets as many connections (a backend that crashed
  mid-request); each is retried elsewhere. A proxy that miscounts
  any kind of attempt it lets go of (one that releases only a stream that ended well, or
  only on an error but not on a cancellation) keeps counting replica 0 busy by two or more.
- *after*: once every replica is idle, two requests a replica at once again.

Miscounts that differ by one between replicas can hide behind a tie-break; two cannot. A
round that comes out uneven is sent once more after RESTORE_WAIT_S: a proxy that sets a
failing backend aside for a while (passive ejection, or honouring its Retry-After) has it
back by then, a miscount never decays. overload_routing_checks.routing_restored judges it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from dd_accept.acceptance.proxy_requests import send_named, settled_attempts
from dd_accept.base.events import RESET_UNANSWERED, ClientRequest, EventWriter, UpstreamAttempt
from dd_accept.base.waiting import wait_for_finding
from dd_accept.deployment import Proxy, ReplicaSet, RunDirectory

PER_REPLICA = 2  # requests sent at once for each replica
ARRIVAL_WAIT_S = 10.0  # for every request sent at once to reach a replica (a proxy holding some back)
RESTORE_WAIT_S = 12.0  # before an uneven round is sent once more (nginx's default fail_timeout is 10 s)
# In the nudge replica 0 then answers each status the proxy retries twice (a miscount of one can
# hide behind a tie-break), one request each, then resets this many connections.
NUDGE_RESETS = 3
NUDGE_HANGUPS = 3  # first, streams their client leaves after the first line, one at a time:
HANGUP_DELAY_S = 0.5  # the rest of each held back, so the client is gone before it ends,
HANGUP_EVERY_S = 0.8  # and the next sent once the proxy has met the hang-up (a correct one, not slow)
# Least connections sends replica 0 this many of them at least: the first two find it below
# the others' two pinned streams whether or not the proxy has met the hang-ups yet.
HANGUPS_TO_REPLICA_0 = 2
HANGUP_PREFIX = "n-hangup-"
GIVEUP_AFTER_S = 0.4  # then streams their client gives up on before the first byte, one at a time:
GIVEUP_HOLD_S = 1.0  # replica 0 holds each back this long before its first byte,
GIVEUP_EVERY_S = 1.3  # and the next once even a proxy that meets the give-up only at its write has
GIVEUP_PREFIX = "n-giveup-"
ID_PREFIX = "routing-"  # the round's request ids: no other phase's prefix
CLIENT_FILE = "routing"  # its requests, as client events, beside the phases' clients


@dataclass(frozen=True, slots=True)
class AtOnce:
    """Requests sent together: each as the client saw it, every attempt the replicas recorded,
    and when they were sent (a second send is told by how long after the first it went)."""

    name: str
    client: tuple[ClientRequest, ...]
    upstream: tuple[UpstreamAttempt, ...]
    sent_at: float  # wall time

    def per_replica(self, replicas: int) -> list[int]:
        return [sum(1 for a in self.upstream if a.replica == index) for index in range(replicas)]

    def even(self, replicas: int) -> bool:
        return self.per_replica(replicas) == [PER_REPLICA] * replicas


@dataclass(frozen=True, slots=True)
class RoutingRound:
    """The round's evidence: how many replicas there were, the requests sent at once before
    and after the nudge (a second one where the first came out uneven), and every attempt
    of the nudge's requests at the replicas."""

    replicas: int
    before: tuple[AtOnce, ...]
    after: tuple[AtOnce, ...]
    nudge: tuple[UpstreamAttempt, ...]

    def nudge_failures(self) -> list[UpstreamAttempt]:
        """The nudge's attempts replica 0 failed as told: a status, or a reset (not the streams
        whose client left: one held before its first byte has no status)."""
        left = (ID_PREFIX + HANGUP_PREFIX, ID_PREFIX + GIVEUP_PREFIX)
        return [
            a for a in self.nudge
            if a.replica == 0 and (a.status != 200 or a.outcome == RESET_UNANSWERED)
            and not (a.request_id or "").startswith(left)
        ]  # fmt: skip

    def nudge_hangups(self) -> list[UpstreamAttempt]:
        """The nudge's streams replica 0 served whose client left after the first line."""
        return self._at_replica_0(HANGUP_PREFIX)

    def nudge_giveups(self) -> list[UpstreamAttempt]:
        """The nudge's streams replica 0 held whose client gave up before the first byte."""
        return self._at_replica_0(GIVEUP_PREFIX)

    def _at_replica_0(self, prefix: str) -> list[UpstreamAttempt]:
        """The nudge's attempts at replica 0 of the requests named ID_PREFIX + `prefix` and a number."""
        return [a for a in self.nudge if a.replica == 0 and (a.request_id or "").startswith(ID_PREFIX + prefix)]


def route_round(replicas: ReplicaSet, proxy: Proxy, run: RunDirectory, retried: tuple[int, ...]) -> RoutingRound:
    """The round (each replica serves as before once it returns); `retried`, the statuses the
    proxy retries (its profile). Every request is written as a client event, so the ledger
    reconciles them."""
    writer = EventWriter(run.path(f"{CLIENT_FILE}.jsonl")[1], "client")
    sends = _Sends(replicas, proxy, writer)
    nudged: list[UpstreamAttempt] = []

    def nudge() -> None:
        nudged.extend(_nudge(replicas, proxy, writer, retried * 2))

    try:
        before = sends.until_even("before the nudge", f"{ID_PREFIX}a", nudge)
        after = sends.until_even("after it", f"{ID_PREFIX}b", None)
    finally:
        writer.close()
    return RoutingRound(replicas.count, before, after, tuple(sorted(nudged, key=lambda a: a.started)))


@dataclass(frozen=True, slots=True)
class _Sends:
    """Requests sent at once through the proxy while the replicas pin them."""

    replicas: ReplicaSet
    proxy: Proxy
    writer: EventWriter

    def until_even(self, name: str, prefix: str, nudge: Callable[[], None] | None) -> tuple[AtOnce, ...]:
        """The requests at once; once more after RESTORE_WAIT_S if they came out uneven.
        `nudge`, if any, runs on the last send, replica 0 released and the others pinned."""
        sent: list[AtOnce] = []
        for attempt in range(2):
            if attempt:
                time.sleep(RESTORE_WAIT_S)
            pinned = self.pinned(f"{name}{' again' if attempt else ''}", f"{prefix}{attempt}-", nudge, attempt == 1)
            sent.append(pinned)
            if pinned.even(self.replicas.count):
                break
        return tuple(sent)

    def pinned(self, name: str, prefix: str, nudge: Callable[[], None] | None, last: bool) -> AtOnce:
        replicas, count = self.replicas, PER_REPLICA * self.replicas.count
        replicas.control(None, "pin", count=PER_REPLICA)
        started = time.time()
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="routing") as pool:
            sending = pool.submit(send_named, replicas.cluster, self.proxy, prefix, count, stream=True, at_once=True,
                                  timeout_s=ARRIVAL_WAIT_S + 30)  # fmt: skip
            try:
                states = wait_for_finding(
                    lambda: replicas.control(None, "state"),
                    lambda rows: sum(int(r.get("pinned_now", 0)) for r in rows) + _ended(replicas, prefix) >= count,
                    timeout=ARRIVAL_WAIT_S, what="every request sent at once to reach a replica",
                )  # fmt: skip
                pinned = [int(row.get("pinned_now", 0)) for row in states or ()]  # by replica, in order
                if nudge is not None and (pinned == [PER_REPLICA] * replicas.count or last):
                    replicas.control(None, "pin", count=0)  # where fewer came, the nudge's retries must not wait
                    replicas.control([0], "unpin")
                    wait_for_finding(lambda: _ended(replicas, prefix, replica=0) >= (pinned or [0])[0], bool,
                                     timeout=ARRIVAL_WAIT_S, what="replica 0's released streams")  # fmt: skip
                    nudge()
            finally:  # the others' pinned streams go on, and no later stream is pinned
                replicas.control(None, "unpin")
            asked = sending.result()
        for request in asked:
            self.writer.write(request)
        return AtOnce(name, tuple(asked), tuple(settled_attempts(replicas, asked)), started)


def _ended(replicas: ReplicaSet, prefix: str, replica: int | None = None) -> int:
    """How many of the round's requests a replica has ended (`replica` None: any of them)."""
    return sum(
        1
        for a in replicas.events()
        if (a.request_id or "").startswith(prefix) and (replica is None or a.replica == replica)
    )


def _nudge(replicas: ReplicaSet, proxy: Proxy, writer: EventWriter, statuses: tuple[int, ...]) -> list[UpstreamAttempt]:
    """Replica 0 streams NUDGE_HANGUPS whose client leaves after the first line, as many whose
    client gives up before the first byte, then answers one request with each of `statuses`,
    then resets NUDGE_RESETS; requests go one at a time; what the replicas recorded of them."""
    asked: list[ClientRequest] = []
    try:
        replicas.control([0], "delay", after_chunks=1, seconds=HANGUP_DELAY_S, count=NUDGE_HANGUPS)
        asked += _left(replicas, proxy, HANGUP_PREFIX, HANGUP_EVERY_S)
        replicas.control([0], "delay", seconds=GIVEUP_HOLD_S, count=NUDGE_HANGUPS)  # before the first byte
        asked += _left(replicas, proxy, GIVEUP_PREFIX, GIVEUP_EVERY_S, timeout_s=GIVEUP_AFTER_S)
        replicas.control([0], "delay", count=0)
        replicas.control([0], "respond", statuses=list(statuses))
        asked += send_named(replicas.cluster, proxy, f"{ID_PREFIX}n-status-", len(statuses), stream=True)
        replicas.control([0], "respond", status=200, count=0)
        replicas.control([0], "reset", count=NUDGE_RESETS)
        asked += send_named(replicas.cluster, proxy, f"{ID_PREFIX}n-reset-", NUDGE_RESETS, stream=True)
    finally:
        replicas.control([0], "respond", status=200, count=0)
        replicas.control([0], "reset", count=0)
        replicas.control([0], "delay", count=0)
    for request in asked:
        writer.write(request)
    return settled_attempts(replicas, asked)


def _left(
    replicas: ReplicaSet, proxy: Proxy, prefix: str, every_s: float, timeout_s: float = 10.0
) -> list[ClientRequest]:
    """NUDGE_HANGUPS streams, one every `every_s`, whose client leaves (node.probe --hangup:
    after the first line, or at `timeout_s` if none came); returned once the replicas have
    ended the ones it left (each held back a while): their records are settled only then,
    and the proxy has met the hang-up. One never ended is left to the check, which sees it
    missing."""
    left = send_named(replicas.cluster, proxy, ID_PREFIX + prefix, NUDGE_HANGUPS, stream=True, hangup=True,
                      every_s=every_s, timeout_s=timeout_s)  # fmt: skip
    gone = {r.request_id for r in left if r.outcome == "hung_up"}
    wait_for_finding(
        lambda: {a.request_id for a in replicas.events()}, gone.issubset,
        timeout=GIVEUP_HOLD_S + ARRIVAL_WAIT_S, what="the streams whose client left to end at the replicas",
    )  # fmt: skip
    return left
