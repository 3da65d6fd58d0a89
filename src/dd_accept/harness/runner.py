"""`dd-accept run`: prepare the SUT, run scenarios under pytest, show progress, judge.

The scenarios are pytest tests (`dd_accept.acceptance`), so the runner starts pytest in a
child process with the options translated, and follows the progress file the scenarios
write. The child owns the cluster (its session fixture starts and removes it), so Ctrl-C
is passed on to it and the runner waits for its cleanup before exiting.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.table import Table

from dd_accept.acceptance.request import RunRequest
from dd_accept.acceptance.scenarios import BY_NAME
from dd_accept.base.child_processes import stop_child
from dd_accept.base.errors import EXIT_CHECK_FAILED, EXIT_PASS, EXIT_USAGE, EnvironmentProblem, UsageError
from dd_accept.base.hashing import sha256_file
from dd_accept.base.results import load_results
from dd_accept.base.serving_names import SUMMARY_COLUMNS, serving_rows, shown
from dd_accept.base.shown_paths import shown_path
from dd_accept.base.slurm_releases import RELEASES
from dd_accept.base.state import state_root
from dd_accept.harness.console import ConsoleListener
from dd_accept.harness.github_actions import annotate
from dd_accept.harness.provenance import gather
from dd_accept.reports.audit import audit
from dd_accept.reports.bundle import write_bundle
from dd_accept.reports.sanitize import Sanitizer
from dd_accept.reports.signing import load_private_key
from dd_accept.slurm_docker import engine
from dd_accept.slurm_docker.login_node import open_existing
from dd_accept.slurm_docker.sut_image import build_node_image
from dd_accept.sut.profile import choose_profile, load_profile
from dd_accept.sut.spec import SutSpec
from dd_accept.sut.wheelhouse import DEFAULT_NODE, build_wheelhouse


def default_out(scenario: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path("evidence") / f"{stamp}-{scenario.replace(',', '+')}"


def prepare_out(out: Path) -> Path:
    """A fresh output directory: an existing non-empty one is never overwritten."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"--out {shown_path(out)} already exists and is not empty; choose another directory")
    out.mkdir(parents=True, exist_ok=True)
    return out.resolve()


def write_request(request: RunRequest, directory: Path) -> Path:
    """The validated request as the pytest child reads it (`--dd-request`): one JSON document,
    readable by this user only (it carries the client headers), with the paths in it made
    absolute (the child runs in another directory)."""
    cluster = request.cluster
    if cluster.run_dir:
        cluster = replace(cluster, run_dir=str(Path(cluster.run_dir).resolve()))
    profile = str(Path(request.profile).resolve()) if request.profile else None
    path = directory / "request.json"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(replace(request, cluster=cluster, profile=profile).to_json())
    return path


def _pytest_argv(request: RunRequest, out: Path, request_file: Path) -> list[str]:
    """The pytest child's command line: the one entry test, the request it runs, where it
    writes, and how many workers and nodes it takes."""
    names = request.scenarios()
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rN", "-c", os.devnull]
    argv += ["--rootdir", str(out), "--pyargs", ENTRY_TEST]
    argv += ["--dd-request", str(request_file), "--dd-out", str(out)]
    # One node per worker, and a node to lose for a scenario that loses one (health).
    spare = max(BY_NAME[name].spare_nodes for name in names)
    workers = min(request.parallel, len(names)) if len(names) > 1 and request.parallel > 1 else 1
    if workers > 1:
        argv += ["-n", str(workers), "--dist", "load"]
    argv += ["--dd-nodes", str(workers + spare)]
    return argv


ENTRY_TEST = "dd_accept.acceptance.test_scenarios"  # one parametrized test: a scenario per parameter


class ProgressFollower:
    """Reads new lines of the scenarios' progress file and shows them."""

    def __init__(self, path: Path, console: ConsoleListener) -> None:
        self.path = path
        self.console = console
        self.offset = 0
        self.last_phase: dict[str, str] = {}

    def poll(self) -> None:
        try:
            with open(self.path) as handle:
                handle.seek(self.offset)
                lines = handle.readlines()
                self.offset = handle.tell()
        except FileNotFoundError:
            return
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            self._show(event)

    def _show(self, event: dict[str, Any]) -> None:
        scenario, phase = event.get("scenario", "?"), event.get("phase", "?")
        numbers = [
            f"{label} {event[key]}"
            for key, label in (
                ("done", "done"),
                ("requests", "requests"),
                ("rate_limited", "429s"),
                ("limit", "admission limit"),
                ("failovers", "failovers"),
            )
            if event.get(key) is not None
        ]
        text = f"{scenario}: {phase}" + (f" — {', '.join(numbers)}" if numbers else "")
        text += f" [{event.get('elapsed_s', 0):.0f}s]"
        if self.last_phase.get(scenario) != phase:
            self.last_phase[scenario] = phase
            self.console.on_step(text)
        else:
            self.console.on_detail(text)


