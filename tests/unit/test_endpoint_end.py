"""How the drain phases read an endpoint's exit: Slurm's record first, srun's status (at the
moment srun ended) as the fallback, never an assumed 0."""

import time
from types import SimpleNamespace

from dd_accept.acceptance.drain_stop import LauncherEnd, endpoint_end
from dd_accept.slurm_docker.step_exit import StepExit


def _allocation(record):
    return SimpleNamespace(cluster=SimpleNamespace(step_exit=lambda step, node: record))


def test_slurms_record_of_the_step_comes_first():
    stop_at = time.time() - 5
    record = StepExit(0, stop_at + 3.0, "slurmd log")
    launcher = LauncherEnd(137, stop_at + 4.0)
    end = endpoint_end(_allocation(record), "7.2", "node1", stop_at, launcher, record_wait_s=0.1)
    assert (end.exit_code, end.source, round(end.seconds_after_stop, 1)) == (0, "slurmd log", 3.0)


def test_without_slurms_record_srun_s_status_is_the_exit_at_the_moment_srun_ended():
    """The drill waits for its launcher: when the node's log kept no record of the step's end
    (it took over 45 s once, under a loaded machine), srun's status is what the task did, and
    when srun ended is when the task did: never when the harness got round to reading it."""
    stop_at = time.time() - 50
    launcher = LauncherEnd(0, stop_at + 3.2, may_be_signalled=True)
    end = endpoint_end(_allocation(None), "7.2", "node1", stop_at, launcher, record_wait_s=0.1)
    assert (end.exit_code, end.source, round(end.seconds_after_stop, 1)) == (0, "srun launcher", 3.2)


def test_a_status_srun_may_show_for_a_signal_to_itself_is_not_the_tasks():
    """A cleanup that TERMs or KILLs a launcher still lingering after its task exited 0 makes
    srun show 143 or 137: where the cleanup may have signalled srun, that is no exit of the
    task's. The harness never signals srun (it signals the step): there 137 is the task's."""
    stop_at = time.time() - 20
    drilled = LauncherEnd(143, stop_at + 2.0, may_be_signalled=True)
    end = endpoint_end(_allocation(None), "7.2", "node1", stop_at, drilled, record_wait_s=0.1)
    assert end.exit_code is None and "Slurm kept no record" in end.source
    own = LauncherEnd(137, stop_at + 12.5)
    end = endpoint_end(_allocation(None), "7.2", "node1", stop_at, own, record_wait_s=0.1)
    assert (end.exit_code, round(end.seconds_after_stop, 1)) == (137, 12.5)
    assert LauncherEnd(1, 0.0, may_be_signalled=True).task_exit == 1, "the task's own failure, passed on"


def test_with_neither_the_exit_is_unknown_never_0():
    end = endpoint_end(_allocation(None), "7.2", "node1", time.time(), record_wait_s=0.1)
    assert end.exit_code is None and "Slurm kept no record of the end of step 7.2" in end.source
