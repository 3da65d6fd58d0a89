"""Who owns a cluster, and whether that owner is still there.

A run's cluster must not outlive the run, however the run ends: CI cancels a job by
killing its process group, and a `kill -9` runs no cleanup. So every object of a cluster
carries its owner in a label — the creating process's pid, its start time (so a reused pid
is not taken for the owner), the machine's boot id (so a pid from before a reboot is not
either) and its pid namespace (so a process in another container sharing the engine is not
looked up in ours) — or, for a cluster made to be kept (`cluster up`, `--keep-cluster`), a
keep label instead. A cluster whose every object names an owner that is gone is an orphan:
the reaper that watches the owner removes it at once, and any later `run` or `up` sweeps what
a reaper could not (a reaper killed too, a machine that rebooted). An owner this process
cannot look up (another pid namespace, another boot: a second CI job sharing the socket, a
remote engine) is never judged dead; its cluster is an orphan only once none of its
containers runs. Objects without either label were made by an older dd-accept and are never
swept. `Reaper` is the creator's end of the reaper's pipe; the reaper itself is
`dd_accept.slurm_docker.reaper`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from dd_accept.base.child_processes import stop_child

LABEL_OWNER = "io.dd-accept.owner"  # "PID/START/BOOT_ID/PID_NAMESPACE"
LABEL_KEEP = "io.dd-accept.keep"  # "1": outlives its creator until `cluster down` or `cluster prune`


def boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def pid_namespace() -> str:
    """This process's pid namespace (the inode number of /proc/self/ns/pid)."""
    return os.readlink("/proc/self/ns/pid").removeprefix("pid:[").removesuffix("]")


def process_start(pid: int) -> str | None:
    """The process's start time in clock ticks after boot (field 22 of /proc/PID/stat), or
    None when no such process runs: none at all, or one that has exited and waits to be
    reaped by its parent (a zombie runs nothing). A pid reused by another process starts
    later."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) is in parentheses and may hold spaces or parentheses itself.
    fields = stat.rpartition(")")[2].split()
    if len(fields) <= 19 or fields[0] in ("Z", "X", "x"):
        return None
    return fields[19]


@dataclass(frozen=True, slots=True)
class Owner:
    pid: int
    started: str
    boot: str
    pidns: str

    @classmethod
    def this_process(cls) -> Owner:
        return cls.of(os.getpid())

    @classmethod
    def of(cls, pid: int) -> Owner:
        """A running process of this namespace as an owner (ValueError when none runs: an
        owner whose start is unknown would look dead at once)."""
        started = process_start(pid)
        if started is None:
            raise ValueError(f"process {pid} does not run: it cannot own a cluster")
        return cls(pid, started, boot_id(), pid_namespace())

    @classmethod
    def parse(cls, label: str | None) -> Owner | None:
        parts = (label or "").split("/")
        if len(parts) != 4 or not parts[0].isdigit() or not all(parts):
            return None
        return cls(int(parts[0]), parts[1], parts[2], parts[3])

    @property
    def label(self) -> str:
        return f"{self.pid}/{self.started}/{self.boot}/{self.pidns}"

    def judgeable(self) -> bool:
        """Whether this process can look the owner up: same boot, same pid namespace."""
        return self.boot == boot_id() and self.pidns == pid_namespace()

    def gone(self) -> bool:
        """The owner is known to have ended: judgeable, and its process no longer runs."""
        return self.judgeable() and process_start(self.pid) != self.started


def ownership_labels(keep: bool, owner: Owner | None = None) -> dict[str, str]:
    return {LABEL_KEEP: "1"} if keep else {LABEL_OWNER: (owner or Owner.this_process()).label}


def orphaned(objects: list[tuple[dict[str, str], bool | None]]) -> bool:
    """A cluster, as its objects' (labels, running) — running is None for a network or a
    volume — that may be removed: none is kept, every one names an owner, and every owner is
    gone; an owner this process cannot look up counts as gone only once no container of the
    cluster runs. An unlabelled object (an older dd-accept's) keeps the cluster."""
    if not objects:
        return False
    owners = [Owner.parse(labels.get(LABEL_OWNER)) for labels, _ in objects]
    if any(labels.get(LABEL_KEEP) for labels, _ in objects) or any(o is None for o in owners):
        return False
    running = any(state for _, state in objects)
    return all(owner.gone() if owner.judgeable() else not running for owner in owners if owner is not None)


RELEASED = b"released\n"


@dataclass
class Reaper:
    """The owner's end: keep it until the cluster is down (or handed over to be kept)."""

    process: subprocess.Popen[bytes]

    @classmethod
    def watch(cls, cluster: str, owner_label: str) -> Reaper:
        process = subprocess.Popen(
            [sys.executable, "-m", "dd_accept.slurm_docker.reaper", cluster, owner_label],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # not in the owner's process group: a group kill spares it
        )
        return cls(process)

    def release(self) -> None:
        """The cluster is down (or kept): the reaper leaves it alone and exits."""
        stdin = self.process.stdin
        if stdin is not None and not stdin.closed:
            try:
                stdin.write(RELEASED)
                stdin.close()
            except (BrokenPipeError, OSError):
                pass
        stop_child(self.process, None, grace_s=10)
