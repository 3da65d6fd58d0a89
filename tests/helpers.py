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
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import docker

from dd_accept.base.events import parse_event

REPOSITORY = Path(__file__).parents[1]

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


def _normalized(argv: Sequence[str], job: str, node: str, helpers: Sequence[str] = ()) -> tuple[str, ...]:
    """A recorded command with what only a run knows (job ids, nodes, run directories,
    canary) as the plan writes it; `helpers` are jobs of the scenario's own on another node
    (health's replicas on the node to lose or to preempt), any other docker node that node."""
    text = "\0".join(argv)
    text = text.replace(f"--jobid={job}\0", "--jobid=$JOB\0")
    text = re.sub(rf"\b{re.escape(node)}\b", "$NODE", text)
    for helper in helpers:
        text = text.replace(f"--jobid={helper}\0", "--jobid=$REPLICAS_JOB\0")
    if helpers:
        text = re.sub(r"\bnode\d+\b", "$REPLICAS_NODE", text)
    text = re.sub(r"(/runs/[a-z][a-z-]*)-[0-9a-f]{8}\b", r"\1-<id>", text)
    text = re.sub(r"(--(?:response-)?canary\0)[0-9a-f]{8,32}\b", r"\1<per-run canary>", text)
    return tuple(text.split("\0"))


def _runs_named(row: Sequence[str]) -> set[str]:
    return set(re.findall(r"/runs/[a-z][a-z-]*-[0-9a-f]{8}\b", " ".join(row)))


def recorded_by_job(records: list[dict]) -> dict[str, set[tuple[str, ...]]]:
    """A run's allocations and what each submitted to Slurm, normalized as a plan writes
    them, by the job name its salloc asked for: its salloc and sruns, the drills it ran on
    the controller's host for it (by the run directories they share with its sruns), the
    `scontrol update`s of its node, and a job of its own on another node (`--exclude` of its
    node), with that job's salloc; by job id too."""
    rows = [tuple(row["argv"]) for row in records]
    jobs: dict[str, tuple[str, ...]] = {}
    for row, record in zip(rows, records, strict=True):
        granted = re.search(r"Granted job allocation (\d+)", record.get("stderr_tail", ""))
        if row[0] == "salloc" and granted:
            jobs[granted.group(1)] = row

    def node_of(job: str) -> str | None:
        nodes = Counter(
            a.split("=", 1)[1] for r in rows if f"--jobid={job}" in r for a in r if a.startswith("--nodelist=")
        )
        return nodes.most_common(1)[0][0] if nodes else None

    def name_of(salloc: tuple[str, ...]) -> str:
        return next(a.split("=", 1)[1] for a in salloc if a.startswith("--job-name="))

    found: dict[str, set[tuple[str, ...]]] = {}
    for job, salloc in jobs.items():
        node = node_of(job)
        excluded = [a.split("=", 1)[1] for a in salloc if a.startswith("--exclude=")]
        if node is None or excluded:
            continue  # a helper job: recorded with the scenario job whose node it excludes
        helpers = [(j, s) for j, s in jobs.items() if f"--exclude={node}" in s]
        submitted = [
            r for r in rows if "srun" in r and any(f"--jobid={j}" in r for j in [job, *(h[0] for h in helpers)])
        ]
        runs = set().union(*map(_runs_named, submitted)) if submitted else set()
        drills = [r for r in rows if "srun" not in r and "/drills/" in " ".join(r) and _runs_named(r) & runs]
        # an administrator's change of the job's node (health's drain) and restart of the
        # controller (health's, on dd-accept's own cluster): submitted to Slurm too
        updates = [r for r in rows if r[:2] == ("scontrol", "update") and f"NodeName={node}" in r]
        updates += [r for r in rows if r[:2] == ("scontrol", "shutdown")]
        # a higher-priority job for a helper's node, not the job's own (health's preemption; the
        # helper's node is in no record of the harness's: the SUT's functions launch its steps)
        updates += [r for r in rows if r[0] == "sbatch" and helpers and f"--nodelist={node}" not in r]
        chosen = [salloc, *(s for _, s in helpers), *submitted, *drills, *updates]
        found[name_of(salloc)] = found[job] = {_normalized(r, job, node, [j for j, _ in helpers]) for r in chosen}
    return found


def planned_commands(plan: str) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    """A dry run's salloc, srun and drill commands (its `env` prefix left out: a record holds
    the argv), and apart from them those it plans only on a condition a run finds."""
    always: list[tuple[str, ...]] = []
    conditional: list[tuple[str, ...]] = []
    lines = plan.splitlines()
    for previous, line in zip(["", *lines], lines, strict=False):
        if not line or line.startswith("#"):
            continue
        words = shlex.split(line)
        if words[0] == "env":
            words = words[next(i for i, w in enumerate(words[1:], 1) if "=" not in w) :]
        scancel = words[0] == "scancel" or (words[:2] == ["bash", "-c"] and words[3:4] == ["scancel"])
        if scancel or "(launched by " in previous:  # not dd-accept's own: in no record
            continue
        (conditional if "(only if " in previous else always).append(tuple(words))
    return always, conditional


def assert_the_plan_is_what_ran(plan: str, recorded: set[tuple[str, ...]], own_job: str | None = None) -> None:
    """Both ways: every command the plan says a run submits is in the run's records, and
    every srun the run submitted is in the plan (a phase that starts a step without
    declaring it fails here). `own_job`: the job name of the scenario's allocation when a
    test made it, not the run (its salloc is then the test's, not the plan's)."""
    always, conditional = planned_commands(plan)
    always = [c for c in always if own_job is None or c[0] != "salloc" or f"--job-name={own_job}" not in c]
    missing = [" ".join(command) for command in always if command not in recorded]
    assert not missing, "planned but never run:\n" + "\n".join(missing)
    unplanned = sorted(" ".join(c) for c in recorded if c[0] != "salloc" and c not in {*always, *conditional})
    assert not unplanned, "run but not in the plan:\n" + "\n".join(unplanned)


def assert_the_dry_run_planned_what_the_run_did(
    records: Path | Iterable[Any],
    *dry_run_args: str,
    scenario: str = "overload",
    job: str | None = None,
    srun_steps: int | None = None,
) -> None:
    """`run SCENARIO --dry-run ARGS` against a real run's command records, both ways: a
    bundle's commands.jsonl, or a cluster's records (`job`: the id of the job a test
    allocated for the scenario, where the run did not allocate its own)."""
    plan = run_cli("run", scenario, "--dry-run", *dry_run_args)
    assert plan.returncode == 0, plan.stderr
    if isinstance(records, Path):
        rows = [json.loads(line) for line in records.read_text().splitlines()]
    else:
        rows = [record.to_json() for record in records]
    own = f"dd-{scenario}"
    assert_the_plan_is_what_ran(plan.stdout, recorded_by_job(rows)[job or own], own if job else None)
    if srun_steps is not None:
        always, _ = planned_commands(plan.stdout)
        assert [c[0] for c in always] == ["salloc", *["srun"] * srun_steps]


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
