"""The drain rules on hand-made stream events: completed, forced, lost."""

import itertools
from dataclasses import replace

import pytest

from dd_accept.acceptance import drain_checks as checks
from dd_accept.base.drain_outcomes import whole_streams
from dd_accept.base.events import ClientRequest, UpstreamAttempt
from dd_accept.base.results import ScenarioResult

_ids = itertools.count()


def stream(started, ended, done=True, outcome="ok", chunks=41):
    return ClientRequest(
        mode="raw", record=0, attempt=0, started=started, t=ended, done=done, outcome=outcome,
        request_id=f"s-{next(_ids)}", chunks=chunks,
    )  # fmt: skip


def served(streams, events=41, outcome="ok"):
    """What the replicas recorded: each stream generated whole, `events` data events of it."""
    return [
        UpstreamAttempt(t=s.t, replica=0, path="/v1/chat/completions", outcome=outcome, started=s.started or 0.0,
                        duration_s=1.0, request_id=s.request_id, status=200, data_events=events)
        for s in streams
    ]  # fmt: skip


def test_classification():
    assert checks.classify(stream(0, 5), stop_at=1, forced_at=None) == "completed"
    assert checks.classify(stream(0, 3, False, "truncated"), stop_at=1, forced_at=13) == "lost"
    assert checks.classify(stream(0, 13.1, False, "error"), stop_at=1, forced_at=13) == "forced"
    assert checks.classify(stream(0, 0.5, False, "error"), stop_at=1, forced_at=13) == "ended before the stop"


def test_only_streams_in_flight_at_the_stop_count():
    events = [stream(0, 0.5), stream(0, 3), stream(2, 4)]
    assert checks.in_flight(events, stop_at=1) == [events[1]]


def test_scancel_step_needs_all_done_exit_0_in_time_and_no_step_left():
    ok = [stream(0, 3), stream(0, 3.5)]
    end, whole = checks.StepEnd(0, 3.6), served(ok)
    assert checks.scancel_step(ok, whole, 1, end, [], 10, 12).verdict == "pass"
    cut = stream(0, 2, False, "truncated")
    assert checks.scancel_step([cut, *ok], whole, 1, end, [], 10, 12).verdict == "fail"
    assert checks.scancel_step(ok, whole, 1, checks.StepEnd(143, 0.1), [], 10, 12).verdict == "fail"
    assert checks.scancel_step(ok, whole, 1, checks.StepEnd(0, 12.5), [], 10, 12).verdict == "fail"
    assert checks.scancel_step(ok, whole, 1, end, ["1.3"], 10, 12).verdict == "fail"
    assert checks.scancel_step([], [], 1, end, [], 10, 12).verdict == "fail", "nothing in flight: nothing was tested"


def test_an_endpoint_that_holds_its_whole_window_and_exits_before_the_allowance_passes_scancel_step():
    """Fact 3: an endpoint that exits 0 before the allowance is correct; its streams, shorter
    than the window, completed at once, and it exited 10.3 s after TERM."""
    ok = [stream(0, 3), stream(0, 3.5)]
    held = checks.scancel_step(ok, served(ok), 1, checks.StepEnd(0, 10.3), [], 10, 12)
    assert held.verdict == "pass" and "exits 0 within the 12s allowance" in held.expected, held
    late = [stream(0, 3), stream(0, 11.5)]  # completed whole, 10.5 s after TERM: drained beyond the window
    over = checks.scancel_step(late, served(late), 1, checks.StepEnd(0, 10.6), [], 10, 12)
    assert over.verdict == "fail" and "2 completed, the last 10.5s after TERM" in over.observed, over
    assert over.metrics["last_stream_end_s"] == 10.5


