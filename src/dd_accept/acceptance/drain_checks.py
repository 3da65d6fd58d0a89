"""The drain checks, as pure functions of client stream events and step outcomes.

The contract (seed pull request, brief fact 3): after TERM an endpoint drains for at most
its window (10 s) and exits by itself; the controller allows 12 s and only then forces
what is left. A stream that was in flight when an endpoint was told to stop ends one of
four ways:
  completed — it ended with `[DONE]` after every event a replica generated for it, the
              replica having generated it whole (a `[DONE]` after fewer is no completion);
  bounded   — the endpoint itself ended it at its drain window (within a second after it),
              before anyone forced it, with events still flowing until the cut: what a
              correct endpoint does with a stream longer than its window;
  overran   — ended by the endpoint, but more than a second after its window: it drained
              longer than its bound;
  stalled   — ended at the window, but nothing had arrived for a while before the cut: the
              endpoint stopped forwarding at TERM and only closed later;
  forced    — it was still running when the allowance ran out and the harness had to KILL
              the endpoint: the endpoint did not bound its own drain;
  lost      — it was cut before the window: the endpoint dropped work it had accepted.
Only `completed` and `bounded` are correct outcomes. Each stream's outcome is read beside
the replicas' record of it (base.drain_outcomes.whole_streams).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any

from dd_accept.acceptance.analysis import requests
from dd_accept.acceptance.registry import check
from dd_accept.base.drain_outcomes import (
    FORCE_TOLERANCE_S,
    GOOD_OUTCOMES,
    STOP_RECORD_TOLERANCE_S,
    WINDOW_OVERRUN_S,
    classify,
    kill_that_reached,
    whole_streams,
)
from dd_accept.base.events import ClientRequest, Event, UpstreamAttempt
from dd_accept.base.results import CheckResult, ScenarioResult

CLEANUP_MODES = ("completion", "failure", "cancel")  # when the SUT's own cleanup stops the endpoint


@dataclass(frozen=True, slots=True)
class StepEnd:
    """How the endpoint task ended: its exit status as Slurm reported it (None: unknown) and
    when, counted from the TERM."""

    exit_code: int | None
    seconds_after_stop: float
    source: str = "srun"  # where the exit status was read (srun launcher, slurmd's step record)
    # The exception the endpoint's output ends with, by name only ("" for none): an exit 1
    # is then a reason a person can act on, not a number. Never its message (it may quote a
    # request).
    raised: str = ""
    # How many times the step got TERM, and the last one's seconds after the first
    # (`harness_stop`, `cleanup_stop`), and who sent it and why it may have come again: what
    # the not-judged error tells a person.
    terms: int = 1
    repeated_after_s: float = 0.0
    term_by: str = "the harness asked once"


# A stop function may return this long before the record of its endpoint's end it is judged
# against: slurmstepd logs the task's end (to the millisecond) before srun, the launcher a stop
# waits on, learns of it; the margin is for the two containers' moments of writing.
RETURN_TOLERANCE_S = 1.0
# An endpoint that ended this soon after a repeated TERM may have ended because of it.
REPEAT_EFFECT_S = 1.0
KILLED_EXIT = 128 + 9  # a task ended by SIGKILL, as Slurm records it
# scancel's own repeat (its second pass, while a later job pends) comes milliseconds after its
# first request (3-10 ms measured); a TERM sent again later is a controller's own doing.
SCANCEL_REPEAT_S = 1.0


# A traceback's last line: `package.module.Name: message` or a bare `Name`, at the line's start.
_RAISED = re.compile(r"^(?P<name>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt))(?::|$)")


def raised_in(output: str) -> str:
    """The name of the exception a process's output ends with (its last traceback), or ""."""
    names = [match["name"] for line in output.splitlines() if (match := _RAISED.match(line.strip()))]
    return names[-1] if names and "Traceback (most recent call last)" in output else ""


