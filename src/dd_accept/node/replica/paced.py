"""The paced replica: the capacity scenario's vLLM stand-in, cheap enough that the proxy, not
the harness, is what saturates.

The ASGI replica (`server.py`) costs about as much per chunk as the proxy it feeds: a timer
per token per stream, uvicorn's send path and the recorder's wrapper around every body
write. Here one timer paces every stream of the process (a heap of due times; streams due
in the same millisecond are written in one wake-up), HTTP is parsed by httptools (uvicorn's
parser) and each token is one pre-framed `transport.write`. What a client sees is the same
OpenAI-compatible stream: chat or text completions, `[DONE]`, usage when asked, keep-alive;
the first token `--ttft-ms` after the request, then one every `--itl-ms`.

What it leaves out, and why that is sound for capacity: no queue admission middleware (the
capacity scenario measures the proxy, not the replicas' admission, and the SUT's middleware
costs nothing per chunk), no engine model (queueing, latency noise), and of the control
plane only `state`. It records the same `UpstreamAttempt` per request as the ASGI replica,
with each chunk's write time, so chunk delays are read the same way.

    python -m dd_accept.node.replica.paced --port-base 8000 --ttft-ms 20 --itl-ms 5 ...
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import hmac
import json
import math
import os
import signal
import socket
import sys
import time
import traceback
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httptools

from dd_accept.base.errors import EXIT_INTERRUPTED, EXIT_PASS, EXIT_USAGE
from dd_accept.base.events import COMPLETION_PATHS, EventWriter, UpstreamAttempt, to_tenth_ms
from dd_accept.base.wall_clock import WallAnchor
from dd_accept.node import event_loop
from dd_accept.node.environment import TOKEN_ENV
from dd_accept.node.event_loop import LOOPS
from dd_accept.node.replica import openai_shapes as shapes
from dd_accept.node.replica.app import MAX_CHUNK_OFFSETS, VERSION
from dd_accept.node.replica.asgi import CONTROL_PREFIX, PROBE_PATHS
from dd_accept.node.replica.http1 import (
    MAX_BODY,
    REASONS,
    BodyTooLarge,
    frame,
    head,
)
from dd_accept.node.replica.readiness import add_location_arguments, listen_port, per_task, task_index, write_ready

TICK_S = 0.001  # the pacing resolution: token gaps are whole milliseconds, as uvloop's timers are
SAME_TICK_S = 0.0005  # a wake-up this early still writes the tick's streams


@dataclass
class Counters:
    connections_accepted: int = 0
    connections_closed: int = 0
    requests: int = 0
    probe_requests: int = 0
    chunks_sent: int = 0


@dataclass
class Stream:
    """One streamed completion: its pre-framed token, its schedule and what it sent."""

    connection: Connection
    request_id: str | None
    path: str
    clock: WallAnchor  # the wall clock read once, when the request came (base.wall_clock)
    tokens: int
    close: bool  # the client asked for `connection: close`
    base: dict[str, Any]  # every event's id, object, created and model
    first: bytes = b""  # the first token's frame (chat: carries the role)
    next: bytes = b""  # every later token's frame: byte-identical within a stream
    tail: bytes = b""  # finish event, usage when asked, [DONE], the terminating chunk
    tail_events: int = 0
    sent: int = 0
    bytes: int = 0
    first_byte: float | None = None
    offsets: list[float] = field(default_factory=list)

    def step(self) -> bool:
        """Write the next token (and the tail after the last); False once the stream is over.
        Each write's own wall time is recorded: streams written later in one wake-up did not
        wait in the proxy for the difference."""
        transport = self.connection.transport
        if transport is None or transport.is_closing():
            self.connection.finish(self, "disconnected")  # the proxy went away: its doing, not ours
            return False
        body = self.first if self.sent == 0 else self.next
        events = 1  # data events in this write, as the ASGI replica's recorder counts them
        if self.sent == self.tokens - 1:
            body += self.tail
            events += self.tail_events
        transport.write(body)
        now_wall = self.clock.now()
        if self.first_byte is None:
            self.first_byte = now_wall
        offsets = self.offsets
        if len(offsets) + events <= MAX_CHUNK_OFFSETS:
            offset = to_tenth_ms(now_wall - self.first_byte)
            if events == 1:  # every token but the last: no list built per chunk
                offsets.append(offset)
            else:
                offsets.extend([offset] * events)
        self.sent += 1
        self.bytes += len(body)
        if self.sent < self.tokens:
            return True
        self.connection.finish(self, "ok")
        return False


class Pacer:
    """One timer for every stream in the process. Streams wait in buckets, one per
    millisecond tick they are due in (uvloop's timers have that resolution anyway): a token
    costs a list append, not a heap operation, and one wake-up writes every stream due."""

    def __init__(self, loop: asyncio.AbstractEventLoop, itl_s: float) -> None:
        self.loop = loop
        self.itl_ticks = round(itl_s / TICK_S)  # 0: a token per stream each turn of the loop
        self.buckets: dict[int, list[Stream]] = {}
        self.keys: list[int] = []  # the buckets' ticks, a heap
        # The wake-up and the tick it is for (uvloop hands back a plain Handle, with no
        # `when()`, for a time already past).
        self.timer: asyncio.Handle | None = None
        self.armed_for = 0

    @property
    def waiting(self) -> int:
        return sum(len(bucket) for bucket in self.buckets.values())

    def add(self, due: float, stream: Stream) -> None:
        key = math.ceil(due / TICK_S)
        self._put(key, stream)
        if self.timer is None or key < self.armed_for:
            self._arm()

    def _put(self, key: int, stream: Stream) -> None:
        bucket = self.buckets.get(key)
        if bucket is None:
            self.buckets[key] = [stream]
            heapq.heappush(self.keys, key)
        else:
            bucket.append(stream)

    def _arm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer = None
        if self.keys:
            self.armed_for = self.keys[0]
            self.timer = self.loop.call_at(self.armed_for * TICK_S, self._tick)

    def _tick(self) -> None:
        self.timer = None
        now = self.loop.time()
        now_key = math.floor(now / TICK_S)
        due: list[tuple[int, list[Stream]]] = []
        while self.keys and self.keys[0] * TICK_S <= now + SAME_TICK_S:
            key = heapq.heappop(self.keys)
            due.append((key, self.buckets.pop(key)))
        try:
            for key, bucket in due:
                # The next token a gap after this one was due; a late wake-up never bunches tokens.
                following = max(key + self.itl_ticks, now_key)
                for stream in bucket:
                    try:
                        if stream.step():
                            self._put(following, stream)
                    except Exception:  # this replica's own fault: that stream ends, the others go on
                        stream.connection.fault(stream)
        finally:
            self._arm()


class Connection(asyncio.Protocol):
    """One client connection: requests parsed by httptools, answered in order."""

    def __init__(self, server: PacedReplica) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.headers: dict[bytes, bytes] = {}
        self.body: list[bytes] = []
        self.size = 0
        self.busy = False  # a response is being written; a pipelined request waits its turn
        self.waiting: list[tuple[str, str, dict[bytes, bytes], bytes, bool]] = []

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.server.counters.connections_accepted += 1

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.counters.connections_closed += 1
        self.transport = None

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as error:
            cause = error.__context__ or error
            if isinstance(cause, BodyTooLarge):
                self._fail(413)
                return
            # A fault of this replica's own, never the client's: its log says where, its events
            # say it happened (the capacity scenario stops as dd-accept's error), the client
            # gets a 500.
            traceback.print_exception(cause, file=sys.stderr)
            request_id = self.headers.get(b"x-dd-request-id", b"").decode(errors="replace") or None
            self.server.record(request_id, "", 500, "fault", WallAnchor(), None, 0, 0, [])
            self._fail(500)
        except httptools.HttpParserError:
            self._fail(400)

    def fault(self, stream: Stream) -> None:
        """A stream this replica could not go on writing: recorded as its fault, connection closed."""
        traceback.print_exc(file=sys.stderr)
        self.finish(stream, "fault")
        if self.transport is not None:
            self.transport.close()

    # httptools callbacks
    def on_message_begin(self) -> None:
        self.url, self.headers, self.body, self.size = b"", {}, [], 0

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.lower()] = value

    def on_body(self, body: bytes) -> None:
        self.size += len(body)
        if self.size > MAX_BODY:
            raise BodyTooLarge(f"request body over {MAX_BODY} bytes")
        self.body.append(body)

    def on_message_complete(self) -> None:
        path = httptools.parse_url(self.url).path.decode(errors="replace")
        method = self.parser.get_method().decode()
        request = (method, path, self.headers, b"".join(self.body), not self.parser.should_keep_alive())
        if self.busy:
            self.waiting.append(request)
        else:
            self._serve(*request)

    # answering
    def _fail(self, status: int) -> None:
        """Answer `status` and close; mid-response, only close (an answer written into a
        stream would corrupt it)."""
        if self.transport is None or self.transport.is_closing():
            return
        if self.busy:
            self.transport.close()
            return
        message = REASONS.get(status, b"error").decode().lower()
        self.respond(status, {"error": {"message": message, "code": status}}, close=True)

    def respond(self, status: int, payload: object, *, close: bool = False, content_type: bytes = b"") -> None:
        body = payload if isinstance(payload, bytes) else json.dumps(payload, separators=(",", ":")).encode()
        kind = content_type or b"application/json"
        assert self.transport is not None
        self.transport.write(head(status, kind, length=len(body), close=close) + body)
        if close:
            self.transport.close()

    def _serve(self, method: str, path: str, headers: dict[bytes, bytes], body: bytes, close: bool) -> None:
        server = self.server
        if self.transport is None or self.transport.is_closing():
            return
        if path.startswith(CONTROL_PREFIX):
            self.respond(*server.control(path, headers), close=close)
        elif path in PROBE_PATHS:
            server.counters.probe_requests += 1
            if path == "/health":
                self.respond(200, b"", close=close, content_type=b"text/plain")
            elif path == "/version":
                self.respond(200, {"version": VERSION}, close=close)
            elif path == "/v1/models":
                model = {"id": server.model, "object": "model", "owned_by": "dd-accept"}
                self.respond(200, {"object": "list", "data": [model]}, close=close)
            else:
                self.respond(404, {"error": {"message": "no metrics on the paced replica", "code": 404}}, close=close)
        elif path in COMPLETION_PATHS and method == "POST":
            server.counters.requests += 1
            self._complete(path, headers, body, close)
        else:
            self.respond(404, {"error": {"message": "not found", "code": 404}}, close=close)

    def _complete(self, path: str, headers: dict[bytes, bytes], body: bytes, close: bool) -> None:
        clock = WallAnchor()
        request_id = headers.get(b"x-dd-request-id", b"").decode(errors="replace") or None
        try:
            payload = json.loads(body or b"{}")
            if not isinstance(payload, dict):
                raise ValueError("body must be a JSON object")
        except ValueError:
            self.respond(400, {"error": {"message": "invalid JSON body", "code": 400}}, close=close)
            self.server.record(request_id, path, 400, "ok", clock, None, 0, 0, [])
            return
        tokens = payload.get("max_tokens", payload.get("max_completion_tokens", 16))
        tokens = 16 if tokens is None else tokens  # null: the server's default, as vLLM's
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
            self.respond(400, {"error": {"message": "max_tokens must be a positive integer"}}, close=close)
            self.server.record(request_id, path, 400, "ok", clock, None, 0, 0, [])
            return
        chat = path.endswith("chat/completions")
        model = str(payload.get("model") or self.server.model)
        options = payload.get("stream_options") if isinstance(payload.get("stream_options"), dict) else {}
        stream = self.server.stream(self, request_id, path, clock, tokens, chat, model, close)
        if payload.get("stream"):
            stream.tail, stream.tail_events = self.server.tail(stream, chat, bool(options.get("include_usage")))
            self.busy = True
            assert self.transport is not None
            # scheduled before the head is written: nothing can fail between the two
            self.server.pacer.add(self.server.loop.time() + self.server.ttft_s, stream)
            self.transport.write(head(200, b"text/event-stream", length=None, close=close))
        else:
            self.busy = True
            delay = self.server.ttft_s + self.server.itl_s * (tokens - 1)
            self.server.loop.call_later(delay, self._whole, stream, chat)

    def _whole(self, stream: Stream, chat: bool) -> None:
        """A non-streamed completion, answered once all its tokens would have been generated."""
        if self.transport is None or self.transport.is_closing():
            self.finish(stream, "disconnected")
            return
        choice = shapes.whole_choice(chat, stream.tokens)
        usage = shapes.usage(1, stream.tokens)
        body = stream.base | {"object": "chat.completion" if chat else "text_completion"}
        body |= {"choices": [choice], "usage": usage}
        encoded = json.dumps(body, separators=(",", ":")).encode()
        stream.first_byte, stream.bytes = stream.clock.now(), len(encoded)
        self.respond(200, encoded, close=stream.close)
        self.finish(stream, "ok", events=0)

    def finish(self, stream: Stream, outcome: str, events: int | None = None) -> None:
        """The stream is over: record it, and answer the next request that waited."""
        counted = stream.sent + (stream.tail_events if outcome == "ok" else 0) if events is None else events
        self.server.counters.chunks_sent += counted
        self.server.record(
            stream.request_id, stream.path, 200, outcome, stream.clock, stream.first_byte, stream.bytes, counted,
            stream.offsets,
        )  # fmt: skip
        self.busy = False
        if stream.close and self.transport is not None:
            self.transport.close()
        if self.waiting and self.transport is not None and not self.transport.is_closing():
            self._serve(*self.waiting.pop(0))


class PacedReplica:
    """The process: its pacer, its counters, its events and the `state` control."""

    def __init__(self, args: argparse.Namespace, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.model = args.model
        self.ttft_s = args.ttft_ms / 1000
        self.itl_s = args.itl_ms / 1000
        self.token = os.environ.get(TOKEN_ENV, "")
        self.task = task_index()
        self.pacer = Pacer(loop, self.itl_s)
        self.counters = Counters()
        path = per_task(args.events) if args.events else None
        self.events = EventWriter(Path(path), source=f"replica-{self.task}") if path else None

    def stream(
        self, connection: Connection, request_id: str | None, path: str, clock: WallAnchor, tokens: int, chat: bool,
        model: str, close: bool,
    ) -> Stream:  # fmt: skip
        identifier = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        kind = "chat.completion.chunk" if chat else "text_completion"
        base = {"id": identifier, "object": kind, "created": int(time.time()), "model": model}

        stream = Stream(connection, request_id, path, clock, tokens, close, base)
        stream.first = frame(shapes.sse(base | {"choices": [shapes.token_choice(chat, first=True)]}))
        stream.next = frame(shapes.sse(base | {"choices": [shapes.token_choice(chat, first=False)]}))
        return stream

    def tail(self, stream: Stream, chat: bool, include_usage: bool) -> tuple[bytes, int]:
        final = shapes.final_choice(chat)
        events = [shapes.sse(stream.base | {"choices": [final]})]
        if include_usage:
            events.append(shapes.sse(stream.base | {"choices": [], "usage": shapes.usage(1, stream.tokens)}))
        return frame(b"".join(events) + b"data: [DONE]\n\n") + b"0\r\n\r\n", len(events)

    def record(
        self, request_id: str | None, path: str, status: int, outcome: str, clock: WallAnchor, first_byte: float | None,
        size: int, events: int, offsets: list[float],
    ) -> None:  # fmt: skip
        if self.events is None:
            return
        started, ended = clock.wall, clock.now()
        self.events.write(
            UpstreamAttempt(
                t=round(ended, 6),
                replica=self.task,
                request_id=request_id,
                path=path,
                status=status,
                outcome=outcome,
                started=round(started, 6),
                first_byte_s=None if first_byte is None else round(first_byte - started, 6),
                duration_s=round(ended - started, 6),
                bytes=size,
                data_events=events,
                chunk_offsets_s=offsets if len(offsets) > 1 else None,
            )
        )

    def control(self, path: str, headers: dict[bytes, bytes]) -> tuple[int, dict[str, Any]]:
        """Only `state`: the paced replica is steered by nothing but its load."""
        supplied = headers.get(b"x-dd-control-token", b"")
        if not self.token or not hmac.compare_digest(supplied, self.token.encode()):
            return 403, {"error": "control token missing or wrong"}
        action = path[len(CONTROL_PREFIX) :].strip("/")
        if action != "state":
            return 400, {"error": f"bad control request: the paced replica only reports state, not {action!r}"}
        c = self.counters
        return 200, {
            "pid": os.getpid(),
            "paced": True,
            "running": self.pacer.waiting,
            "connections_accepted": c.connections_accepted,
            "connections_closed": c.connections_closed,
            "requests": c.requests,
            "probe_requests": c.probe_requests,
            "chunks_sent": c.chunks_sent,
        }


async def serve(args: argparse.Namespace) -> int:
    loop = asyncio.get_running_loop()
    replica = PacedReplica(args, loop)
    host = "127.0.0.1" if args.local else "0.0.0.0"
    port = listen_port(args)
    server = await loop.create_server(lambda: Connection(replica), host, port, backlog=4096, reuse_address=True)
    stopped = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopped.set)
    if args.ready_file:
        write_ready(Path(per_task(args.ready_file)), "127.0.0.1" if args.local else socket.gethostname(), port)
    await stopped.wait()
    server.close()
    if replica.events is not None:
        replica.events.close()
    return EXIT_PASS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dd-accept-paced-replica", description=__doc__.splitlines()[0])
    add_location_arguments(parser)
    parser.add_argument("--model", default="dd-accept-synthetic")
    parser.add_argument("--ttft-ms", type=float, default=20.0)
    parser.add_argument("--itl-ms", type=float, default=5.0, help="0: a token per stream each turn of the loop")
    parser.add_argument("--loop", choices=LOOPS, default="auto", help="event loop (auto: uvloop when installed)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.ttft_ms < 0 or not (args.itl_ms == 0 or args.itl_ms >= 1):
        print("paced replica: --ttft-ms must be >= 0, --itl-ms 0 or at least 1 (whole ms ticks)", file=sys.stderr)
        return EXIT_USAGE
    try:
        return event_loop.run(serve(args), args.loop)
    except OSError as error:  # the port is taken, or the address cannot be bound
        print(f"paced replica: cannot listen: {error.strerror}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
