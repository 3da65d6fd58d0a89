"""Helpers shared by the project's tests: run the real CLI, count labelled engine objects."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import docker

LABEL = "io.dd-accept.cluster"


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """The installed console script's code path, in a child process, as a user runs it."""
    merged = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "dd_accept.harness.cli", *args],
        capture_output=True,
        text=True,
        env=merged,
        timeout=timeout,
        check=False,
    )


def labelled_objects(name: str | None = None) -> list[str]:
    """Containers, networks and volumes carrying the dd-accept label (of one cluster or all).

    Tests poll this while a teardown runs, so a container vanishing mid-listing is expected.
    """
    client = docker.from_env()
    selector = {"label": LABEL if name is None else f"{LABEL}={name}"}
    found = [f"container {c.name}" for c in client.containers.list(all=True, filters=selector, ignore_removed=True)]
    found += [f"network {n.name}" for n in client.networks.list(filters=selector)]
    found += [f"volume {v.name}" for v in client.volumes.list(filters=selector)]
    return found


def files_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []
