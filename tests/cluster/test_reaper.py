"""Nothing outlives its owner: a run killed with SIGKILL (its whole process group, or the CLI
alone) leaves no cluster behind within seconds; the reaper removes only its owner's objects
and exits; a sweep removes only clusters whose owner is gone — never a live run's, a kept one,
one whose owner it cannot look up while its containers run, or an older dd-accept's.

Other tests run beside these (pytest-xdist) and every cluster `up` sweeps the engine. So each
test here that kills an owner first adds a sentinel to the cluster — a volume with the
cluster's name and no owner label, which no sweep ever touches — and then asserts that the
owner's objects went and the sentinel stayed: the reaper did it, not a sweep."""

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

from dd_accept.base.errors import UsageError
from dd_accept.base.waiting import wait_until
from dd_accept.slurm_docker import engine
from dd_accept.slurm_docker.cluster import SlurmCluster
from dd_accept.slurm_docker.images import slurm_tag
from dd_accept.slurm_docker.ownership import LABEL_KEEP, LABEL_OWNER, Owner, ownership_labels
from dd_accept.slurm_docker.reaper import reap
from dd_accept.slurm_docker.spec import ClusterSpec
from dd_accept.slurm_docker.sweep import sweep_orphans
from tests.helpers import labelled_objects

pytestmark = pytest.mark.cluster

REMOVED_WITHIN_S = 30  # a functional bound ("within seconds"), not a performance goal


def _finished_owner() -> Owner:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    owner = Owner.of(child.pid)
    child.wait()
    return owner


def _network(client, name: str, labels: dict[str, str]) -> None:
    """Created with the engine's own call, not read back: another worker's cluster start
    sweeps orphans too, and may remove an orphan's network between its creation and the
    SDK's inspect of it (CI: a 404 on the network just created). Either sweep leaves what
    the test asserts."""
    client.api.create_network(f"{name}-net", internal=True, labels={engine.LABEL_CLUSTER: name, **labels})


def _sentinel(client, name: str):
    """An object of the cluster no sweep removes (no owner label): only its owner's reaper
    can have removed the rest."""
    return client.volumes.create(f"{name}-sentinel", labels={engine.LABEL_CLUSTER: name})


def _owned_objects(name: str) -> list[str]:
    return [item for item in labelled_objects(name) if not item.endswith("-sentinel")]


def _remove_all(name: str) -> None:
    client = docker.from_env()
    engine.remove_labelled(client, engine.find_labelled(client, name))


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def test_a_sweep_removes_only_the_clusters_whose_owner_is_known_to_be_gone():
    client = docker.from_env()
    tag = uuid.uuid4().hex[:6]
    me = Owner.this_process()
    foreign = Owner(1, "1", "another-boot", me.pidns)  # another machine's run on a shared engine
    clusters = {
        f"orphan-{tag}": {LABEL_OWNER: _finished_owner().label},
        f"live-{tag}": ownership_labels(keep=False),  # this test's process: a live run's
        f"kept-{tag}": {LABEL_KEEP: "1"},
        f"older-{tag}": {},  # no owner label: an older dd-accept's, never swept
        f"foreign-idle-{tag}": {LABEL_OWNER: foreign.label},  # nothing of it runs: swept
        f"foreign-busy-{tag}": {LABEL_OWNER: foreign.label},  # a container of it runs: kept
    }
    try:
        for name, labels in clusters.items():
            _network(client, name, labels)
        client.containers.run(
            slurm_tag(), ["120"], entrypoint=["sleep"], detach=True, network_mode="none",
            labels={engine.LABEL_CLUSTER: f"foreign-busy-{tag}", LABEL_OWNER: foreign.label},
        )  # fmt: skip
        sweep_orphans(client)
        left = {name for name in clusters if labelled_objects(name)}
        assert left == {f"live-{tag}", f"kept-{tag}", f"older-{tag}", f"foreign-busy-{tag}"}
    finally:
        for name in clusters:
            _remove_all(name)


def test_a_cluster_of_the_same_name_that_is_in_use_is_refused_never_replaced():
    client = docker.from_env()
    name = f"inuse-{uuid.uuid4().hex[:6]}"
    try:
        _network(client, name, {LABEL_KEEP: "1"})
        with pytest.raises(UsageError, match=f"a cluster named {name} is in use"):
            SlurmCluster(ClusterSpec(name=name, nodes=1), client=client).up()
        assert labelled_objects(name) == [f"network {name}-net"]
    finally:
        _remove_all(name)


