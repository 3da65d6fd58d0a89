"""The fault point: a relay between the SUT's proxy and the replicas that reads the HTTP
responses and SSE streams it relays, and breaks them the way networks and model servers do.

    python -m dd_accept.node.faultpoint --port-base P --upstream HOST:PORT [...] --fault KIND
        [--after-events N] --events PATH --ready-file PATH

It listens on P+i for upstream i (the proxy is given these ports as its backends) and relays
each request as it comes. Each response's head is relayed unchanged and a chunked body chunk
by chunk, with the fault applied by counting the response's SSE data events:

- `split`: every chunk goes out in two TCP segments 5 ms apart, cut inside its `data:` line
  (a frame split as a congested network delivers it);
- `reset`: after N data events both connections are reset (RST): a replica or a link gone
  mid-stream;
- `error`: after N data events an in-stream error event and `[DONE]` end the response, as
  vLLM ends a stream whose generation failed; the replica's connection is closed;
- `stall`: after N data events nothing is forwarded for S seconds, then the rest (a replica
  that pauses mid-generation, a congested link);
- `slow`: a slow, jittery link: each chunk is held a latency drawn around a mean (seeded),
  then sent at R bytes a second, and the replica's next chunk is read only then (in order:
  none overtakes another), so a stream takes many seconds whole though no silence is long;
- `none`: relayed unchanged.

Chaos proxies (Toxiproxy and the like) cut bytes; this one cuts at the stream's own units,
so a check can say which event a proxy lost. Each response is recorded: its request id, the
upstream, what was forwarded and what was done to it. Stdlib only: it runs on the nodes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dd_accept.base.events import EventWriter, RelayedResponse, sse_payload_bytes

FAULTS = ("none", "split", "reset", "error", "stall", "slow")
SPLIT_PAUSE_S = 0.005  # long enough that the two halves leave as two segments (TCP_NODELAY)
HEAD_LIMIT = 64 * 1024
# vLLM's in-stream error: an OpenAI error object as one data event, then [DONE]
ERROR_EVENT = (
    b'data: {"error": {"object": "error", "message": "generation failed (dd-accept fault point)", '
    b'"type": "InternalServerError", "param": null, "code": 500}}\n\n'
)
DONE_EVENT = b"data: [DONE]\n\n"


def chunk(payload: bytes) -> bytes:
    """`payload` as one chunk of a chunked body."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def data_events(payload: bytes) -> int:
    """Data events in a piece of an SSE body, [DONE] not counted (the replicas count alike)."""
    return payload.count(b"data: ") - payload.count(b"data: [DONE]")


def header(head: bytes, name: bytes) -> bytes | None:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip()
    return None


def reset(writer: asyncio.StreamWriter | None) -> None:
    """Close with an RST, not a FIN: the peer reads a reset, as from a lost link or a killed host."""
    if writer is None:
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@dataclass(frozen=True, slots=True)
class SlowLink:
    """The `slow` fault's link: each chunk held `latency_s` ± `jitter_s` (uniform, from `seed`),
    never ahead of the chunk before it, and the connection sending at most `rate_bytes_s`."""

    latency_s: float
    jitter_s: float
    rate_bytes_s: float
    seed: int = 0

    def argv(self) -> list[str]:
        """The fault point's arguments that give it this link."""
        return ["--latency-ms", f"{self.latency_s * 1000:g}", "--jitter-ms", f"{self.jitter_s * 1000:g}",
                "--rate-bytes-s", f"{self.rate_bytes_s:g}", "--seed", str(self.seed)]  # fmt: skip


class _LinkClock:
    """When each chunk of one connection leaves the slow link: a chunk read at `arrived` starts
    once its drawn latency has passed and the chunk before it has been sent, and takes its size
    over the rate to send (a netem-like delay with jitter and rate, kept in order)."""

    def __init__(self, link: SlowLink, draws: random.Random) -> None:
        self.link, self.draws, self.free_at = link, draws, 0.0

    def leaves(self, arrived: float, size: int) -> float:
        link = self.link
        start = max(arrived + link.latency_s + self.draws.uniform(-link.jitter_s, link.jitter_s), self.free_at)
        self.free_at = start + size / link.rate_bytes_s
        return self.free_at


