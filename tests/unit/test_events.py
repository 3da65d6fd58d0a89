"""Typed events: what the node programs write is what the checks read, field for field; a
row that does not match its kind is refused, naming what is wrong."""

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dd_accept.base.events import (
    EVENT_TYPES,
    AdmissionChange,
    ClientRequest,
    EventFormatError,
    EventWriter,
    NodeChange,
    QueueGauge,
    RelayedResponse,
    StepChange,
    SutAttemptRecord,
    UpstreamAttempt,
    parse_event,
    read_event_file,
    readable_events,
    to_tenth_ms,
)

SAMPLES = [
    ClientRequest(mode="raw", record=3, attempt=1, outcome="ok", request_id="stream-3.1", started=10.0, status=200,
                  latency_s=0.5, ttft_s=0.02, chunks=13, bytes=2000, done=True, chunk_offsets_s=[0.0, 0.01]),
    AdmissionChange(event="request_limit_decreased", reason="rate_limited", limit=6, in_flight=8, cooldown_s=3.0),
    UpstreamAttempt(replica=2, path="/v1/chat/completions", outcome="cut", started=10.0, duration_s=4.0,
                    request_id="stream-3.1", status=200, first_byte_s=0.02, bytes=900, data_events=7),
    QueueGauge(waiting=5, running=2),
    NodeChange(node="node2", state="DOWN+NOT_RESPONDING"),
    StepChange(step="7.0", state="ended", job_state="NODE_FAIL"),
    SutAttemptRecord(phase="retry-429", backend="0", status="429", request_id="retry-429-3.0", attempt_started=10.0),
    RelayedResponse(request_id="reset-1.0", upstream=1, fault="reset", status=200, ended="reset", data_events=4,
                    bytes=320),
]  # fmt: skip


def test_every_kind_is_sampled():
    assert {type(sample) for sample in SAMPLES} == set(EVENT_TYPES.values())


def test_what_the_writer_writes_reads_back_as_the_same_event(tmp_path):
    path = tmp_path / "events.jsonl"
    writer = EventWriter(path, source="replica-2")
    for sample in SAMPLES:
        writer.write(sample)
    writer.close()
    read = read_event_file(path)
    assert [type(e) for e in read] == [type(s) for s in SAMPLES]
    for event, sample in zip(read, SAMPLES, strict=True):
        assert event.source == "replica-2" and event.t > 0
        assert dataclasses.replace(event, t=0.0, source="") == sample
    assert writer.counts == {sample.KIND: 1 for sample in SAMPLES}


def test_a_line_still_being_written_is_not_read(tmp_path):
    path = tmp_path / "events.jsonl"
    whole = json.dumps(QueueGauge(t=1.0, waiting=1, running=0).to_json())
    path.write_text(whole + "\n" + whole[:20])
    assert len(read_event_file(path)) == 1
    assert read_event_file(tmp_path / "not-yet.jsonl") == []


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"t": 1, "kind": "request", "mode": "raw", "record": 0, "attempt": 0, "outcome": "ok", "ttft": 0.1},
         "fields no ClientRequest has: ttft"),
        ({"t": 1, "kind": "upstream", "replica": 0, "path": "/", "outcome": "ok", "started": 1},
         "missing 1 required keyword-only argument: 'duration_s'"),
        ({"t": 1, "kind": "requests"}, "unknown event kind 'requests'"),
        ({"t": 1}, "unknown event kind None"),
    ],
    ids=["renamed-field", "missing-field", "unknown-kind", "no-kind"],
)  # fmt: skip
def test_a_row_that_does_not_match_its_kind_is_refused(row, message):
    with pytest.raises(EventFormatError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_event(row)


def test_the_report_skips_rows_it_cannot_read_instead_of_failing():
    rows = [QueueGauge(t=1.0, waiting=1, running=0).to_json(), {"kind": "queue", "depth": 3}, "not a row"]
    assert readable_events(rows) == [QueueGauge(t=1.0, waiting=1, running=0)]


@given(
    record=st.integers(0, 10**6),
    attempt=st.integers(0, 10),
    status=st.none() | st.integers(100, 599),
    outcome=st.sampled_from(["ok", "rate_limited", "http_error", "truncated", "error", "deadline"]),
    offsets=st.none() | st.lists(st.floats(0, 100, allow_nan=False), max_size=5),
)
def test_client_requests_round_trip_through_json(record, attempt, status, outcome, offsets):
    event = ClientRequest(mode="sut", record=record, attempt=attempt, status=status, outcome=outcome,
                          chunk_offsets_s=offsets)  # fmt: skip
    assert parse_event(json.loads(json.dumps(event.to_json()))) == event


@given(st.floats(min_value=0, max_value=100_000, allow_nan=False))
def test_a_chunk_offset_is_kept_to_a_tenth_of_a_millisecond_as_round_keeps_it(seconds):
    kept = to_tenth_ms(seconds)
    assert abs(kept - round(seconds, 4)) <= 1e-4 * (1 + 1e-9)  # one 0.1 ms step apart at most, near a half
    assert abs(kept - seconds) <= 0.5e-4 * (1 + 1e-9)
    assert len(repr(kept).partition(".")[2]) <= 4  # written as short as round's


def test_a_chunk_offset_off_a_tie_is_what_round_gives():
    assert [to_tenth_ms(s) for s in (0.00512345, 1.23456789, 0.0)] == [0.0051, 1.2346, 0.0]
