"""`python -m dd_accept.node.loadclient --endpoint URL [--mode sut|raw] ...`

Prints one JSON summary line on stdout; events go to `--events FILE` (JSONL).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import sys
import typing
from collections.abc import Sequence
from dataclasses import MISSING
from pathlib import Path
from typing import Any

from dd_accept.base.errors import EXIT_PASS, EXIT_USAGE
from dd_accept.base.events import EventWriter
from dd_accept.node import event_loop
from dd_accept.node.event_loop import LOOPS
from dd_accept.node.loadclient.raw import run_raw
from dd_accept.node.loadclient.wire import run_wire
from dd_accept.node.loadclient.workload import Workload, flag_fields, flag_of, parse_header

# Clients of the harness's own, on its event loop: aiohttp's, and the wire client that the
# capacity scenario drives so that the harness costs less per chunk than the proxy it measures.
RAW_CLIENTS = {"raw": run_raw, "wire": run_wire}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dd-accept-loadclient")
    parser.add_argument(
        "--mode",
        choices=("sut", *RAW_CLIENTS),
        default="sut",
        help="sut: the SUT's own client; raw: aiohttp, no admission control; wire: raw on bare connections",
    )
    parser.add_argument(
        "--adapter",
        default="dd_accept.node.loadclient.data_designer",
        help="module with run_sut(workload, events) for --mode sut (from the SUT profile)",
    )
    parser.add_argument("--events", type=Path)
    parser.add_argument("--loop", choices=LOOPS, default="auto", help="event loop (auto: uvloop when installed)")
    kinds = typing.get_type_hints(Workload)
    for flag_field in flag_fields():  # the workload's own flags, derived from its fields
        given: dict[str, Any] = {"type": kinds[flag_field.name], "help": flag_field.metadata.get("help")}
        if flag_field.default is MISSING:
            given["required"] = True
        else:
            given["default"] = flag_field.default
        parser.add_argument(flag_of(flag_field), **given)
    parser.add_argument("--no-stream", action="store_true", help="ask for whole responses, not streams")
    parser.add_argument("--header", action="append", default=[], help="extra request header, NAME: VALUE")
    return parser


def workload_from_args(args: argparse.Namespace) -> Workload:
    """The `Workload` whose `to_argv()` produced these flags (the inverse of `Workload.to_argv`)."""
    values = {flag_field.name: getattr(args, flag_field.name) for flag_field in flag_fields()}
    values["endpoint"] = values["endpoint"].rstrip("/")
    return Workload(**values, stream=not args.no_stream, headers=tuple(parse_header(text) for text in args.header))


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        workload = workload_from_args(args)
        if (workload.hang_up_after or workload.read_bytes_per_s or workload.stream_deadline_s) and args.mode != "raw":
            raise ValueError(
                "--hang-up-after, --read-bytes-per-s and --stream-deadline-s are a raw client's (--mode raw)"
            )
    except ValueError as error:
        print(f"loadclient: {error}", file=sys.stderr)
        return EXIT_USAGE
    events = EventWriter(args.events, source="client")
    try:
        if args.mode in RAW_CLIENTS:
            summary = event_loop.run(RAW_CLIENTS[args.mode](workload, events), args.loop)
        else:  # the SUT's own client runs on the loop asyncio gives it, as in the SUT
            summary = asyncio.run(importlib.import_module(args.adapter).run_sut(workload, events))
    except ValueError as error:  # a workload this client cannot send (wire: an https endpoint)
        print(f"loadclient: {error}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        events.close()
    print(json.dumps({**summary, "mode": args.mode, "events": events.counts}))
    return EXIT_PASS


if __name__ == "__main__":
    sys.exit(main())
