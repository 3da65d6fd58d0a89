"""The false-alarm benchmark's busy loops stop with the measurement, however it ends: a
benchmark interrupted with Ctrl-C must not leave two cores spinning."""

import os

import pytest
from benchmarks.busy_loops import busy_loops


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_loops_run_during_the_block_and_are_gone_after_it_even_when_interrupted():
    with pytest.raises(KeyboardInterrupt), busy_loops(2) as pids:
        assert len(pids) == 2 and all(_alive(pid) for pid in pids)
        raise KeyboardInterrupt
    assert not any(_alive(pid) for pid in pids), "a busy loop outlived its block"


def test_none_asked_none_started():
    with busy_loops(0) as pids:
        assert pids == []
