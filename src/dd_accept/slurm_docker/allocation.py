"""Allocations and steps: `salloc --no-shell`, `srun` launchers in the background, `scancel`.

Drain checks depend on the difference between signalling a step's *launcher* (srun, which
turns TERM into "forcing job termination") and signalling the step itself with
`scancel --signal=TERM JOB.STEP`; so a background step keeps its launcher's PID.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from dd_accept.base.errors import ClusterError
from dd_accept.base.waiting import WaitTimeout, wait_for_finding, wait_until
from dd_accept.slurm_docker.interface import AllocationSite, Cluster
from dd_accept.slurm_docker.records import CommandRecord, tail, utc_now_iso
from dd_accept.slurm_docker.spec import CONTROLLER

_GRANTED = re.compile(r"Granted job allocation (\d+)")
_counter = itertools.count(1)


@dataclass
class BackgroundCommand:
    """A command started through `dd-bg`, which reports pid, output and exit through files."""

    cluster: Cluster
    argv: tuple[str, ...]
    node: str
    cluster_dir: str
    host_dir: Path
    start: str
    started_monotonic: float
    record: CommandRecord | None = None

    def _read(self, name: str) -> str | None:
        try:
            return (self.host_dir / name).read_text()
        except FileNotFoundError:
            return None

    def pid(self, timeout: float = 10.0) -> int:
        """The launcher's PID inside its container (e.g. the srun process)."""
        text = wait_until(
            lambda: self._read("pid"),
            lambda value: bool(value and value.strip().isdigit()),
            timeout=timeout,
            what=f"pid of `{shlex.join(self.argv)}`",
        )
        assert text is not None
        return int(text.strip())

    @property
    def finished(self) -> bool:
        return self._read("exit") is not None

    def signal(self, signal_name: str) -> CommandRecord:
        """Send a signal to the launcher process by its own PID (never by name)."""
        return self.cluster.exec(["kill", f"-{signal_name}", str(self.pid())], node=self.node, timeout=10)

    def wait(self, timeout: float = 60.0) -> CommandRecord:
        """Wait for the command to end and return (and log) its record."""
        if self.record is not None:
            return self.record
        wait_until(
            lambda: self._read("exit"),
            lambda value: value is not None and value.strip() != "",
            timeout=timeout,
            what=f"`{shlex.join(self.argv)}` to end",
        )
        return self._finish(timed_out=False)

    def _finish(self, timed_out: bool) -> CommandRecord:
        exit_text = (self._read("exit") or "").strip()
        record = CommandRecord(
            argv=self.argv,
            node=self.node,
            start=self.start,
            duration_s=round(time.monotonic() - self.started_monotonic, 4),
            exit_code=int(exit_text) if exit_text.lstrip("-").isdigit() else None,
            stdout_tail=tail(self._read("stdout") or ""),
            stderr_tail=tail(self._read("stderr") or ""),
            timed_out=timed_out,
            background=True,
        )
        self.record = self.cluster.records.add(record)
        return record

    def stop(self) -> CommandRecord:
        """KILL a launcher still running (teardown) and record it as timed out."""
        if self.record is not None:
            return self.record
        if not self.finished:
            self.signal("KILL")
            try:
                wait_until(lambda: self.finished, bool, timeout=10, what="killed launcher to end")
            except TimeoutError:
                return self._finish(timed_out=True)
        return self._finish(timed_out=not self.finished)


def start_background(
    cluster: Cluster,
    argv: Sequence[str],
    *,
    node: str = CONTROLLER,
    environment: Mapping[str, str] | None = None,
) -> BackgroundCommand:
    name = f"cmd-{int(time.time() * 1000)}-{next(_counter)}"
    cluster_path, host_path = cluster.shared_path("commands", name)
    command = BackgroundCommand(
        cluster=cluster,
        argv=tuple(argv),
        node=node,
        cluster_dir=cluster_path,
        host_dir=host_path,
        start=utc_now_iso(),
        started_monotonic=time.monotonic(),
    )
    cluster.start_detached(cluster_path, argv, node=node, environment=environment)
    return command


def salloc_argv(
    cluster: AllocationSite, *, nodes: int, job_name: str, time_limit: str = "30:00", extra: Sequence[str] = ()
) -> list[str]:
    """The allocation request, with the site's options (partition, account, time, gres) when set."""
    limit = cluster.time_limit or time_limit
    argv = ["salloc", "--no-shell", f"--nodes={nodes}", f"--job-name={job_name}", f"--time={limit}"]
    return [*argv, *cluster.salloc_args, *extra]


def srun_argv(job_id: str, argv: Sequence[str], options: Sequence[str] = (), site: Sequence[str] = ()) -> list[str]:
    """A step in an allocation, overlapping the others, with the site's extra srun arguments."""
    return ["srun", f"--jobid={job_id}", "--overlap", *site, *options, *argv]


def scancel_argv(target: str, signal_name: str | None = None) -> list[str]:
    """`scancel` of a step or job: with a signal, to the step's tasks (not its srun), as
    the drain contract requires; without, the whole job."""
    return ["scancel", *([f"--signal={signal_name}"] if signal_name else []), target]


