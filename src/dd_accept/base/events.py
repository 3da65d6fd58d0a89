"""JSONL events on one clock: wall time, which host and containers share (one kernel).

Each kind of event is a dataclass here, written by the programs on compute nodes (load
client, replica) and read back by the checks, the runner and the report. Writers construct
the dataclass, so a misspelt field fails where it is written; readers get the dataclass back
(`parse_event`), so a field renamed on one side and not the other fails in the first unit
test that reads it, not in a scenario that quietly judged a missing field as None. A row
that does not match its kind (an unknown kind or field, a required field missing) is a
fault of dd-accept itself and is refused.

Only counts, sizes, statuses and timings are written, never request or response text.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TextIO, TypeVar


@functools.cache
def _payload_names(cls: type) -> tuple[str, ...]:
    """Field names after t and source (cached: replicas write one event per request)."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.name not in ("t", "source"))


def to_tenth_ms(seconds: float) -> float:
    """`seconds` to a tenth of a millisecond, as `round(seconds, 4)` gives it but at a third
    of the cost (it runs once per chunk on both sides of the proxy). Where `seconds * 10000`
    lands within float error of a half the two may differ by one step (0.12345: 0.1234
    here, 0.1235 from `round`): 0.1 ms, the resolution these offsets are kept to anyway."""
    return round(seconds * 10000) / 10000


REQUEST_ID_HEADER = "x-dd-request-id"  # every request's id, sent by the load clients, kept by the replicas
# What the load clients send, and the replicas generate for: every other path is a probe's,
# a control's or the proxy's own (/health, /metrics).
COMPLETION_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})

# How the harness probes a replica's queue admission, straight to the replica (never through
# the SUT's proxy): the request the middleware exists to gate, a POST to the chat endpoint,
# with a body the app refuses before any work (max_tokens 0). A 429 is the middleware's
# rejection; an answer below 500 is the app's own, so the probe got past admission. Its
# request id marks it as the harness's traffic, never the SUT's: no scenario's prefix, no
# client's record, and the replica's control plane does not spend a forced answer on it.
ADMISSION_PROBE_PATH = "/v1/chat/completions"
ADMISSION_PROBE_BODY = b'{"messages":[],"max_tokens":0}'
ADMISSION_PROBE_ID = "dd-accept-admission-probe"
# The smallest generation a replica streams (one token, then [DONE]): the request the harness
# sends through the proxy where only its routing is judged (the control plane can hold a
# stream's first byte back, so requests stay in flight together).
STREAM_PROBE_BODY = b'{"messages":[],"max_tokens":1,"stream":true}'
# A replica's outcome for a request it read whole and then reset unanswered (the control
# plane's `reset`): a backend that crashed mid-request, a connection error to the proxy.
RESET_UNANSWERED = "reset"


def sse_payload_bytes(body: bytes) -> int:
    """The bytes of the data events' values in an SSE body, `[DONE]` and framing left out
    (line ends, the space after `data:`, comments such as a proxy's heartbeats): what a
    stream carries, counted alike by the replica that wrote it and the client that read it,
    however a correct proxy re-frames it on the way."""
    total = 0
    for line in body.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n"):
        if line.startswith(b"data:"):
            value = line[5:].strip()
            if value != b"[DONE]":
                total += len(value)
    return total


def admitted_probe(status: int | None) -> bool:
    """The app answered the probe (below 500, not 429: the synthetic app's and vLLM's answer
    is a 400): the middleware let it through. A 5xx is no admission: a middleware that
    refuses with 503 has refused."""
    return status is not None and status < 500 and status != 429


