"""Harness headroom: what the harness's own processes cost per chunk, next to the SUT's proxy,
for each way the harness can be built.

The capacity scenario's knee is the proxy's only if the harness (replicas and load client)
takes at most 35% of the CPU at the knee. This runs the capacity scenario's workload at
rc1's knee (60 streams in flight, 4 replicas pacing 32 tokens 5 ms apart, the rc1 proxy, a
load client) as local processes on 127.0.0.1, once per variant, and reads each component's
CPU from /proc. Variants, side by side:
  - the event loop of the harness's programs: asyncio's own, or uvloop;
  - the replica: the ASGI one (uvicorn, behind the SUT's queue admission middleware, a timer
    per token per stream) or the paced one (one timer for every stream, bare protocol);
  - the client: raw (aiohttp) or wire (bare protocol, httptools);
  - the replicas' processes: 4, or 8 sharing the same load (more processes per replica: the
    proxy then has 8 backends, each serving half as many streams).
Prints a table and writes JSON.

    python benchmarks/harness_headroom.py [--seconds 5] [--repeats 2] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from dd_accept.base.events import ClientRequest, of_type, read_event_file
from dd_accept.base.waiting import wait_until
from dd_accept.deployment.backends.local import LocalReplica, free_port
from dd_accept.deployment.clients import load_client_argv
from dd_accept.deployment.synthetic_replicas import ASGI_REPLICA, PACED_REPLICA
from dd_accept.node.probe import probe
from dd_accept.node.step_usage import process_usage
from dd_accept.sut.profile import profile_for
from dd_accept.sut.spec import DEFAULT_SUT, SutSpec
from dd_accept.sut.wheelhouse import build_wheelhouse, install_local

VARIANTS = (  # (event loop, replica, client, replica processes)
    ("asyncio", "asgi", "raw", 4),
    ("uvloop", "asgi", "raw", 4),
    ("uvloop", "paced", "raw", 4),
    ("uvloop", "asgi", "wire", 4),
    ("uvloop", "paced", "wire", 4),
    ("uvloop", "paced", "wire", 8),
)
PROGRAMS = {"asgi": ASGI_REPLICA, "paced": PACED_REPLICA}
STREAMS, TOKENS = 60, 32


def cpu_seconds(pid: int) -> float:
    """The kernel's count, as the capacity scenario reads it on the nodes."""
    usage = process_usage(pid)
    return usage[0] if usage is not None else 0.0


def _up(url: str) -> bool:
    return probe(f"{url}/health", timeout=1).get("status") == 200


def measure(
    sut_path: Path, middleware: str, loop: str, replica: str, client_mode: str, processes: int, seconds: float
) -> dict:
    options = ("--ttft-ms", "20", "--itl-ms", "5", "--loop", loop)
    if replica == "asgi":
        options += ("--max-num-seqs", "256", "--middleware", middleware)
    program = PROGRAMS[replica]
    replicas = [LocalReplica(options=options, python_path=[sut_path], program=program) for _ in range(processes)]
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
        with tempfile.TemporaryDirectory(prefix="dd-headroom-") as scratch:
            events = Path(scratch) / "client.jsonl"
            client = [
                *load_client_argv(
                    sys.executable, url, str(events), mode=client_mode, profile=None, name="headroom",
                    records=1_000_000, concurrency=STREAMS, max_tokens=TOKENS, max_record_attempts=1,
                    duration_s=seconds,
                ),
                "--loop", loop,
            ]  # fmt: skip
            pids = {"proxy": [proxy.pid], "replicas": [r.process.pid for r in replicas]}  # type: ignore[union-attr]
            before = {name: sum(cpu_seconds(p) for p in group) for name, group in pids.items()}
            started = time.monotonic()
            done = subprocess.run(client, capture_output=True, text=True, check=True)
            elapsed = time.monotonic() - started
            used = {name: sum(cpu_seconds(p) for p in group) - before[name] for name, group in pids.items()}
            summary = json.loads(done.stdout.strip().splitlines()[-1])
            chunks = sum(a.chunks or 0 for a in of_type(read_event_file(events), ClientRequest) if a.outcome == "ok")
    finally:
        proxy.terminate()
        proxy.wait()
        for each in replicas:
            each.stop()
    used["client"] = summary["cpu_s"]  # its CPU while it sent (its start-up is not load)
    harness = used["replicas"] + used["client"]
    return {
        "loop": summary.get("loop", loop),
        "replica": replica,
        "client": client_mode,
        "replica_processes": processes,
        "chunks_per_s": round(chunks / summary["window_s"]),
        "us_per_chunk": {name: round(value / chunks * 1e6, 1) for name, value in used.items()},
        "harness_share": round(harness / (harness + used["proxy"]), 3),
        "elapsed_s": round(elapsed, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "harness_headroom.json")
    args = parser.parse_args()
    spec = SutSpec.parse(DEFAULT_SUT)
    wheelhouse = build_wheelhouse(spec)
    sut_path = install_local(wheelhouse, Path(tempfile.mkdtemp(prefix="dd-bench-sut-")))
    middleware = profile_for("data-designer-slurm", "1.0.0rc1").queue_admission.middleware
    runs = [
        measure(sut_path, middleware, loop, replica, client, processes, args.seconds)
        for _ in range(args.repeats)
        for loop, replica, client, processes in VARIANTS
    ]
    table = Table(title=f"harness headroom at {STREAMS} streams x {TOKENS} tokens (rc1 proxy, 2 cores)")
    for column in ("loop", "replica", "client", "processes", "chunks/s", "proxy us/chunk", "replicas us/chunk",
                   "client us/chunk", "harness share"):  # fmt: skip
        table.add_column(column)
    for run in runs:
        cost = run["us_per_chunk"]
        table.add_row(
            run["loop"], run["replica"], run["client"], str(run["replica_processes"]), f"{run['chunks_per_s']:,}",
            f"{cost['proxy']:.1f}",
            f"{cost['replicas']:.1f}", f"{cost['client']:.1f}", f"{run['harness_share']:.0%}",
        )  # fmt: skip
    Console(width=160).print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"benchmark": "harness_headroom", "runs": runs}, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
