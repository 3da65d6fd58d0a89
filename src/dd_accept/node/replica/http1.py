"""The few pieces of HTTP/1.1 the paced replica writes by hand (it answers on raw asyncio
transports to pace many streams from one timer): a response head, a chunk, and the body
size it refuses above.
"""

from __future__ import annotations

MAX_BODY = 16 * 1024 * 1024


REASONS = {
    200: b"OK",
    400: b"Bad Request",
    403: b"Forbidden",
    404: b"Not Found",
    413: b"Payload Too Large",
    500: b"Internal Server Error",
}


class BodyTooLarge(Exception):
    """A request body above MAX_BODY: answered 413, never read into memory."""


def frame(body: bytes) -> bytes:
    """One HTTP/1.1 chunk."""
    return b"%x\r\n%s\r\n" % (len(body), body)


def head(status: int, content_type: bytes, *, length: int | None, close: bool) -> bytes:
    lines = [b"HTTP/1.1 %d %s" % (status, REASONS.get(status, b"Status")), b"content-type: " + content_type]
    lines.append(b"transfer-encoding: chunked" if length is None else b"content-length: %d" % length)
    if content_type == b"text/event-stream":
        lines.append(b"cache-control: no-cache")
    if close:
        lines.append(b"connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n"
