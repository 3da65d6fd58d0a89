"""The synthetic replica's control plane (`/_dd/...`, behind the run's token): how a scenario
steers a replica while load runs through the proxy (hold a queue, answer 429 or 503, cut or
stall streams, refuse or reset connections, fail health) and reads its counters back. It
sits outside the SUT's middleware, so controls still work while the replica is overloaded.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import os
import signal
import time
from collections.abc import Callable, Mapping
from typing import Any

from dd_accept.node.replica.asgi import (
    CONTROL_PREFIX,
    TOKEN_HEADER,
    App,
    ConnectionReset,
    Receive,
    Scope,
    Send,
    read_body,
    send_json,
)
from dd_accept.node.replica.connections import ConnectionTable
from dd_accept.node.replica.control_state import ControlState, ForcedResponse
from dd_accept.node.replica.engine import Engine


class ControlRouter:
    """`/_dd/...` for the harness (token-guarded); everything else goes to the wrapped app."""

    def __init__(
        self,
        app: App,
        engine: Engine,
        control: ControlState,
        token: str | None,
        shutdown: Callable[[int], None],
        connections: ConnectionTable | None = None,
        refuse: Callable[[float], None] | None = None,
    ) -> None:
        self.app = app
        self.engine = engine
        self.control = control
        self.token = token
        self.shutdown = shutdown
        self.connections = connections
        self.refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(CONTROL_PREFIX):
            while self.control.hung and scope["type"] == "http":  # a backend that stopped serving
                await asyncio.sleep(0.05)
            try:
                await self.app(scope, receive, send)
            except ConnectionReset:
                if self.connections is None:
                    raise  # no transport to reset: uvicorn answers 500, as a crash would
                await self.connections.reset(scope.get("client"))
            return
        if self.connections is not None:  # the harness's own connection: none of the proxy's
            self.connections.control_seen(scope.get("client"))
        supplied = dict(scope.get("headers") or []).get(TOKEN_HEADER, b"")
        if not self.token or not hmac.compare_digest(supplied, self.token.encode()):
            await send_json(send, 403, {"error": "control token missing or wrong"})
            return
        action = scope["path"][len(CONTROL_PREFIX) :].strip("/")
        try:
            body = json.loads(await read_body(receive) or b"{}")
            result = self.apply(action, body if isinstance(body, dict) else {})
        except (ValueError, TypeError, KeyError) as error:
            await send_json(send, 400, {"error": f"bad control request: {error}"})
            return
        await send_json(send, 200, result)

    def apply(self, action: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """One control action; returns the replica's state afterwards."""
        engine, control = self.engine, self.control
        if action == "state":
            pass
        elif action == "hold":
            engine.hold(int(body["depth"]))
        elif action == "release":
            engine.hold(0)
        elif action == "health":
            control.healthy = bool(body["ok"])
        elif action == "hang":
            control.hung = bool(body["on"])
        elif action == "stall":  # {"on": bool, "after_tokens": N}: streams hold from their N-th token on
            engine.stall(bool(body["on"]), int(body.get("after_tokens", 0)))
        elif action == "pace":  # {"itl_ms": N, "exact": bool, "token_bytes": N}, or {} for the pacing it started with
            itl_ms = body.get("itl_ms")
            engine.pace(
                None if itl_ms is None else float(itl_ms) / 1000,
                exact=bool(body.get("exact", False)),
                token_bytes=int(body.get("token_bytes", 0)),
            )
        elif action == "respond":  # {"status", "count", "retry_after"}, or {"statuses": [...]}: one each, in order
            if "statuses" in body:
                forced = [ForcedResponse(int(code)) for code in body["statuses"]]
            else:
                retry_after = body.get("retry_after")
                answer = ForcedResponse(int(body["status"]), None if retry_after is None else int(retry_after))
                forced = [answer] * int(body.get("count", 1))
            if not all(100 <= answer.status <= 599 for answer in forced):
                raise ValueError("status must be an HTTP status code")
            control.forced = forced
        elif action == "keepalive":
            control.close_connections = bool(body["close"])
        elif action == "pin":  # {"count": N}: the next N streams wait for `unpin`
            control.pin_remaining = int(body.get("count", 1))
            control.unpinned.clear()
        elif action == "unpin":  # every pinned stream goes on; no more are pinned
            control.pin_remaining = 0
            control.unpinned.set()
        elif action == "delay":
            after = body.get("after_chunks")
            control.delay_after_chunks = None if after is None else int(after)
            control.delay_seconds = float(body.get("seconds", 0))
            control.delay_remaining = int(body.get("count", 1))
        elif action == "health_delay":
            control.health_delay_s = float(body.get("seconds", 0))  # 0 also releases a probe held now
        elif action == "close_idle":
            if self.connections is None:
                raise ValueError("this replica does not track its connections")
            return self.connections.close_idle(
                lambda protocol: self.engine.metrics.carried_requests(getattr(protocol, "_dd_peer", None))
            )
        elif action == "cut":
            after = body.get("after_chunks")
            control.cut_after_chunks = None if after is None else int(after)
            count = body.get("count")
            control.cut_remaining = None if count is None else int(count)
        elif action == "reset":
            if self.connections is None:
                raise ValueError("this replica does not track its connections")
            self.control.reset_remaining = int(body.get("count", 1))
        elif action == "refuse":  # nothing listens on the port for `seconds`, then it listens again
            if self.refuse is None:
                raise ValueError("this replica cannot stop listening")
            seconds = float(body["seconds"])
            if not 0 < seconds <= 120:
                raise ValueError("seconds must be above 0 and at most 120")
            self.control.refusing_until = time.time() + seconds
            self.refuse(seconds)
            if self.connections is not None:  # and the idle ones go, or a pool would reuse them
                return {**self.state(), **self.connections.close_idle(lambda protocol: False)}
        elif action == "exit":
            code = int(body.get("code", 0))
            asyncio.get_running_loop().call_later(0.05, self.shutdown, code)
        elif action == "kill":
            asyncio.get_running_loop().call_later(0.05, os.kill, os.getpid(), signal.SIGKILL)
        else:
            raise ValueError(f"unknown action {action!r}")
        return self.state()

    def state(self) -> dict[str, Any]:
        metrics = self.engine.metrics
        return {
            "pid": os.getpid(),
            "itl_ms": self.engine.settings.itl_s * 1000,
            "latency": self.engine.settings.latency,
            "waiting": self.engine.waiting,
            "running": self.engine.running,
            "held_depth": self.engine.held_depth,
            "healthy": self.control.healthy,
            "hung": self.control.hung,
            "close_connections": self.control.close_connections,
            "forced_remaining": self.control.forced_remaining,
            "cut_after_chunks": self.control.cut_after_chunks,
            "connections_accepted": int(metrics.connections_accepted._value.get()),
            "connections_closed": int(metrics.connections_closed._value.get()),
            "connections_with_requests": int(metrics.connections_with_requests._value.get()),
            "probe_requests": int(metrics.probe_requests._value.get()),
            "open_connections": len(metrics.open_connections),
            "open_connections_with_requests": sum(1 for carried in metrics.open_connections.values() if carried),
            "chunks_sent": int(metrics.chunks_sent._value.get()),
            "delay_remaining": self.control.delay_remaining,
            "pin_remaining": self.control.pin_remaining,
            "pinned_now": self.control.pinned_now,
            "reset_remaining": self.control.reset_remaining,
            "refusing_until": self.control.refusing_until,
            "probe_window": list(self.control.probe_window) if self.control.probe_window else None,
            **(self.connections.state() if self.connections is not None else {}),
        }