# scancel signals a step twice while a job submitted after the step's job is pending
# (step_exit.signal_requests; semantics test (h)). Run --interactive, it asks before each
# request it would send: answering yes once, then no to every later question (it asks again
# at end of input), sends exactly one, whatever the queue holds. Its prompts (stdout) say how
# many it would have sent; its verbose lines (stderr), how many it sent. `$0` is "scancel",
# so the record reads as the scancel it runs.
_ONE_REQUEST = '{ echo y; yes n; } | scancel --interactive --verbose "$@"'


def scancel_once_argv(target: str, signal_name: str) -> list[str]:
    """`scancel --signal=SIGNAL JOB.STEP` that sends its request once: the drain contract's one
    TERM, which plain scancel repeats on a cluster with a later job pending."""
    return ["bash", "-c", _ONE_REQUEST, "scancel", f"--signal={signal_name}", target]


# How long a step whose task has ended may stay listed while its node finishes it (CI once saw
# a cat's step still listed under proctrack/cgroup on 24.11): one still listed after this was left.
STEP_END_GRACE_S = 5.0
# How a job looks in squeue once it has ended (until MinJobAge): NODE_FAIL after a node loss,
# PREEMPTED after a higher-priority job took its node (slurm_docker.preemption).
ENDED_JOB_STATES = frozenset({"GONE", "COMPLETED", "CANCELLED", "NODE_FAIL", "FAILED", "TIMEOUT", "PREEMPTED"})


NODE_LIST_WAIT_S = 30.0


# Steps Slurm runs for a job itself, not the job's own work: never a leak, never a stop's target.
SLURM_OWN_STEPS = (".extern", ".batch", ".interactive")


def _still_listed(listed: Callable[[], list[str]], grace_s: float, what: str) -> list[str]:
    """What `listed` (steps squeue shows) still shows `grace_s` on: a step whose task has ended
    stays listed a moment while its node finishes it, and is no step left running for that."""
    gone = wait_for_finding(listed, lambda steps: not steps, timeout=grace_s, what=f"{what} to leave the queue")
    return listed() if gone is None else []


def allocated_hosts(cluster: Cluster, job_id: str, timeout: float = NODE_LIST_WAIT_S) -> list[str]:
    """The hosts of a granted allocation, from `squeue`, asked again until it names them.

    Right after salloc reports the grant, a busy slurmctld may time out the query or list
    the job without its nodes yet (CI saw an allocation recorded with none, and the scenario
    failed on its first step as dd-accept's own error); each query is recorded."""

    def node_list() -> str:
        record = cluster.exec(["squeue", "-h", "-j", job_id, "-o", "%N"], timeout=10)
        return record.stdout.strip() if record.ok else ""

    try:
        listed = wait_until(node_list, bool, timeout=timeout, what=f"the nodes of allocation {job_id}", interval=0.5)
    except WaitTimeout as error:
        reason = f"allocation {job_id} was granted but squeue names no node for it within {timeout:g} s"
        raise ClusterError(reason) from error
    hosts = cluster.exec(["scontrol", "show", "hostnames", listed], timeout=10).stdout.split()
    if not hosts:
        raise ClusterError(f"allocation {job_id}: scontrol expands its node list {listed!r} to no host")
    return hosts


