"""When the client takes an event to have arrived: when a reader could use it, at the blank
line that ends it, not at its data line (a proxy holding back an event's end holds it)."""

import dataclasses
import itertools

from hypothesis import example, given, settings
from hypothesis import strategies as st

from dd_accept.base.wall_clock import WallAnchor
from dd_accept.node.loadclient.sse import SseTally


def test_an_event_is_timed_at_the_blank_line_that_ends_it():
    tally = SseTally()
    tally.feed(b"data: {}\n", 1.0)
    tally.feed(b"\n", 2.5)  # its end written with (or before) the next event
    tally.feed(b"data: {}\n\n", 2.6)
    tally.end(3.0)
    assert tally.chunks == 2 and tally.first == 2.5 and tally.offsets == [0.0, 0.1]


def test_data_lines_before_a_blank_line_are_one_event_as_an_sse_reader_joins_them():
    """The SSE format: an event's data may span lines, joined by the reader; only the blank
    line dispatches it. A proxy that drops the blank lines between events merges them (an
    OpenAI client would read one event that is not JSON): counted as the reader would."""
    tally = SseTally()
    tally.feed(b'data: {"a":\n', 1.0)
    tally.feed(b"data: 1}\n", 1.5)
    tally.feed(b"\n", 1.6)
    tally.feed(b"data: [DONE]\n\n", 2.0)
    tally.end(2.25)
    assert (tally.chunks, tally.payload, tally.done, tally.first) == (1, len(b'{"a":') + len(b"1}"), True, 1.6)
    merged = SseTally()
    merged.feed(b"data: a\n", 1.0)
    merged.feed(b"data: b\n", 1.5)
    merged.feed(b"data: [DONE]\n", 2.0)
    merged.end(2.25)
    assert (merged.chunks, merged.done) == (1, True) and merged.first == 2.0


def test_an_event_without_its_blank_line_ends_at_the_body_end():
    last = SseTally()
    last.feed(b"data: a\n\ndata: b\n", 1.0)
    last.end(1.75)
    assert last.chunks == 2 and last.offsets == [0.0, 0.75]


def test_events_read_whole_are_timed_at_their_read():
    tally = SseTally()
    tally.feed(b"data: a\n\ndata: b\n\n", 1.0)
    tally.feed(b": keep-alive\n\ndata: c\r\n\r\n", 1.2)
    tally.end(1.3)
    assert tally.chunks == 3 and tally.offsets == [0.0, 0.0, 0.2]
    assert [round(g, 6) for g in tally.gaps] == [0.0, 0.2]


def test_a_crlf_split_across_two_reads_is_one_line_end_not_a_blank_line():
    tally = SseTally()
    tally.feed(b"data: a\r", 1.0)
    tally.feed(b"\n", 1.1)  # the rest of the data line's CRLF, not the event's end
    tally.feed(b"\r\n", 2.0)  # the blank line
    tally.feed(b"data: b\r\n\r\n", 2.5)
    tally.end(3.0)
    assert tally.chunks == 2 and tally.first == 2.0 and tally.offsets == [0.0, 0.5]


def test_an_event_whose_end_never_came_is_timed_at_its_data_line_in_the_record():
    """A body that broke (an exception, no end()): the record still times every counted event,
    as read, so TTFT and the drain's timing see it."""
    tally = SseTally()
    tally.feed(b"data: a\n", 1.0)
    record = tally.request(_clock_at(0.5), mode="raw", record=0, attempt=0, outcome="error", request_id="x")
    assert record.chunks == 1 and record.ttft_s == 0.5


def test_an_event_named_error_is_an_error_whatever_its_data_and_wherever_its_name_stands():
    """The SSE event type: `event: error` before (or after) the event's data line makes the
    event an error a client sees, as an error object in its data does; the name ends with the
    event's blank line, so the next event is a token again."""
    tally = SseTally()
    tally.feed(b'event: error\ndata: {"message":"upstream lost"}\n\n', 1.0)
    tally.feed(b'data: {"t":1}\n\n', 1.1)  # the fast path, after a named event
    tally.feed(b"event: error\n", 1.2)  # the name in one read, its data (fast path) in the next
    tally.feed(b'data: {"m":1}\n\n', 1.3)
    tally.feed(b'data: {"m":2}\nevent: error\n\n', 1.4)  # named after its data line
    tally.feed(b'event: error\ndata: {"error":{}}\n\n', 1.5)  # named and an error object: one error
    tally.feed(b"event: error\n\n", 1.6)  # a name with no data: no event
    tally.feed(b'data: {"t":2}\n\n', 1.7)
    tally.end(1.8)
    assert (tally.chunks, tally.errors) == (6, 4)