def in_flight(events: list[Event], stop_at: float) -> list[ClientRequest]:
    """Streams that had started and not yet ended when the stop began. Where every stream
    had already ended whole, the stop came too late to test anything: the machine delayed
    the harness (a RuntimeError, exit 2), never a failure of the SUT's drain."""
    streams = requests(events)
    earliest = stop_at - STOP_RECORD_TOLERANCE_S  # the stop's line is written a moment after it
    flying = [e for e in streams if e.began < stop_at and earliest <= e.t]
    if streams and not flying and all(e.done and e.outcome == "ok" and e.t < earliest for e in streams):
        late = stop_at - max(e.t for e in streams)
        raise RuntimeError(
            f"all {len(streams)} stream(s) had ended whole {late:.1f}s and more before the stop: it came too late "
            "to test a drain (a loaded machine delayed the harness)"
        )
    return flying


def _outcomes(
    streams: list[ClientRequest],
    upstream: list[UpstreamAttempt],
    stop_at: float,
    forced_at: float | None,
    window_s: float | None = None,
) -> Counter[str]:
    whole = whole_streams(streams, upstream)
    return Counter(classify(s, stop_at, forced_at, window_s, s.request_id in whole) for s in streams)


def _exit_text(endpoint: StepEnd) -> str:
    code = "exit unknown" if endpoint.exit_code is None else f"exit {endpoint.exit_code}"
    code = f"{code} (raised {endpoint.raised})" if endpoint.raised else code
    return code + (f" (got TERM {endpoint.terms} times)" if endpoint.terms > 1 else "")


def harness_stop(end: StepEnd, deliveries: tuple[float, ...] | None, requests: int, scancel_s: float) -> StepEnd:
    """The harness's stop: the node's log says how many TERMs reached the step and when
    (`deliveries`); where it cannot be read (a login node: None), scancel's own count of the
    requests it sent stands for them, the repeat then within scancel's run (`scancel_s`). One
    delivery logged is one, whatever scancel sent (a repeat may have found the step gone)."""
    by = "the harness asked once"
    if requests > 1:
        by = (
            f"the harness ran scancel once; it sent its request {requests} times, as Slurm's scancel does while "
            "a job submitted after this one is pending"
        )
    if deliveries is not None and len(deliveries) > 1:
        return replace(end, terms=len(deliveries), repeated_after_s=deliveries[-1] - deliveries[0], term_by=by)
    if deliveries is None and requests > 1:
        return replace(end, terms=requests, repeated_after_s=scancel_s, term_by=by)
    return replace(end, term_by=by)


def repeated_by_scancel(deliveries: tuple[float, ...]) -> tuple[float, ...]:
    """The deliveries one scancel run can have made: those within SCANCEL_REPEAT_S of the first.
    A SUT's cleanup that sends TERM again itself, later, is judged on what its endpoint did."""
    return tuple(at for at in deliveries if at - deliveries[0] <= SCANCEL_REPEAT_S) if deliveries else ()


def cleanup_stop(end: StepEnd, deliveries: tuple[float, ...] | None, later_job_pending: bool) -> StepEnd:
    """The SUT's cleanup ran its own scancel, whose output the harness never sees. The node's
    log, where it can be read, says how many TERMs came (none: a cleanup that KILLs, as rc1's
    does through its launcher): a repeat within SCANCEL_REPEAT_S is scancel's own (a later job
    pending), one later the SUT's doing. Where it cannot be read (a login node: None), a job
    submitted after this one pending when the drill is read means scancel signalled
    twice (semantics test (h)): a correct endpoint that dies at a second TERM must not be
    failed there for what the docker cluster would set aside."""
    own = repeated_by_scancel(deliveries or ())
    if len(own) > 1:
        within = f"{SCANCEL_REPEAT_S:g} s"
        by = f"the SUT's cleanup ran scancel; a repeat within {within} is scancel's own, as a later job pends"
        return replace(end, terms=len(own), repeated_after_s=own[-1] - own[0], term_by=by)
    if deliveries is None and later_job_pending:
        by = (
            "the SUT's cleanup ran scancel while a job submitted after this one was pending, when scancel signals a "
            "step twice; the node's log, which would show it, cannot be read here"
        )
        return replace(end, terms=2, repeated_after_s=0.0, term_by=by)
    return replace(end, term_by="the SUT's cleanup sent it")


