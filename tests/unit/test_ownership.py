"""Who owns a cluster: a process, told apart from a later one with the same pid, from one
before a reboot, from a zombie and from a process in another pid namespace; a cluster is an
orphan only when every object's owner is known to be gone."""

import os
import subprocess
import sys

import pytest

from dd_accept.slurm_docker.ownership import (
    LABEL_KEEP,
    LABEL_OWNER,
    Owner,
    boot_id,
    orphaned,
    ownership_labels,
    pid_namespace,
)


def _finished_process() -> Owner:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
    owner = Owner.of(child.pid)
    child.wait()
    return owner


def test_this_process_is_alive_and_a_finished_one_is_gone():
    me = Owner.this_process()
    assert me.pid == os.getpid() and me.started and me.boot == boot_id() and me.pidns == pid_namespace()
    assert me.judgeable() and not me.gone()
    assert _finished_process().gone()


def test_a_zombie_is_gone_and_cannot_become_an_owner():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    owner = Owner.of(child.pid)
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped: a zombie
    try:
        assert owner.gone()
        with pytest.raises(ValueError, match="does not run"):
            Owner.of(child.pid)
    finally:
        child.wait()


def test_the_same_pid_started_later_is_another_process_and_a_foreign_owner_is_never_judged():
    me = Owner.this_process()
    assert Owner(me.pid, str(int(me.started) + 1), me.boot, me.pidns).gone()
    for foreign in (Owner(1, "1", "another-boot", me.pidns), Owner(1, "1", me.boot, "another-namespace")):
        assert not foreign.judgeable() and not foreign.gone()


def test_the_label_reads_back():
    me = Owner.this_process()
    assert Owner.parse(me.label) == me
    for label in (None, "12/x/y", "x/1/2/3", "12/1/b/"):
        assert Owner.parse(label) is None


def test_a_cluster_is_an_orphan_only_when_every_owner_is_known_to_be_gone_and_nothing_is_kept():
    live = ownership_labels(keep=False)
    dead = {LABEL_OWNER: _finished_process().label}
    me = Owner.this_process()
    foreign = {LABEL_OWNER: Owner(1, "1", "another-boot", me.pidns).label}
    assert orphaned([(dead, False), (dead, None)])
    assert not orphaned([(dead, None), (live, None)])  # one object still owned by a live process
    assert not orphaned([(dead, None), ({**dead, LABEL_KEEP: "1"}, None)])
    assert not orphaned([(dead, None), ({}, None)])  # made by an older dd-accept: never swept
    assert not orphaned([])
    # An owner this process cannot look up: gone only once none of its containers runs.
    assert not orphaned([(foreign, True), (foreign, None)])
    assert orphaned([(foreign, False), (foreign, None)])
    assert ownership_labels(keep=True) == {LABEL_KEEP: "1"}
