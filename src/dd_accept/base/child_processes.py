"""Stopping a child process the harness started, so that no stop leaves one behind."""

from __future__ import annotations

import subprocess


def stop_child(process: subprocess.Popen, signal_number: int | None, grace_s: float) -> int:
    """Ask the child to stop (`signal_number`; None when it was already asked another way,
    such as its stdin closed) and KILL it once `grace_s` has passed: a child that ignores
    the request is still reaped, never left running after the harness."""
    if process.poll() is None:
        if signal_number is not None:
            process.send_signal(signal_number)
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode
