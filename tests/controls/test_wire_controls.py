"""Controls for the wire checks, each asserting the numbers behind its verdict.

rc1 forwards bytes as it reads them and lets an exception from a broken upstream body break
the client's body: it passes every wire check. Each variant mishandles one fault and is
caught by the check for it, for its reason, while the checks nearest its patch still pass
(each control runs those parts only; rc1's runs them all):
- reframes-per-read (one event per line of each read): a frame split over two TCP reads goes
  out as two, and split_frames sees other events and bytes than were forwarded;
- clean-end-on-upstream-error: a cut stream ends cleanly without [DONE], cut_visible's
  silent truncation;
- holds-cut-streams-open: a cut stream is kept open with a keep-alive comment a second, so no
  wait for bytes ends it: the client gives up at its own bound, cut_visible's hang;
- drops-error-events: the in-stream error never reaches the client, error_event;
- sends-only-the-error: the error reaches the client, the tokens before it do not, error_event;
- retries-mid-stream: a cut stream is resumed from another replica, no_retry_after_first_byte;
- short-read-timeout (1 s, its profile still saying 3600 s): a 10 s silence ends the stream,
  stall_survived;
- reads-to-end-after-hangup: the proxy keeps reading a stream whose client left, so each
  generation runs to its last token for nobody, cancel_stops_generation;
- gathers-for-slow-readers: the proxy reads each stream into a queue as fast as it comes, so
  what a slow client has not taken gathers in it, slow_reader_bounded;
- bounds-whole-response (6 s for a whole response, its silences still bounded at 3600 s): each
  8 s stream over the slow link is cut 6 s in, slow_link_survived, while frames split in two
  still pass split_frames (its 10 s stalls are cut too: a stream that long is past its bound).
"""

import pytest

from dd_accept.acceptance.wire import WireOptions, run_wire
from dd_accept.acceptance.wire_checks import SLOW_READER_BOUND_MIB
from dd_accept.base.progress import ProgressWriter
from dd_accept.deployment import RunDirectory
from tests.controls.controls import run_with_fault
from tests.helpers import assert_the_dry_run_planned_what_the_run_did

pytestmark = pytest.mark.cluster
OPTIONS = WireOptions()
STREAMS = OPTIONS.streams
WIRE_CHECKS = {"wire.split_frames", "wire.cut_visible", "wire.error_event", "wire.stall_survived"}
WIRE_CHECKS |= {"wire.no_retry_after_first_byte", "wire.cancel_stops_generation", "wire.slow_reader_bounded"}
WIRE_CHECKS |= {"wire.slow_link_survived"}


def _wire(allocation, run, profile, progress):
    return run_wire(allocation, run, profile, OPTIONS, progress)


def _wire_judging(*chosen):
    """The wire scenario with only the parts the `chosen` checks need (as `--check` runs it)."""
    return lambda allocation, run, profile, progress: run_wire(
        allocation, run, profile, OPTIONS, progress, checks=chosen
    )


def _not_passed(checks):
    return "\n".join(f"{c.id} {c.verdict}: {c.observed} | {c.detail}" for c in checks.values() if c.verdict != "pass")


def _the_others_pass(checks, failing):
    others = {k: c for k, c in checks.items() if k != failing}
    assert all(c.verdict == "pass" for c in others.values()), _not_passed(others)


def test_rc1_passes_every_wire_check(sut_allocation, sut_profile, sut_cluster):
    result = _wire(sut_allocation, RunDirectory.create(sut_cluster), sut_profile, ProgressWriter(None, "wire"))
    checks = {c.id: c for c in result.checks}
    assert set(checks) == {*WIRE_CHECKS, "wire.ledger.answered_once", "wire.ledger.delivered"}
    assert all(c.verdict == "pass" for c in checks.values()), _not_passed(checks)
    split = checks["wire.split_frames"]
    # every data chunk of every stream split (16 tokens and the finish event; [DONE] may ride along)
    assert split.metrics["streams"] == STREAMS and split.metrics["frames_split"] >= STREAMS * OPTIONS.tokens, split
    cut = checks["wire.cut_visible"]
    assert cut.observed == f"{STREAMS} streams cut after {OPTIONS.after_events} event(s): {STREAMS} error", cut
    errors = checks["wire.error_event"]
    assert errors.metrics == {
        "streams": STREAMS, "errors_lost": 0, "streams_differing": 0, "events_lost_before_error": 0
    }, errors  # fmt: skip
    stall = checks["wire.stall_survived"]
    assert stall.observed == f"{STREAMS} streams silent 10s mid-way: {STREAMS} whole", stall  # rc1 declares 3600 s
    once = checks["wire.no_retry_after_first_byte"]
    assert once.observed.endswith(f"the replicas saw {2 * STREAMS} once"), once
    # each stream the client left after 4 events stopped at its replica, long before its 200th token
    left = checks["wire.cancel_stops_generation"]
    assert left.observed == f"{STREAMS} streams left after {OPTIONS.after_events} events: {STREAMS} stopped", left
    assert left.metrics["events_generated_max"] < OPTIONS.hangup_tokens / 2, left
    # a client reading 64 MiB streams at 256 KiB/s: rc1 waits for it (each write drains), and
    # holds a few MiB of buffers beyond its size before the streams (16 KiB events)
    slow = checks["wire.slow_reader_bounded"]
    print("rc1 slow reader:", slow.observed)
    reader = OPTIONS.slow_reader
    assert slow.metrics["streams"] == reader.streams and slow.metrics["proxy_grew_mib"] <= 16, slow
    assert slow.metrics["client_read_mib"] >= reader.streams * reader.events / 64, slow
    # 128 KiB streams over a link whose rate takes 8 s for one (each chunk held 50 +- 40 ms):
    # every one whole at the client, however long the link took
    link = checks["wire.slow_link_survived"]
    print("rc1 slow link:", link.observed)
    assert f"over the link: {STREAMS} whole; a bound on a whole response longer than" in link.observed, link
    assert OPTIONS.slow_link.stream_s <= link.metrics["stream_s_max"] <= 2 * OPTIONS.slow_link.stream_s, link
    assert_the_dry_run_planned_what_the_run_did(sut_cluster.records, scenario="wire", job=sut_allocation.job_id)


