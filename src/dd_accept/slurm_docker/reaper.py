"""The reaper: a small watcher that removes a cluster when the process that owns it is gone.

In the spirit of testcontainers' Ryuk. The creating process holds one end of a pipe, the
reaper the other; the reaper also watches the owner (the creator itself, or the process
whose life bounds the cluster: pytest-xdist's controller for a cluster its workers share).
However the owner ends — returns, raises, is interrupted, is killed with SIGKILL along with
its whole process group — the reaper sees it within a second (at once, by end-of-file, when
the owner is the creator) and removes the cluster. A creator that removed the cluster itself
(or keeps it) says so first (`release`), and the reaper exits touching nothing; so does a
reaper whose cluster someone else removed. It runs in a session of its own, so the signal
that kills the owner's group does not reach it, and it removes only the objects that carry
its owner's label: a later cluster that reuses the name is never touched. A cancel that kills
a whole process tree or cgroup (systemd's KillMode=control-group) takes the reaper too; the
next `run` or `up` on the engine sweeps that cluster.
"""

from __future__ import annotations

import os
import select
import sys
import time

from dd_accept.base.errors import EXIT_PASS, EXIT_USAGE
from dd_accept.slurm_docker import engine
from dd_accept.slurm_docker.ownership import LABEL_OWNER, RELEASED, Owner
from dd_accept.slurm_docker.sdk import docker
from dd_accept.slurm_docker.sweep import remove_owned


def reap(cluster: str, owner_label: str) -> list[str]:
    """Remove the cluster's objects that carry this owner's label (never another owner's of
    the same name), then look again until two listings a few seconds apart find none: an
    object the engine was still creating when the owner died appears after the first."""
    removed: list[str] = []
    empty_in_a_row, deadline = 0, time.monotonic() + REAP_FOR_S
    while empty_in_a_row < 2 and time.monotonic() < deadline:
        try:
            client = engine.connect(timeout=30)
            if _owned(client, cluster, owner_label):
                removed += remove_owned(client, cluster, {owner_label})
                empty_in_a_row = 0
            else:
                empty_in_a_row += 1
        except Exception:  # a busy or restarting engine: try again, the cluster is still there
            empty_in_a_row = 0
        time.sleep(RELOOK_S)
    return removed


def _owned(client: docker.DockerClient, cluster: str, owner_label: str) -> bool:
    return bool(engine.find_labelled(client, cluster).where(LABEL_OWNER, {owner_label}))


def main(argv: list[str]) -> int:
    cluster, owner_label = argv
    owner = Owner.parse(owner_label)
    if owner is None:
        return EXIT_USAGE
    stdin = sys.stdin.buffer.fileno()
    watching_pipe, seen, last_look = True, False, time.monotonic()
    while True:
        if watching_pipe and select.select([stdin], [], [], POLL_S)[0]:
            data = os.read(stdin, 64)
            if data.startswith(RELEASED):
                return EXIT_PASS
            watching_pipe = bool(data)  # end of file: the creator is gone (the owner may not be)
        elif not watching_pipe:
            time.sleep(POLL_S)
        if owner.gone():
            reap(cluster, owner_label)
            return EXIT_PASS
        if time.monotonic() - last_look > LOOK_S:  # removed by someone else (the last xdist worker out)
            last_look = time.monotonic()
            try:
                owned = _owned(engine.connect(timeout=30), cluster, owner_label)
            except Exception:  # cannot tell now: keep watching
                continue
            if owned:
                seen = True
            elif seen:
                return EXIT_PASS


POLL_S = 0.5  # how often the owner is looked up
LOOK_S = 10.0  # how often the cluster is looked for, to stop once someone else removed it
RELOOK_S = 2.0
REAP_FOR_S = 120.0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