def judged_on_one_term(result: ScenarioResult, check: CheckResult, endpoint: StepEnd) -> None:
    """Add a check of a stop, unless it failed where the step got TERM more than once: the
    harness asked for one TERM, and how an endpoint answers a second one (rc1, as aiohttp's
    run_app, exits 1 at once and cuts every stream) is not what the drain contract states.
    Such a stop is not judged: the run's error (exit 2), the check left out, never a failure
    of the SUT. A check that passed stands: the endpoint drained even so; and so does one
    whose endpoint outlived the repeat (a KILL at the allowance, 12 s after both TERMs)."""
    if check.verdict == "fail" and repeat_may_have_ended_it(endpoint):
        said = (
            f"{check.id} not judged: the endpoint's step got TERM {endpoint.terms} times ({endpoint.term_by}), "
            f"and it failed: {check.observed}"
        )
        result.error = f"{result.error}; {said}" if result.error else said
        return
    result.add(check)


def repeat_may_have_ended_it(endpoint: StepEnd) -> bool:
    """The step got TERM more than once and the endpoint ended within REPEAT_EFFECT_S of the
    last delivery: what the stop shows may be its answer to the repeat. Never an endpoint that
    died by KILL: a TERM, however often, makes an endpoint exit by itself (rc1 exits 1), and a
    KILL is someone's force (rc1's own cleanup KILLs through its launcher: fact 4)."""
    soon = endpoint.seconds_after_stop <= endpoint.repeated_after_s + REPEAT_EFFECT_S
    return endpoint.terms > 1 and soon and endpoint.exit_code != KILLED_EXIT


def described_end(endpoint: StepEnd) -> str:
    """How the endpoint ended, for a check that reports a stop beside its own verdict."""
    return f"endpoint {_exit_text(endpoint)} {endpoint.seconds_after_stop:.1f}s after TERM ({endpoint.source})"


def _show(counts: Counter[str]) -> str:
    return ", ".join(f"{value} {key}" for key, value in sorted(counts.items())) or "none"


@check("drain.scancel_step")
def scancel_step(
    streams: list[ClientRequest],
    upstream: list[UpstreamAttempt],
    stop_at: float,
    endpoint: StepEnd,
    steps_left: list[str],
    window_s: float,
    allowance_s: float,
) -> CheckResult:
    """`scancel --signal=TERM` of the endpoint's step lets every stream in flight (each
    shorter than the window) complete whole within the window (the endpoint drains for at
    most its window), and the step exits 0 by itself before the allowance with no step left
    behind (the brief's drain contract, fact 3: "one that ... exits 0 before the allowance
    is correct")."""
    flying = in_flight(streams, stop_at)
    counts = _outcomes(flying, upstream, stop_at, None)
    last_end = max((e.t - stop_at for e in flying), default=0.0)
    ok = (
        bool(flying)
        and counts == Counter({"completed": len(flying)})
        and last_end <= window_s
        and endpoint.exit_code == 0
        and endpoint.seconds_after_stop <= allowance_s
        and not steps_left
    )
    return CheckResult.judge(
        scancel_step.check_id,
        ok,
        "every in-flight stream completes whole (every event the replica generated, then [DONE]) within the "
        f"{window_s:g}s window; the endpoint task exits 0 within the {allowance_s:g}s allowance; no step left",
        f"{len(flying)} in flight: {_show(counts)}, the last {last_end:.1f}s after TERM; endpoint "
        f"{_exit_text(endpoint)} after {endpoint.seconds_after_stop:.1f}s; "
        f"steps left: {', '.join(steps_left) or 'none'}",
        "stopped with scancel --signal=TERM JOB.STEP",
        {
            "streams_cut": len(flying) - counts.get("completed", 0),
            "last_stream_end_s": last_end,
            "endpoint_exit_s": endpoint.seconds_after_stop,
        },
    )


