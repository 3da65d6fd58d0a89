"""When the client takes an event to have arrived: when a reader could use it, at the blank
line that ends it, not at its data line (a proxy holding back an event's end holds it)."""

from dd_accept.node.loadclient.sse import SseTally


def test_an_event_is_timed_at_the_blank_line_that_ends_it():
    tally = SseTally()
    tally.feed(b"data: {}\n", 1.0)
    tally.feed(b"\n", 2.5)  # its end written with (or before) the next event
    tally.feed(b"data: {}\n\n", 2.6)
    tally.end(3.0)
    assert tally.chunks == 2 and tally.first == 2.5 and tally.offsets == [0.0, 0.1]


def test_an_event_without_its_blank_line_ends_at_the_next_data_line_or_the_body_end():
    tally = SseTally()
    tally.feed(b"data: a\n", 1.0)
    tally.feed(b"data: b\n", 1.5)
    tally.feed(b"data: [DONE]\n", 2.0)
    tally.end(2.25)
    assert (tally.chunks, tally.done) == (2, True) and tally.offsets == [0.0, 0.5]
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
    record = tally.request(0.5, mode="raw", record=0, attempt=0, outcome="error", request_id="x")
    assert record.chunks == 1 and record.ttft_s == 0.5
