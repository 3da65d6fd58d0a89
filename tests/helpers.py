"""Helpers shared by the project's tests: run the real CLI, count labelled engine objects."""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import docker

from dd_accept.base.events import parse_event

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


def sealed(directory: Path) -> Path:
    """A directory holding a hand-made results.json (and any other files), made a bundle as a
    run leaves it: a manifest of every file and the provenance naming it, so the readers,
    which verify a bundle before they show it, read it as they read a run's."""
    from dd_accept.base.hashing import sha256_file
    from dd_accept.reports.bundle import RunContext, provenance, write_manifest
    from dd_accept.reports.sanitize import Sanitizer

    results = json.loads((directory / "results.json").read_text())
    write_manifest(directory)
    context = RunContext(["dd-accept", "run"], 0.0, 1.0, "0" * 64, "1" * 64, [], [], [])
    statement = provenance(results, context, Sanitizer(), sha256_file(directory / "manifest.json"))
    (directory / "provenance.json").write_text(json.dumps(statement, indent=2) + "\n")
    return directory


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


def file_contents_under(root: Path, changed_since: float = 0.0) -> Iterator[tuple[Path, bytes]]:
    """Every file under root (last changed at `changed_since` or later) with its bytes, as
    it is when read.

    Other xdist workers create and remove run directories under the same state root while
    this walks it, so a file or directory that is gone by the time it is read is passed over
    (it holds nothing any more); os.walk already passes over a directory that vanished.
    """
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory, name)
            try:
                info = path.stat()
                if stat.S_ISREG(info.st_mode) and info.st_mtime >= changed_since:
                    yield path, path.read_bytes()
            except FileNotFoundError:
                continue


def _normalized(argv: list[str]) -> tuple[str, ...]:
    """A recorded command with what only a run knows (job id, node, run directory) as the plan writes it."""
    text = "\0".join(argv)
    text = re.sub(r"--jobid=\d+", "--jobid=$JOB", text)
    text = re.sub(r"\bnode1\b", "$NODE", text)
    text = re.sub(r"(run|admission-default)-[0-9a-f]{8}", r"\1-<id>", text)
    return tuple(text.split("\0"))


def assert_the_dry_run_planned_what_the_run_did(commands_file: Path, *dry_run_args: str, srun_steps: int) -> None:
    """The plan and the run agree both ways: every salloc and srun `run overload --dry-run
    ARGS` prints is in a real run's command records, and every srun the run issued is in
    the plan (a phase that starts a step without declaring it fails here)."""
    plan = run_cli("run", "overload", "--dry-run", *dry_run_args)
    assert plan.returncode == 0, plan.stderr
    planned = [shlex.split(line) for line in plan.stdout.splitlines() if line and not line.startswith("#")]
    planned = [tuple(c[c.index("srun") :]) if "srun" in c else tuple(c) for c in planned if c[0] != "scancel"]
    assert [c[0] for c in planned] == ["salloc", *["srun"] * srun_steps]
    recorded = {_normalized(json.loads(line)["argv"]) for line in commands_file.read_text().splitlines()}
    missing = [" ".join(command) for command in planned if command not in recorded]
    assert not missing, "planned but never run:\n" + "\n".join(missing)
    unplanned = sorted(" ".join(command) for command in recorded if command[:1] == ("srun",) and command not in planned)
    assert not unplanned, "run but not in the plan:\n" + "\n".join(unplanned)


def every_event_parses(bundle: Path) -> dict[str, int]:
    """Every event row a real run wrote (client, replicas) parses as its typed event (the
    node programs and the checks agree on each field); returns the count of each kind."""
    counts: Counter[str] = Counter()
    for path in sorted((bundle / "events").rglob("*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line) if line.strip() else {}
            if "kind" in row:  # admission samples and drain marks are not events
                counts[parse_event(row).KIND] += 1
    return dict(counts)
