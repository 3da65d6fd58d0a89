"""How a stream in flight at an endpoint's stop ended: the drain contract's vocabulary.

Shared by the drain checks (which judge) and the HTML report (which draws the drain
chart), so the chart can never colour a stream differently from the verdict. See
`acceptance.drain_checks` for the contract each outcome comes from.
"""

from __future__ import annotations

from dd_accept.base.events import ClientRequest

MARKS = "drain-marks.jsonl"  # when each stop began (and was forced): the drain chart's axis marks
FORCE_TOLERANCE_S = 0.5  # a cut this close before the KILL counts as caused by it
WINDOW_TOLERANCE_S = 0.5  # a cut this close before the window's end counts as the endpoint's bound
FLOWING_S = 1.0  # a bounded stream's last event arrived at most this long before its cut
GOOD_OUTCOMES = frozenset({"completed", "bounded"})


def classify(stream: ClientRequest, stop_at: float, forced_at: float | None, window_s: float | None = None) -> str:
    if stream.done and stream.outcome == "ok":
        return "completed"
    if stream.t < stop_at:
        return "ended before the stop"
    if forced_at is not None and stream.t >= forced_at - FORCE_TOLERANCE_S:
        return "forced"
    if window_s is not None and stream.t - stop_at >= window_s - WINDOW_TOLERANCE_S:
        last = last_event_at(stream)
        return "bounded" if last is None or stream.t - last <= FLOWING_S else "stalled"
    return "lost"


def last_event_at(stream: ClientRequest) -> float | None:
    """When the stream's last data event arrived (wall clock), from the client's record."""
    if stream.started is None or stream.ttft_s is None:
        return None
    offsets = stream.chunk_offsets_s or [0.0]
    return float(stream.started) + float(stream.ttft_s) + float(offsets[-1])
