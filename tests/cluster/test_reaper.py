"""Nothing outlives its owner: a run killed with SIGKILL (its whole process group, or the CLI
alone) leaves no cluster behind within seconds, and a sweep removes only clusters whose owner
is gone — never a live run's, a kept one, or an older dd-accept's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import docker
import pytest

from dd_accept.base.waiting import wait_until
from dd_accept.slurm_docker import engine
from dd_accept.slurm_docker.cluster import sweep_orphans
from dd_accept.slurm_docker.ownership import LABEL_KEEP, LABEL_OWNER, Owner, ownership_labels
from tests.helpers import labelled_objects

pytestmark = pytest.mark.cluster

REMOVED_WITHIN_S = 30  # a functional bound ("within seconds"), not a performance goal


def _finished_owner() -> Owner:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    owner = Owner.of(child.pid)
    child.wait()
    return owner


def _network(client, name: str, labels: dict[str, str]):
    return client.networks.create(
        f"{name}-net", driver="bridge", internal=True, labels={engine.LABEL_CLUSTER: name, **labels}
    )


def test_a_sweep_removes_only_the_clusters_whose_owner_is_gone():
    client = docker.from_env()
    tag = uuid.uuid4().hex[:6]
    dead, rebooted = _finished_owner(), Owner(os.getpid(), Owner.this_process().started, "before-a-reboot")
    clusters = {
        f"orphan-{tag}": {LABEL_OWNER: dead.label},
        f"rebooted-{tag}": {LABEL_OWNER: rebooted.label},
        f"live-{tag}": ownership_labels(keep=False),  # this test's process: a live run's
        f"kept-{tag}": {LABEL_KEEP: "1"},
        f"older-{tag}": {},  # no owner label: an older dd-accept's, never swept
    }
    try:
        for name, labels in clusters.items():
            _network(client, name, labels)
        sweep_orphans(client)
        left = {name for name in clusters if labelled_objects(name)}
        assert left == {f"live-{tag}", f"kept-{tag}", f"older-{tag}"}
    finally:
        for name in clusters:
            engine.remove_labelled(client, engine.find_labelled(client, name))


OWNER_SCRIPT = """
import sys, time, docker
from dd_accept.slurm_docker import engine
from dd_accept.slurm_docker.ownership import LABEL_OWNER, ownership_labels
from dd_accept.slurm_docker.ownership import Reaper
name, release = sys.argv[1], sys.argv[2] == "release"
labels = ownership_labels(keep=False)
reaper = Reaper.watch(name, labels[LABEL_OWNER])
docker.from_env().networks.create(f"{name}-net", internal=True, labels={engine.LABEL_CLUSTER: name, **labels})
if release:
    reaper.release()
print("up", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("release", [False, True])
def test_the_reaper_removes_a_killed_owners_cluster_and_leaves_a_released_one(release):
    name = f"reaped-{uuid.uuid4().hex[:6]}"
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER_SCRIPT, name, "release" if release else "watch"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert owner.stdout is not None and owner.stdout.readline() == "up\n"
        assert labelled_objects(name)
        os.killpg(owner.pid, signal.SIGKILL)
        owner.wait()
        if release:  # released: the reaper has exited and the cluster is its owner's to remove
            time.sleep(2)
            assert labelled_objects(name) == [f"network {name}-net"]
        else:
            wait_until(lambda: labelled_objects(name), lambda left: not left, timeout=REMOVED_WITHIN_S, what="reaping")
    finally:
        client = docker.from_env()
        engine.remove_labelled(client, engine.find_labelled(client, name))


def _owned_by_child_of(pid: int) -> set[str]:
    """Clusters whose owner label names a process whose parent is `pid` (the CLI's pytest)."""
    found = set()
    for container in docker.from_env().containers.list(all=True, filters={"label": engine.LABEL_CLUSTER}):
        owner = Owner.parse(container.labels.get(LABEL_OWNER))
        if owner is not None and _parent_of(owner.pid) == pid:
            found.add(container.labels[engine.LABEL_CLUSTER])
    return found


def _parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
        return None


@pytest.mark.parametrize("kill", ["group", "cli"])
def test_a_run_killed_mid_way_leaves_nothing_behind(kill, tmp_path):
    """`kill -9` of the run's process group (as CI cancels a job), or of the CLI alone: its
    pytest child ends with it, and the cluster it started is removed within seconds."""
    run = subprocess.Popen(
        [sys.executable, "-m", "dd_accept.harness.cli", "-q", "run", "streaming", "--out", str(tmp_path / "out")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        (cluster,) = wait_until(lambda: _owned_by_child_of(run.pid), bool, timeout=300, what="the run's cluster")
        children = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _parent_of(int(p.name)) == run.pid]
        os.killpg(run.pid, signal.SIGKILL) if kill == "group" else os.kill(run.pid, signal.SIGKILL)
        run.wait()
        started = time.monotonic()
        wait_until(lambda: labelled_objects(cluster), lambda left: not left, timeout=REMOVED_WITHIN_S, what="reaping")
        for child in children:  # the run's pytest: killed with the group, or told by the kernel (PDEATHSIG)
            wait_until(lambda c=child: not c.exists() or _zombie(c), bool, timeout=15, what=f"{child.name} to end")
        print(f"{kill}: cluster {cluster} removed {time.monotonic() - started:.1f}s after the kill")
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()


def _zombie(process: Path) -> bool:
    try:
        return (process / "stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True
