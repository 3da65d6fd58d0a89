"""Run one synthetic replica under uvicorn (vLLM's own server stack).

As a Slurm step, one task per replica: the port is `--port-base` plus the task's
`SLURM_PROCID`, and a ready file (host, port, pid, job and step ids) is written into the
shared run directory once the server accepts connections. As a local process (fast
tests) it binds 127.0.0.1. The control token comes from the environment, never argv,
so it does not appear in process listings or command records.

    python -m dd_accept.node.replica.server --port 8000 [--middleware mod:Class] ...
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

import uvicorn

from dd_accept.base.errors import EXIT_INTERRUPTED
from dd_accept.base.events import EventWriter, QueueGauge
from dd_accept.node import event_loop
from dd_accept.node.environment import TOKEN_ENV
from dd_accept.node.event_loop import LOOPS
from dd_accept.node.loadclient.workload import CANARY
from dd_accept.node.replica.app import build_app
from dd_accept.node.replica.asgi import StreamCut
from dd_accept.node.replica.connections import ConnectionTable
from dd_accept.node.replica.control_state import ControlState
from dd_accept.node.replica.engine import Engine, EngineMetrics, EngineSettings
from dd_accept.node.replica.readiness import add_location_arguments, listen_port, per_task, task_index, write_ready


def _protocol_base() -> type[asyncio.Protocol]:
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        return HttpToolsProtocol
    except ImportError:  # httptools not installed: uvicorn's pure-Python h11 protocol
        from uvicorn.protocols.http.h11_impl import H11Protocol

        return H11Protocol


def counting_protocol(metrics: EngineMetrics, table: ConnectionTable | None = None) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol, counting connections as they are accepted and closed (and,
    with a table, who closed each one)."""
    base = _protocol_base()

    class CountingProtocol(base):  # type: ignore[valid-type, misc]
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self._dd_peer = transport.get_extra_info("peername")
            metrics.connection_opened(self._dd_peer)
            if table is not None:
                table.opened(self)
            super().connection_made(transport)

        def connection_lost(self, exc: Exception | None) -> None:
            if table is not None:
                table.lost(self, metrics.carried_requests(self._dd_peer))
            metrics.connection_closed(self._dd_peer)
            super().connection_lost(exc)

        def timeout_keep_alive_handler(self) -> None:
            self._dd_closed_by_replica = True  # the replica's own keep-alive expiry
            super().timeout_keep_alive_handler()

    return CountingProtocol


