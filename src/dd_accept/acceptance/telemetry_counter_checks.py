"""The telemetry checks of the proxy's connection and timeout counters: each counter moves in
the phase built to move it (stale and expired connections, discarded responses, timeouts
before the first byte and mid-stream), by as much as that phase's events allow, and stays
still in the phases that give it no cause.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any

from dd_accept.acceptance.registry import check
from dd_accept.acceptance.telemetry_records import (
    TelemetryPhase,
    find,
    metrics_delta,
    shown_numbers,
    unclaimed,
)
from dd_accept.base.results import CheckResult
from dd_accept.sut.profile import TelemetryProfile

# The longest a phase may wait for the SUT's own clock (an idle expiry, a timeout) to run
# out: long enough for rc1's 65 s keep-alive to expire twice over, far short of its 3600 s
# read timeout. A counter whose phase would need longer is not judged (`unsupported`).
LONGEST_WAIT_SECONDS = 150.0


def drivable(seconds: float | None, times: float = 1.0) -> bool:
    """Whether a phase that waits `seconds` of the SUT's clock `times` over fits in a run."""
    return seconds is not None and seconds > 0 and seconds * times <= LONGEST_WAIT_SECONDS


@dataclass(frozen=True, slots=True)
class CountedPhase:
    """A phase built to produce connection events or timeouts: the proxy's counters before
    and after, and per counter path the counts the replicas' view allows. A view can allow
    more than one count: a proxy may keep its health probes on a pool of its own (counted
    or not), a reading taken while a connection closes lands on either side of it, and the
    seed's words allow two readings of a terminal timeout. `also` holds the other counters
    of the same kind, which must move only by what the replicas saw of *their* events in
    this window (mostly none): a counter that also counts another event is caught there."""

    name: str
    metrics_before: dict[str, Any]
    metrics_after: dict[str, Any]
    expected: dict[str, tuple[int, ...]]  # counter path -> the counts the replicas' view allows
    seen: str  # what the replicas saw, in words
    also: dict[str, tuple[int, ...]] = field(default_factory=dict)  # the other counters' allowed counts

    def counted(self, path: str) -> Any:
        return metrics_delta(self.metrics_before, self.metrics_after, path)


def allowed_text(allowed: tuple[int, ...]) -> str:
    """1 | 1 or 3 | 4 to 6: the counts a view allows, as a person says them."""
    values = sorted(set(allowed))
    if len(values) > 2 and values == list(range(values[0], values[-1] + 1)):
        return f"{values[0]} to {values[-1]}"
    return " or ".join(str(v) for v in values)


def _metric_key(path: str) -> str:
    return re.sub(r"[^a-z0-9_]", "_", path.lower())


def _counters_judged(
    check_id: str,
    claim: str,
    counters: tuple[str, ...],
    metrics: dict[str, Any],
    phases: list[CountedPhase],
    profile: TelemetryProfile,
    what: str,
    not_driven: str,
    also_wrong: tuple[str, ...] = (),
    quiet: list[TelemetryPhase] | None = None,
) -> CheckResult:
    """Each counter against the phase built to produce its event: it must have moved by what
    the replicas saw, and the event must have happened at all. A counter no phase could
    produce in a run's time (`not_driven`) is judged on what can be: given `quiet` windows
    (phases in which none of its events can happen), it must never decrease over the run's
    readings and stay unmoved in each; it then passes saying it was *not driven* (metric
    `driven` 0), and fails where it moved. Without quiet windows it leaves the check
    `unsupported`, never `pass`. `also_wrong`: what else the phases showed wrong (a status
    the client got)."""
    expected_text = f"the metrics count {what} ({', '.join(counters)}) as the replicas saw them"
    if not profile.claimed(claim):
        return unclaimed(check_id, expected_text, claim)
    if not isinstance(metrics, dict):
        return CheckResult.judge(check_id, False, expected_text, "the proxy's metrics are not a JSON object")
    missing = [path for path in counters if not isinstance(find(metrics, path), int | float)]
    if missing:
        return CheckResult.judge(
            check_id,
            False,
            expected_text,
            f"the proxy's metrics have no {', '.join(missing)}",
            f"claimed by the profile; the metrics document's keys: {', '.join(sorted(metrics)) or 'none'}",
        )
    observed, wrong, never, judged = [], [], [], []
    numbers: dict[str, float] = {}
    for path in counters:
        phase = next((p for p in phases if path in p.expected), None)
        if phase is None:
            continue
        allowed, counted = phase.expected[path], phase.counted(path)
        judged.append(path)
        key = _metric_key(path)
        numbers[f"{key}_seen"] = float(max(allowed))
        numbers[f"{key}_seen_min"] = float(min(allowed))
        if isinstance(counted, int | float):
            numbers[f"{key}_counted"] = float(counted)
        observed.append(f"{phase.name}: {path} +{shown_numbers(counted)} ({phase.seen})")
        if max(allowed) <= 0:
            never.append(f"{phase.name}: no event for {path} happened ({phase.seen})")
        elif not isinstance(counted, int | float) or counted not in allowed:
            wrong.append(
                f"{phase.name}: {path} counted {shown_numbers(counted)}, the replicas saw {allowed_text(allowed)}"
            )
    for phase in phases:  # every window also holds the counters its events must not move
        for path, allowed in phase.also.items():
            counted = phase.counted(path)
            if path in counters and (not isinstance(counted, int | float) or counted not in allowed):
                wrong.append(
                    f"{phase.name}: {path} counted {shown_numbers(counted)} where the replicas saw "
                    f"{allowed_text(allowed)} of its events"
                )
    wrong += also_wrong
    unjudged = [path for path in counters if path not in judged]
    quiet_note = ""
    if unjudged and quiet:
        wrong += _moved_where_quiet(unjudged, quiet, metrics)
        quiet_note = (
            f"not driven: {', '.join(unjudged)} ({not_driven}); judged only present, never decreasing and unmoved "
            f"in the {len(quiet)} phases where none of their events could happen"
        )
    metrics_out = {"judged": float(len(judged)), "wrong": float(len(wrong) + len(never)), **numbers}
    metrics_out["driven"] = float(not unjudged)
    if wrong or never:
        return CheckResult.judge(
            check_id, False, expected_text, "; ".join(observed), "; ".join(wrong + never), metrics_out
        )
    if quiet_note:
        shown = "; ".join(observed) or f"reported ({', '.join(f'{p}={find(metrics, p)}' for p in counters)})"
        return CheckResult.judge(check_id, True, expected_text, f"{shown}; {quiet_note}", quiet_note, metrics_out)
    if unjudged:
        return CheckResult(
            check_id,
            "unsupported",
            expected_text,
            "; ".join(observed) or f"reported ({', '.join(f'{p}={find(metrics, p)}' for p in counters)})",
            f"not judged: {', '.join(unjudged)} ({not_driven}); never a pass",
            metrics_out,
        )
    return CheckResult.judge(check_id, True, expected_text, "; ".join(observed), "", metrics_out)