def test_a_done_after_fewer_events_than_the_replica_generated_is_no_completion():
    """An endpoint that answers TERM by ending every stream with [DONE] after 24 of 41 events:
    the client saw 'ok' and [DONE], the replicas' records show the streams were not whole."""
    faked = [stream(0, 1.4, chunks=24), stream(0, 1.4, chunks=24)]
    early = checks.scancel_step(faked, served(faked), 1, checks.StepEnd(0, 0.4), [], 10, 12)
    assert early.verdict == "fail" and early.observed.startswith("2 in flight: 2 lost"), early
    assert early.metrics["streams_cut"] == 2
    abandoned = served(faked, events=24, outcome="abandoned")  # the endpoint left the replica mid-stream
    assert checks.scancel_step(faked, abandoned, 1, checks.StepEnd(0, 0.4), [], 10, 12).verdict == "fail"
    unseen = checks.scancel_step(faked, [], 1, checks.StepEnd(0, 0.4), [], 10, 12)
    assert unseen.verdict == "fail", "no record of a whole generation: nothing completed"
    whole = [stream(0, 3), stream(0, 3)]
    assert whole_streams(whole, served(whole)) == {s.request_id for s in whole}
    assert whole_streams(faked, served(faked)) == set()


def test_a_cut_at_the_window_is_bounded_before_it_lost_and_after_it_overran():
    assert checks.classify(stream(0, 10.8, False, "error"), stop_at=1, forced_at=None, window_s=10) == "bounded"
    assert checks.classify(stream(0, 10.6, False, "error"), stop_at=1, forced_at=None, window_s=10) == "bounded"
    assert checks.classify(stream(0, 12.0, False, "error"), stop_at=1, forced_at=None, window_s=10) == "bounded"
    assert checks.classify(stream(0, 12.8, False, "error"), stop_at=1, forced_at=None, window_s=10) == "overran"
    assert checks.classify(stream(0, 10.4, False, "error"), stop_at=1, forced_at=None, window_s=10) == "lost"
    assert checks.classify(stream(0, 4, False, "error"), stop_at=1, forced_at=None, window_s=10) == "lost"
    assert checks.classify(stream(0, 13.1, False, "error"), stop_at=1, forced_at=13, window_s=10) == "forced"


def test_allowance_passes_an_endpoint_that_bounds_its_own_drain():
    bounded = checks.allowance([stream(0, 11.0, False, "error")], [], 1, None, 10, 12, checks.StepEnd(0, 10.05))
    assert bounded.verdict == "pass", bounded
    assert bounded.observed.startswith("1 long stream(s): 1 bounded")
    assert bounded.metrics["streams_bounded"] == 1 and bounded.metrics["streams_forced"] == 0


def test_allowance_fails_an_endpoint_that_had_to_be_forced():
    """rc1: the 20 s stream outlives the window; the harness KILLs at the 12 s allowance."""
    forced = checks.allowance([stream(0, 13.1, False, "error")], [], 1, 13.0, 10, 12, checks.StepEnd(137, 12.1))
    assert forced.verdict == "fail" and forced.observed.startswith("1 long stream(s): 1 forced")
    assert "does not bound its own drain" in forced.detail and forced.metrics["streams_forced"] == 1


def test_a_kill_sent_after_the_task_exited_0_by_itself_is_no_force():
    """slurmd recorded the task's exit 0 at 11.6 s; srun outlived it and the harness's KILL
    went out at 12.4 s, to nothing of the endpoint's. A task that was KILLed does not exit 0."""
    cut_at_window = stream(0, 11.0, False, "error")
    lingered = checks.allowance([cut_at_window], [], 1, 13.4, 10, 12, checks.StepEnd(0, 11.6, "slurmd step record"))
    assert lingered.verdict == "pass" and "forced at -" in lingered.observed, lingered
    killed = checks.allowance([cut_at_window], [], 1, 13.4, 10, 12, checks.StepEnd(137, 11.6, "slurmd step record"))
    assert killed.verdict == "fail" and "had to be forced" in killed.detail, killed


