"""How the drain phases read an endpoint's exit: Slurm's record first, srun's status as the
fallback, never an assumed 0."""

import time
from types import SimpleNamespace

from dd_accept.acceptance.drain import _endpoint_end
from dd_accept.slurm_docker.step_exit import StepExit


def _allocation(record):
    return SimpleNamespace(cluster=SimpleNamespace(step_exit=lambda step, node: record))


def test_slurms_record_of_the_step_comes_first():
    stop_at = time.time() - 5
    record = StepExit(0, stop_at + 3.0, "slurmd log")
    end = _endpoint_end(_allocation(record), "7.2", "node1", stop_at, launcher_exit=137, record_wait_s=0.1)
    assert (end.exit_code, end.source, round(end.seconds_after_stop, 1)) == (0, "slurmd log", 3.0)


def test_without_slurms_record_srun_s_status_is_the_exit_and_says_so():
    """The drill waits for its launcher: when the node's log kept no record of the step's end
    (it took over 45 s once, under a loaded machine), srun's status is what the task did."""
    end = _endpoint_end(_allocation(None), "7.2", "node1", time.time(), launcher_exit=0, record_wait_s=0.1)
    assert (end.exit_code, end.source) == (0, "srun launcher")


def test_with_neither_the_exit_is_unknown_never_0():
    end = _endpoint_end(_allocation(None), "7.2", "node1", time.time(), record_wait_s=0.1)
    assert end.exit_code is None and "Slurm kept no record of the end of step 7.2" in end.source
