"""How a step's tasks ended, as Slurm itself recorded it.

A drain verdict rests on the endpoint task's exit status, so it is read from Slurm, never
inferred from silence: `srun` prints nothing for a task that exits 0, so "no message" is
not "exit 0". The docker cluster's nodes log each task's end through slurmstepd (at
`SlurmdDebug=verbose`, into `SLURMD_LOG`); a site's cluster answers through `sacct`.
When neither has a record, the exit is unknown, and checks treat unknown as a failure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

SLURMD_LOG = "/var/log/slurm/slurmd.log"  # SlurmdLogFile in the docker cluster's slurm.conf
# A site's record of a step's end: slurmctld's moment of completion, in whole seconds, on the
# controller's clock (not the node's, nor the login node's a drill marks its own moments on).
SACCT = "sacct"

# [2026-11-30T05:36:50.121] [1.3] Sent signal 9 to StepId=1.3
_SIGNAL_SENT = re.compile(r"^\[(?P<at>[0-9T:.-]+)\] \[(?P<step>\d+\.\d+)\] Sent signal (?P<signal>\d+) to StepId=")
# [2026-11-30T05:36:18.055] [1.0] task 0 (35) exited with exit code 0.
# [2026-11-30T05:36:50.121] [1.3] task 0 (68) exited. Killed by signal 9.
_TASK_END = re.compile(
    r"^\[(?P<at>[0-9T:.-]+)\] \[(?P<step>\d+\.\d+)\] task (?P<task>\d+) \(\d+\) exited"
    r"(?: with exit code (?P<code>\d+)|\. Killed by signal (?P<signal>\d+))"
)


@dataclass(frozen=True, slots=True)
class StepExit:
    """The worst task exit of a step (128 + signal for a task killed by a signal) and the
    moment the last task ended (epoch seconds), with where it was read."""

    exit_code: int
    ended_at: float | None
    source: str


def _epoch(stamp: str) -> float | None:
    try:
        return datetime.fromisoformat(stamp).replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def from_slurmd_log(text: str, step: str) -> StepExit | None:
    """The exit of `step` (JOB.STEP) from a slurmd log; None when no task end is logged."""
    codes: list[int] = []
    times: list[float] = []
    for line in text.splitlines():
        match = _TASK_END.match(line)
        if match is None or match["step"] != step:
            continue
        codes.append(int(match["code"]) if match["code"] is not None else 128 + int(match["signal"]))
        if (at := _epoch(match["at"])) is not None:
            times.append(at)
    if not codes:
        return None
    return StepExit(max(codes), max(times) if times else None, "slurmd step record")


def signal_sent_at(text: str, step: str, signal: int) -> float | None:
    """When slurmstepd delivered `signal` to the step's tasks (the first time), from a slurmd
    log: the node's own moment of TERM, not the harness's."""
    sent = signals_sent(text, step, signal)
    return sent[0] if sent else None


def signals_sent(text: str, step: str, signal: int) -> tuple[float, ...]:
    """Every moment slurmstepd delivered `signal` to the step's tasks, in the log's order. One
    `scancel --signal=TERM` is one delivery, except where scancel itself repeats its request
    (`signal_requests`): then two, milliseconds apart (and rc1 exits 1 on a second TERM while
    it drains)."""
    matches = [m for line in text.splitlines() if (m := _SIGNAL_SENT.match(line)) is not None]
    times = [_epoch(m["at"]) for m in matches if m["step"] == step and int(m["signal"]) == signal]
    return tuple(at for at in times if at is not None)


# scancel: Signal 15 to step 1.3   (scancel --verbose, once per request it sends)
_SIGNAL_REQUEST = re.compile(r"\bSignal (?P<signal>\d+) to step (?P<step>\S+)$")
_RETRIED = "Job is in transitional state, retrying"


def signal_requests(scancel_stderr: str, step: str, signal: int) -> int:
    """How many requests one `scancel --verbose --signal=S JOB.STEP` sent to signal the step
    (a verbose line each, less those it repeated because Slurm refused the last in a
    transitional state). More than one: scancel itself signalled the step again. Slurm 22.05
    to 26.05 do whenever a job submitted after this one is pending: `_verify_job_ids` keeps
    `job_found` set past the matched record, so the later pending record marks the step id
    pending too, and both passes of `_cancel_jobs` (pending, then every job) signal it.
    Pinned per release by the semantics test (h); on a login node, the only count there is."""
    lines = scancel_stderr.splitlines()
    sent = sum(
        1 for line in lines if (m := _SIGNAL_REQUEST.search(line)) and m["step"] == step and int(m["signal"]) == signal
    )
    return max(0, sent - sum(1 for line in lines if _RETRIED in line))


# A step still running reports "0:0|Unknown|RUNNING": only a terminal state has an exit.
_TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED")


def from_sacct(text: str) -> StepExit | None:
    """The exit of a step from `sacct -n -P -o ExitCode,End,State -j JOB.STEP`
    ("code:signal|end|state"); None unless the step has ended."""
    for line in text.splitlines():
        exit_field, end, state = ([*line.strip().split("|"), "", ""])[:3]
        code, _, signal = exit_field.partition(":")
        if not code.isdigit() or not signal.isdigit() or not state.startswith(_TERMINAL):
            continue
        exit_code = 128 + int(signal) if int(signal) else int(code)
        ended = None
        if end and end not in {"Unknown", "None"}:
            try:
                ended = datetime.fromisoformat(end).astimezone(UTC).timestamp()
            except ValueError:
                ended = None
        return StepExit(exit_code, ended, SACCT)
    return None