def test_allowance_fails_lost_streams_a_bad_exit_and_nothing_in_flight():
    lost = checks.allowance([stream(0, 4, False, "error")], [], 1, None, 10, 12, checks.StepEnd(0, 3.0))
    assert lost.verdict == "fail" and "1 lost" in lost.observed and lost.metrics["streams_lost"] == 1
    bad_exit = checks.allowance([stream(0, 11.0, False, "error")], [], 1, None, 10, 12, checks.StepEnd(143, 10.0))
    assert bad_exit.verdict == "fail" and "endpoint exit 143" in bad_exit.observed
    late = checks.allowance([stream(0, 11.0, False, "error")], [], 1, None, 10, 12, checks.StepEnd(0, 12.5))
    assert late.verdict == "fail", "exited after the allowance"
    unknown = checks.allowance([stream(0, 11.0, False, "error")], [], 1, None, 10, 12, checks.StepEnd(None, 10.0))
    assert unknown.verdict == "fail" and "exit unknown" in unknown.observed
    empty = checks.allowance([], [], 1, None, 10, 12, checks.StepEnd(0, 0.1))
    assert empty.verdict == "fail" and "nothing was tested" in empty.detail
    short = [stream(0, 9)]
    assert checks.allowance(short, served(short), 1, None, 10, 12, checks.StepEnd(0, 8.1)).verdict == "pass"


def test_allowance_fails_an_endpoint_that_drains_beyond_its_window():
    """Fact 3: the endpoint drains for at most its 10 s window. Cut 11.8 s after TERM, exited
    0 at 11.9 s, inside the allowance: it overran its window."""
    over = checks.allowance([stream(0, 12.8, False, "error")], [], 1, None, 10, 12, checks.StepEnd(0, 11.9))
    assert over.verdict == "fail" and over.observed.startswith("1 long stream(s): 1 overran"), over
    assert "drained beyond its bound" in over.detail and over.metrics["streams_overran"] == 1
    faked = [stream(0, 11.0, chunks=200)]  # [DONE] at the window after 200 of 400 events: ended, so bounded
    bounded = checks.allowance(faked, served(faked, events=400), 1, None, 10, 12, checks.StepEnd(0, 10.1))
    assert bounded.verdict == "pass" and "1 bounded" in bounded.observed, bounded


def _cleanup(streams, end, left=()):
    return checks.sut_cleanup("completion", streams, served(streams), 1, end, {}, 12, list(left))


def test_sut_cleanup_counts_cut_streams():
    cut = _cleanup([stream(0, 1.3, False, "error")] * 4, checks.StepEnd(137, 0.3))
    assert cut.verdict == "fail" and cut.observed.startswith("4 of 4 in-flight stream(s) cut; endpoint exit 137")
    four = [stream(0, 3) for _ in range(4)]
    fine = checks.sut_cleanup("cancel", four, served(four), 1, checks.StepEnd(0, 2.5), {}, 12, [])
    assert fine.verdict == "pass" and fine.id == "drain.sut_cleanup.cancel"


def test_sut_cleanup_never_assumes_exit_0_and_checks_time_and_leftovers():
    done = [stream(0, 3)] * 4
    unknown = _cleanup(done, checks.StepEnd(None, 2.5, "nowhere"))
    assert unknown.verdict == "fail" and "endpoint exit unknown" in unknown.observed
    late = _cleanup(done, checks.StepEnd(0, 12.6))
    assert late.verdict == "fail", "stopped after the allowance"
    left = _cleanup(done, checks.StepEnd(0, 2.5), ["7.3"])
    assert left.verdict == "fail" and "steps left: 7.3" in left.observed
    assert _cleanup(done, checks.StepEnd(0, 2.5)).verdict == "pass"


def flowing(started, ended, last_event):
    """A long stream cut at `ended` whose last event arrived at `last_event` (wall clock)."""
    return ClientRequest(
        mode="raw", record=0, attempt=0, started=started, t=ended, done=False, outcome="error",
        ttft_s=0.02, chunk_offsets_s=[0.0, round(last_event - started - 0.02, 4)],
    )  # fmt: skip


