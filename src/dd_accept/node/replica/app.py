"""The synthetic vLLM replica as an ASGI application.

Layers, outermost first:
  1. `ControlRouter` — the harness's control plane under `/_dd/`, guarded by a per-run
     token. It sits *outside* the SUT's middleware so that controls still work while the
     replica is overloaded (the middleware would answer 429 to them too).
  2. the SUT's queue-admission middleware, unmodified, loaded by import path.
  3. `ReplicaApp` — OpenAI-compatible endpoints backed by the engine model.

No request or response text is ever logged: only counts, sizes and timings.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, generate_latest

from dd_accept.base.events import (
    ADMISSION_PROBE_ID,
    RESET_UNANSWERED,
    EventWriter,
    UpstreamAttempt,
    sse_payload_bytes,
    to_tenth_ms,
)
from dd_accept.base.wall_clock import WallAnchor
from dd_accept.node.replica import openai_shapes as shapes
from dd_accept.node.replica.asgi import (
    PROBE_PATHS,
    REQUEST_ID_HEADER,
    App,
    ConnectionReset,
    Message,
    PeerGone,
    Receive,
    Scope,
    Send,
    StreamCut,
    read_body,
    response_headers,
    send_json,
)
from dd_accept.node.replica.connections import ConnectionTable
from dd_accept.node.replica.control import (
    ControlRouter,
)
from dd_accept.node.replica.control_state import PIN_LIMIT_S, ControlState, ForcedResponse
from dd_accept.node.replica.engine import Engine

VERSION = "0.0.0-dd-accept-synthetic"
MAX_CHUNK_OFFSETS = 2048  # per stream: enough for the scenarios' streams, bounded for long ones


class PeerWatch:
    """Whether the peer has left. ASGI tells it only through `receive`, one call at a time, and
    uvicorn drops without a word what is sent to a peer that left; once the request's body is
    read, the next message can only be the disconnect, so one call, started once, is the
    watch. A replica that keeps streaming to nobody would record a stream the proxy ended
    (its drain bound, its timeout) as served whole; vLLM aborts such a request, and so does
    the replica."""

    def __init__(self, receive: Receive) -> None:
        self._next = asyncio.ensure_future(receive())

    @property
    def gone(self) -> bool:
        if not self._next.done() or self._next.cancelled() or self._next.exception() is not None:
            return False
        return self._next.result().get("type") == "http.disconnect"

    async def hold(self, seconds: float) -> None:
        """Hold the response back `seconds`; raise PeerGone as soon as the peer disconnects."""
        await asyncio.wait({self._next}, timeout=seconds)
        if self.gone:
            raise PeerGone("the peer closed the connection while the response was held back")

    async def hold_until(self, released: asyncio.Event, limit_s: float) -> None:
        """Hold the response back until `released` is set (`limit_s` at the most); raise
        PeerGone as soon as the peer disconnects."""
        waiting = asyncio.ensure_future(released.wait())
        try:
            await asyncio.wait({self._next, waiting}, timeout=limit_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()
        if self.gone:
            raise PeerGone("the peer closed the connection while the response was pinned")

    def close(self) -> None:
        self._next.cancel()


def _estimate_prompt_tokens(payload: Mapping[str, Any]) -> int:
    """Roughly 4 characters a token; the text itself is never kept."""
    characters = 0
    for message in payload.get("messages") or []:
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, str):
            characters += len(content)
        elif isinstance(content, list):
            characters += sum(len(str(part.get("text", ""))) for part in content if isinstance(part, Mapping))
    prompt = payload.get("prompt")
    if isinstance(prompt, str):
        characters += len(prompt)
    return max(1, characters // 4)


class ReplicaApp:
    """OpenAI-compatible chat and text completions, streaming and not, plus vLLM's probes."""

    def __init__(self, engine: Engine, control: ControlState, registry: CollectorRegistry = REGISTRY) -> None:
        self.engine = engine
        self.control = control
        self.registry = registry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        close = self.control.close_connections
        if path == "/health" and method == "GET":
            if self.control.health_delay_s > 0:  # a probe held in flight (probe-aware routing)
                probe = WallAnchor()  # one wall-clock reading for the window (base.wall_clock)
                started = probe.wall
                self.control.probe_window = (started, None)
                await read_body(receive)  # the (empty) request first: then only a disconnect can come
                watch = PeerWatch(receive)
                try:
                    with contextlib.suppress(PeerGone):  # held until the delay, a release, or the prober gives up
                        while self.control.health_delay_s > 0 and probe.elapsed() < self.control.health_delay_s:
                            await watch.hold(0.05)
                finally:
                    watch.close()
                self.control.probe_window = (started, probe.now())
            status = 200 if self.control.healthy else 503
            await send(
                {"type": "http.response.start", "status": status, "headers": response_headers(b"text/plain", {}, close)}
            )
            await send({"type": "http.response.body", "body": b""})
        elif path == "/version":
            await send_json(send, 200, {"version": VERSION}, close=close)
        elif path == "/v1/models":
            model = {"id": self.engine.settings.model, "object": "model", "owned_by": "dd-accept"}
            await send_json(send, 200, {"object": "list", "data": [model]}, close=close)
        elif path == "/metrics":
            body = generate_latest(self.registry)
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": response_headers(b"text/plain; version=0.0.4; charset=utf-8", {}, close),
                }
            )
            await send({"type": "http.response.body", "body": body})
        elif path in ("/v1/chat/completions", "/v1/completions") and method == "POST":
            await self._completion(scope, receive, send, chat=path.endswith("chat/completions"))
        else:
            await send_json(send, 404, {"error": {"message": "not found", "code": 404}}, close=close)

    async def _completion(self, scope: Scope, receive: Receive, send: Send, *, chat: bool) -> None:
        close = self.control.close_connections
        harness = dict(scope.get("headers") or []).get(REQUEST_ID_HEADER) == ADMISSION_PROBE_ID.encode()
        forced = None if harness else self.control.take_forced()  # forced answers are for the SUT's traffic
        body = await read_body(receive)
        if not harness and self.control.take_reset():
            raise ConnectionReset("the request was read; its connection is reset unanswered")
        if forced is not None:
            await self._forced(send, forced, close)
            return
        try:
            payload = json.loads(body or b"{}")
            if not isinstance(payload, dict):
                raise ValueError("body must be a JSON object")
        except ValueError:
            await send_json(send, 400, {"error": {"message": "invalid JSON body", "code": 400}}, close=close)
            return
        max_tokens = payload.get("max_tokens", payload.get("max_completion_tokens", 16))
        max_tokens = 16 if max_tokens is None else max_tokens  # null: the server's default, as vLLM's
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            await send_json(send, 400, {"error": {"message": "max_tokens must be a positive integer"}}, close=close)
            return
        max_tokens = min(max_tokens, self.engine.settings.max_model_len)
        prompt_tokens = _estimate_prompt_tokens(payload)
        model = str(payload.get("model") or self.engine.settings.model)
        if payload.get("stream"):
            options = payload.get("stream_options") or {}
            include_usage = bool(options.get("include_usage")) if isinstance(options, dict) else False
            watch = PeerWatch(receive)  # the body is read: only the disconnect can come now
            try:
                await self._stream(watch, send, chat, model, prompt_tokens, max_tokens, include_usage, close)
            finally:
                watch.close()
        else:
            await self._complete(send, chat, model, prompt_tokens, max_tokens, close)

    async def _forced(self, send: Send, forced: ForcedResponse, close: bool) -> None:
        headers = {"retry-after": str(forced.retry_after)} if forced.retry_after is not None else {}
        error = {"error": {"message": "forced by dd-accept control plane", "code": forced.status}}
        await send_json(send, forced.status, error, headers=headers, close=close)

    async def _complete(
        self, send: Send, chat: bool, model: str, prompt_tokens: int, max_tokens: int, close: bool
    ) -> None:
        produced = 0
        async for _ in self.engine.generate(prompt_tokens, max_tokens):
            produced += 1
        created = int(time.time())
        choice = shapes.whole_choice(chat, produced, shapes.token_text(self.engine.settings.response_canary))
        if chat:
            body = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": created}
        else:
            body = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": created}
        body.update({"model": model, "choices": [choice], "usage": shapes.usage(prompt_tokens, produced)})
        await send_json(send, 200, body, close=close)

    async def _stream(
        self,
        watch: PeerWatch,
        send: Send,
        chat: bool,
        model: str,
        prompt_tokens: int,
        max_tokens: int,
        include_usage: bool,
        close: bool,
    ) -> None:
        cut_after = self.control.take_cut()
        if self.control.take_pin():  # no first byte until the harness releases it
            self.control.pinned_now += 1
            try:
                await watch.hold_until(self.control.unpinned, PIN_LIMIT_S)
            finally:
                self.control.pinned_now -= 1
        delay = self.control.take_delay()
        if delay is not None and delay[0] is None:  # no first byte for a while
            await watch.hold(delay[1])
        identifier = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        created = int(time.time())
        kind = "chat.completion.chunk" if chat else "text_completion"
        headers = response_headers(b"text/event-stream", {"cache-control": "no-cache"}, close)
        started = False
        sent = 0

        def chunk(choice: dict[str, Any], usage: dict[str, int] | None = None) -> bytes:
            data: dict[str, Any] = {
                "id": identifier,
                "object": kind,
                "created": created,
                "model": model,
                "choices": [choice] if choice else [],
            }
            if usage is not None:
                data["usage"] = usage
            return shapes.sse(data)

        # Every token event but the first is byte-identical: serialise it once per stream.
        text = shapes.token_text(self.engine.settings.response_canary, self.engine.settings.token_bytes)
        first_choice = shapes.token_choice(chat, first=True, text=text)
        next_choice = shapes.token_choice(chat, first=False, text=text)
        first_bytes, next_bytes = chunk(first_choice), chunk(next_choice)
        try:
            async for index in self.engine.generate(prompt_tokens, max_tokens):
                if not started:
                    await send({"type": "http.response.start", "status": 200, "headers": headers})
                    started = True
                if cut_after is not None and sent >= cut_after:
                    raise StreamCut(f"stream cut after {sent} chunks by the control plane")
                if delay is not None and delay[0] == sent and sent > 0:  # a stall mid-stream
                    await watch.hold(delay[1])
                if watch.gone:  # the proxy ended the stream (its drain bound, a timeout): so does the replica
                    raise PeerGone("the peer closed the connection mid-stream")
                body = first_bytes if index == 0 else next_bytes
                await send({"type": "http.response.body", "body": body, "more_body": True})
                sent += 1
        finally:
            self.engine.metrics.chunks_sent.inc(sent)  # once per stream, not once per token
        if delay is not None and delay[0] == sent and sent > 0:  # held after its last token: before the tail
            await watch.hold(delay[1])
        final = shapes.final_choice(chat)
        tail = chunk(final)
        events = 1
        if include_usage:
            tail += chunk({}, shapes.usage(prompt_tokens, sent))
            events += 1
        await send({"type": "http.response.body", "body": tail + b"data: [DONE]\n\n", "more_body": False})
        # Every `data:` event but [DONE] counts, as the client counts them: integrity compares the two.
        self.engine.metrics.chunks_sent.inc(events)


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


