"""What a person at an 80-column terminal sees during `dd-accept run`: a live progress line
(the phase, the numbers, the elapsed time) redrawn in place, then the results drawn as a
table that fits 80 columns with every check id whole. What a CI log sees of a run piped to a
file is asserted on the piped live-canary run (tests/controls/test_live_canaries.py)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time

import pytest

pytestmark = pytest.mark.cluster

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")


def _run_on_a_terminal(argv: list[str], columns: int = 80, rows: int = 24, timeout: float = 900) -> tuple[int, str]:
    """Run `argv` with a pseudo-terminal of `columns` x `rows` as its stdin, stdout and
    stderr; return its exit status and everything it drew."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(columns), "LINES": str(rows)}
    env.pop("NO_COLOR", None)
    process = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    drawn, deadline = bytearray(), time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the terminal closed: the process has ended
                    break
                if not chunk:
                    break
                drawn += chunk
            elif process.poll() is not None:
                break
        return process.wait(timeout=30), drawn.decode(errors="replace")
    finally:
        if process.poll() is None:
            process.kill()
        os.close(master)


def test_a_person_at_an_80_column_terminal_sees_live_progress_and_a_table_that_fits(tmp_path):
    code, drawn = _run_on_a_terminal(
        [sys.executable, "-m", "dd_accept.harness.cli", "run", "streaming", "--out", str(tmp_path / "out")]
    )
    assert code == 0, drawn[-3000:]
    assert "\x1b[" in drawn, "a terminal gets colour and a redrawn status line"
    assert "\x1b[?25l" in drawn, "the live status hides the cursor while it redraws"
    progress = re.findall(r"streaming: [a-z][^\n\r\x1b]*?\[\d+s\]", drawn)
    assert len(set(progress)) >= 4, progress[:10]  # the phases, one after another, with elapsed seconds
    lines = [line for line in ANSI.sub("", drawn.replace("\r\n", "\n")).split("\n")]
    table = [line for line in lines if line.startswith(("┃", "│", "┏", "┡", "└", "┗", "┌"))]
    assert table, "the results are drawn as a table"
    assert max(len(line) for line in table) <= 80, max(table, key=len)
    for check_id in ("streaming.integrity", "streaming.no_buffering", "streaming.connection_accounting"):
        assert any(check_id in line for line in table), f"{check_id} is folded or missing"
    metrics = [line for line in table if line.startswith("│ TTFT p99 ms")]
    assert metrics and all("…" not in line for line in metrics), metrics  # every value legible at 80 columns
    assert re.search(r"│ TTFT p99 ms\s+│\s+\d", metrics[0]), metrics
    assert " | " not in "\n".join(table), "a terminal gets the drawn table, not the CI log's lines"