def test_the_reaper_never_removes_another_owners_objects_of_the_same_name():
    client = docker.from_env()
    name = f"reused-{uuid.uuid4().hex[:6]}"
    try:
        _network(client, name, ownership_labels(keep=False))  # a later, live cluster of the name
        assert reap(name, _finished_owner().label) == []
        assert labelled_objects(name) == [f"network {name}-net"]
    finally:
        _remove_all(name)


OWNER_SCRIPT = """
import sys, time, docker
from dd_accept.slurm_docker import engine
from dd_accept.slurm_docker.ownership import LABEL_OWNER, Reaper, ownership_labels
name, release = sys.argv[1], sys.argv[2] == "release"
labels = ownership_labels(keep=False)
reaper = Reaper.watch(name, labels[LABEL_OWNER])
client = docker.from_env()
client.networks.create(f"{name}-net", internal=True, labels={engine.LABEL_CLUSTER: name, **labels})
client.volumes.create(f"{name}-sentinel", labels={engine.LABEL_CLUSTER: name})
if release:
    reaper.release()
print(reaper.process.pid, flush=True)
time.sleep(600)
"""


def _owner(name: str, mode: str) -> tuple[subprocess.Popen, int]:
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER_SCRIPT, name, mode], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert owner.stdout is not None
    return owner, int(owner.stdout.readline())


def test_the_reaper_removes_a_killed_owners_objects_and_exits():
    name = f"reaped-{uuid.uuid4().hex[:6]}"
    owner, reaper = _owner(name, "watch")
    try:
        assert _owned_objects(name) == [f"network {name}-net"] and _running(reaper)
        os.killpg(owner.pid, signal.SIGKILL)
        owner.wait()
        wait_until(lambda: _owned_objects(name), lambda left: not left, timeout=REMOVED_WITHIN_S, what="reaping")
        assert labelled_objects(name) == [f"volume {name}-sentinel"]  # the reaper's doing: no sweep touches it
        wait_until(lambda: _running(reaper), lambda running: not running, timeout=15, what="the reaper to exit")
    finally:
        if owner.poll() is None:
            os.killpg(owner.pid, signal.SIGKILL)
        _remove_all(name)


def test_a_released_reaper_exits_at_once_and_leaves_the_cluster_to_its_owner():
    name = f"released-{uuid.uuid4().hex[:6]}"
    owner, reaper = _owner(name, "release")
    try:
        wait_until(lambda: _running(reaper), lambda running: not running, timeout=5, what="the reaper to exit")
        assert sorted(labelled_objects(name)) == [f"network {name}-net", f"volume {name}-sentinel"]
    finally:
        os.killpg(owner.pid, signal.SIGKILL)
        owner.wait()
        _remove_all(name)


def _owned_by_child_of(pid: int) -> set[str]:
    """Clusters whose owner label names a process whose parent is `pid` (the CLI's pytest)."""
    found = set()
    # another test's cluster may be removed between the listing and its inspection
    listed = docker.from_env().containers.list(all=True, filters={"label": engine.LABEL_CLUSTER}, ignore_removed=True)
    for container in listed:
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
    cluster = ""
    try:
        (cluster,) = wait_until(lambda: _owned_by_child_of(run.pid), bool, timeout=300, what="the run's cluster")
        _sentinel(docker.from_env(), cluster)
        children = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _parent_of(int(p.name)) == run.pid]
        os.killpg(run.pid, signal.SIGKILL) if kill == "group" else os.kill(run.pid, signal.SIGKILL)
        run.wait()
        started = time.monotonic()
        wait_until(lambda: _owned_objects(cluster), lambda left: not left, timeout=REMOVED_WITHIN_S, what="reaping")
        if kill == "group":  # nothing of the run survived to clean up: the reaper's doing, not a sweep's
            assert labelled_objects(cluster) == [f"volume {cluster}-sentinel"]
        # (the CLI alone: its pytest child, told by the kernel, may still tear its cluster down
        # by name, sentinel and all, when the signal lands where it is handled; or its reaper does)
        for child in children:  # the run's pytest: killed with the group, or told by the kernel (PDEATHSIG)
            wait_until(lambda c=child: _running(int(c.name)), lambda r: not r, timeout=15, what=f"{child.name} to end")
        print(f"{kill}: cluster {cluster} removed {time.monotonic() - started:.1f}s after the kill")
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
        if cluster:
            _remove_all(cluster)
