"""The reaper: a small watcher that removes a cluster when the process that owns it is gone.

In the spirit of testcontainers' Ryuk. The creating process holds one end of a pipe, the
reaper the other; the reaper also watches the owner (the creator itself, or the process
whose life bounds the cluster: pytest-xdist's controller for a cluster its workers share).
However the owner ends — returns, raises, is interrupted, is killed with SIGKILL along with
its whole process group — the reaper sees it within a second (at once, by end-of-file, when
the owner is the creator) and removes the cluster. A creator that removed the cluster itself
(or keeps it) says so first (`release`), and the reaper exits touching nothing; so does a
reaper whose cluster someone else removed. It runs in a session of its own, so the signal
that kills the owner's group does not reach it, and it removes only a cluster whose every
object carries its owner's label: a later cluster that reuses the name is never touched.
"""

from __future__ import annotations

import os
import select
import sys
import time

from dd_accept.slurm_docker import engine
from dd_accept.slurm_docker.cluster import remove_cluster
from dd_accept.slurm_docker.ownership import LABEL_OWNER, RELEASED, Owner


def reap(cluster: str, owner_label: str) -> list[str]:
    """Remove the cluster's objects that carry this owner's label, and then, if nothing of
    the cluster is left, its run directory."""
    client = engine.connect(timeout=30)
    objects = engine.find_labelled(client, cluster)
    owners = {engine.labels_of(o).get(LABEL_OWNER) for o in (*objects.containers, *objects.networks, *objects.volumes)}
    if owners != {owner_label}:
        return []  # nothing left, or another owner's cluster of the same name: never this reaper's
    return remove_cluster(client, cluster)


def main(argv: list[str]) -> int:
    cluster, owner_label = argv
    owner = Owner.parse(owner_label)
    if owner is None:
        return 2
    stdin = sys.stdin.buffer.fileno()
    watching_pipe, last_look = True, time.monotonic()
    while True:
        if watching_pipe and select.select([stdin], [], [], POLL_S)[0]:
            data = os.read(stdin, 64)
            if data.startswith(RELEASED):
                return 0
            watching_pipe = bool(data)  # end of file: the creator is gone (the owner may not be)
        elif not watching_pipe:
            time.sleep(POLL_S)
        if not owner.alive():
            reap(cluster, owner_label)
            return 0
        if time.monotonic() - last_look > LOOK_S:  # removed by someone else (the last xdist worker out)
            last_look = time.monotonic()
            if not _owned_objects(cluster, owner_label):
                return 0


POLL_S = 0.5
LOOK_S = 10.0


def _owned_objects(cluster: str, owner_label: str) -> bool:
    try:
        objects = engine.find_labelled(engine.connect(timeout=30), cluster)
    except Exception:  # the engine stopped: nothing left to reap on it
        return False
    everything = (*objects.containers, *objects.networks, *objects.volumes)
    return any(engine.labels_of(o).get(LABEL_OWNER) == owner_label for o in everything)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
