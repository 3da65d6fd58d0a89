"""Backends benchmark: is the harness fast enough that the SUT, not the harness, is measured?

1. SSE chunks/s from one synthetic replica process pinned to one core (the ASGI replica
   the scenarios use, and the paced one the capacity scenario uses), side by side with a
   plain aiohttp SSE server (the reference) pinned the same way. Goals: >= 20,000 chunks/s,
   and the paced replica at >= 0.8 of the reference. The paced replica and the reference are
   measured in pairs, back to back, in alternating order (`--repeats`): the machine drifts by
   20% between runs minutes apart, so each ratio is taken within its pair, and the median
   ratio is the verdict.
2. Requests/s the raw load client sustains on loopback against each.
3. 8 replicas + the SUT's rc1 proxy + the load client on 2 cores: throughput through the
   proxy and each component's CPU share (from /proc), so the harness's share is visible.

Everything runs on 127.0.0.1 as local processes; prints a table and writes JSON.

    python benchmarks/backends.py [--seconds 5] [--repeats 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import aiohttp
from rich.console import Console
from rich.table import Table

from dd_accept.base.events import ClientRequest, of_type, read_event_file
from dd_accept.base.waiting import wait_until
from dd_accept.deployment.backends.local import LocalReplica, free_port
from dd_accept.deployment.clients import load_client_argv
from dd_accept.deployment.synthetic_replicas import PACED_REPLICA
from dd_accept.sut.spec import DEFAULT_SUT, SutSpec
from dd_accept.sut.wheelhouse import build_wheelhouse, install_local

REFERENCE_SERVER = textwrap.dedent(
    """
    import json, sys
    from aiohttp import web

    CHUNK = b"data: " + json.dumps({"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m",
        "choices": [{"index": 0, "delta": {"content": "tok "}, "finish_reason": None, "logprobs": None}]},
        separators=(",", ":")).encode() + b"\\n\\n"

    async def completions(request):
        body = await request.json()
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        for _ in range(int(body.get("max_tokens", 16))):
            await response.write(CHUNK)
        await response.write(b"data: [DONE]\\n\\n")
        return response

    async def health(request):
        return web.Response(text="")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    app.router.add_get("/health", health)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
    """
)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def stream_load(url: str, seconds: float, concurrency: int, max_tokens: int) -> dict[str, float]:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": max_tokens, "stream": True}
    chunks = requests = 0
    deadline = time.monotonic() + seconds
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            nonlocal chunks, requests
            while time.monotonic() < deadline:
                async with session.post(f"{url}/v1/chat/completions", json=body) as response:
                    async for line in response.content:
                        if line.startswith(b"data: "):
                            chunks += 1
                requests += 1

        started = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.monotonic() - started
    return {"chunks_per_s": chunks / elapsed, "requests_per_s": requests / elapsed, "elapsed_s": elapsed}


def pin(pid: int, core: int) -> None:
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(pid, {core})


def wire_load(url: str, seconds: float, concurrency: int, max_tokens: int) -> dict[str, float]:
    """The capacity scenario's own load client (wire mode, uvloop) on core 1: a client that
    costs less per chunk than aiohttp's, so the server, not the client, fills its core first."""
    records = max(100_000, int(seconds * 20_000))  # more than the window can send; its queue is built first
    with tempfile.TemporaryDirectory(prefix="dd-bench-client-") as scratch:
        events = Path(scratch) / "client.jsonl"
        argv = [
            *load_client_argv(
                sys.executable, url, str(events), mode="wire", profile=None, name="backends", records=records,
                concurrency=concurrency, max_tokens=max_tokens, max_record_attempts=1, duration_s=seconds,
            ),
            "--loop", "uvloop",
        ]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, check=True, preexec_fn=lambda: pin(0, 1))
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        attempts = [a for a in of_type(read_event_file(events), ClientRequest) if a.outcome == "ok"]
    elapsed = summary["window_s"]
    return {
        "chunks_per_s": sum(a.chunks or 0 for a in attempts) / elapsed,
        "requests_per_s": len(attempts) / elapsed,
        "elapsed_s": elapsed,
    }


