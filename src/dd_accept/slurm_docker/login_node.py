"""An existing Slurm cluster, driven from its login node, behind the docker cluster's interface.

The scenarios only ask a cluster to run commands (recorded), to start commands in the
background, for paths in a shared directory and for where the SUT lives on the nodes. Here
those are local processes on the login node (salloc, srun, scancel on PATH), the `--run-dir`
every node mounts, and a SUT virtual environment installed into that directory; commands a
scenario runs "on a node" become `srun --overlap` steps in the allocation holding that node.
So the very same scenario code judges a SUT on a real cluster.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import Field, dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import dd_accept
from dd_accept.base.errors import ClusterError, EnvironmentProblem, UsageError
from dd_accept.base.options import flag
from dd_accept.base.shown_paths import shown_path
from dd_accept.base.state import file_lock
from dd_accept.slurm_docker import step_exit
from dd_accept.slurm_docker.cluster_options import ClusterOptions
from dd_accept.slurm_docker.layout import NodeLayout
from dd_accept.slurm_docker.records import CommandLog, CommandRecord, decode, tail, utc_now_iso
from dd_accept.slurm_docker.spec import CONTROLLER
from dd_accept.slurm_docker.status import reported_versions
from dd_accept.slurm_docker.step_exit import StepExit
from dd_accept.slurm_docker.sut_image import node_files, node_source_digest

if TYPE_CHECKING:
    from dd_accept.sut.wheelhouse import Wheelhouse

SLURM_COMMANDS = ("salloc", "srun", "scancel", "squeue", "sinfo", "scontrol")
LOGIN = "login"  # how records name the login node


def missing_slurm_commands(path: str | None = None) -> list[str]:
    return [command for command in SLURM_COMMANDS if shutil.which(command, path=path) is None]


def check_run_dir(run_dir: Path) -> Path:
    """An absolute, existing, writable directory, or a usage error saying which it is not."""
    shown = shown_path(run_dir)
    if not run_dir.is_absolute():
        raise UsageError(f"--run-dir must be an absolute path every node sees, got a relative one ({shown})")
    if not run_dir.is_dir():
        raise UsageError(f"--run-dir {shown}: no such directory (it must exist and be shared by every node)")
    probe = run_dir / f".dd-accept-write-{uuid.uuid4().hex[:8]}"
    try:
        probe.write_text("ok")
        probe.unlink()
    except OSError:
        raise UsageError(f"--run-dir {shown} is not writable") from None
    return run_dir


def open_existing(options: ClusterOptions, spell: Callable[[Field[Any]], str] = flag) -> ExistingCluster:
    """The login node's cluster, once its preconditions hold: Slurm's commands on PATH and a
    usable run directory. Every failure is a usage error naming the option to fix, spelled
    the way the caller's front end spells it (`spell`)."""
    fields = ClusterOptions.__dataclass_fields__
    mode_flag, run_dir_flag = f"{spell(fields['mode'])} existing", spell(fields["run_dir"])
    missing = missing_slurm_commands()
    if missing:
        raise UsageError(
            f"{mode_flag} needs Slurm's commands on PATH (this machine must be a login node); "
            f"missing: {', '.join(missing)}"
        )
    if options.run_dir is None:
        raise UsageError(f"{mode_flag} needs {run_dir_flag} DIR, a directory every node of the cluster shares")
    return ExistingCluster(run_dir=check_run_dir(Path(options.run_dir)), options=options)


# Run by a one-task job: read the marker (waiting up to $3 seconds for it), print it and write
# it back to the reply file. Exit 0 whatever it found: srun's own failure is told apart.
SHARED_MARKER_SCRIPT = (
    'i=0; while [ "$i" -lt "$3" ]; do '
    'if [ -r "$1" ]; then cat "$1"; cat "$1" > "$2" 2>/dev/null; exit 0; fi; '
    "sleep 1; i=$((i+1)); done; exit 0"
)