# Each control runs the part its fault is about and the parts of the checks it must leave
# passing: those nearest its patch (as health's controls do; rc1's control above runs all).
@pytest.mark.parametrize(
    ("fault", "failing", "reason", "kept"),
    [
        ("reframes-per-read", "wire.split_frames", "treats a TCP read as a frame", ("wire.error_event",)),
        ("clean-end-on-upstream-error", "wire.cut_visible", "silent truncation", ("wire.error_event",)),
        ("holds-cut-streams-open", "wire.cut_visible", "stayed open until the client gave up", ("wire.error_event",)),
        ("drops-error-events", "wire.error_event", "drops the error", ("wire.cut_visible",)),
        ("sends-only-the-error", "wire.error_event", "events before the error lost", ("wire.cut_visible",)),
        ("retries-mid-stream", "wire.no_retry_after_first_byte", "generated again", ("wire.cut_visible",)),
        ("short-read-timeout", "wire.stall_survived", "gave up on a stream silent for 10s", ("wire.split_frames",)),
        ("reads-to-end-after-hangup", "wire.cancel_stops_generation", "ran on after its client left",
         ("wire.split_frames",)),
        ("gathers-for-slow-readers", "wire.slow_reader_bounded", "gathered what its slow reader had not taken",
         ("wire.cancel_stops_generation", "wire.cut_visible")),
        ("bounds-whole-response", "wire.slow_link_survived", "slow but alive", ("wire.split_frames",)),
    ],
)  # fmt: skip
def test_each_mishandled_fault_is_caught_by_its_check(
    sut_wheelhouse, sut_image, sut_profile, tmp_path, fault, failing, reason, kept
):
    wire = _wire_judging(failing, *kept)
    checks = run_with_fault(wire, fault, sut_wheelhouse, sut_image, sut_profile, tmp_path)
    assert set(checks) == {failing, *kept}, "judged: the fault's check and those it must leave passing"
    caught = checks[failing]
    assert caught.verdict == "fail" and reason in caught.detail, caught
    numbers = {
        "wire.split_frames": ("streams_differing", STREAMS),
        "wire.cut_visible": ("silently_truncated", STREAMS),
        "wire.error_event": ("errors_lost", STREAMS),
        "wire.no_retry_after_first_byte": ("retried_mid_stream", STREAMS),  # each cut stream, once more
        "wire.stall_survived": ("streams_broken", STREAMS),
        "wire.cancel_stops_generation": ("generated_to_the_end", STREAMS),  # each to its last token
        "wire.slow_link_survived": ("streams_broken", STREAMS),  # each at the proxy's 6 s bound
    }
    if failing == "wire.slow_reader_bounded":  # held what the replicas wrote unpaced, far past the bound
        print("gathers-for-slow-readers:", caught.observed)
        assert caught.metrics["proxy_grew_mib"] > 2 * SLOW_READER_BOUND_MIB, caught
    else:  # the error told, the tokens before it lost, or the stream held open: a metric of its own
        metric, count = {"sends-only-the-error": ("events_lost_before_error", STREAMS),
                         "holds-cut-streams-open": ("hung", STREAMS)}.get(fault, numbers[failing])  # fmt: skip
        assert caught.metrics[metric] == count, caught
    if fault == "bounds-whole-response":  # cut at its bound, before the link was done with any stream
        print("bounds-whole-response:", caught.observed, caught.detail)
        assert 5.5 <= caught.metrics["cut_after_s"] < OPTIONS.slow_link.stream_s, caught
    _the_others_pass(checks, failing)