class _QuietStreamCuts(logging.Filter):
    """A deliberate cut is an expected event: one line, not a traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], StreamCut):
            record.msg, record.args, record.exc_info = "stream cut: %s", (record.exc_info[1],), None
        return True


class Listener:
    """Stops the server listening for a while and starts it again: a backend whose port
    refuses connections (a restarting process), while the connections it accepted, the
    harness's included, go on (the control plane closes the idle ones). uvicorn has no public
    way to listen again, so the protocol factory it builds at start-up is rebuilt here the
    way it builds it."""

    def __init__(self, server: uvicorn.Server) -> None:
        self.server = server
        self.reopening: asyncio.Task[None] | None = None

    def refuse(self, seconds: float) -> None:
        for listening in self.server.servers:
            listening.close()  # the listening socket only; accepted connections stay
        if self.reopening is None or self.reopening.done():
            self.reopening = asyncio.get_running_loop().create_task(self._listen_after(seconds))

    async def _listen_after(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        config, server = self.server.config, self.server

        def protocol() -> asyncio.Protocol:
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=server.server_state, app_state=server.lifespan.state
            )

        listening = await asyncio.get_running_loop().create_server(
            protocol, host=config.host, port=config.port, backlog=config.backlog
        )
        server.servers = [listening]


async def serve(args: argparse.Namespace) -> int:
    settings = EngineSettings(
        model=args.model,
        max_num_seqs=args.max_num_seqs,
        ttft_s=args.ttft_ms / 1000,
        itl_s=args.itl_ms / 1000,
        jitter=args.jitter,
        seed=args.seed + task_index(),
        latency=args.latency,
        sigma=args.sigma,
        step_s=args.scheduler_step_ms / 1000,
        response_canary=args.response_canary,
    )
    metrics = EngineMetrics(settings.model)
    engine = Engine(settings, metrics)
    control = ControlState()
    exit_code = 0
    server: uvicorn.Server | None = None
    listener: Listener | None = None

    def shutdown(code: int) -> None:
        nonlocal exit_code
        exit_code = code
        if server is not None:
            server.should_exit = True

    task = task_index()
    events = EventWriter(Path(per_task(args.events)), source=f"replica-{task}") if args.events else None
    if events is not None:
        engine.on_change = lambda waiting, running: events.write(QueueGauge(waiting=waiting, running=running))
        engine.on_change(engine.waiting, engine.running)
    table = ConnectionTable()
    app = build_app(
        engine,
        control,
        connections=table,
        middleware=args.middleware,
        token=os.environ.get(TOKEN_ENV),
        shutdown=shutdown,
        events=events,
        task=task,
        refuse=lambda seconds: listener.refuse(seconds) if listener is not None else None,
    )
    host = "127.0.0.1" if args.local else "0.0.0.0"
    port = listen_port(args)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        http=counting_protocol(metrics, table),
        lifespan="off",
        access_log=False,
        log_level="warning",
        timeout_graceful_shutdown=args.graceful_shutdown_s,
        timeout_keep_alive=args.keep_alive_s,
    )
    server = uvicorn.Server(config)
    listener = Listener(server)
    logging.getLogger("uvicorn.error").addFilter(_QuietStreamCuts())
    serving = asyncio.create_task(server.serve())
    scheduler = asyncio.create_task(engine.run_scheduler()) if settings.scheduled else None
    while not server.started:
        if serving.done():
            return serving.result() or 1  # startup failed (e.g. port in use); uvicorn logged why
        await asyncio.sleep(0.02)
    stopped_on_term = []
    if args.exit_on_term:  # over uvicorn's own handler, installed once it serves

        def stop_at_once() -> None:
            stopped_on_term.append(True)
            serving.cancel()

        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop_at_once)
    if args.ready_file:
        ready_host = "127.0.0.1" if args.local else socket.gethostname()
        write_ready(Path(per_task(args.ready_file)), ready_host, port)
    try:
        await serving
    except asyncio.CancelledError:
        if not stopped_on_term:
            raise
    if scheduler is not None:
        scheduler.cancel()
    if events is not None:
        events.close()
    return exit_code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dd-accept-replica", description="Synthetic vLLM replica.")
    add_location_arguments(parser)
    parser.add_argument("--model", default="dd-accept-synthetic")
    parser.add_argument("--max-num-seqs", type=int, default=16)
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--jitter", type=float, default=0.1, help="uniform latency: relative spread")
    parser.add_argument("--latency", choices=("uniform", "lognormal"), default="uniform")
    parser.add_argument("--sigma", type=float, default=0.5, help="lognormal latency: shape")
    parser.add_argument(
        "--scheduler-step-ms",
        type=float,
        default=0.0,
        help="> 0: realistic scheduling, one admission step per interval",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--middleware", action="append", default=[], help="ASGI middleware, module:Class")
    parser.add_argument("--graceful-shutdown-s", type=float, default=30.0)
    parser.add_argument(
        "--exit-on-term",
        action="store_true",
        help="on TERM stop serving at once and exit 0, streams in flight cut, as vLLM's server does "
        "(default: uvicorn's drain, then the TERM it re-raises ends the process)",
    )
    parser.add_argument(
        "--keep-alive-s",
        type=float,
        default=65.0,
        help="close a connection idle this long (longer than the proxy's keep-alive: its expiry is its own)",
    )
    parser.add_argument("--loop", choices=LOOPS, default="auto", help="event loop (auto: uvloop when installed)")
    parser.add_argument(
        "--response-canary",
        default="",
        type=_hex,
        help="hex every token carries (finds responses a SUT writes)",
    )
    return parser


def _hex(text: str) -> str:
    if text and not CANARY.fullmatch(text):
        raise argparse.ArgumentTypeError("must be 8 to 32 lowercase hex digits")
    return text


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return event_loop.run(serve(args), args.loop)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
