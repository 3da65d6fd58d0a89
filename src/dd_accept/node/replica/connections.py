"""The replica's view of its connections' lives: who closed each one, and when.

The telemetry checks compare the proxy's connection counters with these. A connection the
peer (the proxy) closes while no request is in flight on it is one the proxy let go idle:
its keep-alive expired, or it was evicted. One the replica closes while idle (the
`close_idle` control action) is one the proxy will find stale. One whose response said
`Connection: close` is one the proxy cannot return to its pool. Probe-only connections are
counted apart, so a proxy that keeps its health probes on a pool of their own can be
judged as well as one that shares the pool. Connections that carried the harness's own
control requests are not the proxy's, and are not counted at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from dataclasses import dataclass, field
from typing import Any

from dd_accept.node.replica.engine import peer_key


@dataclass
class ConnectionTable:
    """Open connections (uvicorn protocols) and how closed ones ended."""

    open: set[Any] = field(default_factory=set)
    idle_closed_by_peer: int = 0
    idle_closed_by_peer_with_requests: int = 0
    control_peers: set[tuple[str, int]] = field(default_factory=set)  # open connections of the control plane

    def opened(self, protocol: Any) -> None:
        self.open.add(protocol)

    def control_seen(self, peer: Any) -> None:
        """A control request arrived from `peer` (the ASGI scope's client)."""
        key = peer_key(peer)
        if key is not None:
            self.control_peers.add(key)

    def lost(self, protocol: Any, carried_requests: bool) -> None:
        """Called before uvicorn handles the loss: the cycle still says whether a response
        was in flight and whether it asked for the connection to be closed."""
        self.open.discard(protocol)
        key = peer_key(getattr(protocol, "_dd_peer", None))
        if key in self.control_peers:
            self.control_peers.discard(key)
            return
        if getattr(protocol, "_dd_closed_by_replica", False) or not is_idle(protocol):
            return
        cycle = getattr(protocol, "cycle", None)
        if cycle is not None and not cycle.keep_alive:  # the replica's own `Connection: close`
            return
        self.idle_closed_by_peer += 1
        self.idle_closed_by_peer_with_requests += carried_requests

    def close_idle(self, carried_requests: Any) -> dict[str, int]:
        """Close every connection with no request in flight, as a backend that drops idle
        keep-alive connections does; `carried_requests(protocol)` says whether one carried
        a request other than a probe."""
        idle = [
            protocol
            for protocol in self.open
            if is_idle(protocol) and peer_key(getattr(protocol, "_dd_peer", None)) not in self.control_peers
        ]
        with_requests = 0
        for protocol in idle:
            protocol._dd_closed_by_replica = True
            with_requests += bool(carried_requests(protocol))
            transport: asyncio.BaseTransport | None = getattr(protocol, "transport", None)
            if transport is not None:
                transport.close()
        return {"closed": len(idle), "closed_with_requests": with_requests}

    async def reset(self, peer: Any) -> None:
        """Reset the connection from `peer` (RST: linger 0, then abort), as a crashed backend's
        kernel does, and let the loss reach uvicorn before its handler returns (so it sends
        nothing on it). Not an idle close of the proxy's: not counted as one."""
        key = peer_key(peer)
        for protocol in [p for p in self.open if peer_key(getattr(p, "_dd_peer", None)) == key]:
            protocol._dd_closed_by_replica = True
            transport: asyncio.Transport | None = getattr(protocol, "transport", None)
            if transport is None:
                continue
            sock = transport.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError, AttributeError):  # no linger: abort() closes it anyway
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            transport.abort()
        for _ in range(3):  # abort() reports the loss on the loop's next turns
            await asyncio.sleep(0)

    def state(self) -> dict[str, int]:
        return {
            "idle_closed_by_peer": self.idle_closed_by_peer,
            "idle_closed_by_peer_with_requests": self.idle_closed_by_peer_with_requests,
        }


def is_idle(protocol: Any) -> bool:
    """No request in flight: none yet, or the last one's response is complete."""
    cycle = getattr(protocol, "cycle", None)
    return cycle is None or bool(cycle.response_complete)