@dataclass
class Allocation:
    """A job allocation held with `salloc --no-shell`; steps run in it with `srun`."""

    cluster: Cluster
    job_id: str
    nodes: tuple[str, ...] = ()
    background: list[BackgroundCommand] = field(default_factory=list)

    @classmethod
    def acquire(
        cls,
        cluster: Cluster,
        *,
        nodes: int = 1,
        job_name: str = "dd-accept",
        time_limit: str = "30:00",
        extra: Sequence[str] = (),
        timeout: float | None = None,
    ) -> Self:
        argv = salloc_argv(cluster, nodes=nodes, job_name=job_name, time_limit=time_limit, extra=extra)
        record = cluster.exec(argv, timeout=timeout or cluster.allocation_timeout)
        match = _GRANTED.search(record.stderr_tail + record.stdout_tail)
        if not record.ok or match is None:
            raise ClusterError(f"allocation failed: {record.describe()}")
        job_id = match.group(1)
        try:
            hosts = allocated_hosts(cluster, job_id)
        except ClusterError:
            cluster.exec(scancel_argv(job_id), timeout=10)  # never leave a job nobody holds
            raise
        cluster.allocated(job_id, hosts)
        return cls(cluster=cluster, job_id=job_id, nodes=tuple(hosts))

    @property
    def first_node(self) -> str:
        if not self.nodes:
            raise ClusterError(f"allocation {self.job_id} has no nodes recorded")
        return self.nodes[0]

    def srun_argv(self, argv: Sequence[str], options: Sequence[str] = ()) -> list[str]:
        """`srun` for a step in this allocation (overlapping the others), as the harness runs it."""
        return srun_argv(self.job_id, argv, options, self.cluster.srun_args)

    def srun(self, argv: Sequence[str], *, options: Sequence[str] = (), timeout: float = 60.0) -> CommandRecord:
        return self.cluster.exec(self.srun_argv(argv, options), timeout=timeout)

    def start_step(
        self,
        argv: Sequence[str],
        *,
        options: Sequence[str] = (),
        environment: Mapping[str, str] | None = None,
    ) -> BackgroundCommand:
        """Launch `srun` in the background on the controller; its PID is the launcher's."""
        command = start_background(self.cluster, self.srun_argv(argv, options), environment=environment)
        self.background.append(command)
        return command

    def steps(self) -> list[str]:
        """Running step ids (JOB.STEP) of this allocation, excluding Slurm's own extern step."""
        return [s for s in self._step_lines("%i").split() if not s.endswith(SLURM_OWN_STEPS)]

    def _step_lines(self, fields: str, attempts: int = 3) -> str:
        """squeue's lines for this job's steps, asked again where squeue failed: a busy
        slurmctld times a query out, and its empty output read as 'no step' would let a step
        left running pass for gone (the likely cause of a leak check that saw none in CI, on a
        fresh clone with five workers). Failing every time is the harness's error, never an
        empty list."""
        for attempt in range(attempts):
            record = self.cluster.exec(["squeue", "-h", "-s", "-j", self.job_id, "-o", fields], timeout=10)
            if record.ok:
                return record.stdout
            if "Invalid job id" in record.stderr_tail:  # the job has left Slurm's memory: no step runs
                return ""
            time.sleep(0.5 * (attempt + 1))
        raise ClusterError(f"squeue could not list the steps of job {self.job_id}: {record.describe()}")

    def steps_by_name(self) -> dict[str, list[str]]:
        """Running steps grouped by their `-J` name (e.g. "proxy", "replicas")."""
        named: dict[str, list[str]] = {}
        for line in self._step_lines("%i %j").splitlines():
            step, _, name = line.partition(" ")
            if step and not step.endswith(SLURM_OWN_STEPS):
                named.setdefault(name.strip(), []).append(step)
        return named

    def steps_left(self, name: str, grace_s: float = STEP_END_GRACE_S) -> list[str]:
        """The steps named `name` still listed `grace_s` after their tasks ended: what a stop
        left running. A step whose task has ended stays listed a moment while its node
        finishes it (see `release`); read once, a correct stop was blamed for that moment."""
        return _still_listed(lambda: self.steps_by_name().get(name, []), grace_s, f"the {name} step")

    def step_left(self, step: str, grace_s: float = STEP_END_GRACE_S) -> list[str]:
        """`step` (JOB.STEP) if it is still listed `grace_s` after its tasks ended (see `steps_left`)."""
        return _still_listed(lambda: [s for s in self.steps() if s == step], grace_s, f"step {step}")

    def stop_step(
        self, launcher: BackgroundCommand, name: str, signal_name: str = "TERM", timeout: float = 30.0
    ) -> CommandRecord:
        """Signal a named step's tasks with scancel (not its launcher) and wait for the launcher."""
        for step in self.steps_by_name().get(name, []):
            self.scancel_step(step, signal_name)
        try:
            return launcher.wait(timeout=timeout)
        except TimeoutError:
            for step in self.steps_by_name().get(name, []):
                self.scancel_step(step, "KILL")
            return launcher.wait(timeout=timeout)

    def scancel_step(self, step: str, signal_name: str = "TERM") -> CommandRecord:
        return self.cluster.exec(scancel_argv(step, signal_name), timeout=10)

    def signal_step_once(self, step: str, signal_name: str = "TERM") -> CommandRecord:
        """The step's tasks get `signal_name` once (`scancel_once_argv`): a drain stop."""
        return self.cluster.exec(scancel_once_argv(step, signal_name), timeout=10)

    def later_job_pending(self) -> bool:
        """Whether a job submitted after this one is pending: plain scancel then signals a step
        of this job twice (semantics test (h)). Job ids rise with submission."""
        record = self.cluster.exec(["squeue", "-h", "-t", "PENDING", "-o", "%i"], timeout=10)
        own = int(self.job_id)
        return any(int(m[0]) > own for m in map(re.compile(r"\d+").match, record.stdout.split()) if m)

    def job_state(self) -> str:
        record = self.cluster.exec(["squeue", "-h", "-j", self.job_id, "-o", "%T"], timeout=10)
        return record.stdout_tail.strip() or "GONE"

    def release(self, timeout: float = 30.0, grace_s: float = STEP_END_GRACE_S) -> list[str]:
        """Cancel the allocation; return the steps that were still running (leaks): those still
        listed `grace_s` after the scenario ended (STEP_END_GRACE_S)."""
        leaked = _still_listed(self.steps, grace_s, "the allocation's steps")
        self.cluster.exec(scancel_argv(self.job_id), timeout=10)
        for command in self.background:
            if not command.finished:
                with contextlib.suppress(TimeoutError):
                    wait_until(lambda c=command: c.finished, bool, timeout=10, what="launcher to end after scancel")
            command.stop()
        wait_until(
            self.job_state,
            lambda state: state in ENDED_JOB_STATES,
            timeout=timeout,
            what=f"job {self.job_id} to leave the queue",
        )
        return leaked

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
