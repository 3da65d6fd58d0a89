"""Gathering what the provenance records about a run (digests, locks, images, versions)."""

from __future__ import annotations

import json
from pathlib import Path

from dd_accept.reports.bundle import RunContext
from dd_accept.reports.digests import lock_of_environment, runtime_source_digest
from dd_accept.slurm_docker import engine
from dd_accept.slurm_docker.sut_image import harness_source_digest
from dd_accept.sut.wheelhouse import Wheel, Wheelhouse


def gather(
    raw: Path,
    wheelhouse: Wheelhouse,
    runtime: Wheel,
    node_image: str | None,
    command_line: list[str],
    started: float,
    ended: float,
) -> RunContext:
    """What the provenance records; `runtime` is the SUT wheel the profile follows (of a SUT of
    several wheels, the one holding the runtime files), `node_image` None on an existing cluster."""
    runtime_digest, runtime_files = runtime_source_digest(wheelhouse.path / runtime.file)
    freeze = raw / "node-freeze.txt"
    node_lock = freeze.read_text().split() if freeze.is_file() else []
    versions = json.loads((raw / "cluster.json").read_text()) if (raw / "cluster.json").is_file() else {}
    versions["wheelhouse_python"] = wheelhouse.python  # the interpreter the SUT's wheels were fetched for
    images = {}
    if node_image is not None:
        client = engine.connect()
        versions["docker_engine"] = engine.engine_version(client)
        images[node_image] = engine.image_id(client, node_image)
    return RunContext(
        command_line=command_line,
        started=started,
        ended=ended,
        harness_source_digest=harness_source_digest(),
        runtime_source_digest=runtime_digest,
        runtime_files=runtime_files,
        runtime_wheel=runtime.file,
        host_lock=lock_of_environment(),
        node_lock=sorted(line for line in node_lock if "==" in line or " @ " in line),
        images=images,
        versions=versions,
    )