def measure_server(url: str, pid: int, seconds: float, client: str) -> dict[str, float]:
    pin(pid, 0)
    pin(os.getpid(), 1)
    load = wire_load if client == "wire" else (lambda *a, **k: asyncio.run(stream_load(*a, **k)))
    before = cpu_seconds(pid)
    streams = load(url, seconds, concurrency=16, max_tokens=256)
    server_cpu = cpu_seconds(pid) - before
    short = load(url, seconds, concurrency=16, max_tokens=1)
    share = server_cpu / streams["elapsed_s"]
    return {
        "chunks_per_s": round(streams["chunks_per_s"]),
        "server_cpu_share": round(share, 3),
        # what one core of the server carries: the client on the other core may be the limit
        "chunks_per_core": round(streams["chunks_per_s"] / share) if share > 0 else 0,
        "short_requests_per_s": round(short["requests_per_s"]),
    }


def reference(seconds: float, client: str) -> dict[str, float]:
    port = free_port()
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as handle:
        handle.write(REFERENCE_SERVER)
    process = subprocess.Popen([sys.executable, handle.name, str(port)])
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until(
            lambda: subprocess.run(["true"]).returncode == 0 and _up(url), bool, timeout=20, what="reference server"
        )
        return measure_server(url, process.pid, seconds, client)
    finally:
        process.terminate()
        process.wait()
        os.unlink(handle.name)


def _up(url: str) -> bool:
    import urllib.request

    try:
        return urllib.request.urlopen(f"{url}/health", timeout=1).status == 200
    except OSError:
        return False


def replica(seconds: float, client: str) -> dict[str, float]:
    with LocalReplica(options=("--ttft-ms", "0", "--itl-ms", "0", "--max-num-seqs", "64")) as local:
        assert local.process is not None
        return measure_server(local.url, local.process.pid, seconds, client)


def paced_replica(seconds: float, client: str) -> dict[str, float]:
    # its per-request evidence written, as in the capacity scenario; paced as fast as it can
    events = Path(tempfile.mkdtemp(prefix="dd-bench-paced-")) / "events.jsonl"
    options = ("--ttft-ms", "0", "--itl-ms", "0", "--events", str(events))
    with LocalReplica(options=options, program=PACED_REPLICA) as local:
        assert local.process is not None
        return measure_server(local.url, local.process.pid, seconds, client)


def full_stack(seconds: float) -> dict[str, object]:
    """8 replicas behind the rc1 proxy, driven by the raw load client; CPU share per component."""
    os.sched_setaffinity(os.getpid(), set(range(os.cpu_count() or 1))) if hasattr(os, "sched_setaffinity") else None
    wheelhouse = build_wheelhouse(SutSpec.parse(DEFAULT_SUT))
    sut_path = install_local(wheelhouse, Path(tempfile.mkdtemp(prefix="dd-bench-sut-")))
    replicas = [LocalReplica(options=("--ttft-ms", "10", "--itl-ms", "2", "--max-num-seqs", "64")) for _ in range(8)]
    for each in replicas:
        each.start()
    port = free_port()
    argv = [sys.executable, str(sut_path / "data_designer/slurm/runtime/proxy.py"), "--listen-port", str(port)]
    for each in replicas:
        argv += ["--backend", each.url]
    env = {**os.environ, "PYTHONPATH": str(sut_path)}
    proxy = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: _up(url), bool, timeout=30, what="proxy health")
        pids = {"proxy (SUT)": [proxy.pid], "replicas (harness)": [r.process.pid for r in replicas]}  # type: ignore[union-attr]
        before = {name: sum(cpu_seconds(p) for p in group) for name, group in pids.items()}
        client_before = time.process_time()
        result = asyncio.run(stream_load(url, seconds, concurrency=32, max_tokens=64))
        client_cpu = time.process_time() - client_before
        used = {name: sum(cpu_seconds(p) for p in group) - before[name] for name, group in pids.items()}
        used["load client (harness)"] = client_cpu
        total = sum(used.values())
        return {
            "chunks_per_s": round(result["chunks_per_s"]),
            "requests_per_s": round(result["requests_per_s"], 1),
            "cpu_seconds": {k: round(v, 2) for k, v in used.items()},
            "cpu_share": {k: round(v / total, 3) for k, v in used.items()},
            "harness_cpu_share": round((used["replicas (harness)"] + used["load client (harness)"]) / total, 3),
        }
    finally:
        proxy.terminate()
        proxy.wait()
        for each in replicas:
            each.stop()


