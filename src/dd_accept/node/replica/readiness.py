"""Where a replica listens and how it says it is ready: shared by both replica programs
(the ASGI replica and the paced one), so the fixtures start and find either the same way."""

from __future__ import annotations

import argparse
import json
import os
import socket
from pathlib import Path


def task_index() -> int:
    """This task's index in its Slurm step (0 outside Slurm)."""
    return int(os.environ.get("SLURM_PROCID", "0"))


def listen_port(args: argparse.Namespace) -> int:
    """`--port`, or `--port-base` plus the task's index (one step, one task per replica)."""
    if args.port is not None:
        return int(args.port)
    return int(args.port_base) + task_index()


def per_task(template: str) -> str:
    """A path with `{task}` replaced by this task's index."""
    return template.replace("{task}", str(task_index()))


def write_ready(path: Path, host: str, port: int) -> None:
    """Host, port, pid, job and step ids, written atomically once the server accepts."""
    info = {
        "host": host,
        "port": port,
        "pid": os.getpid(),
        "job_id": os.environ.get("SLURM_JOB_ID"),
        "step_id": os.environ.get("SLURM_STEP_ID"),
        "task_id": task_index(),
        "node": socket.gethostname(),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(info))
    os.replace(temporary, path)


def add_location_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags both replica programs take for where they listen and what they write."""
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--port", type=int, help="fixed port")
    where.add_argument("--port-base", type=int, help="port = base + SLURM_PROCID (one task per replica)")
    parser.add_argument("--local", action="store_true", help="bind 127.0.0.1 only (local-process mode)")
    parser.add_argument("--ready-file", help="write readiness JSON here ({task} = SLURM_PROCID)")
    parser.add_argument("--events", help="write one JSONL event per request here ({task} = SLURM_PROCID)")