def parse_sut(text: str, profile: str | None) -> SutSpec:
    """`--sut`, validated before anything is fetched: a local SUT's wheels are known by their
    file names, so one none of whose wheels has a built-in profile (and no --profile) is
    refused here, as is a directory holding one project in two versions."""
    spec = SutSpec.parse(text)
    if not profile and spec.local_wheels():
        choose_profile(spec.local_wheels(), None, spec.display)
    return spec


def run(request: RunRequest, console: ConsoleListener) -> int:

    request.scenarios()  # validate before anything is created
    spec = parse_sut(request.sut, request.profile)
    sign_key = None
    if request.sign_key is not None:
        sign_key = load_private_key(request.sign_key)
    given = load_profile(Path(request.profile)) if request.profile else None
    existing = _existing_cluster(request)
    client = engine.connect() if existing is None else None
    out = prepare_out(request.out or default_out(request.scenario))
    raw = out.with_name(f".{out.name}.raw")  # never part of the bundle; removed below
    started_wall, started = time.time(), time.monotonic()
    try:
        with console:
            release = request.cluster.release
            wheelhouse = build_wheelhouse(spec, console, RELEASES[release] if existing is None else DEFAULT_NODE)
            choice = choose_profile(wheelhouse.sut_wheels, given, spec.display)
            console.on_step(choice.describe())
            if existing is None:
                image = build_node_image(client, wheelhouse, console, release).tag
            else:
                image = None
                console.on_step(f"checking that {existing.run_dir.name} is shared with the compute nodes")
                existing.check_shared()
            console.on_step(f"running {', '.join(request.scenarios())} against {spec.display}")
            raw.mkdir(parents=True, exist_ok=True)
            code = _run_pytest(request, raw, console)
            if not (raw / "results.json").is_file():
                tail = (raw / "pytest.log").read_text(errors="replace").strip().splitlines()[-3:]
                raise EnvironmentProblem(f"the scenarios produced no results (pytest exit {code}): {' | '.join(tail)}")
            if existing is not None:  # the runner's own cluster commands (the shared-directory check)
                with open(raw / "commands.jsonl", "a") as handle:
                    handle.write(existing.records.to_jsonl())
            console.on_step("writing the evidence bundle")
            run_dir = Path(request.cluster.run_dir) if request.cluster.run_dir else None
            runtime = choice.wheel or wheelhouse.sut_wheels[0]
            _write_evidence(raw, out, wheelhouse, runtime, image, started_wall, sign_key, run_dir)
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)  # nothing half-written is left behind
        out.with_name(out.name + ".tar.gz").unlink(missing_ok=True)
        raise
    finally:
        shutil.rmtree(raw, ignore_errors=True)
    return _report(out, console, time.monotonic() - started)


def _existing_cluster(request: RunRequest):
    """The login-node cluster of `--cluster existing`, validated (exit 2 before anything starts)."""
    if request.cluster.mode != "existing":
        return None

    return open_existing(request.cluster)


def _write_evidence(
    raw: Path,
    out: Path,
    wheelhouse: Any,
    runtime: Any,
    image: str | None,
    started: float,
    sign_key: Any = None,
    run_dir: Path | None = None,
) -> None:

    roots = {str(out): "<bundle>", str(raw): "<run>", str(Path.cwd()): "<cwd>", str(state_root()): "<state>"}
    if run_dir is not None:
        roots[str(run_dir)] = "<run-dir>"
    sanitizer = Sanitizer(path_roots=roots)
    context = gather(raw, wheelhouse, runtime, image, ["dd-accept", *sys.argv[1:]], started, time.time())
    write_bundle(raw, out, context, sanitizer, sign_key)


def child_environment() -> dict[str, str]:
    """The environment for the scenarios' pytest: this one without inherited pytest state.

    A run started from inside another pytest session (a test of dd-accept, a CI job under
    xdist) would otherwise inherit its worker id and run id, take the outer session's
    cluster name, and remove that cluster as "stale" when it starts its own.
    """
    return {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}


def die_with_parent() -> Callable[[], None]:
    """For a child's `preexec_fn`: the kernel sends it SIGTERM when this process ends, however
    it ends (PR_SET_PDEATHSIG), so a `kill -9` of the CLI does not leave its scenarios running
    unseen; the cluster they started is then removed by its reaper."""
    parent = os.getpid()
    libc = ctypes.CDLL(None, use_errno=True)

    def set_death_signal() -> None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent was gone before the signal was armed
            os._exit(EXIT_USAGE)  # nobody is left to read it: the run could not go on

    return set_death_signal


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _run_pytest(request: RunRequest, out: Path, console: ConsoleListener) -> int:
    log = open(out / "pytest.log", "w")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        _pytest_argv(request, out, write_request(request, out)),
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=out,
        env=child_environment(),
        preexec_fn=die_with_parent(),
    )
    follower = ProgressFollower(out / "progress.jsonl", console)
    try:
        while process.poll() is None:
            follower.poll()
            time.sleep(0.25)
        follower.poll()
        return process.returncode
    except KeyboardInterrupt:
        console.info("interrupted: stopping the scenarios and removing the cluster…")
        stop_child(process, signal.SIGINT, grace_s=120)
        raise
    finally:
        log.close()