def test_a_stream_that_stopped_flowing_long_before_the_cut_is_stalled_not_bounded():
    """An endpoint that stops forwarding at TERM and only closes at its window did not drain."""
    assert checks.classify(flowing(0, 11.0, 10.95), stop_at=1, forced_at=None, window_s=10) == "bounded"
    assert checks.classify(flowing(0, 11.0, 1.1), stop_at=1, forced_at=None, window_s=10) == "stalled"
    assert checks.classify(flowing(0, 11.0, 9.2), stop_at=1, forced_at=None, window_s=10) == "bounded", "1.8 s"
    stalled = checks.allowance([flowing(0, 11.0, 1.1)], [], 1, None, 10, 12, checks.StepEnd(0, 10.0))
    assert stalled.verdict == "fail" and "1 stalled" in stalled.observed


def test_sut_cleanup_streams_stretched_past_the_window_may_be_ended_there_by_the_endpoint():
    """The drills' streams have about 8 s left at TERM; a busy machine stretches them past the
    10 s window, where an endpoint that bounds its drain ends them: correct (fact 3), not cut.
    Without the window only completing counts; a stream silent long before the cut, or cut
    before the window, is cut."""
    at_window = [flowing(0, 11.0, 10.95)] * 4
    bounded = checks.sut_cleanup("completion", at_window, [], 1, checks.StepEnd(0, 10.0), {}, 12, [], None, 10)
    assert bounded.verdict == "pass", bounded
    assert bounded.observed.startswith("0 of 4 in-flight stream(s) cut (4 ended by the endpoint at its window)")
    assert _cleanup(at_window, checks.StepEnd(0, 10.0)).verdict == "fail", "no window given: only completing"
    stalled = [flowing(0, 11.0, 1.5)] * 4
    held = checks.sut_cleanup("completion", stalled, [], 1, checks.StepEnd(0, 10.0), {}, 12, [], None, 10)
    assert held.verdict == "fail" and held.observed.startswith("4 of 4 in-flight stream(s) cut"), held
    early = [flowing(0, 5.8, 5.75)] * 4  # the hasty cleanup's KILL 4.8 s after the stop
    hasty = checks.sut_cleanup("completion", early, [], 1, checks.StepEnd(137, 4.8), {}, 12, [], 4.8, 10)
    assert hasty.verdict == "fail" and hasty.observed.startswith("4 of 4 in-flight stream(s) cut; endpoint exit 137")


def test_sut_cleanup_fails_a_kill_before_the_allowance():
    done = [stream(0, 3)] * 4
    early = _cleanup_killed(done, 0.2)
    assert early.verdict == "fail" and "KILL after 0.2s" in early.observed
    assert _cleanup_killed(done, 12.1).verdict == "pass", "a KILL at the allowance is the last resort, allowed"
    assert "KILL never" in _cleanup_killed(done, None).observed


def test_sut_cleanup_fails_a_stop_function_that_returns_while_its_endpoint_drains():
    """The seed keeps launchers and backends alive for the drain and forces only after the
    allowance: the stop function returns once its endpoint has ended. One that TERMs and
    returns at once (the wait left to the background) lets its controller go on, and the job
    end, under a drain still running, even where every stream completed here. Slurm's record
    of the end follows the launcher the stop waited on by a moment (up to 1 s allowed)."""
    done = [stream(0, 3) for _ in range(4)]

    def returned(after_s, ended_s=8.0):
        end = checks.StepEnd(0, ended_s)
        return checks.sut_cleanup("completion", done, served(done), 1, end, {}, 12, [], None, 10, after_s)

    detached = returned(0.1)
    assert detached.verdict == "fail" and detached.observed.endswith("KILL never; stop returned after 0.1s"), detached
    assert "returned 7.9s before its endpoint ended" in detached.detail, detached
    assert detached.metrics["stop_returned_s"] == 0.1
    assert returned(8.2).verdict == "pass", "returned once its endpoint had ended"
    assert returned(7.5).verdict == "pass", "Slurm's record of the end 0.5 s after the launcher's"
    assert returned(6.9).verdict == "fail"
    assert returned(None).verdict == "pass" and "stop returned" not in returned(None).observed, "not recorded"


