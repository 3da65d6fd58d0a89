"""Wire mode: the raw client without aiohttp, for the capacity scenario.

aiohttp wakes a coroutine per read and runs its stream reader around every chunk; at the
capacity scenario's knee that cost the client half of what the proxy it measures spends per
chunk. Here each connection is an asyncio protocol: httptools (uvicorn's C parser) frames
the response, the body goes straight into the SSE tally, and only the end of a response
wakes the sender. It sends and records exactly what raw mode does (the same request, the
same `ClientRequest` fields, the same retries and arrivals: `schedule.drive`), on plain
HTTP/1.1 keep-alive connections, one per request in flight.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any
from urllib.parse import urlsplit

import httptools

from dd_accept.base.events import EventWriter
from dd_accept.base.wall_clock import WallAnchor
from dd_accept.node.loadclient.schedule import TIMED_OUT, drive, outcome_of, retry_wait
from dd_accept.node.loadclient.sse import SseTally
from dd_accept.node.loadclient.workload import Workload

CONNECT_TIMEOUT_S = 10.0


class ServerDisconnected(ConnectionError):
    """The connection closed before the response was whole."""


class ReadTimeout(TimeoutError):
    """No byte from the server for the workload's deadline: the client gave up waiting."""


class WireConnection(asyncio.Protocol):
    """One keep-alive connection; one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.tally = SseTally()
        self.status = 0
        self.retry_after: str | None = None
        self.reusable = False
        self.now = 0.0
        self.answered: asyncio.Future[None] | None = None
        # A response with neither length nor chunks ends when the server closes (RFC 9112,
        # 6.3): httptools cannot be told of that end, so it is recognised here.
        self.framed = False
        self.headers_done = False

    @property
    def open(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.answered is None or self.answered.done():
            return
        if self.headers_done and not self.framed and exc is None:
            self.on_message_complete()  # the body ran to the close: that was its end
            self.reusable = False
        else:
            self.answered.set_exception(ServerDisconnected())

    def data_received(self, data: bytes) -> None:
        self.now = time.monotonic()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as error:
            if self.answered is not None and not self.answered.done():
                self.answered.set_exception(error)
            self.close()

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"retry-after":
            self.retry_after = value.decode(errors="replace")
        elif name in (b"content-length", b"transfer-encoding"):
            self.framed = True

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        # 1xx, 204 and 304 carry no body: their end is the headers' end
        self.framed = self.framed or self.status < 200 or self.status in (204, 304)
        self.headers_done = self.status >= 200

    def on_body(self, body: bytes) -> None:
        self.tally.feed(body, self.now)

    def on_message_complete(self) -> None:
        self.tally.end(self.now)
        self.reusable = self.parser.should_keep_alive()
        if self.answered is not None and not self.answered.done():
            self.answered.set_result(None)

    async def exchange(self, request: bytes, timeout: float) -> None:
        """Send one request; return once its response is whole (raises when it cannot be).
        `timeout` bounds each wait for the server's next bytes, as raw mode's read timeout
        does, not the whole response."""
        if self.transport is None or self.transport.is_closing():
            raise ServerDisconnected()
        self.tally, self.status, self.retry_after, self.reusable = SseTally(), 0, None, False
        self.framed = self.headers_done = False
        self.answered = answered = asyncio.get_running_loop().create_future()
        self.now = time.monotonic()
        self.transport.write(request)
        while not answered.done():
            await asyncio.wait((answered,), timeout=max(0.0, self.now + timeout - time.monotonic()))
            if not answered.done() and time.monotonic() - self.now >= timeout:
                raise ReadTimeout(f"no byte from the server for {timeout:g} s")
        answered.result()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class WireClient:
    """The request bytes, and idle keep-alive connections to reuse."""

    def __init__(self, workload: Workload, events: EventWriter) -> None:
        self.workload = workload
        self.events = events
        address = urlsplit(workload.endpoint)
        if address.scheme != "http" or not address.hostname:
            raise ValueError("wire mode speaks plain HTTP/1.1: the endpoint must be http://HOST[:PORT]")
        self.host, self.port = address.hostname, address.port or 80
        body = json.dumps(workload.body(), separators=(",", ":")).encode()
        lines = [
            f"POST {address.path.rstrip('/')}/v1/chat/completions HTTP/1.1",
            f"host: {address.netloc}",
            "content-type: application/json",
            f"content-length: {len(body)}",
            *(f"{name}: {value}" for name, value in workload.request_headers),
        ]
        self.head = ("\r\n".join(lines) + "\r\nx-dd-request-id: ").encode()
        self.body = body
        self.idle: list[WireConnection] = []

    async def _connection(self) -> WireConnection:
        while self.idle:
            connection = self.idle.pop()
            if connection.open:
                return connection
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            _, connection = await loop.create_connection(WireConnection, self.host, self.port)
        return connection

    async def attempt(self, record: int, attempt: int) -> tuple[int, float | None]:
        workload = self.workload
        request_id = f"{workload.run_tag}{record}.{attempt}"
        clock = WallAnchor()
        connection: WireConnection | None = None
        error = None
        try:
            connection = await self._connection()
            await connection.exchange(self.head + request_id.encode() + b"\r\n\r\n" + self.body, workload.deadline_s)
            outcome = outcome_of(connection.status, workload.stream, connection.tally.done)
        except ReadTimeout as caught:  # a connection not made in time is an error, as in raw mode
            outcome, error = TIMED_OUT, type(caught).__name__
        except (TimeoutError, OSError, httptools.HttpParserError) as caught:
            outcome, error = "error", type(caught).__name__
        tally = connection.tally if connection is not None else SseTally()
        if connection is not None:
            if error is None and connection.reusable and connection.open:
                self.idle.append(connection)
            else:
                connection.close()
        status = connection.status if connection is not None else 0
        retry_after = connection.retry_after if connection is not None else None
        self.events.write(
            tally.request(
                clock, mode="wire", request_id=request_id, record=record, attempt=attempt, status=status,
                retry_after=retry_after, outcome=outcome, error=error,
            )
        )  # fmt: skip
        return (1 if outcome == "ok" else 0), retry_wait(outcome, retry_after)

    def close(self) -> None:
        for connection in self.idle:
            connection.close()
        self.idle.clear()


async def run_wire(workload: Workload, events: EventWriter) -> dict[str, Any]:
    """Send the workload's records on raw connections (see `schedule.drive` for when)."""
    client = WireClient(workload, events)
    try:
        return await drive(workload, client.attempt)
    finally:
        client.close()
