"""A wall clock stepped in the middle of every stream moves no moment of a record against
another (`base.wall_clock`): the client's read of each chunk still pairs with the replica's
write of it within milliseconds, and each record ends after it began.

NTP, chrony's `makestep` or a paused virtual machine catching up step the wall clock of every
process on a node at once; CI once saw a 1.04 s step fail rc1's no-buffering check (every
sparse stream's first two events "held" 1.04 s) and empty a drain check's in-flight set. Here
the step is made the same way for both sides: the replica (a local process) and this test's
client read `time.time` through a clock that jumps by STEP_S at one moment of the monotonic
clock, which the two processes share (one kernel). The processes' own wall clock is the only
thing changed: nothing needs the right to set the machine's clock.
"""

import asyncio
import time

import pytest

from dd_accept.acceptance.analysis import chunk_delays
from dd_accept.base.events import ClientRequest, EventWriter, UpstreamAttempt, of_type, read_event_file
from dd_accept.node.loadclient.raw import run_raw
from dd_accept.node.loadclient.wire import run_wire
from dd_accept.node.loadclient.workload import Workload

STEP_S = 1.0  # the size of CI's step, rounded
STREAMS, TOKENS, ITL_MS = 8, 8, 120  # ~0.9 s streams; the step lands 0.4 s into all of them

# Loaded by the replica's interpreter at start-up (a `sitecustomize` on its PYTHONPATH).
_STEPPED_CLOCK = """
import os, time
_real, _at, _by = time.time, float(os.environ["STEP_AT_MONO"]), float(os.environ["STEP_BY_S"])
time.time = lambda: _real() + (_by if time.monotonic() >= _at else 0.0)
open(os.environ["STEP_MARK"], "w").close()
"""
REAL_TIME = time.time


def _stepping_at(at: float):
    return lambda: REAL_TIME() + (STEP_S if time.monotonic() >= at else 0.0)


@pytest.mark.parametrize(
    ("program", "run_client"),
    [("dd_accept.node.replica.paced", run_wire), ("dd_accept.node.replica.server", run_raw)],
    ids=["paced-wire", "asgi-raw"],
)
def test_a_wall_clock_step_mid_stream_moves_no_chunk_against_its_pair(
    local_replica, tmp_path, monkeypatch, program, run_client
):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_STEPPED_CLOCK)
    replica_events, mark = tmp_path / "replica.jsonl", tmp_path / "replica-clock-installed"
    at = time.monotonic() + 4.0  # the replica starts in about a second; then the streams, then the step
    environment = {"STEP_BY_S": str(STEP_S), "STEP_MARK": str(mark), "STEP_AT_MONO": repr(at)}
    options = ("--ttft-ms", "20", "--itl-ms", str(ITL_MS), "--events", str(replica_events))
    replica = local_replica(*options, python_path=(site,), environment=environment, program=program)
    monkeypatch.setattr(time, "time", _stepping_at(at))
    wait = at - 0.4 - time.monotonic()
    assert wait > 0, "the replica took too long to start: the step would not land mid-stream"
    time.sleep(wait)

    wall_before, mono_before = time.time(), time.monotonic()
    client_events = tmp_path / "client.jsonl"
    writer = EventWriter(client_events, source="client")
    workload = Workload(
        endpoint=replica.url, records=STREAMS, concurrency=STREAMS, max_tokens=TOKENS, max_record_attempts=1
    )
    summary = asyncio.run(run_client(workload, writer))
    writer.close()
    mono_after = time.monotonic()
    time.sleep(0.2)  # the replica writes its record after the last chunk
    assert summary["completed"] == STREAMS
    assert abs(summary["wall_clock_step_s"] - STEP_S) < 0.01, "the client's summary is the evidence of the step"
    # the step happened, in both processes, while every stream was running
    assert mark.exists(), "the replica's clock was not the stepping one: the test tested nothing"
    assert mono_before + 0.2 < at < mono_after - 0.3
    assert abs((time.time() - wall_before) - (mono_after - mono_before) - STEP_S) < 0.25

    client = {r.request_id: r for r in of_type(read_event_file(client_events), ClientRequest)}
    served = of_type(read_event_file(replica_events), UpstreamAttempt)
    assert {a.request_id for a in served} == set(client) and len(client) == STREAMS
    for attempt in served:
        seen = client[attempt.request_id]
        delays = chunk_delays(seen, attempt)
        assert len(delays) == TOKENS + 1, delays
        # each chunk's read follows its write by milliseconds, before the step and after it
        assert all(-0.05 <= d < 0.25 for d in delays), delays
        # and each record ends on the clock it began on
        assert abs(seen.t - seen.started - seen.latency_s) < 0.001
        assert abs(attempt.t - attempt.started - attempt.duration_s) < 0.001