class RequestRecorder:
    """One event per request as this replica saw it: the evidence of every proxy attempt.

    Sits outside the SUT's middleware, so its 429s are recorded too. Carries the request id
    the load client sends (`x-dd-request-id`, forwarded by the proxy) so each client request
    can be matched with every upstream attempt made for it. No content is recorded.
    """

    def __init__(self, app: App, engine: Engine | None, events: EventWriter | None, task: int) -> None:
        self.app = app
        self.engine = engine  # None in front of a real vLLM (no synthetic engine to count in)
        self.events = events
        self.task = task

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        clock = WallAnchor()  # one wall-clock reading per request (base.wall_clock)
        started = clock.wall
        state: dict[str, Any] = {
            "status": None, "first_byte": None, "bytes": 0, "events": 0, "payload": 0, "ended": None,
        }  # fmt: skip
        offsets: list[float] = []  # per data event: when it was sent, after the first (no content)
        if self.engine is not None:
            self.engine.metrics.request_seen(scope.get("client"), scope["path"] in PROBE_PATHS)

        async def recording_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
                if self.engine is not None:
                    self.engine.metrics.responses.labels(str(message["status"])).inc()
            elif message["type"] == "http.response.body":
                body = message.get("body", b"")
                now = clock.now()
                if body and state["first_byte"] is None:
                    state["first_byte"] = now
                count = body.count(b"data: ") - body.count(b"data: [DONE]")
                if count and len(offsets) + count <= MAX_CHUNK_OFFSETS:
                    offsets.extend([to_tenth_ms(now - state["first_byte"])] * count)
                state["bytes"] += len(body)
                state["events"] += count
                if count:
                    state["payload"] += sse_payload_bytes(body)
                if not message.get("more_body", False):
                    # The response ends here, before the peer can read its end: a request
                    # it sends next cannot start at a replica before this span ends.
                    state["ended"] = now
            await send(message)

        outcome = "ok"
        try:
            await self.app(scope, receive, recording_send)
        except StreamCut:
            outcome = "cut"
            raise
        except ConnectionReset:
            outcome = RESET_UNANSWERED
            raise
        except PeerGone:
            outcome = "abandoned"  # nothing to send to a peer that left: the response ends here
        except BaseException:
            outcome = "error"
            raise
        finally:
            if self.events is not None and scope["path"] not in PROBE_PATHS:
                headers = dict(scope.get("headers") or [])
                ended = clock.now() if state["ended"] is None else state["ended"]
                self.events.write(
                    UpstreamAttempt(
                        t=round(ended, 6),
                        replica=self.task,
                        request_id=headers.get(REQUEST_ID_HEADER, b"").decode(errors="replace") or None,
                        path=scope["path"],
                        status=state["status"],
                        outcome=outcome,
                        started=round(started, 6),
                        first_byte_s=None if state["first_byte"] is None else round(state["first_byte"] - started, 6),
                        duration_s=round(ended - started, 6),
                        bytes=state["bytes"],
                        data_events=state["events"],
                        chunk_offsets_s=offsets if len(offsets) > 1 else None,
                        payload_bytes=state["payload"],
                    )
                )


def load_middleware(path: str) -> Callable[[App], App]:
    """`package.module:Class` → the class; it is applied to the app unmodified."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"middleware must be 'module:attribute', got {path!r}")
    return getattr(importlib.import_module(module_name), attribute)


def build_app(
    engine: Engine,
    control: ControlState,
    *,
    middleware: list[str],
    token: str | None,
    shutdown: Callable[[int], None],
    events: EventWriter | None = None,
    task: int = 0,
    connections: ConnectionTable | None = None,
    refuse: Callable[[float], None] | None = None,
) -> App:
    app: App = ReplicaApp(engine, control)
    for path in middleware:
        app = load_middleware(path)(app)
    recorder = RequestRecorder(app, engine, events, task)
    return ControlRouter(recorder, engine, control, token, shutdown, connections, refuse)
