"""The request ledger: every request of a run as the client and the replicas saw it.

Every client request carries an id (`x-dd-request-id`) that the proxy forwards on each of
its upstream attempts, and every replica records each request it serves with that id. So
after a scenario, each request the client made can be set beside every generation the
replicas did for it, with neither side taking the SUT's word for anything. The ledger reads
every event file of the scenario's run directory (the client runs' files, the replicas'
`replicas/events-*.jsonl`); a file that is not an event file (drain marks) is passed over.
A scenario's phases may run clients in sub-runs of their own (health's drills): those are
read too. What the rows must show is judged in `ledger_checks`.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from dd_accept.base.events import (
    ADMISSION_PROBE_ID,
    COMPLETION_PATHS,
    EVENT_TYPES,
    ClientRequest,
    Event,
    RelayedResponse,
    UpstreamAttempt,
    read_event_file,
)


def attempt_end(attempt: UpstreamAttempt) -> float:
    return attempt.started + attempt.duration_s


@dataclass(frozen=True, slots=True)
class LedgerRow:
    """One request id: what the client recorded of it, and every attempt a replica served for it."""

    request_id: str
    client: tuple[ClientRequest, ...]
    attempts: tuple[UpstreamAttempt, ...]  # in the order they began
    # The fault point (node.faultpoint) did not pass its response whole: cut, ended by an error
    # event or hung up on, by design; the wire checks judge what the client saw of it.
    broken_on_purpose: bool = False

    @property
    def generations(self) -> tuple[UpstreamAttempt, ...]:
        return tuple(a for a in self.attempts if a.generated_whole)

    @property
    def answered(self) -> bool:
        """The client got its answer whole (any record of it: one per id in every client)."""
        return any(record.outcome == "ok" for record in self.client)


@dataclass(frozen=True, slots=True)
class Ledger:
    rows: dict[str, LedgerRow]  # every id the client sent, in the order it sent them
    # attempts whose id the client never recorded (its record may be missing because its step
    # was killed by design, as health's drills do): shown, not judged
    unmatched: tuple[UpstreamAttempt, ...] = ()
    # completion requests a replica saw with no request id at all: the proxy did not pass
    # some request's id on, so those requests cannot be set beside the client's
    anonymous: tuple[UpstreamAttempt, ...] = ()

    @property
    def attempts(self) -> int:
        return sum(len(row.attempts) for row in self.rows.values())

    @classmethod
    def of(cls, events: Iterable[Event]) -> Ledger:
        clients: dict[str, list[ClientRequest]] = defaultdict(list)
        attempts: dict[str, list[UpstreamAttempt]] = defaultdict(list)
        broken: set[str] = set()
        anonymous: list[UpstreamAttempt] = []
        for event in events:
            if isinstance(event, ClientRequest) and event.request_id:
                clients[event.request_id].append(event)
            elif isinstance(event, UpstreamAttempt) and not event.request_id and event.path in COMPLETION_PATHS:
                anonymous.append(event)
            elif isinstance(event, UpstreamAttempt) and event.request_id not in (None, "", ADMISSION_PROBE_ID):
                attempts[event.request_id].append(event)  # the harness's admission probes are no client's
            elif isinstance(event, RelayedResponse) and event.request_id and event.ended != "whole":
                broken.add(event.request_id)
        ordered = sorted(clients, key=lambda rid: min(r.began for r in clients[rid]))
        rows = {
            rid: LedgerRow(
                rid, tuple(clients[rid]), tuple(sorted(attempts.get(rid, ()), key=lambda a: a.started)), rid in broken
            )
            for rid in ordered
        }
        unmatched = tuple(a for rid, found in attempts.items() if rid not in clients for a in found)
        return cls(rows, unmatched, tuple(anonymous))


def is_event_file(path: Path) -> bool:
    """Whether a JSON-lines file holds events (its first row is of an event kind): a run
    directory also holds other records (drain marks, capacity's levels), which the ledger does
    not read."""
    with open(path) as handle:
        first = handle.readline().strip()
    try:
        row = json.loads(first) if first else None
    except ValueError:
        return False
    return isinstance(row, dict) and row.get("kind") in EVENT_TYPES


def read_ledger(*directories: Path) -> Ledger:
    """The ledger of a scenario's run directories (its own and the sub-runs its phases made):
    each directory's client files and its replicas' files, a request known by its directory
    and its id (each client run numbers its requests afresh)."""
    events: list[Event] = []
    for directory in dict.fromkeys(directories):
        files = [*sorted(directory.glob("*.jsonl")), *sorted(directory.glob("replicas/*.jsonl"))]
        files += sorted(directory.glob("faultpoint-*/relayed.jsonl"))  # the wire scenario's fault point
        for path in files:
            if is_event_file(path):
                events += [_placed(event, directory.name) for event in read_event_file(path)]
    return Ledger.of(events)


def _placed(event: Event, directory: str) -> Event:
    if isinstance(event, ClientRequest | UpstreamAttempt | RelayedResponse) and event.request_id:
        return dataclasses.replace(event, request_id=f"{directory}/{event.request_id}")
    return event