def _moved_where_quiet(paths: list[str], quiet: list[TelemetryPhase], last: dict[str, Any]) -> list[str]:
    """What the counters did that no correct one does where none of their events happened:
    move in a quiet phase, or fall between two readings of the run (a reset counter)."""
    wrong = []
    readings = [document for phase in quiet for document in (phase.metrics_before, phase.metrics_after)] + [last]
    for path in paths:
        for phase in quiet:
            moved = phase.delta(path)
            if isinstance(moved, int | float) and moved != 0:
                wrong.append(
                    f"{phase.name}: {path} counted {shown_numbers(moved)} where none of its events could happen"
                )
        values = [v for document in readings if isinstance(v := find(document, path), int | float)]
        if any(later < earlier for earlier, later in itertools.pairwise(values)):
            wrong.append(f"{path} fell between two readings of the run ({', '.join(shown_numbers(v) for v in values)})")
    return wrong


# How many times over each phase waits out the SUT's own clock: an idle connection expires
# between one and two keep-alives after its last use (a pool sweeps at that interval); a
# request whose every attempt stalls before its first byte waits out one timeout per attempt.
EXPIRY_WAITS = 2.0


TIMEOUT_WAITS = 3.0


@check("telemetry.connection_lifecycle")
def connection_lifecycle(
    metrics: dict[str, Any], profile: TelemetryProfile, phases: list[CountedPhase] | None = None
) -> CheckResult:
    """The proxy counts upstream connections that expired idle (its keep-alive ran out), went
    stale (closed by the backend while idle, found before reuse) and were discarded (not
    returned to the pool after a response: the backend said `Connection: close`), each equal
    to what the replicas saw in the phase built to produce it. Opened and reused are
    `streaming.connection_accounting`'s."""
    keepalive = profile.keepalive_seconds
    return _counters_judged(
        connection_lifecycle.check_id, "connection_lifecycle", profile.connection_counters, metrics, phases or [],
        profile, "expired, stale and discarded upstream connections",
        f"an idle expiry needs the proxy's keep-alive ({keepalive} s in the profile) to run out "
        f"{EXPIRY_WAITS:g} times over, beyond the {LONGEST_WAIT_SECONDS:g} s a phase waits",
    )  # fmt: skip


@check("telemetry.timeouts")
def timeouts(
    metrics: dict[str, Any],
    profile: TelemetryProfile,
    phases: list[CountedPhase] | None = None,
    timed_out_status: int | None = None,
    quiet: list[TelemetryPhase] | None = None,
) -> CheckResult:
    """The proxy counts terminal timeouts (an upstream attempt that got no first byte in
    time) and streaming timeouts (a stream that stalled mid-way), as the replicas saw the
    proxy abandon the responses they held back past its timeouts. The seed counts them
    "without requiring another retry", which reads two ways for a terminal timeout: every
    attempt that timed out before its first byte, or only those no retry followed (the
    others being retries); either count passes, one that matches neither fails. The
    request whose every attempt timed out must get the status the profile documents
    (`timeout_status`; `timed_out_status` is what the client got). Timeouts the profile puts
    beyond a run's time are judged in the `quiet` phases (replicas answering at once: no
    timeout can happen) and said to be *not driven*."""
    status_wrong = ()
    if phases and profile.timeout_status is not None and timed_out_status != profile.timeout_status:
        status_wrong = (
            f"the request whose every attempt timed out got {timed_out_status}, the profile documents "
            f"{profile.timeout_status}",
        )
    return _counters_judged(
        timeouts.check_id, "timeouts", profile.timeout_counters, metrics, phases or [], profile,
        "terminal and streaming timeouts",
        f"the profile's timeouts ({profile.terminal_timeout_seconds} s to the first byte, "
        f"{profile.streaming_timeout_seconds} s mid-stream) waited out {TIMEOUT_WAITS:g} times over are beyond "
        f"the {LONGEST_WAIT_SECONDS:g} s a phase waits",
        status_wrong,
        quiet,
    )  # fmt: skip