class Relay:
    """One listening port: every connection the proxy opens gets its own to the upstream."""

    def __init__(
        self,
        index: int,
        upstream: tuple[str, int],
        fault: str,
        after: int,
        events: EventWriter,
        stall_s: float = 0.0,
        link: SlowLink | None = None,
    ) -> None:
        self.index, self.upstream, self.fault, self.after, self.events = index, upstream, fault, after, events
        self.stall_s, self.link, self.connections = stall_s, link, 0
        if fault == "slow" and link is None:
            raise ValueError("the slow fault needs its link")

    async def serve(self, down_reader: asyncio.StreamReader, down_writer: asyncio.StreamWriter) -> None:
        sock = down_writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        up: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self.connections += 1
        clock = None  # the slow link's, one per connection: its rate is the connection's
        if self.link is not None:
            clock = _LinkClock(self.link, random.Random(f"{self.link.seed}/{self.index}/{self.connections}"))
        try:
            while True:
                try:
                    head = await down_reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return  # the proxy closed its connection (or sent what is not HTTP)
                length = int(header(head, b"content-length") or 0)
                body = await down_reader.readexactly(length) if length else b""
                if up is None:
                    up = await asyncio.open_connection(*self.upstream, limit=HEAD_LIMIT)
                up[1].write(head + body)
                request_id = (header(head, b"x-dd-request-id") or b"").decode(errors="replace") or None
                keep = await self._response(up[0], down_writer, request_id, clock)
                if keep is None:  # reset: both connections are gone
                    reset(up[1])
                    return
                if not keep:  # the upstream response was ended early: its connection goes
                    up[1].close()
                    up = None
        except (ConnectionError, asyncio.IncompleteReadError, OSError):
            reset(down_writer)
        finally:
            if up is not None:
                up[1].close()
            if not down_writer.is_closing():
                down_writer.close()

    async def _response(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        request_id: str | None,
        clock: _LinkClock | None = None,
    ) -> bool | None:
        """Relay one response. True: the upstream connection can carry the next request;
        False: it must be closed (its response was ended early); None: both were reset."""
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        writer.write(head)
        record = {"status": status, "data_events": 0, "bytes": 0, "payload_bytes": 0, "split": 0, "ended": "whole",
                  "stalled_s": 0.0, "slowed_s": 0.0}  # fmt: skip
        began = asyncio.get_running_loop().time()
        chunked = (header(head, b"transfer-encoding") or b"").lower() == b"chunked"
        try:
            if not chunked:
                length = header(head, b"content-length")
                body = await (reader.readexactly(int(length)) if length is not None else reader.read())
                writer.write(body)
                record["bytes"], record["payload_bytes"] = len(body), sse_payload_bytes(body)
                await writer.drain()
                return length is not None
            return await self._chunks(reader, writer, record, clock)
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            record["ended"] = "broken"  # a side hung up mid-response (the proxy gave up, a replica died)
            raise
        finally:
            if clock is not None and self.fault == "slow":  # how long the link took with it, however it ended
                record["slowed_s"] = round(asyncio.get_running_loop().time() - began, 3)
            self.events.write(RelayedResponse(request_id=request_id, upstream=self.index, fault=self.fault, **record))

    async def _chunks(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, record: dict, clock: _LinkClock | None
    ) -> bool | None:
        faulting = self.fault if self.fault != "none" else None
        loop = asyncio.get_running_loop()
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            payload = await reader.readexactly(size + 2)  # the data and its CRLF
            if faulting == "slow" and clock is not None:  # the rest waits upstream, unread, meanwhile
                await asyncio.sleep(max(0.0, clock.leaves(loop.time(), len(size_line) + len(payload)) - loop.time()))
            if size == 0:  # the last chunk (and the empty trailer)
                writer.write(size_line + payload)
                await writer.drain()
                return True
            data = payload[:-2]
            if faulting == "split" and (cut := data.find(b"data:")) >= 0:
                frame = size_line + payload
                at = len(size_line) + cut + 3
                writer.write(frame[:at])
                await writer.drain()
                await asyncio.sleep(SPLIT_PAUSE_S)
                writer.write(frame[at:])
                record["split"] += 1
            else:
                writer.write(size_line + payload)
            await writer.drain()
            record["data_events"] += data_events(data)
            record["bytes"] += len(data)
            record["payload_bytes"] += sse_payload_bytes(data)  # a replica writes each event in one chunk
            if faulting == "stall" and not record["stalled_s"] and record["data_events"] >= self.after:
                record["stalled_s"] = self.stall_s  # recorded however the stall ends
                await asyncio.sleep(self.stall_s)  # the rest waits upstream, unread
            if faulting in ("reset", "error") and record["data_events"] >= self.after:
                if faulting == "reset":
                    record["ended"] = "reset"
                    reset(writer)
                    return None
                ending = ERROR_EVENT + DONE_EVENT
                writer.write(chunk(ending) + b"0\r\n\r\n")
                await writer.drain()
                record["data_events"] += data_events(ending)
                record["bytes"] += len(ending)
                record["payload_bytes"] += sse_payload_bytes(ending)
                record["ended"] = "error_event"
                return False