@check("drain.allowance")
def allowance(
    streams: list[ClientRequest],
    upstream: list[UpstreamAttempt],
    stop_at: float,
    forced_at: float | None,
    window_s: float,
    allowance_s: float,
    endpoint: StepEnd,
) -> CheckResult:
    """Streams longer than the window: the endpoint must end them itself at its window (or
    let them complete) and exit 0 by itself before the allowance; a KILL means it did not
    bound its drain, a cut before the window means it dropped work. A KILL sent after Slurm
    recorded the task's own exit (srun, its launcher, can outlive the task on a busy node)
    reached nothing of the endpoint's and is no force (a killed task never exits 0)."""
    forced_at = kill_that_reached(forced_at, stop_at, endpoint.exit_code, endpoint.seconds_after_stop)
    flying = in_flight(streams, stop_at)
    counts = _outcomes(flying, upstream, stop_at, forced_at, window_s)
    ends = [round(e.t - stop_at, 1) for e in flying]
    exited_by_itself = forced_at is None and endpoint.exit_code == 0 and endpoint.seconds_after_stop <= allowance_s
    ok = bool(flying) and sum(counts[k] for k in GOOD_OUTCOMES) == len(flying) and exited_by_itself
    if not flying:
        detail = "no stream was in flight at TERM: nothing was tested"
    elif forced_at is not None:
        detail = (
            f"the endpoint was still running at the {allowance_s:g}s allowance and had to be forced (KILL): "
            f"it does not bound its own drain to the {window_s:g}s window"
        )
    elif counts.get("lost"):
        detail = f"stream(s) cut before the {window_s:g}s window: the endpoint dropped work it had accepted"
    elif counts.get("overran"):
        detail = f"stream(s) ended more than {WINDOW_OVERRUN_S:g}s after the {window_s:g}s window: the endpoint "
        detail += "drained beyond its bound"
    elif not exited_by_itself:
        detail = "the endpoint did not exit 0 by itself within the allowance"
    else:
        detail = "the endpoint bounded its drain and exited by itself"
    return CheckResult.judge(
        allowance.check_id,
        ok,
        f"a stream longer than the {window_s:g}s drain window completes or is ended by the endpoint at its window; "
        f"the endpoint exits 0 by itself before the {allowance_s:g}s allowance; nothing forced, nothing lost",
        f"{len(flying)} long stream(s): {_show(counts)}; ended at {ends}s after TERM; "
        f"forced at {'-' if forced_at is None else f'{forced_at - stop_at:.1f}s'}; "
        f"endpoint {_exit_text(endpoint)} after {endpoint.seconds_after_stop:.1f}s",
        detail,
        {
            "streams_lost": counts.get("lost", 0),
            "streams_forced": counts.get("forced", 0),
            "streams_bounded": counts.get("bounded", 0),
            "streams_overran": counts.get("overran", 0),
            "endpoint_exit_s": endpoint.seconds_after_stop,
        },
    )


def _cleanup_text(cleanup: dict[str, Any], endpoint: StepEnd) -> str:
    """Which stop function of which script stopped the endpoint, how its controller exited,
    and where the endpoint's exit was read: the drills' detail."""
    return (
        f"{cleanup.get('function', '?')} from {cleanup.get('script', '?')}; controller exit: {cleanup.get('exit')}; "
        f"endpoint exit read from {endpoint.source}"
    )