def _cleanup_killed(streams, killed_after):
    return checks.sut_cleanup("failure", streams, served(streams), 1, checks.StepEnd(0, 2.5), {}, 12, [], killed_after)


def test_an_endpoint_that_raised_is_named_by_its_exception_never_its_message():
    """A non-zero exit says what the endpoint raised (the last traceback's exception, by
    name), so an exit 1 is a reason; the exception's message (it may quote a request) is
    never shown, and output without a traceback names nothing."""
    output = "\n".join(
        [
            'slurm_proxy_request {"final_status": 200}',
            "Traceback (most recent call last):",
            '  File "proxy.py", line 416, in main',
            "aiohttp.web_runner.GracefulExit",
            "During handling of the above exception, another exception occurred:",
            "Traceback (most recent call last):",
            "ValueError: prompt 'my secret question' was refused",
        ]
    )
    assert checks.raised_in(output) == "ValueError"
    assert checks.raised_in("Traceback (most recent call last):\naiohttp.web_runner.GracefulExit") == (
        "aiohttp.web_runner.GracefulExit"
    )
    assert checks.raised_in("ValueError: looks like one, but no traceback") == ""
    assert checks.raised_in('slurm_proxy_request {"e": "KeyError"}') == ""
    end = checks.StepEnd(1, 0.2, "slurmd step record", checks.raised_in(output))
    result = checks.scancel_step([stream(0, 3)], [], 1, end, [], 10, 12)
    assert result.verdict == "fail" and "endpoint exit 1 (raised ValueError) after 0.2s" in result.observed
    assert "secret" not in result.observed + result.detail
    assert "raised" not in checks.scancel_step([stream(0, 3)], [], 1, checks.StepEnd(0, 2.0), [], 10, 12).observed


def test_a_stop_that_came_after_every_stream_ended_whole_is_the_harness_fault_not_the_suts():
    """A loaded machine can delay the TERM past the streams it was meant to catch: nothing
    was drained, so nothing is judged (exit 2); a stream cut before the stop still fails."""
    end = checks.StepEnd(0, 3.0)
    finished = [stream(0.0, 4.0), stream(0.5, 4.5)]
    with pytest.raises(RuntimeError, match=r"all 2 stream\(s\) had ended whole 5\.5s and more before the stop"):
        checks.scancel_step(finished, served(finished), 10.0, end, [], 10, 12)
    with pytest.raises(RuntimeError, match="came too late"):
        checks.allowance(finished, served(finished), 10.0, None, 10, 12, end)
    cut_before = [stream(0.0, 4.0), stream(0.5, 2.0, done=False, outcome="error")]
    assert checks.scancel_step(cut_before, served(cut_before[:1]), 10.0, end, [], 10, 12).verdict == "fail"


