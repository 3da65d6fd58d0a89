"""The node's CPU reader: the kernel's counters for a process and for the machine."""

import os
import time

from dd_accept.node import step_usage


def test_a_process_usage_is_its_cpu_seconds_and_resident_memory():
    before, rss, _ = step_usage.process_usage(os.getpid())
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:
        pass
    after, _, _ = step_usage.process_usage(os.getpid())
    assert 0.15 <= after - before <= 1.0 and rss > 1000


def test_the_peak_is_what_a_process_held_however_briefly():
    """VmHWM: 64 MiB touched and freed between two readings still shows in the second."""
    _, _, peak_before = step_usage.process_usage(os.getpid())
    held = bytearray(64 * 2**20)
    held[::4096] = b"x" * len(held[::4096])  # touch every page: resident, not just reserved
    del held
    _, rss, peak = step_usage.process_usage(os.getpid())
    assert peak >= peak_before and peak >= rss and peak - rss >= 60 * 1024, (peak_before, rss, peak)


def test_a_process_that_is_gone_is_none_not_an_error():
    assert step_usage.process_usage(2**22 + 12345) is None


def test_the_machine_reading_counts_busy_within_total():
    machine = step_usage.machine_cpu()
    assert 0 < machine["busy_s"] < machine["total_s"]


def test_a_step_slurm_does_not_know_has_no_processes(monkeypatch):
    class Done:
        stdout = "PID      JOBID    STEPID   LOCALID GLOBALID\n27       1        0        0       0\n"

    monkeypatch.setattr(step_usage.subprocess, "run", lambda *a, **k: Done())
    assert step_usage.step_pids("1.0") == [27]
    Done.stdout = "scontrol: error: no such step\n"
    assert step_usage.step_pids("1.9") == []