class LinesOnly(SseTally):
    """The tally without its one-whole-event fast path: every read split into lines."""

    def feed(self, data: bytes, now: float) -> None:
        self.size += len(data)
        self._feed_lines(data, now)


_EVENT = st.one_of(
    st.binary(max_size=12).filter(lambda b: b"\n" not in b and b"\r" not in b).map(lambda b: b"data: " + b),
    st.sampled_from([b"data: [DONE]", b"data:[DONE]", b"data:  [DONE] ", b"data: [DONE]x", b"data:"]),
    st.just(b"data:x"),
    st.just(b": keep-alive"),
    st.just(b"event: message"),
    st.just(b"event: error"),
    st.just(b'data: {"error":{}}'),
)
_LINE_END = st.sampled_from([b"\n", b"\n", b"\r\n", b"\r"])  # LF twice as often: what proxies write


@settings(max_examples=300, deadline=None)
@given(
    # each line's end, and whether a blank line ends its event (a proxy may drop or delay it)
    events=st.lists(st.tuples(_EVENT, _LINE_END, st.sampled_from([True, True, False])), max_size=12),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=10),
    ended=st.booleans(),
    per_event=st.booleans(),  # also cut at every event's end: the reads the fast path takes
)
# two events, one LF
@example(events=[(b"data: a", b"\r", True), (b"data: b", b"\n", True)], cuts=[], ended=True, per_event=False)
# no blank line
@example(events=[(b"data: a", b"\n", False), (b"data: b", b"\n", True)], cuts=[8], ended=True, per_event=False)
# the common case, read by read
@example(events=[(b"data: a", b"\n", True)] * 3, cuts=[9, 18], ended=False, per_event=False)
# a read that ends mid-line
@example(events=[(b"data: data: q", b"\n", True)], cuts=[6], ended=True, per_event=False)
def test_the_fast_path_for_whole_events_concludes_what_the_line_loop_does(events, cuts, ended, per_event):
    pieces = [line + eol + (eol if blank else b"") for line, eol, blank in events]
    body = b"".join(pieces)
    ends = set(itertools.accumulate(len(piece) for piece in pieces)) if per_event else set()
    points = sorted({c % (len(body) + 1) for c in cuts} | ends | {0, len(body)})
    reads = [body[a:b] for a, b in itertools.pairwise(points)]
    fast, lines = SseTally(), LinesOnly()
    for step, data in enumerate(reads):
        fast.feed(data, 1.0 + step * 0.0123)
        lines.feed(data, 1.0 + step * 0.0123)
    if ended:
        fast.end(9.0)
        lines.end(9.0)
    seen = (fast.chunks, fast.errors, fast.done, fast.size, fast.first, fast.last, fast.gaps, fast.offsets,
            fast.pending, fast.open)  # fmt: skip
    assert seen == (
        lines.chunks, lines.errors, lines.done, lines.size, lines.first, lines.last, lines.gaps, lines.offsets,
        lines.pending, lines.open,
    )  # fmt: skip
    attempt = {"mode": "wire", "record": 0, "attempt": 0, "outcome": "ok"}
    assert dataclasses.replace(
        fast.request(_clock_at(0.5), **attempt), t=0.0, started=0.0, latency_s=0.0
    ) == dataclasses.replace(lines.request(_clock_at(0.5), **attempt), t=0.0, started=0.0, latency_s=0.0)


def test_one_event_per_read_takes_the_fast_path_and_counts_as_the_line_loop():
    tally = SseTally()
    for step in range(3):
        tally.feed(b'data: {"t":1}\n\n', 1.0 + step * 0.005)
    tally.feed(b"data: [DONE]\n\n", 1.02)
    tally.end(1.03)
    assert (tally.chunks, tally.done, tally.offsets) == (3, True, [0.0, 0.005, 0.01])


def _clock_at(mono: float) -> WallAnchor:
    """A wall-clock reading taken at monotonic moment `mono` (the tallies here are fed made-up
    monotonic times)."""
    clock = WallAnchor()
    clock.mono = mono
    return clock