@dataclass(frozen=True, slots=True, kw_only=True)
class EventBase:
    KIND: ClassVar[str]
    t: float = 0.0  # wall time it ended: set by the writer unless the record timed it (base.wall_clock)
    source: str = ""  # who wrote it ("client", "replica-3"); set by the writer

    def to_json(self) -> dict[str, Any]:
        fields = {name: getattr(self, name) for name in _payload_names(type(self))}
        return {"t": self.t, "source": self.source, "kind": self.KIND, **fields}


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientRequest(EventBase):
    """One attempt of one record, as the load client saw it (raw HTTP or the SUT's client)."""

    KIND: ClassVar[str] = "request"
    mode: str  # "raw", "wire" (the raw client on bare connections) or "sut"
    record: int
    attempt: int
    outcome: str  # ok, rate_limited, http_error, truncated, error, deadline, hung_up (the client left)
    request_id: str | None = None  # x-dd-request-id: the key to the replicas' records of it
    started: float | None = None  # wall time the attempt began (t is when it ended)
    status: int | None = None
    retry_after: str | float | None = None  # as received: a header value (raw) or the SUT's number
    error: str | None = None  # the exception type or the SUT's error kind, never a message
    latency_s: float | None = None
    ttft_s: float | None = None
    chunks: int | None = None
    bytes: int | None = None
    done: bool | None = None  # the stream's [DONE] arrived
    gap_max_s: float | None = None
    gap_mean_s: float | None = None
    chunk_offsets_s: list[float] | None = None  # first chunks' arrival, relative to the first
    tokens: int | None = None  # output tokens the SUT's client reported
    error_events: int | None = None  # data events that were an error object (a server's in-stream error)
    payload_bytes: int | None = None  # the data events' values, without framing (sse_payload_bytes)

    @property
    def began(self) -> float:
        """When the attempt began; its end (t) where the writer could not say."""
        return self.t if self.started is None else self.started


@dataclass(frozen=True, slots=True, kw_only=True)
class AdmissionChange(EventBase):
    """One event of the SUT's client admission controller (its own event sink)."""

    KIND: ClassVar[str] = "admission"
    event: str  # the controller's event kind: request_lease_acquired, request_limit_decreased, ...
    reason: str | None = None
    limit: int | None = None
    in_flight: int | None = None
    waiters: int | None = None
    cooldown_s: float | None = None
    lease: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class UpstreamAttempt(EventBase):
    """One request a replica served (or refused), as the replica saw it: the independent
    count of the proxy's upstream attempts."""

    KIND: ClassVar[str] = "upstream"
    replica: int
    path: str
    # ok, cut (by the control plane), error (an exception while serving), abandoned (the
    # proxy closed the connection while the control plane held the response back), and on the paced
    # replica: disconnected (the proxy went away mid-response), fault (the replica's own bug)
    outcome: str
    started: float
    duration_s: float  # to the response's last byte handed to the server, else to the handler's end
    request_id: str | None = None
    status: int | None = None
    first_byte_s: float | None = None
    bytes: int = 0
    data_events: int = 0
    chunk_offsets_s: list[float] | None = None
    payload_bytes: int | None = None  # its data events' values, without framing (sse_payload_bytes)

    @property
    def generated_whole(self) -> bool:
        """A generation the replica finished: it answered 200 and wrote the whole response (a
        stream cut, abandoned or disconnected mid-way is not one)."""
        return self.status == 200 and self.outcome == "ok"


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueGauge(EventBase):
    """A synthetic replica's queue after a change: what its queue admission samples."""

    KIND: ClassVar[str] = "queue"
    waiting: int
    running: int


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeChange(EventBase):
    """A compute node's condition as the harness did it or Slurm reported it, on the events'
    clock: when it was lost and restored, and Slurm's State field when it changed."""

    KIND: ClassVar[str] = "node"
    node: str
    state: str  # "lost", "restored" (what the harness did), else Slurm's State ("DOWN+NOT_RESPONDING")


@dataclass(frozen=True, slots=True, kw_only=True)
class StepChange(EventBase):
    """A Slurm step as the controller listed it (`squeue -s`): running when first read, ended
    when it left the list, with its job's state at that moment (NODE_FAIL when its node went
    DOWN). How a lost node's steps end is Slurm's side of the loss, next to the node's."""

    KIND: ClassVar[str] = "step"
    step: str  # JOB.STEP
    state: str  # "running" or "ended"
    job_state: str | None = None  # squeue's %T for the job when the step ended ("GONE" once purged)


@dataclass(frozen=True, slots=True, kw_only=True)
class SutAttemptRecord(EventBase):
    """One upstream attempt as the SUT's own log recorded it (its backend and status only),
    and where it was placed: the SUT's records carry no request id, so each is paired with
    the replicas' attempt of the same backend and status in the same phase, in order of
    occurrence. Unplaced (request_id None) where the replicas served no such attempt."""

    KIND: ClassVar[str] = "sut_attempt"
    phase: str
    backend: str  # a replica index, or "?" for a backend the record names that is none of them
    status: str  # a status code, or "no response"
    request_id: str | None = None
    attempt_started: float | None = None  # the replicas' attempt it was paired with


