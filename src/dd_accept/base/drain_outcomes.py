"""How a stream in flight at an endpoint's stop ended: the drain contract's vocabulary.

Shared by the drain checks (which judge) and the HTML report (which draws the drain
chart), so the chart can never colour a stream differently from the verdict. See
`acceptance.drain_checks` for the contract each outcome comes from.
"""

from __future__ import annotations

from collections.abc import Iterable

from dd_accept.base.events import ClientRequest, UpstreamAttempt

MARKS = "drain-marks.jsonl"  # when each stop began (and was forced): the drain chart's axis marks
FORCE_TOLERANCE_S = 0.5  # a cut this close before the KILL counts as caused by it
# A stream that ended this close before the stop's recorded moment may have been ended by it:
# slurmstepd writes its line of TERM's delivery a moment after delivering it, and an endpoint
# that answers TERM at once is read ending first (CI: a [DONE] made up at TERM read 1.5 ms
# before the line's moment, and the stop was taken for one that came after every stream).
STOP_RECORD_TOLERANCE_S = 0.25
WINDOW_TOLERANCE_S = 0.5  # a cut this close before the window's end counts as the endpoint's bound
# A cut this long after the window's end still counts as the endpoint's bound (its timer and
# the cut's way to the client on a busy machine): half the way from a 10 s window to its
# 12 s allowance. Later, the endpoint drained beyond its window ("overran").
WINDOW_OVERRUN_S = 1.0
# A bounded stream's last event arrived at most this long before its cut: it was flowing
# until the endpoint ended it (above the 1.2 s a loaded machine was seen to stall a stream);
# one silent longer was held, not drained.
FLOWING_S = 2.0
GOOD_OUTCOMES = frozenset({"completed", "bounded"})


def classify(
    stream: ClientRequest, stop_at: float, forced_at: float | None, window_s: float | None = None, whole: bool = True
) -> str:
    """How one stream in flight at the stop ended. `whole`: a replica generated it to its end
    and the client read every event of it (whole_streams); a [DONE] after fewer is no
    completion: the endpoint ended the stream early, however it said so."""
    if stream.done and stream.outcome == "ok" and whole:
        return "completed"
    if stream.t < stop_at - STOP_RECORD_TOLERANCE_S:
        return "ended before the stop"
    if forced_at is not None and stream.t >= forced_at - FORCE_TOLERANCE_S:
        return "forced"
    if window_s is not None and stream.t - stop_at >= window_s - WINDOW_TOLERANCE_S:
        if stream.t - stop_at > window_s + WINDOW_OVERRUN_S:
            return "overran"
        last = last_event_at(stream)
        return "bounded" if last is None or stream.t - last <= FLOWING_S else "stalled"
    return "lost"


def kill_that_reached(
    forced_at: float | None, stop_at: float, exit_code: int | None, exited_after_s: float
) -> float | None:
    """The harness's KILL (`forced_at`), unless Slurm recorded the task's own exit 0 before it:
    srun, the launcher the harness waits on, can outlive its task on a busy node, and a KILL
    sent then reaches nothing of the endpoint's (a killed task never exits 0). One reading for
    the verdict, the drain chart's marks and the telemetry drain phase alike."""
    if forced_at is not None and exit_code == 0 and stop_at + exited_after_s < forced_at:
        return None
    return forced_at


def whole_streams(streams: Iterable[ClientRequest], upstream: Iterable[UpstreamAttempt]) -> set[str]:
    """The request ids whose stream a replica generated whole (200, written to its end) and
    the client read event for event: the replicas' records, not the [DONE] the client got,
    say whether a stream completed."""
    written: dict[str, set[int]] = {}
    for attempt in upstream:
        if attempt.request_id and attempt.generated_whole:
            written.setdefault(attempt.request_id, set()).add(attempt.data_events)
    return {
        stream.request_id
        for stream in streams
        if stream.request_id and stream.chunks is not None and stream.chunks in written.get(stream.request_id, ())
    }


def last_event_at(stream: ClientRequest) -> float | None:
    """When the stream's last data event arrived (wall clock), from the client's record."""
    if stream.started is None or stream.ttft_s is None:
        return None
    offsets = stream.chunk_offsets_s or [0.0]
    return float(stream.started) + float(stream.ttft_s) + float(offsets[-1])
