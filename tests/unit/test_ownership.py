"""Who owns a cluster: a process, told apart from a later one with the same pid and from one
before a reboot; a cluster is an orphan only when every object's owner is gone."""

import os
import subprocess
import sys

from dd_accept.slurm_docker.ownership import LABEL_KEEP, LABEL_OWNER, Owner, boot_id, orphaned, ownership_labels


def _finished_process() -> Owner:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
    owner = Owner.of(child.pid)
    child.wait()
    return owner


def test_this_process_is_alive_and_a_finished_one_is_not():
    me = Owner.this_process()
    assert me.pid == os.getpid() and me.started and me.boot == boot_id() and me.alive()
    gone = _finished_process()
    assert gone.started and not gone.alive()


def test_the_same_pid_started_at_another_time_or_boot_is_another_process():
    me = Owner.this_process()
    assert not Owner(me.pid, str(int(me.started) + 1), me.boot).alive()
    assert not Owner(me.pid, me.started, "another-boot").alive()


def test_the_label_reads_back():
    me = Owner.this_process()
    assert Owner.parse(me.label) == me
    assert Owner.parse(None) is None and Owner.parse("12/x") is None and Owner.parse("x/1/2") is None


def test_a_cluster_is_an_orphan_only_when_every_owner_is_gone_and_nothing_is_kept():
    live = ownership_labels(keep=False)
    dead = {LABEL_OWNER: _finished_process().label}
    assert orphaned([dead, dead])
    assert not orphaned([dead, live])  # one object still owned by a live process
    assert not orphaned([dead, {**dead, LABEL_KEEP: "1"}])
    assert not orphaned([dead, {}])  # made by an older dd-accept: never swept
    assert not orphaned([])
    assert ownership_labels(keep=True) == {LABEL_KEEP: "1"}