@dataclass(frozen=True, slots=True, kw_only=True)
class RelayedResponse(EventBase):
    """One response as the fault point between the proxy and the replicas relayed it
    (`node.faultpoint`): what it forwarded to the proxy and what it did to the stream."""

    KIND: ClassVar[str] = "relayed"
    upstream: int  # the replica's index
    fault: str  # none, split, reset, error, stall, slow
    status: int
    # whole, reset (both connections reset), error_event (an error event and [DONE] ended it),
    # broken (a side hung up mid-response: the proxy gave up, or a replica died)
    ended: str
    request_id: str | None = None
    data_events: int = 0  # forwarded, an injected error event included
    bytes: int = 0  # body bytes forwarded (a chunked body's data, as a client decodes it)
    payload_bytes: int = 0  # the data events' values forwarded, without framing (sse_payload_bytes)
    split: int = 0  # chunks sent as two TCP segments
    stalled_s: float = 0.0  # how long nothing was forwarded mid-stream (a stall)
    slowed_s: float = 0.0  # a slow link: how long the response took to cross it, head to end


# Where a run keeps its SutAttemptRecords, in its directory (a folder of its own: the report
# takes the run's top-level JSONL files for load clients').
SUT_ATTEMPT_RECORDS = ("sut", "attempt-records.jsonl")


Event = (
    ClientRequest
    | AdmissionChange
    | UpstreamAttempt
    | QueueGauge
    | NodeChange
    | StepChange
    | SutAttemptRecord
    | RelayedResponse
)
EVENT_TYPES: dict[str, type[Event]] = {
    cls.KIND: cls
    for cls in (
        ClientRequest, AdmissionChange, UpstreamAttempt, QueueGauge, NodeChange, StepChange, SutAttemptRecord,
        RelayedResponse,
    )
}  # fmt: skip
E = TypeVar("E", bound=EventBase)


class EventFormatError(ValueError):
    """A row that is not an event of a kind dd-accept writes: the writer and the reader disagree."""


def parse_event(row: dict[str, Any]) -> Event:
    kind = row.get("kind")
    cls = EVENT_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise EventFormatError(f"unknown event kind {kind!r}")
    unknown = sorted(set(row) - set(_payload_names(cls)) - {"t", "source", "kind"})
    if unknown:
        raise EventFormatError(f"{kind} event has fields no {cls.__name__} has: {', '.join(unknown)}")
    try:
        return cls(**{key: value for key, value in row.items() if key != "kind"})
    except TypeError as error:  # a required field missing
        raise EventFormatError(f"{kind} event: {error}") from None


def parse_events(rows: Iterable[dict[str, Any]]) -> list[Event]:
    return [parse_event(row) for row in rows]


def read_event_file(path: Path) -> list[Event]:
    """Every complete line of an event file (a writer may be mid-line), parsed; none if the
    file does not exist yet."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    lines = text.split("\n")[:-1]  # the part after the last newline is not a whole line yet
    return parse_events(json.loads(line) for line in lines if line.strip())


def readable_events(rows: Iterable[Any]) -> list[Event]:
    """The rows that are events, skipping any that are not: for views of evidence written by
    other versions (the report), never for verdicts."""
    found = []
    for row in rows:
        if isinstance(row, dict):
            try:
                found.append(parse_event(row))
            except EventFormatError:
                continue
    return found


def of_type(events: Iterable[Any], cls: type[E]) -> list[E]:
    return [event for event in events if isinstance(event, cls)]


class EventWriter:
    def __init__(self, path: Path | None, source: str) -> None:
        self.source = source
        self._lock = threading.Lock()
        self._handle: TextIO | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = open(path, "a", buffering=1)  # noqa: SIM115 - closed in close()
        self.counts: dict[str, int] = {}

    def write(self, event: EventBase) -> None:
        record = event.to_json() | {"t": round(event.t or time.time(), 6), "source": self.source}
        with self._lock:
            self.counts[event.KIND] = self.counts.get(event.KIND, 0) + 1
            if self._handle is not None:
                self._handle.write(json.dumps(record, separators=(",", ":"), default=str) + "\n")

    def close(self) -> None:
        with self._lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None