def paired_runs(seconds: float, repeats: int, client: str, console: Console) -> list[dict]:
    """The paced replica and the reference back to back, the order alternating."""
    servers = {"reference": reference, "paced_replica": paced_replica}
    pairs = []
    for index in range(repeats):
        measured = {}
        for name in sorted(servers, reverse=not index % 2):  # the reference first, then the other way
            console.print(f"pair {index + 1}/{repeats}: {name.replace('_', ' ')}…")
            measured[name] = servers[name](seconds, client)
        ratio = measured["paced_replica"]["chunks_per_core"] / measured["reference"]["chunks_per_core"]
        pairs.append(measured | {"ratio": round(ratio, 3)})
    return pairs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3, help="pairs of paced replica and reference")
    parser.add_argument(
        "--client",
        choices=("wire", "aiohttp"),
        default="wire",
        help="the load client on the other core (wire: the capacity scenario's, cheaper per chunk)",
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "backends.json")
    args = parser.parse_args()
    if args.repeats < 1 or args.seconds <= 0:
        parser.error("--repeats must be at least 1 and --seconds above 0")
    console = Console()
    pairs = paired_runs(args.seconds, args.repeats, args.client, console)
    median_ratio = statistics.median(pair["ratio"] for pair in pairs)
    middle = sorted(pairs, key=lambda pair: pair["ratio"])[(len(pairs) - 1) // 2]
    ref, paced = middle["reference"], middle["paced_replica"]
    console.print("synthetic replica…")
    rep = replica(args.seconds, args.client)
    console.print("8 replicas + rc1 proxy + load client…")
    stack = full_stack(args.seconds)

    table = Table(title="dd-accept backends (one replica process pinned to one core; client on the other)")
    for column in ("measure", "ASGI replica", "paced replica", "plain aiohttp reference", "goal"):
        table.add_column(column, justify="right" if column != "measure" else "left")
    servers = (rep, paced, ref)
    table.add_row("SSE chunks/s", *(f"{s['chunks_per_s']:,}" for s in servers), "≥ 20,000")
    table.add_row("server CPU share while streaming", *(f"{s['server_cpu_share']:.2f}" for s in servers), "")
    table.add_row("SSE chunks/s per core of the server", *(f"{s['chunks_per_core']:,}" for s in servers), "")
    relative = (f"{s['chunks_per_core'] / ref['chunks_per_core']:.2f}" for s in servers)
    table.add_row("  of the reference's", *relative, "paced ≥ 0.8")
    table.add_row(f"short requests/s ({args.client} client)", *(f"{s['short_requests_per_s']:,}" for s in servers), "")
    console.print(table)
    console.print(
        f"paced replica / reference, chunks per core, {len(pairs)} pairs: "
        + " / ".join(f"{pair['ratio']:.2f}" for pair in pairs)
        + f"; median {median_ratio:.2f} (goal ≥ 0.8; the table shows the median pair)"
    )
    shares = Table(title="8 replicas + rc1 proxy + load client on 2 cores")
    shares.add_column("component")
    shares.add_column("CPU s", justify="right")
    shares.add_column("share", justify="right")
    for name, seconds in stack["cpu_seconds"].items():  # type: ignore[union-attr]
        shares.add_row(name, f"{seconds:.2f}", f"{stack['cpu_share'][name]:.0%}")  # type: ignore[index]
    console.print(shares)
    console.print(
        f"through the proxy: {stack['chunks_per_s']:,} chunks/s, {stack['requests_per_s']} requests/s; "
        f"harness CPU share {stack['harness_cpu_share']:.0%}"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "benchmark": "backends",
                "client": args.client,
                "replica": rep,
                "paced_replica": paced,
                "reference": ref,
                "pairs": pairs,
                "paced_ratio_median": round(median_ratio, 3),
                "full_stack": stack,
            },
            indent=2,
        )
        + "\n"
    )
    console.print(f"wrote {args.out.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