def test_a_stop_slurm_delivered_twice_is_not_judged_where_it_failed_and_stands_where_it_passed():
    """CI's Slurm once delivered one `scancel --signal=TERM` twice, 3 ms apart (the node's log:
    two "Sent signal 15" lines); rc1, as aiohttp's run_app, exits 1 at a second TERM and cuts
    every stream. Its scancel_step failure is then no finding of the contract's one TERM: the
    run's error (exit 2), the check left out. One TERM, or a pass despite two, is judged."""
    cut = [stream(0, 1.1, False, "truncated") for _ in range(4)]
    twice = checks.StepEnd(1, 0.07, "slurmd step record", "asyncio.exceptions.InvalidStateError", 2, 0.003)
    failed = checks.scancel_step(cut, served(cut), 1, twice, [], 10, 12)
    assert failed.verdict == "fail" and "exit 1 (raised asyncio.exceptions.InvalidStateError)" in failed.observed
    assert "(got TERM 2 times)" in failed.observed, failed
    result = ScenarioResult("drain")
    checks.judged_on_one_term(result, failed, twice)
    assert result.checks == [] and result.verdict() == "fail", result  # never a pass: exit 2, not judged
    assert result.error.startswith("drain.scancel_step not judged: the endpoint's step got TERM 2 times"), result.error
    once = ScenarioResult("drain")
    checks.judged_on_one_term(once, failed, replace(twice, terms=1))
    assert once.checks == [failed] and once.error is None, "one TERM: the failure is the SUT's"
    ok = [stream(0, 3), stream(0, 3.5)]
    drained = checks.scancel_step(ok, served(ok), 1, checks.StepEnd(0, 2.6, terms=2), [], 10, 12)
    kept = ScenarioResult("drain")
    checks.judged_on_one_term(kept, drained, checks.StepEnd(0, 2.6, terms=2))
    assert drained.verdict == "pass" and kept.checks == [drained] and kept.error is None
    # an endpoint that ignored both TERMs and was KILLed at the allowance outlived the repeat:
    # its failure is its own
    ignored = [stream(0, 13.5, False, "error")]
    killed = checks.StepEnd(137, 12.5, "slurmd step record", "", 2, 0.003)
    forced = checks.allowance(ignored, served(ignored, outcome="cut"), 1, 13.5, 10, 12, killed)
    judged = ScenarioResult("drain")
    checks.judged_on_one_term(judged, forced, killed)
    assert forced.verdict == "fail" and judged.checks == [forced] and judged.error is None, judged


def test_the_not_judged_stop_says_scancel_repeated_its_request_where_its_output_shows_it():
    """The repeat's cause, where scancel's verbose output shows two requests: Slurm's scancel
    signals a step twice while a job submitted after it is pending (semantics test (h))."""
    cut = [stream(0, 1.1, False, "truncated") for _ in range(4)]
    twice = checks.harness_stop(checks.StepEnd(1, 0.06, "slurmd step record"), (100.0, 100.004), 2, 0.05)
    assert (twice.terms, round(twice.repeated_after_s, 3)) == (2, 0.004)
    result = ScenarioResult("drain")
    checks.judged_on_one_term(result, checks.scancel_step(cut, served(cut), 1, twice, [], 10, 12), twice)
    assert result.checks == [] and result.error is not None
    assert "(the harness ran scancel once; it sent its request 2 times, as Slurm's scancel does while a job " in (
        result.error
    )