def _report(out: Path, console: ConsoleListener, seconds: float) -> int:

    results = load_results(out / "results.json")
    table = Table(title=f"dd-accept {results['verdict'].upper()} — {results['sut'].get('spec', '?')}")
    for column in ("check", "verdict", "expected", "observed"):
        table.add_column(column, overflow="fold")
    errors = []
    for scenario in results["scenarios"]:
        if scenario.get("error"):
            errors.append(f"{scenario['name']}: {scenario['error']}")
        for check in scenario["checks"]:
            colour = {"pass": "green", "fail": "red"}.get(check["verdict"], "yellow")
            table.add_row(check["id"], f"[{colour}]{check['verdict']}[/{colour}]", check["expected"], check["observed"])
    console.table(table)
    if console.out.is_terminal:  # a person: metrics down the side, a few scenarios or phases across
        for part in serving_tables_for(results, console.out.width):
            console.table(part)
    else:  # a CI log: one line per scenario and phase, every metric on it
        console.table(serving_table(results))
    for wheel in results["sut"].get("wheels", []):
        print(f"{wheel['sha256']}  {wheel['file']}")
    findings = audit([out])
    for finding in findings:
        print(f"audit: {finding}", file=sys.stderr)
    print(f"evidence: {out.name}/ and {out.name}.tar.gz ({seconds:.0f}s); check it with `dd-accept verify`")
    annotate(results, out.name)
    for error in errors:
        print(f"dd-accept: error: scenario {error}", file=sys.stderr)
    if findings:
        print(f"dd-accept: the bundle failed its audit ({len(findings)} finding(s)): the run fails", file=sys.stderr)
    if errors:
        code = EXIT_USAGE
    elif findings:
        code = EXIT_CHECK_FAILED
    else:
        code = EXIT_PASS if results["verdict"] == "pass" else EXIT_CHECK_FAILED
    console.emit(run_summary(results, out, findings, seconds, code))
    return code


SERVING_TITLE = "serving metrics (vLLM bench serve's names; every one is in results.json)"


def serving_table(results: dict[str, Any]) -> Table:
    """Each scenario's and phase's serving metrics, as summary.md shows them (no rows when no
    load client ran)."""
    table = Table(title=SERVING_TITLE)
    table.add_column("scenario / phase")
    for _, header in SUMMARY_COLUMNS:
        table.add_column(header, justify="right")
    for label, metrics in serving_rows(results):
        table.add_row(label, *(shown(name, metrics.get(name)) for name, _ in SUMMARY_COLUMNS))
    return table


def serving_tables_for(results: dict[str, Any], width: int) -> list[Table]:
    """The serving metrics turned on their side for a terminal `width` columns wide: one row
    per metric and as many scenarios or phases across as fit, in as many tables as it takes."""
    rows = serving_rows(results)
    across = max(1, (width - 18) // 15)
    tables = []
    for start in range(0, len(rows), across):
        part = rows[start : start + across]
        table = Table(title=SERVING_TITLE)
        table.add_column("metric")
        for label, _ in part:
            table.add_column(label, justify="right")
        for name, header in SUMMARY_COLUMNS:
            table.add_row(header, *(shown(name, metrics.get(name)) for _, metrics in part))
        tables.append(table)
    return tables


def run_summary(results: dict[str, Any], out: Path, findings: list[Any], seconds: float, code: int) -> dict[str, Any]:
    """The `dd-accept/run/v1` document (`run --json`): what a CI job needs without opening
    the bundle, and the digests that tie it to the bundle it names."""
    archive = out.with_name(out.name + ".tar.gz")
    summary: dict[str, Any] = {
        "schema": "dd-accept/run/v1",
        "verdict": results["verdict"],
        "exit_status": code,
        "seconds": round(seconds, 3),
        "sut": results["sut"],
        "scenarios": [
            {"name": s["name"], "verdict": s["verdict"], "error": s["error"], "checks": s["checks"]}
            for s in results["scenarios"]
        ],
        "bundle": {
            "directory": str(as_given(out)),
            "archive": str(as_given(archive)),
            "manifest_sha256": sha256_file(out / "manifest.json"),
            "archive_sha256": sha256_file(archive),
        },
        "audit_findings": [finding.to_json() for finding in findings],
    }
    if "cluster" in results:
        summary["cluster"] = results["cluster"]
    return summary


def as_given(path: Path) -> Path:
    """`path` relative to the working directory when it is under it, as the user named it."""
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path
