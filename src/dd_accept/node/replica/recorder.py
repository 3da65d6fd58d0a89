"""The replicas' request evidence in front of a real vLLM, as an ASGI middleware.

The synthetic replica records one event per request itself; vLLM does not. Passed to
`vllm serve` as the outermost `--middleware` (after the SUT's queue admission), this records
the same events, so the overload checks count upstream attempts and 429s on the replicas'
side exactly as with synthetic replicas. Where to write comes from the step's environment.
No request or response content is recorded.
"""

from __future__ import annotations

import os
from pathlib import Path

from dd_accept.base.events import EventWriter
from dd_accept.node.environment import EVENTS_ENV, REPLICA_ENV
from dd_accept.node.replica.app import RequestRecorder
from dd_accept.node.replica.asgi import App, Receive, Scope, Send


class RequestEvents:
    def __init__(self, app: App) -> None:
        path, index = os.environ.get(EVENTS_ENV), int(os.environ.get(REPLICA_ENV, "0"))
        events = EventWriter(Path(path), source=f"replica-{index}") if path else None
        self._recorder = RequestRecorder(app, None, events, index)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._recorder(scope, receive, send)
