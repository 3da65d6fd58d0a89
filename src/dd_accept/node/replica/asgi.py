"""The ASGI plumbing the synthetic replica's layers share: the callable types, the headers
and paths they agree on, the exceptions a response ends with, and reading a body or
answering JSON. No request or response text is ever logged here either.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from dd_accept.base import events

Scope = dict[str, Any]


Message = dict[str, Any]


Receive = Callable[[], Awaitable[Message]]


Send = Callable[[Message], Awaitable[None]]


App = Callable[[Scope, Receive, Send], Awaitable[None]]


CONTROL_PREFIX = "/_dd/"


REQUEST_ID_HEADER = events.REQUEST_ID_HEADER.encode()


PROBE_PATHS = frozenset({"/health", "/metrics", "/version", "/v1/models"})


TOKEN_HEADER = b"x-dd-control-token"


class StreamCut(Exception):
    """Raised to abort a response mid-stream, as a crashing or cut-off backend would."""


class ConnectionReset(Exception):
    """Raised once a request is read, to reset its connection instead of answering it (the
    control router resets the transport): the proxy sees a connection error mid-request."""


class PeerGone(Exception):
    """The peer closed the connection while the replica held its response back (a proxy
    that timed the attempt out): the response ends there, recorded as `abandoned`."""


async def read_body(receive: Receive, limit: int = 16 * 1024 * 1024) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise StreamCut("client went away")
        body = message.get("body", b"")
        size += len(body)
        if size > limit:
            raise ValueError("request body too large")
        chunks.append(body)
        if not message.get("more_body"):
            return b"".join(chunks)


def response_headers(content_type: bytes, extra: Mapping[str, str] | None, close: bool) -> list[tuple[bytes, bytes]]:
    headers = [(b"content-type", content_type)]
    for name, value in (extra or {}).items():
        headers.append((name.lower().encode(), value.encode()))
    if close:
        headers.append((b"connection", b"close"))
    return headers


async def send_json(
    send: Send, status: int, payload: object, *, headers: Mapping[str, str] | None = None, close: bool = False
) -> None:
    body = json.dumps(payload, separators=(",", ":")).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": response_headers(b"application/json", headers, close),
        }
    )
    await send({"type": "http.response.body", "body": body})
