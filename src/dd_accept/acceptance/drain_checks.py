"""The drain checks, as pure functions of client stream events and step outcomes.

A stream that was in flight when an endpoint was told to stop ends one of three ways:
  completed — it ended with `[DONE]`;
  forced    — it was cut at or after the moment the allowance ran out and the harness
              forced the endpoint (KILL): expected for streams longer than the drain window;
  lost      — it was cut before that: the endpoint dropped work it had accepted.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from dd_accept.acceptance.analysis import Event, of_kind
from dd_accept.acceptance.results import CheckResult

MARKS = "drain-marks.jsonl"  # when each stop began (and was forced): the drain chart's axis marks
FORCE_TOLERANCE_S = 0.5  # a cut this close before the KILL counts as caused by it


@dataclass(frozen=True, slots=True)
class StepEnd:
    exit_code: int | None
    seconds_after_stop: float


def classify(stream: Event, stop_at: float, forced_at: float | None) -> str:
    if stream.get("done") and stream.get("outcome") == "ok":
        return "completed"
    if stream["t"] < stop_at:
        return "ended before the stop"
    if forced_at is not None and stream["t"] >= forced_at - FORCE_TOLERANCE_S:
        return "forced"
    return "lost"


def in_flight(events: list[Event], stop_at: float) -> list[Event]:
    """Streams that had started and not yet ended when the stop began."""
    return [e for e in of_kind(events, "request") if e.get("started", e["t"]) < stop_at <= e["t"]]


def _outcomes(streams: list[Event], stop_at: float, forced_at: float | None) -> Counter[str]:
    return Counter(classify(stream, stop_at, forced_at) for stream in streams)


def _show(counts: Counter[str]) -> str:
    return ", ".join(f"{value} {key}" for key, value in sorted(counts.items())) or "none"


def scancel_step(
    streams: list[Event], stop_at: float, endpoint: StepEnd, steps_left: list[str], window_s: float
) -> CheckResult:
    flying = in_flight(streams, stop_at)
    counts = _outcomes(flying, stop_at, None)
    ok = (
        bool(flying)
        and counts == Counter({"completed": len(flying)})
        and endpoint.exit_code == 0
        and endpoint.seconds_after_stop <= window_s
        and not steps_left
    )
    return CheckResult.judge(
        "drain.scancel_step",
        ok,
        f"every in-flight stream ends with [DONE]; the endpoint task exits 0 within {window_s:g}s; no step left",
        f"{len(flying)} in flight: {_show(counts)}; endpoint exit {endpoint.exit_code} after "
        f"{endpoint.seconds_after_stop:.1f}s; steps left: {', '.join(steps_left) or 'none'}",
        "stopped with scancel --signal=TERM JOB.STEP",
        {"streams_cut": len(flying) - counts.get("completed", 0), "endpoint_exit_s": endpoint.seconds_after_stop},
    )


def allowance(
    streams: list[Event], stop_at: float, forced_at: float | None, window_s: float, allowance_s: float
) -> CheckResult:
    flying = in_flight(streams, stop_at)
    counts = _outcomes(flying, stop_at, forced_at)
    ends = [round(e["t"] - stop_at, 1) for e in flying]
    reported = counts.get("forced", 0) + counts.get("completed", 0) == len(flying)
    forced_late_enough = forced_at is None or forced_at - stop_at >= allowance_s - FORCE_TOLERANCE_S
    ok = bool(flying) and reported and counts.get("lost", 0) == 0 and forced_late_enough
    detail = ""
    if forced_at is not None and counts.get("forced"):
        detail = (
            f"the endpoint still had streams running at {allowance_s:g}s and was forced (KILL); "
            f"a stream outliving the {window_s:g}s drain window means the endpoint does not bound its own drain"
        )
    return CheckResult.judge(
        "drain.allowance",
        ok,
        f"streams longer than the {window_s:g}s drain window survive until the {allowance_s:g}s allowance "
        "and are reported as forced; none lost",
        f"{len(flying)} long stream(s): {_show(counts)}; ended at {ends}s after TERM; "
        f"forced at {'-' if forced_at is None else f'{forced_at - stop_at:.1f}s'}",
        detail,
        {"streams_lost": counts.get("lost", 0)},
    )


def sut_cleanup(
    mode: str, streams: list[Event], stop_at: float, endpoint: StepEnd, cleanup: dict[str, Any]
) -> CheckResult:
    flying = in_flight(streams, stop_at)
    counts = _outcomes(flying, stop_at, None)
    cut = len(flying) - counts.get("completed", 0)
    ok = bool(flying) and cut == 0 and endpoint.exit_code == 0
    return CheckResult.judge(
        f"drain.sut_cleanup.{mode}",
        ok,
        "the SUT's own cleanup lets every in-flight stream complete; the endpoint task exits 0",
        f"{cut} of {len(flying)} in-flight stream(s) cut; endpoint exit {endpoint.exit_code} after "
        f"{endpoint.seconds_after_stop:.1f}s",
        f"{cleanup.get('function', '?')} from {cleanup.get('script', '?')}; controller exit: {cleanup.get('exit')}",
        {"streams_cut": cut, "endpoint_exit_s": endpoint.seconds_after_stop},
    )
