import os
import signal

import pytest

from dd_accept.base.interrupts import deferred_interrupts


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_inside_the_block_is_raised_only_after_it(signum):
    steps = []
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt), deferred_interrupts():
            os.kill(os.getpid(), signum)
            steps.append("block finished")
        assert steps == ["block finished"]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_no_signal_means_no_interrupt_and_handlers_are_restored():
    before = signal.getsignal(signal.SIGINT)
    with deferred_interrupts():
        pass
    assert signal.getsignal(signal.SIGINT) is before