@check(*(f"drain.sut_cleanup.{mode}" for mode in CLEANUP_MODES))
def sut_cleanup(
    mode: str,
    streams: list[ClientRequest],
    upstream: list[UpstreamAttempt],
    stop_at: float,
    endpoint: StepEnd,
    cleanup: dict[str, Any],
    allowance_s: float,
    steps_left: list[str],
    killed_after_s: float | None = None,
    window_s: float | None = None,
    returned_after_s: float | None = None,
) -> CheckResult:
    """The SUT's own cleanup: every in-flight stream (shorter than the window) completes, or,
    stretched past the window by a busy machine, is ended by the endpoint at its window
    (*bounded*, fact 3: correct; `window_s`, None: only completing counts),
    the endpoint task exits 0 within the allowance as Slurm reports it (an exit status
    nobody reported is a failure, never assumed 0), no step of it is left running, and no
    KILL reaches it before the allowance has run out (`killed_after_s`: when Slurm
    delivered SIGKILL to the endpoint step, counted from the stop; None: never), and the stop
    function does not return while the endpoint still drains (`returned_after_s`, from the
    stop; None: not recorded): the seed keeps launchers and backends alive for the drain and
    forces only after the allowance, so the controller goes on (and its job ends, taking the
    backends the drain still reads from) only once the endpoint is stopped."""
    flying = in_flight(streams, stop_at)
    counts = _outcomes(flying, upstream, stop_at, None, window_s)
    bounded = counts.get("bounded", 0)
    cut = len(flying) - counts.get("completed", 0) - bounded
    in_time = endpoint.seconds_after_stop <= allowance_s
    early_kill = killed_after_s is not None and killed_after_s < allowance_s - FORCE_TOLERANCE_S
    # how long before its endpoint's end the stop function returned (None: not recorded)
    returned_early_s = None if returned_after_s is None else endpoint.seconds_after_stop - returned_after_s
    early_return = returned_early_s is not None and returned_early_s > RETURN_TOLERANCE_S
    ok = bool(flying) and cut == 0 and endpoint.exit_code == 0 and in_time
    ok = ok and not (steps_left or early_kill or early_return)
    detail = _cleanup_text(cleanup, endpoint)
    if early_return:
        detail = (
            f"the stop function returned {returned_early_s:.1f}s before its endpoint "
            "ended: the controller goes on, and its job ends, while the endpoint still drains; " + detail
        )
    returned = "" if returned_after_s is None else f"; stop returned after {returned_after_s:.1f}s"
    return CheckResult.judge(
        f"drain.sut_cleanup.{mode}",
        ok,
        f"the SUT's own cleanup lets every in-flight stream complete; the endpoint task exits 0 within the "
        f"{allowance_s:g}s allowance, never KILLed before it; no step left",
        f"{cut} of {len(flying)} in-flight stream(s) cut"
        + (f" ({bounded} ended by the endpoint at its window)" if bounded else "")
        + f"; endpoint {_exit_text(endpoint)} after "
        f"{endpoint.seconds_after_stop:.1f}s; steps left: {', '.join(steps_left) or 'none'}; "
        f"KILL {'never' if killed_after_s is None else f'after {killed_after_s:.1f}s'}{returned}",
        detail,
        {"streams_cut": cut, "endpoint_exit_s": endpoint.seconds_after_stop}
        | ({} if returned_after_s is None else {"stop_returned_s": returned_after_s}),
    )


# How much earlier than its allowance a stop function's KILL may come: bash's SECONDS counts
# whole seconds, so a 12 s wait written with it ends 11 to 12 s after it began (hasty-cleanup's
# 5 s wait ended 4 to 5 s after its TERM, measured), and the wait starts after the TERM is sent.
ESCALATION_EARLY_S = 1.5
# How long after the allowance the endpoint may still be running: the KILL to its launcher,
# srun's end and slurmd's teardown of the task, on a busy machine.
ESCALATION_LATE_S = 3.0


