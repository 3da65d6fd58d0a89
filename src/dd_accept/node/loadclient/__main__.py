"""`python -m dd_accept.node.loadclient --endpoint URL [--mode sut|raw] ...`

Prints one JSON summary line on stdout; events go to `--events FILE` (JSONL).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from dd_accept.base.errors import EXIT_PASS, EXIT_USAGE
from dd_accept.base.events import EventWriter
from dd_accept.node import event_loop
from dd_accept.node.event_loop import LOOPS
from dd_accept.node.loadclient.raw import run_raw
from dd_accept.node.loadclient.wire import run_wire
from dd_accept.node.loadclient.workload import ARRIVALS, Workload, parse_header

# Clients of the harness's own, on its event loop: aiohttp's, and the wire client that the
# capacity scenario drives so that the harness costs less per chunk than the proxy it measures.
RAW_CLIENTS = {"raw": run_raw, "wire": run_wire}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dd-accept-loadclient")
    parser.add_argument("--endpoint", required=True, help="base URL, e.g. http://127.0.0.1:9000")
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
    parser.add_argument("--records", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--prompt-chars", type=int, default=64)
    parser.add_argument("--no-stream", action="store_true")
    parser.add_argument("--admission-limit", type=int, default=8)
    parser.add_argument("--deadline-s", type=float, default=120.0)
    parser.add_argument("--max-record-attempts", type=int, default=50)
    parser.add_argument("--model", default="dd-accept-synthetic")
    parser.add_argument("--events", type=Path)
    parser.add_argument("--run-tag", default="", help="prefix of request ids (x-dd-request-id)")
    parser.add_argument("--header", action="append", default=[], help="extra request header, NAME: VALUE")
    parser.add_argument("--arrival", choices=ARRIVALS, default="concurrency", help="how raw requests are sent")
    parser.add_argument("--rate", type=float, default=0.0, help="requests per second (constant, poisson)")
    parser.add_argument("--duration-s", type=float, default=0.0, help="stop sending new requests after this")
    parser.add_argument("--seed", type=int, default=0, help="seed of the Poisson arrivals")
    parser.add_argument("--canary", default="", help="hex the prompts and a credential carry (finds leaks)")
    parser.add_argument(
        "--hang-up-after", type=int, default=0, help="raw: close each stream after N data events (a user who leaves)"
    )
    parser.add_argument(
        "--read-bytes-per-s", type=int, default=0, help="raw: read each stream at most this fast (a slow link)"
    )
    parser.add_argument("--loop", choices=LOOPS, default="auto", help="event loop (auto: uvloop when installed)")
    return parser


def workload_from_args(args: argparse.Namespace) -> Workload:
    """The `Workload` whose `to_argv()` produced these flags (the inverse of `Workload.to_argv`)."""
    return Workload(
        endpoint=args.endpoint.rstrip("/"),
        records=args.records,
        concurrency=args.concurrency,
        max_tokens=args.max_tokens,
        prompt_chars=args.prompt_chars,
        stream=not args.no_stream,
        model=args.model,
        admission_limit=args.admission_limit,
        deadline_s=args.deadline_s,
        max_record_attempts=args.max_record_attempts,
        run_tag=args.run_tag,
        headers=tuple(parse_header(text) for text in args.header),
        arrival=args.arrival,
        rate=args.rate,
        duration_s=args.duration_s,
        seed=args.seed,
        canary=args.canary,
        hang_up_after=args.hang_up_after,
        read_bytes_per_s=args.read_bytes_per_s,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        workload = workload_from_args(args)
        if (workload.hang_up_after or workload.read_bytes_per_s) and args.mode != "raw":
            raise ValueError("--hang-up-after and --read-bytes-per-s are a raw client's (--mode raw)")
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
