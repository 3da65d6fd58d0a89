"""stop_child: every stop ends with the child reaped, whether it obeys or ignores the request."""

from __future__ import annotations

import signal
import subprocess
import sys

from dd_accept.base.child_processes import stop_child

IGNORES_TERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
)


def _started(code: str) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    return process


def test_a_child_that_obeys_ends_with_the_signal_asked() -> None:
    process = _started("import time; print('ready', flush=True); time.sleep(60)")
    assert stop_child(process, signal.SIGTERM, grace_s=10) == -signal.SIGTERM


def test_a_child_that_ignores_the_signal_is_killed_after_the_grace() -> None:
    process = _started(IGNORES_TERM)
    assert stop_child(process, signal.SIGTERM, grace_s=0.5) == -signal.SIGKILL
    assert process.poll() == -signal.SIGKILL


def test_without_a_signal_the_child_is_only_waited_for() -> None:
    process = _started("import sys; print('ready', flush=True); sys.stdin.read(); sys.exit(3)")
    assert process.stdin is not None
    process.stdin.close()  # the request made another way
    assert stop_child(process, None, grace_s=10) == 3


def test_an_ended_child_is_left_as_it_ended() -> None:
    process = _started("print('ready', flush=True)")
    process.wait()
    assert stop_child(process, signal.SIGTERM, grace_s=0.1) == 0