@check("drain.sut_escalation")
def sut_escalation(
    streams: list[ClientRequest],
    stop_at: float,
    endpoint: StepEnd,
    cleanup: dict[str, Any],
    allowance_s: float,
    steps_left: list[str],
    killed_after_s: float | None = None,
    returned_after_s: float | None = None,
    term_after_s: float = 0.0,
) -> CheckResult:
    """The SUT's stop function forces an endpoint still draining at the allowance, never
    before it (bounded escalation). The seed forces "remaining endpoints to stop only after
    the 12-second allowance"; an endpoint that does not bound its own drain (rc1's, fact 3)
    is what that force is for. A stream longer than the allowance is in flight when the SUT's
    stop function begins; the endpoint may end it at its window and exit by itself (correct)
    or drain on (then the stop function must force it). Either way it is gone soon after the
    allowance, no KILL reaches it before, no step is left, and the stop function returns once
    the endpoint has ended. How the stream ended is not this check's: a forced stream is cut
    by design, and whether the endpoint bounds its drain is drain.allowance's question. The
    allowance runs from the first TERM's delivery to the endpoint's step (`term_after_s`, from
    the stop; 0 where none was recorded): what a cleanup does before it (an identity looked up
    in the queue) is not counted against it."""
    flying = in_flight(streams, stop_at)
    forced_s = killed_after_s
    if forced_s is None and endpoint.exit_code == KILLED_EXIT:
        forced_s = endpoint.seconds_after_stop  # killed, its KILL's line not read: forced by then
    forced_s = kill_that_reached(forced_s, 0.0, endpoint.exit_code, endpoint.seconds_after_stop)  # from the stop
    since_term = endpoint.seconds_after_stop - term_after_s
    early = forced_s is not None and forced_s - term_after_s < allowance_s - ESCALATION_EARLY_S
    late = endpoint.exit_code is None or since_term > allowance_s + ESCALATION_LATE_S
    returned_early_s = None if returned_after_s is None else endpoint.seconds_after_stop - returned_after_s
    # the force's way to the task's end is the same 3 s the late rule allows (a KILL to srun ends
    # the launcher a stop function waits on before slurmd records the task's end)
    early_return = returned_early_s is not None and returned_early_s > ESCALATION_LATE_S
    ok = bool(flying) and not (early or late or early_return or steps_left)
    reasons = [
        *(["no stream was in flight at the stop: nothing was tested"] if not flying else []),
        *(
            [f"forced {forced_s - term_after_s:.1f}s after the TERM, before the {allowance_s:g}s allowance had run"]
            if early and forced_s is not None
            else []
        ),
        *(["the endpoint's exit was not recorded: when it ended is unknown"] if endpoint.exit_code is None else []),
        *(
            [
                f"the endpoint still ran {since_term:.1f}s after the TERM: the stop function did not have it "
                f"stopped at the {allowance_s:g}s allowance"
                + (" (unbounded escalation)" if forced_s is None else f" (its KILL at {forced_s - term_after_s:.1f}s)")
            ]
            if late and endpoint.exit_code is not None
            else []
        ),
        *([f"the stop function returned {returned_early_s:.1f}s before its endpoint ended"] if early_return else []),
        *(["a step of the endpoint was left running"] if steps_left else []),
    ]
    detail = "; ".join(reasons) or "stopped by the allowance, never forced before it"
    returned = "" if returned_after_s is None else f"; stop returned after {returned_after_s:.1f}s"
    return CheckResult.judge(
        sut_escalation.check_id,
        ok,
        f"with a stream longer than the {allowance_s:g}s allowance in flight, the SUT's stop function has the "
        f"endpoint stopped within {ESCALATION_LATE_S:g}s after the allowance, never KILLed before it "
        f"(less {ESCALATION_EARLY_S:g}s); no step left; it returns once the endpoint has ended",
        f"{len(flying)} long stream(s) in flight; TERM after {term_after_s:.1f}s; endpoint {_exit_text(endpoint)} "
        f"after {endpoint.seconds_after_stop:.1f}s; KILL {'never' if forced_s is None else f'after {forced_s:.1f}s'}; "
        f"steps left: {', '.join(steps_left) or 'none'}{returned}",
        f"{detail}; {_cleanup_text(cleanup, endpoint)}",
        {"endpoint_exit_s": endpoint.seconds_after_stop, "term_s": term_after_s}
        | ({} if forced_s is None else {"forced_s": forced_s})
        | ({} if returned_after_s is None else {"stop_returned_s": returned_after_s}),
    )
