"""The drain rules on hand-made stream events: completed, forced, lost."""

from dd_accept.acceptance import drain_checks as checks


def stream(started, ended, done=True, outcome="ok"):
    return {"kind": "request", "started": started, "t": ended, "done": done, "outcome": outcome}


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
    end = checks.StepEnd(0, 3.6)
    assert checks.scancel_step(ok, 1, end, [], 10).verdict == "pass"
    assert checks.scancel_step([stream(0, 2, False, "truncated"), *ok], 1, end, [], 10).verdict == "fail"
    assert checks.scancel_step(ok, 1, checks.StepEnd(143, 0.1), [], 10).verdict == "fail"
    assert checks.scancel_step(ok, 1, checks.StepEnd(0, 11), [], 10).verdict == "fail"
    assert checks.scancel_step(ok, 1, end, ["1.3"], 10).verdict == "fail"
    assert checks.scancel_step([], 1, end, [], 10).verdict == "fail", "nothing in flight: nothing was tested"


def test_allowance_accepts_forced_streams_and_rejects_lost_ones_and_early_force():
    assert checks.allowance([stream(0, 13.1, False, "error")], 1, 13.0, 10, 12).verdict == "pass"
    assert checks.allowance([stream(0, 4, False, "error")], 1, 13.0, 10, 12).verdict == "fail"
    assert checks.allowance([stream(0, 6.1, False, "error")], 1, 6.0, 10, 12).verdict == "fail", "forced too early"
    assert checks.allowance([stream(0, 9)], 1, None, 10, 12).verdict == "pass", "completed inside the window"


def test_sut_cleanup_counts_cut_streams():
    cut = checks.sut_cleanup("completion", [stream(0, 1.3, False, "error")] * 4, 1, checks.StepEnd(137, 0.3), {})
    assert cut.verdict == "fail" and cut.observed.startswith("4 of 4 in-flight stream(s) cut; endpoint exit 137")
    fine = checks.sut_cleanup("cancel", [stream(0, 3)] * 4, 1, checks.StepEnd(0, 2.5), {})
    assert fine.verdict == "pass" and fine.id == "drain.sut_cleanup.cancel"
