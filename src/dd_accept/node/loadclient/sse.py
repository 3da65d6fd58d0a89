"""What a load client keeps of one streamed response: its SSE events counted and timed, never
their text. Shared by both raw clients (aiohttp's and the wire client), so they count alike.

Bytes are read as the socket delivers them and split into lines here: a readline per SSE
line costs the client more than the proxy's forwarding of it. Events that arrive in one
read arrived together and share its time. Lines end in LF, CRLF or CR; a data line is
`data:` with or without its space (the SSE format). An event is counted at its first data
line (the data lines that follow it before a blank line are the same event's, joined, as an
SSE reader joins them) and timed when it is dispatched, at the blank line that ends it (or at
the body's end, when that never comes): a reader can use it only then, so a proxy that holds
back an event's end holds the event.
"""

from __future__ import annotations

import time
from typing import Any

from dd_accept.base.events import ClientRequest, to_tenth_ms
from dd_accept.base.wall_clock import WallAnchor

MAX_CHUNK_OFFSETS = 2048  # as the replica records them, so the two lists line up


_ERROR_TYPES = (b'"object":"error"', b'"object": "error"', b'"type":"error"', b'"type": "error"')


def is_error_event(payload: bytes) -> bool:
    """Whether an event's data is an error object: `{"error": {...}}` (vLLM, OpenAI), an error
    response itself (`{"object": "error", ...}`, older vLLM), or one typed as an error
    (`{"type": "error", ...}`, OpenAI's Responses and Anthropic's streams). Read at its start
    only: a token's text comes after the chunk's id and cannot be mistaken for it. An event
    named `event: error` is one too, whatever its data (`SseTally` reads the name)."""
    head = payload[:48].lstrip()
    return head.startswith(b'{"error"') or any(kind in head for kind in _ERROR_TYPES)


class SseTally:
    __slots__ = (
        "chunks", "done", "errors", "first", "gaps", "last", "named_error", "offsets", "open", "open_error",
        "opened", "payload", "pending", "size",
    )  # fmt: skip

    def __init__(self) -> None:
        self.chunks = self.size = 0
        self.payload = 0  # the data events' values, framing left out (base.events.sse_payload_bytes)
        self.errors = 0  # data events that are an error object (a server's in-stream error)
        self.done = False
        self.first: float | None = None
        self.last: float | None = None
        self.gaps: list[float] = []
        self.offsets: list[float] = []  # per data event: when it arrived, after the first
        self.pending = b""
        self.open = False  # a data event counted, its ending blank line not yet read
        self.opened = 0.0  # when that event's data line was read
        self.named_error = False  # the event being read was named `event: error` (the SSE event type)
        self.open_error = False  # the open event was counted an error

    def feed(self, data: bytes, now: float) -> None:
        """Body bytes as read at `now` (monotonic)."""
        self.size += len(data)
        if (
            not self.pending
            and not self.open
            and data.startswith(b"data:")
            and data.find(b"\n") == len(data) - 2
            and data.endswith(b"\n\n")
            and b"\r" not in data
        ):
            # One whole event in one read, as a streaming proxy under load delivers nearly every
            # token: what the line loop below would conclude, without splitting lines (the
            # client's cost per chunk is the harness's share of the capacity run).
            value = data[5:-2].strip()
            if value == b"[DONE]":
                self.done = True
            else:
                self.chunks += 1
                self.payload += len(value)
                if self.named_error or is_error_event(data[5:]):
                    self.errors += 1
                self._dispatched(now)
            self.named_error = False  # its blank line ended the event a read before may have named
            return
        self._feed_lines(data, now)

    def _feed_lines(self, data: bytes, now: float) -> None:
        text = self.pending + data
        held = b""
        if b"\r" in text:
            if text.endswith(b"\r"):  # maybe the first half of a CRLF: decided by the next read
                text, held = text[:-1], b"\r"
            text = text.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *whole, rest = text.split(b"\n")
        self.pending = rest + held
        for line in whole:
            if line:
                self._line(line, now)
            else:  # an event's end: its name goes with it, data or not
                self.named_error = False
                if self.open:
                    self._dispatched(now)

    def end(self, now: float) -> None:
        """The body ended: a last line without its newline still counts, and an event whose
        blank line never came is dispatched now."""
        if self.pending:
            self._line(self.pending, now)
            self.pending = b""
        if self.open:
            self._dispatched(now)

    def _line(self, line: bytes, now: float) -> None:
        if not line.startswith(b"data:"):
            if line.startswith(b"event:"):
                self.named_error = line[6:].strip() == b"error"
                if self.named_error and self.open and not self.open_error:
                    self.open_error = True  # named after its data line: the event is an error all the same
                    self.errors += 1
            return
        value = line[5:].strip()
        if value == b"[DONE]":
            if self.open:  # the event before it never got its blank line: it ends here
                self._dispatched(now)
            self.done = True
            return
        if self.open:  # a further data line of the open event: its data goes on, no new event
            self.payload += len(value)
            return
        self.chunks += 1
        self.payload += len(value)
        self.open_error = self.named_error or is_error_event(line[5:])
        self.errors += self.open_error
        self.open, self.opened = True, now

    def _dispatched(self, now: float) -> None:
        self.open = False
        if self.first is None:
            self.first = now
        elif self.last is not None:
            self.gaps.append(now - self.last)
        if self.chunks <= MAX_CHUNK_OFFSETS:
            self.offsets.append(to_tenth_ms(now - self.first))
        self.last = now

    def request(self, clock: WallAnchor, **attempt: Any) -> ClientRequest:
        """The attempt's `ClientRequest`: `attempt` holds who sent it and how it ended (mode,
        request_id, record, attempt, status, retry_after, outcome, error); it began when
        `clock` was read (the times fed in are monotonic) and ends now. Its start and end are
        both on that one wall-clock reading (see `base.wall_clock`)."""
        ended = time.monotonic()
        if self.open:  # the body broke before the event's end: timed at its data line, as read
            self._dispatched(self.opened)
        started = clock.mono
        return ClientRequest(
            t=round(clock.at(ended), 6), started=round(clock.wall, 6), latency_s=round(ended - started, 6),
            **attempt, **self._fields(started),
        )  # fmt: skip

    def _fields(self, started: float) -> dict[str, Any]:
        gaps = self.gaps
        return {
            "ttft_s": None if self.first is None else round(self.first - started, 6),
            "chunks": self.chunks,
            "bytes": self.size,
            "payload_bytes": self.payload,
            "done": self.done,
            "gap_max_s": round(max(gaps), 6) if gaps else None,
            "gap_mean_s": round(sum(gaps) / len(gaps), 6) if gaps else None,
            "chunk_offsets_s": self.offsets if len(self.offsets) > 1 else None,
            "error_events": self.errors or None,
        }