def test_a_cleanup_drill_sets_aside_only_scancels_own_repeat_and_reads_the_queue_where_no_log_is():
    """The SUT's cleanup runs its own scancel, whose output the harness never sees. Where the
    node's log is read: a TERM again within 1 s is scancel's own repeat (set aside), one 1.5 s
    later the cleanup's own doing (its failure stands). On a login node, no log: a job
    submitted after the endpoint's pending at the stop means scancel signalled twice (set
    aside); none pending, one TERM (judged). A readable log with no TERM in it (rc1's cleanup
    KILLs through its launcher) is no repeat, whatever pends."""
    cut = [stream(0, 1.1, False, "truncated") for _ in range(4)]
    drill = checks.sut_cleanup("cancel", cut, served(cut), 1, checks.StepEnd(1, 0.06), {}, 12, [])
    assert drill.verdict == "fail"

    def judged(end):
        result = ScenarioResult("drain")
        checks.judged_on_one_term(result, drill, end)
        return result

    by_scancel = judged(checks.cleanup_stop(checks.StepEnd(1, 0.06), (100.0, 100.004), False))
    assert by_scancel.checks == [] and "(the SUT's cleanup ran scancel; a repeat within 1 s is scancel's own," in (
        by_scancel.error
    ), by_scancel.error
    assert checks.repeated_by_scancel((100.0, 101.5)) == (100.0,) and checks.repeated_by_scancel(()) == ()
    its_own = judged(checks.cleanup_stop(checks.StepEnd(1, 1.55), (100.0, 101.5), False))
    assert its_own.checks == [drill] and its_own.error is None, "the SUT's own later repeat: its own failure"
    once = judged(checks.cleanup_stop(checks.StepEnd(1, 0.06), (100.0,), True))
    assert once.checks == [drill] and once.error is None, "one TERM logged: a pending job changes nothing"
    queued = judged(checks.cleanup_stop(checks.StepEnd(1, 0.06), None, True))
    assert queued.checks == [] and "while a job submitted after this one was pending" in queued.error, queued.error
    quiet = judged(checks.cleanup_stop(checks.StepEnd(1, 0.06), None, False))
    assert quiet.checks == [drill] and quiet.error is None, "no log, nothing pending: one TERM, judged"
    killed = judged(checks.cleanup_stop(checks.StepEnd(137, 12.5), None, True))
    assert killed.checks == [drill], "an endpoint KILLed 12.5 s later outlived any repeat: judged"
    # rc1's cleanup KILLs through its launcher: the readable log shows no TERM at all, and no
    # pending job makes that a repeat (its true finding, fact 4, stays judged)
    launcher_killed = judged(checks.cleanup_stop(checks.StepEnd(137, 0.2), (), True))
    assert launcher_killed.checks == [drill] and launcher_killed.error is None, launcher_killed.error
    # nor on a login node with a later job pending, nor beside a logged repeat: a KILL is no
    # answer to a TERM, however often it came
    for deliveries in (None, (100.0, 100.004)):
        kill_at_once = judged(checks.cleanup_stop(checks.StepEnd(137, 0.2), deliveries, True))
        assert kill_at_once.checks == [drill] and kill_at_once.error is None, (deliveries, kill_at_once.error)


def _escalation(end, killed_after=None, returned_after=None, left=(), streams=None):
    long = streams if streams is not None else [stream(0, 13.2, False, "error")]  # 20 s long, stopped 1 s in
    return checks.sut_escalation(long, 1, end, {}, 12, list(left), killed_after, returned_after)


def test_sut_escalation_passes_a_force_at_the_allowance_and_an_endpoint_that_bounds_itself():
    """The seed's step-aware cleanup waits 12 s (bash's SECONDS: 11 to 12 s) and forces: the
    long stream is cut then, by design. An endpoint that ends it at its 10 s window and exits
    by itself needs no force (fact 3): no KILL at all is fine."""
    forced = _escalation(checks.StepEnd(137, 11.6), killed_after=11.5, returned_after=11.7)
    assert forced.verdict == "pass", forced
    assert (
        forced.id == "drain.sut_escalation"
        and "endpoint exit 137" in forced.observed
        and "KILL after 11.5s" in (forced.observed)
    )
    assert forced.metrics == {"endpoint_exit_s": 11.6, "term_s": 0.0, "forced_s": 11.5, "stop_returned_s": 11.7}
    bounded = _escalation(checks.StepEnd(0, 10.0), returned_after=10.1)
    assert bounded.verdict == "pass" and "KILL never" in bounded.observed, bounded
    assert _escalation(checks.StepEnd(137, 14.9), killed_after=14.8).verdict == "pass", "3 s for the KILL to land"


def test_sut_escalation_fails_a_force_before_the_allowance_by_its_moment():
    early = _escalation(checks.StepEnd(137, 9.3), killed_after=9.2, returned_after=9.4)
    assert early.verdict == "fail" and "forced 9.2s after the TERM, before the 12s allowance" in early.detail, early
    # killed, the KILL's line not read: the end is when it was forced at the latest
    unread = _escalation(checks.StepEnd(137, 0.3))
    assert (
        unread.verdict == "fail"
        and "KILL after 0.3s" in unread.observed
        and "forced 0.3s after the TERM" in unread.detail
    )
    assert _escalation(checks.StepEnd(137, 10.6), killed_after=10.5).verdict == "pass", "within 1.5 s of it"
    assert _escalation(checks.StepEnd(137, 10.4), killed_after=10.4).verdict == "fail"