async def serve(args: argparse.Namespace) -> None:
    events = EventWriter(Path(args.events), source="faultpoint")
    servers = []
    for index, target in enumerate(args.upstream):
        host, _, port = target.rpartition(":")
        link = SlowLink(args.latency_ms / 1000, args.jitter_ms / 1000, args.rate_bytes_s, args.seed)
        relay = Relay(index, (host, int(port)), args.fault, args.after_events, events, args.stall_s,
                      link if args.fault == "slow" else None)  # fmt: skip
        servers.append(await asyncio.start_server(relay.serve, "0.0.0.0", args.port_base + index, limit=HEAD_LIMIT))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    ready = {"pid": os.getpid(), "ports": [args.port_base + i for i in range(len(servers))], "fault": args.fault}
    Path(args.ready_file).write_text(json.dumps(ready))
    await stop.wait()
    for server in servers:
        server.close()
    events.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dd_accept.node.faultpoint", description=__doc__.split("\n")[0])
    parser.add_argument("--port-base", type=int, required=True)
    parser.add_argument("--upstream", action="append", required=True, help="HOST:PORT of a replica, in order")
    parser.add_argument("--fault", choices=FAULTS, default="none")
    parser.add_argument("--after-events", type=int, default=3, help="data events before the fault acts")
    parser.add_argument("--stall-s", type=float, default=0.0, help="seconds a stall holds the rest of a stream")
    parser.add_argument("--latency-ms", type=float, default=50.0, help="slow: mean hold of each chunk")
    parser.add_argument("--jitter-ms", type=float, default=0.0, help="slow: the hold varies this much either way")
    parser.add_argument("--rate-bytes-s", type=float, default=16384.0, help="slow: what the link carries a second")
    parser.add_argument("--seed", type=int, default=0, help="slow: the seed of the drawn holds")
    parser.add_argument("--events", required=True)
    parser.add_argument("--ready-file", required=True)
    args = parser.parse_args(argv)
    if args.after_events < 1:
        parser.error("--after-events must be at least 1")
    if args.rate_bytes_s <= 0 or args.latency_ms < 0 or not 0 <= args.jitter_ms <= args.latency_ms:
        parser.error("the slow link needs a rate above 0 and a jitter between 0 and its latency")
    asyncio.run(serve(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