@dataclass
class ExistingCluster:
    """A Slurm cluster this machine is a login node of; see the module docstring."""

    run_dir: Path
    options: ClusterOptions = field(default_factory=ClusterOptions)
    name: str = "existing"
    records: CommandLog = field(default_factory=CommandLog)
    layout: NodeLayout | None = None
    allocation_timeout: float = 3600.0  # a shared cluster may queue the allocation for a while
    may_lose_nodes: ClassVar[bool] = False  # dd-accept never takes a site's node down
    _jobs_by_node: dict[str, str] = field(default_factory=dict)
    _children: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def host_shared_dir(self) -> Path:
        return self.run_dir

    @property
    def nodes(self) -> list[str]:
        return sorted(self._jobs_by_node)

    @property
    def salloc_args(self) -> tuple[str, ...]:
        return self.options.salloc_args()

    @property
    def srun_args(self) -> tuple[str, ...]:
        return self.options.srun_args

    @property
    def time_limit(self) -> str | None:
        return self.options.time

    def shared_path(self, *parts: str) -> tuple[str, Path]:
        path = self.run_dir.joinpath(*parts)
        return str(path), path

    def allocated(self, job_id: str, nodes: Sequence[str]) -> None:
        for node in nodes:
            self._jobs_by_node[node] = job_id

    # ---- commands -----------------------------------------------------------------------
    def _on_node(self, argv: Sequence[str], node: str) -> list[str]:
        if node in (CONTROLLER, LOGIN):
            return list(argv)
        job = self._jobs_by_node.get(node)
        if job is None:
            raise ClusterError(f"no allocation of this run holds node {node}; cannot run a command there")
        return ["srun", f"--jobid={job}", "--overlap", "-N1", "-n1", f"--nodelist={node}", *self.srun_args, *argv]

    def exec(
        self,
        argv: Sequence[str],
        *,
        node: str = CONTROLLER,
        timeout: float = 60.0,
        environment: Mapping[str, str] | None = None,
    ) -> CommandRecord:
        """Run a command on the login node (or as a step on a compute node); always recorded."""
        command = self._on_node(argv, node)
        start, began = utc_now_iso(), time.monotonic()
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **(environment or {})},
            start_new_session=True,
        )
        timed_out = False
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(process.pid, signal.SIGKILL)  # this command's own process group
            out, err = process.communicate()
        stdout = decode(out)
        record = CommandRecord(
            argv=tuple(command),
            node=LOGIN if node == CONTROLLER else node,
            start=start,
            duration_s=round(time.monotonic() - began, 4),
            exit_code=None if timed_out else process.returncode,
            stdout_tail=tail(stdout),
            stderr_tail=tail(decode(err)),
            timed_out=timed_out,
            stdout=stdout,
        )
        return self.records.add(record)

    def start_detached(
        self,
        report_dir: str,
        argv: Sequence[str],
        *,
        node: str = CONTROLLER,
        environment: Mapping[str, str] | None = None,
    ) -> None:
        """Start a command through the packaged `dd-bg`, which reports through `report_dir`."""
        script = resources.files("dd_accept.slurm_docker").joinpath("recipe", "dd-bg")
        child = subprocess.Popen(
            ["bash", str(script), report_dir, *self._on_node(argv, node)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **(environment or {})},
            start_new_session=True,
        )
        self._children.append(child)

    def step_exit(self, step: str, node: str) -> StepExit | None:
        """How `step` ended, from the site's accounting (`sacct`); None where it keeps none."""
        del node
        record = self.exec(["sacct", "-n", "-P", "-o", "ExitCode,End,State", "-j", step], timeout=30)
        return step_exit.from_sacct(record.stdout) if record.ok else None

    def signals_sent(self, step: str, node: str, signal: int) -> tuple[float, ...] | None:
        """A site's slurmd logs are not readable from the login node: unknown (None), not none
        delivered. A stop's count is then scancel's own (`step_exit.signal_requests`), or the
        queue's word (`Allocation.later_job_pending`)."""
        del step, node, signal
        return None

    def daemon_logs(self, lines: int = 2000) -> dict[str, str]:
        """Slurm's daemon logs are the site's, not readable from a login node: none collected."""
        return {}

    def versions(self) -> dict[str, str]:
        """What the site's cluster reports (the same recorded commands as the docker cluster's)."""
        return reported_versions(self)

    def lose_node(self, node: str) -> CommandRecord:
        raise UsageError(f"dd-accept never takes down a node of a site's cluster ({node})")

    restore_node = lose_node

    def close(self) -> None:
        """Reap the background launchers this object started (they end with their allocation)."""
        for child in self._children:
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
        self._children.clear()

    # ---- the SUT on the nodes -----------------------------------------------------------
    def install_sut(self, wheelhouse: Wheelhouse) -> NodeLayout:
        """Install the SUT (offline, from the wheelhouse) and dd-accept's in-cluster code into
        the shared run directory, once per SUT and harness version (keyed by both digests)."""

        key = f"{wheelhouse.digest[:16]}-{node_source_digest()[:16]}"
        base = self.run_dir / "dd-accept-sut" / key
        layout = NodeLayout(venv=str(base / "venv"), harness_dir=str(base / "harness"), sut_only=str(base / "sut-only"))
        base.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(base.parent / ".install.lock"):
            if not (base / "installed").is_file():
                shutil.rmtree(base, ignore_errors=True)
                self._install(wheelhouse, base, layout)
                (base / "installed").write_text(key)
        self.layout = layout
        return layout

    def _install(self, wheelhouse: Wheelhouse, base: Path, layout: NodeLayout) -> None:

        found = self.exec(["python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], timeout=30)
        if found.ok and found.stdout.strip() != wheelhouse.python:
            raise EnvironmentProblem(
                f"this login node's python3 is {found.stdout.strip()}; on a site's cluster dd-accept installs the "
                f"SUT's wheels for Python {wheelhouse.python}, the interpreter its venv is built with"
            )
        shutil.copytree(wheelhouse.path, base / "wheelhouse")
        root = Path(dd_accept.__file__).parent
        for path in node_files():
            target = Path(layout.harness_dir) / "dd_accept" / path.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
        steps = [
            ["python3", "-m", "venv", layout.venv],
            [
                layout.python,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-index",
                "--disable-pip-version-check",
                "--find-links",
                str(base / "wheelhouse"),
                *wheelhouse.install_requirements(),
            ],
        ]
        for argv in steps:
            record = self.exec(argv, timeout=600)
            if not record.ok:
                raise ClusterError(f"installing the SUT into the run directory failed: {record.describe()}")
        sut_wheels = [str(base / "wheelhouse" / wheel.file) for wheel in wheelhouse.sut_wheels]
        target = ["--no-deps", "--no-index", "--target", str(layout.sut_only), *sut_wheels]
        record = self.exec([layout.python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *target])
        if not record.ok:
            raise ClusterError(f"installing the SUT's own packages failed: {record.describe()}")
        freeze = self.exec([layout.python, "-m", "pip", "freeze", "--all"], timeout=120)
        Path(layout.venv, "dd-accept-freeze.txt").write_text(freeze.stdout)
        Path(layout.site_packages, "dd_accept.pth").write_text(layout.harness_dir + "\n")

    def node_freeze(self) -> str:
        if self.layout is None:
            return ""
        try:
            return Path(self.layout.venv, "dd-accept-freeze.txt").read_text()
        except OSError:
            return ""

    def check_shared(self, timeout: float = 120.0, tries: int = 5) -> None:
        """Prove the run directory is the same on a compute node: a one-task job reads a marker
        the login node just wrote and writes it back beside it. Raises a usage error naming the
        directory when it is not.

        Either way back proves it: the job's output (srun forwards it) or the reply file (a
        site's srun may lose a short task's output; the file cannot be mistaken). The job looks
        for the marker `tries` times a second apart, since a network filesystem may show a
        file created on another host a moment later."""
        token = uuid.uuid4().hex[:8]
        marker = self.run_dir / f".dd-accept-shared-{token}"
        reply = self.run_dir / f".dd-accept-shared-{token}.reply"
        marker.write_text(marker.name)
        try:
            argv = ["srun", "-N1", "-n1", "--job-name=dd-accept-check", *self.salloc_args]
            if self.time_limit:
                argv.append(f"--time={self.time_limit}")
            # The task itself always exits 0: a failing srun is a scheduling problem, no marker
            # read back means the compute node does not see the file.
            read = [
                "sh", "-c", SHARED_MARKER_SCRIPT, "read-marker", str(marker), str(reply), str(tries),
            ]  # fmt: skip
            record = self.exec([*argv, *self.srun_args, *read], timeout=timeout + tries)
            replied = reply.read_text() if reply.is_file() else ""
        finally:
            marker.unlink(missing_ok=True)
            reply.unlink(missing_ok=True)
        if not record.ok:
            raise UsageError(f"--run-dir check: a one-task job could not run: {record.describe()}")
        if marker.name not in (record.stdout.strip(), replied.strip()):
            printed = "printed nothing" if not record.stdout.strip() else "printed something else"
            raise UsageError(
                f"--run-dir {shown_path(self.run_dir)} is not shared with the compute nodes (a job could not read it "
                f"there within {tries} s; it {printed} and wrote nothing back)"
            )