def test_sut_escalation_fails_an_endpoint_left_draining_past_the_allowance():
    """A stop function that waits for its endpoint without a bound (never forces): rc1's
    proxy drains a 19 s remainder to its end, and the stop returns only then."""
    unbounded = _escalation(checks.StepEnd(0, 19.1), returned_after=19.2)
    assert unbounded.verdict == "fail" and "still ran 19.1s after the TERM" in unbounded.detail, unbounded
    assert "unbounded escalation" in unbounded.detail and "KILL never" in unbounded.observed
    assert _escalation(checks.StepEnd(0, 15.1)).verdict == "fail", "more than 3 s past the allowance"
    unknown = _escalation(checks.StepEnd(None, 11.0, "nowhere"))
    assert unknown.verdict == "fail" and "exit was not recorded" in unknown.detail


def test_sut_escalation_fails_an_early_return_and_a_step_left():
    detached = _escalation(checks.StepEnd(137, 11.8), killed_after=11.7, returned_after=0.1)
    assert detached.verdict == "fail" and "returned 11.7s before its endpoint ended" in detached.detail, detached
    # a KILL to srun ends the launcher a stop function waits on before slurmd records the task's end
    assert _escalation(checks.StepEnd(137, 14.2), killed_after=12.0, returned_after=12.1).verdict == "pass"
    left = _escalation(checks.StepEnd(137, 11.8), killed_after=11.7, left=["7.4"])
    assert left.verdict == "fail" and "steps left: 7.4" in left.observed
    nothing = _escalation(checks.StepEnd(0, 2.0), streams=[stream(0, 0.5, False, "error")])  # failed before it
    assert nothing.verdict == "fail" and "nothing was tested" in nothing.detail


def test_a_stream_ended_by_the_term_just_before_its_logged_moment_is_in_flight():
    """slurmstepd writes its line of TERM's delivery a moment after delivering it: an endpoint
    that answers TERM at once with a made-up [DONE] is read ending first (CI: 1.5 ms before).
    Such a stream is in flight and lost, not a stop that came after every stream (exit 2);
    one that ended well before the stop still is that."""
    made_up = [stream(0, 0.9985, chunks=20)]  # [DONE] after 20 of the 400 events the replica was to write
    judged = checks.allowance(made_up, served(made_up, events=400, outcome="disconnected"), 1, None, 10, 12,
                              checks.StepEnd(0, 0.5))  # fmt: skip
    assert judged.verdict == "fail" and judged.metrics["streams_lost"] == 1, judged
    with pytest.raises(RuntimeError, match="came too late"):
        checks.allowance([stream(0, 0.7)], [], 1, None, 10, 12, checks.StepEnd(0, 0.5))


def test_sut_escalation_counts_the_allowance_from_the_term_and_ignores_a_kill_after_a_clean_exit():
    """A cleanup that looks its step up in the queue first TERMs it seconds after the stop
    began: its 12 s run from that TERM. A KILL logged after the endpoint's own exit 0 (a
    launcher stopped once the endpoint had ended by itself) reached nothing of it."""
    slow = checks.sut_escalation([stream(0, 16.0, False, "error")], 1, checks.StepEnd(137, 15.1), {}, 12, [], 14.9,
                                 15.2, term_after_s=2.5)  # fmt: skip
    assert slow.verdict == "pass" and "TERM after 2.5s" in slow.observed and slow.metrics["term_s"] == 2.5, slow
    late = checks.sut_escalation([stream(0, 19.0, False, "error")], 1, checks.StepEnd(137, 15.1), {}, 12, [], 14.9)
    assert late.verdict == "fail" and "(its KILL at 14.9s)" in late.detail, "counted from the stop: 3.1 s late"
    bounded = _escalation(checks.StepEnd(0, 10.0), killed_after=10.3, returned_after=10.4)
    assert bounded.verdict == "pass" and "KILL never" in bounded.observed, bounded
