"""The overload rules on hand-made evidence: each rule's pass and fail, and its edges."""

from dd_accept.acceptance import overload_checks as checks
from dd_accept.acceptance.analysis import expected_decreases
from dd_accept.acceptance.overload_unreachable import UnreachableRound, resetting_replicas
from dd_accept.base.events import AdmissionChange, ClientRequest, UpstreamAttempt
from dd_accept.deployment import AdmissionSample, ColdStart, ExemptAnswers


def request(t, record, status=200, outcome="ok", request_id=None, retry_after=None):
    return ClientRequest(
        t=t, mode="sut", record=record, attempt=0, status=status, outcome=outcome,
        request_id=request_id or f"r{record}.{int(t * 10)}", retry_after=retry_after,
    )  # fmt: skip


def upstream(request_id, status, started, duration=0.0):
    return UpstreamAttempt(
        t=started + duration, replica=0, path="/v1/chat/completions", outcome="ok",
        request_id=request_id, status=status, started=started, duration_s=duration,
    )  # fmt: skip


def lease(t):
    return AdmissionChange(t=t, event="request_lease_acquired", limit=8)


def change(t, name, limit):
    return AdmissionChange(t=t, event=name, limit=limit)


def test_expected_decreases_follow_floor_times_factor_until_the_limit_cannot_fall():
    assert expected_decreases(8, 0.75, 2) == [6, 4]
    assert expected_decreases(3, 0.75, 3) == [2, 1]
    assert expected_decreases(2, 0.5, 3) == [1], "1 → 1 is no decrease: a controller reports none"
    assert expected_decreases(1, 0.75, 2) == []


def test_a_limit_of_2_is_judged_on_its_one_possible_decrease():
    events = [change(1, "request_limit_decreased", 1)]
    check = checks.total_admission_decrease(events, 2, 0.75)
    assert check.verdict == "pass" and check.expected.startswith("2 → 1, one decrease a round"), check


def test_partial_completes_requires_every_record_and_no_visible_429_when_absorbable():
    ok = [request(1, r) for r in range(3)]
    assert checks.partial_completes(ok, 3, overloaded=2, max_attempts=3).verdict == "pass"
    visible = [request(0.5, 0, 429, "rate_limited"), *ok]
    assert checks.partial_completes(visible, 3, overloaded=2, max_attempts=3).verdict == "fail"
    # with as many overloaded replicas as attempts, a 429 can legitimately reach the client
    assert checks.partial_completes(visible, 3, overloaded=3, max_attempts=3).verdict == "pass"
    assert checks.partial_completes(ok[:2], 3, overloaded=2, max_attempts=3).verdict == "fail"


def test_partial_failover_needs_failovers_on_both_sides_and_the_attempt_bound():
    failed_over = [upstream("a", 429, 1.0), upstream("a", 200, 1.1), upstream("b", 200, 1.2)]
    no_failover = [upstream("a", 200, 1.0), upstream("b", 200, 1.2)]
    assert checks.partial_failover(failed_over, 1, 3).verdict == "pass"
    zero = checks.partial_failover(failed_over, 0, 3)
    assert zero.verdict == "fail" and "0 429 retries (proxy metrics)" in zero.observed, "the proxy says it retried none"
    # a SUT whose profile names no retry metric is judged by the replicas alone
    unreported = checks.partial_failover(failed_over, None, 3)
    assert unreported.verdict == "pass" and "not reported by the SUT" in unreported.observed
    assert checks.partial_failover(no_failover, None, 3).verdict == "fail"
    assert checks.partial_failover(no_failover, 1, 3).verdict == "fail"
    four = [upstream("a", 429, 1.0 + i / 10) for i in range(4)]
    assert checks.partial_failover(four, 3, 3).verdict == "fail"


def test_total_attempts_counts_the_replicas_view_of_each_client_429():
    client = [request(2, 0, 429, "rate_limited", "x")]
    three = [upstream("x", 429, 1.0), upstream("x", 429, 1.1), upstream("x", 429, 1.2)]
    assert checks.total_attempts(client, three, replicas=8, max_attempts=3).verdict == "pass"
    assert checks.total_attempts(client, three[:2], replicas=8, max_attempts=3).verdict == "fail"
    assert checks.total_attempts(client, three[:2], replicas=2, max_attempts=3).verdict == "pass"
    mixed = [*three[:2], upstream("x", 503, 1.2)]
    assert checks.total_attempts(client, mixed, replicas=8, max_attempts=3).verdict == "fail"
    assert checks.total_attempts([], three, replicas=8, max_attempts=3).verdict == "fail", "no 429 seen at all"


def test_total_retry_after_must_match_on_every_429():
    good = [request(1, 0, 429, "rate_limited", retry_after=3.0), request(2, 1, 429, "rate_limited", retry_after=3.0)]
    assert checks.total_retry_after(good, 3).verdict == "pass"
    assert checks.total_retry_after([*good, request(3, 2, 429, "rate_limited")], 3).verdict == "fail"
    assert checks.total_retry_after(good, 1).verdict == "fail"


def test_admission_decrease_compares_the_first_rounds_in_order():
    events = [change(1, "request_limit_decreased", 6), change(4, "request_limit_decreased", 4)]
    assert checks.total_admission_decrease(events, 8, 0.75).verdict == "pass"
    assert checks.total_admission_decrease(events[:1], 8, 0.75).verdict == "fail"
    result = checks.total_admission_decrease([], 8, 0.75)
    assert result.verdict == "fail" and result.observed.startswith("8 (no decrease);")


def attempt(request_id, started, duration):
    return upstream(request_id, 200, started, duration)


def test_the_limit_the_controller_reports_is_checked_against_concurrency_at_the_replicas():
    """A controller that reports 8 → 6 → 4 but keeps 8 requests under way is caught by what
    the replicas saw, not by what it says."""
    events = [change(1, "request_limit_decreased", 6), change(4, "request_limit_decreased", 4)]
    second_round = [attempt(f"q{i}", 2.0, 0.1) for i in range(6)]  # admitted under 6, they lowered it to 4
    honest = [attempt(f"r{i}", 10.0 + i, 0.5) for i in range(4)] + [attempt(f"s{i}", 10.2, 0.5) for i in range(3)]
    honest += second_round
    check = checks.total_admission_decrease(events, 8, 0.75, upstream=honest)
    assert check.verdict == "pass", check
    flooding = [attempt(f"f{i}", 10.0, 1.0) for i in range(8)]
    broken = checks.total_admission_decrease(events, 8, 0.75, upstream=flooding)
    assert broken.verdict == "fail" and broken.metrics["limit_breaches"] == 8
    assert "worst 8 at limit 4" in broken.observed
    just_after = [attempt(f"g{i}", 4.5, 0.2) for i in range(6)]  # admitted under 6, a moment before the decrease
    check = checks.total_admission_decrease(events, 8, 0.75, upstream=[*second_round, *just_after])
    assert check.verdict == "pass", check
    until = checks.total_admission_decrease(events, 8, 0.75, upstream=[*second_round, *flooding], until=9.0)
    assert until.verdict == "pass", "attempts after the relief belong to recovery"


def test_a_request_that_follows_a_response_at_once_does_not_overlap_it():
    """A replica's span ends at the response's last byte; the client may send its next
    request the moment it reads it. Only an overlap longer than the span edge counts."""
    events = [change(1, "request_limit_decreased", 1)]
    follows = [attempt("a", 10.0, 0.5), attempt("b", 10.5 + 0.002, 0.5), attempt("c", 0.5, 0.1)]
    check = checks.total_admission_decrease(events, 2, 0.75, upstream=follows)
    assert check.verdict == "pass" and check.metrics["limit_breaches"] == 0, check
    overlaps = [attempt("a", 10.0, 0.5), attempt("b", 10.49, 0.5), attempt("c", 0.5, 0.1)]
    broken = checks.total_admission_decrease(events, 2, 0.75, upstream=overlaps)
    assert broken.verdict == "fail" and "worst 2 at limit 1" in broken.observed, broken


def test_decreasing_on_every_429_of_one_round_fails_though_the_first_values_match():
    """8 → 6 → 4 → 3 → 2 → 1 within one round: its first two values are AIMD's, but no request
    reached a replica between the decreases, so no round admitted under 6 lowered it to 4."""
    round_one = [attempt(f"r{i}", 0.5, 0.01) for i in range(8)]
    hasty = [change(1.0 + i / 100, "request_limit_decreased", limit) for i, limit in enumerate((6, 4, 3, 2, 1))]
    broken = checks.total_admission_decrease(hasty, 8, 0.75, upstream=round_one)
    assert broken.verdict == "fail" and broken.metrics["decreases_without_new_round"] == 4, broken
    assert "8 → 6 → 4 → 3 → 2 → 1; 4 decrease(s) before any new request reached a replica (first to 4)" in (
        broken.observed
    )
    assert broken.metrics["limit_breaches"] == 0, "what it let through stayed within the limits it reported"
    round_two = [attempt(f"s{i}", 4.0, 0.01) for i in range(6)]  # after the 3 s cooldown, under 6
    rounds = [change(1.0, "request_limit_decreased", 6), change(4.02, "request_limit_decreased", 4)]
    aimd = checks.total_admission_decrease(rounds, 8, 0.75, upstream=[*round_one, *round_two])
    assert aimd.verdict == "pass" and aimd.metrics["decreases_without_new_round"] == 0, aimd


def test_no_request_id_seen_at_the_replicas_fails_for_that_reason():
    events = [change(1, "request_limit_decreased", 6), change(4, "request_limit_decreased", 4)]
    client = [*events, request(2.0, 0, 429, "rate_limited")]
    check = checks.total_admission_decrease(client, 8, 0.75, upstream=[])
    assert check.verdict == "fail" and "saw none of the client's request ids" in check.detail, check


def test_recovery_counts_breaches_after_the_relief_only():
    events = [change(1, "request_limit_decreased", 6), change(4, "request_limit_decreased", 4)]
    events += [request(20 + i, i) for i in range(3)] + [change(21, "request_limit_increased", 5)]
    fine = checks.recovery(events, 3, 10.0, upstream=[attempt(f"r{i}", 20.0 + i, 0.5) for i in range(3)], limit=8)
    assert fine.verdict == "pass", fine
    flood = [attempt(f"f{i}", 20.0, 1.0) for i in range(8)]
    broken = checks.recovery(events, 3, 10.0, upstream=flood, limit=8)
    assert broken.verdict == "fail" and broken.metrics["limit_breaches"] == 8


def test_cooldown_windows_come_from_the_retry_after_the_client_saw():
    limited = request(10.0, 0, 429, "rate_limited", retry_after=3.0)
    assert checks.total_cooldown([limited, lease(9.0), lease(13.1)], 2.0).verdict == "pass"
    breach = checks.total_cooldown([limited, lease(10.5)], 2.0)
    assert breach.verdict == "fail" and "admitted 0.50s into a 3.00s cooldown" in breach.detail
    # no Retry-After: the controller's documented default applies
    bare = request(10.0, 0, 429, "rate_limited")
    assert checks.total_cooldown([bare, lease(11.0)], 2.0).verdict == "fail"
    assert checks.total_cooldown([bare, lease(12.5)], 2.0).verdict == "pass"
    assert checks.total_cooldown([lease(1.0)], 2.0).verdict == "fail", "no 429, nothing was tested"


def test_recovery_needs_all_records_and_a_rise_after_relief():
    events = [
        change(1, "request_limit_decreased", 4),
        *[request(5, r) for r in range(3)],
        change(6, "request_limit_increased", 5),
    ]
    assert checks.recovery(events, 3, relieved_at=4.0).verdict == "pass"
    assert checks.recovery(events, 3, relieved_at=7.0).verdict == "fail"
    assert checks.recovery(events[:-1], 3, relieved_at=4.0).verdict == "fail"


def test_a_cooldown_is_counted_from_where_the_replicas_answered_the_429():
    """The controller learnt of the 429 no earlier than its last attempt ended at a replica;
    the client's own record of it may come later on a busy machine. A correct controller
    that admits 3 s after the replica's answer is not blamed for the client's late record."""
    limited = request(10.25, 0, 429, "rate_limited", request_id="x", retry_after=3.0)
    answered = [upstream("x", 429, 9.9, 0.05), upstream("x", 429, 9.96, 0.04)]  # last one ended at 10.0
    on_time = checks.total_cooldown([limited, lease(13.02)], 2.0, answered)
    assert on_time.verdict == "pass" and on_time.metrics["cooldown_breaches"] == 0, on_time
    assert checks.total_cooldown([limited, lease(13.02)], 2.0).verdict == "fail", "dated by the client's record"
    early = checks.total_cooldown([limited, lease(12.5)], 2.0, answered)
    assert early.verdict == "fail" and "admitted 2.25s into a 2.75s cooldown" in early.detail, early.detail


def test_cooldown_without_lease_events_is_not_observed_and_fails():
    limited = request(10.0, 0, 429, "rate_limited", retry_after=3.0)
    silent = checks.total_cooldown([limited], 2.0)
    assert silent.verdict == "fail" and "cooldown not observed" in silent.detail
    before_only = checks.total_cooldown([limited, lease(9.0)], 2.0)
    assert before_only.verdict == "fail" and before_only.metrics["cooldown_windows_judged"] == 0


def test_retry_after_tells_a_substituted_fallback_from_the_replicas_value():
    substituted = [request(1, 0, 429, "rate_limited", retry_after=7.0)]
    check = checks.total_retry_after(substituted, 3, proxy_fallback=7)
    assert check.verdict == "fail" and "substituted its fallback" in check.detail
    passed_on = checks.total_retry_after([request(1, 0, 429, "rate_limited", retry_after=3.0)], 3, proxy_fallback=7)
    assert passed_on.verdict == "pass" and "substituted" not in passed_on.detail


def sample(depth, threshold, statuses, retry_after=None):
    return AdmissionSample(
        tuple(range(len(statuses))),
        depth,
        threshold,
        tuple(statuses),
        tuple(retry_after or [None] * len(statuses)),
        0.4,
    )


def test_admission_rejects_above_the_threshold_and_admits_at_it():
    good = [
        sample(0, 0, [400, 400]),
        sample(1, 0, [429, 429], ["3", "3"]),
        sample(0, 0, [400, 400]),
        sample(128, 128, [400]),
        sample(129, 128, [429], ["3"]),
    ]
    check = checks.admission_rejects(good, 3)
    assert check.verdict == "pass", check
    assert "threshold 0, depth 1: 429: 2 (Retry-After 3: 2)" in check.observed


GOOD = [sample(0, 0, [400]), sample(1, 0, [429], ["3"]), sample(128, 128, [400]), sample(129, 128, [429], ["3"])]


def cold(statuses, every=0.05):
    return ColdStart(0, 129, 128, tuple(statuses), tuple(round(i * every, 4) for i in range(len(statuses))))


def test_a_cold_start_may_fail_open_until_the_first_reading_and_the_evidence_shows_how_long():
    """rc1: the sampler starts on the first request, so that request is admitted (fail-open)
    and the next ones are rejected."""
    check = checks.admission_rejects(GOOD, 3, cold([400, 429, 429, 429]), stale_after_s=1.0)
    assert check.verdict == "pass", check
    assert (
        "cold start at depth 129 (threshold 128): 1 admitted before its first reading (fail-open), " in check.observed
    )
    assert "first 429 after 0.05s" in check.observed
    assert check.metrics["cold_start_admitted"] == 1 and check.metrics["cold_start_first_reject_s"] == 0.05
    assert "the first 429 within 1.5s (its 1s staleness bound)" in check.expected


def test_a_middleware_that_fails_open_beyond_its_staleness_bound_fails():
    late = checks.admission_rejects(GOOD, 3, cold([400] * 40 + [429]), stale_after_s=1.0)  # first 429 at 2.0 s
    assert late.verdict == "fail" and "40 admitted before its first reading" in late.observed
    assert "first 429 after 2.00s" in late.observed and "beyond 1.5s" in late.detail
    never = checks.admission_rejects(GOOD, 3, cold([400] * 40), stale_after_s=1.0)
    assert never.verdict == "fail" and "no 429 in 40 probes" in never.observed
    assert "cold_start_first_reject_s" not in never.metrics
    at_the_bound = checks.admission_rejects(GOOD, 3, cold([400] * 30 + [429]), stale_after_s=1.0)  # 1.5 s
    assert at_the_bound.verdict == "pass", "the bound includes its tolerance"


def test_unanswered_probes_are_not_counted_as_admitted():
    assert cold([None, 400, None, 429]).admitted_before_reject == 1
    assert cold([None, None]).first_reject_s is None


def test_admission_that_never_rejects_fails_with_what_was_seen():
    never = checks.admission_rejects([sample(0, 0, [400, 400]), sample(1, 0, [400, 400])], 3)
    assert never.verdict == "fail" and "threshold 0, depth 1: 400: 2" in never.observed
    assert "did not reject" in never.detail and never.metrics["admission_wrong"] == 1


def test_admission_at_the_threshold_must_admit_and_retry_after_must_match():
    off_by_one = checks.admission_rejects([sample(128, 128, [429], ["3"]), sample(129, 128, [429], ["3"])], 3)
    assert off_by_one.verdict == "fail" and "did not admit" in off_by_one.detail
    wrong_header = checks.admission_rejects([sample(1, 0, [429], ["1"])], 3)
    assert wrong_header.verdict == "fail"
    missing_header = checks.admission_rejects([sample(1, 0, [429], [None])], 3)
    assert missing_header.verdict == "fail"
    probe_failed = checks.admission_rejects([sample(0, 0, [None]), sample(1, 0, [429], ["3"])], 3)
    assert probe_failed.verdict == "fail", "no answer is not an admission"
    assert checks.admission_rejects([], 3).verdict == "fail"
    assert checks.admission_rejects([sample(0, 0, [400])], 3).verdict == "fail", "rejection never exercised"


def test_the_retry_metric_is_read_where_the_profile_says():
    from dd_accept.acceptance.proxy_metrics import metric_value

    metrics = {"retries": {"http_429": 4, "connect": 1}, "flag": True}
    assert metric_value(metrics, "retries.http_429") == 4.0
    assert metric_value(metrics, "retries.http_503") == 0.0, "a counter not incremented yet"
    assert metric_value({"retry_counts": {"http_429": 4}}, "retries.http_429") is None, "named otherwise"
    assert metric_value(None, "retries.http_429") is None, "no metrics document: not reported"
    assert metric_value(metrics, "flag") is None, "not a number"
    assert metric_value(metrics, "") is None, "no metric named: not reported"
    # the seed counts retries by cause, not how a cause is spelled: telemetry reads them alike
    for spelled in ({"429": 9}, {"status_429": 9}, {"http_429": 9, "timeout": 1}):
        assert metric_value({"retries": spelled}, "retries.http_429") == 9.0, spelled
    assert metric_value({"retries": {"503": 2}}, "retries.http_429") == 0.0, "only another status counted"


def test_an_admitted_probe_is_the_app_s_own_answer_and_a_5xx_is_no_admission():
    """The probe is a POST to the chat endpoint whose body the app refuses (400): any answer
    of the app's below 500 got past the middleware; a 503 is a refusal, not an admission."""
    assert checks.admission_rejects([sample(0, 0, [400, 422]), sample(1, 0, [429], ["3"])], 3).verdict == "pass"
    refused = checks.admission_rejects([sample(0, 0, [503]), sample(1, 0, [429], ["3"])], 3)
    assert refused.verdict == "fail" and "did not admit" in refused.detail, refused
    assert "admitted (the app answers the probe itself: a 400 for its empty body" in refused.expected
    assert "any status below 500 but 429) at or below it" in refused.expected


def _released(t, outcome="success"):
    return AdmissionChange(t=t, event="request_lease_released", reason=outcome)


def _recovering(steps, successes_before_each, reset_after=None):
    """The total phase's decreases 8 → 6 → 4, then rises to each limit in `steps`, each after
    its count of successful releases (the release completing the streak reported just after
    the rise, as rc1 reports it); `reset_after`: a 429's release after that many successes of
    the first streak."""
    events = [change(1, "request_limit_decreased", 6), change(4, "request_limit_decreased", 4)]
    events += [request(20 + r / 100, r) for r in range(3)]
    t = 20.0
    for limit, successes in zip(steps, successes_before_each, strict=True):
        for n in range(successes - 1):
            t += 0.01
            events.append(_released(t))
            if reset_after is not None and n + 1 == reset_after:
                events.append(_released(t, "rate_limited"))
                reset_after = None
        events += [change(t + 0.005, "request_limit_increased", limit), _released(t + 0.006)]
        t += 0.01
    return events


def test_recovery_rises_by_one_after_25_successes_and_not_otherwise():
    """The controller's AIMD (+1 after 25 successes): a rise by 2, or after 5 successes, or
    after a streak a 429 broke, fails recovery, with the rise named; the successes are the
    controller's own releases (rc1 reports the release completing a streak just after the
    rise it caused)."""
    rc1 = checks.recovery(_recovering([5, 6], [25, 25]), 3, relieved_at=10.0)
    assert rc1.verdict == "pass" and rc1.metrics["increases_off_rule"] == 0, rc1
    by_two = checks.recovery(_recovering([6], [25]), 3, relieved_at=10.0)
    assert by_two.verdict == "fail" and "the limit rose 4 → 6, not by 1" in by_two.detail, by_two
    hasty = checks.recovery(_recovering([5, 6], [25, 5]), 3, relieved_at=10.0)
    assert hasty.verdict == "fail" and "rose 5 → 6 after 5 successes, not 25" in hasty.detail, hasty
    assert hasty.metrics["increases_off_rule"] == 1
    broken_streak = checks.recovery(_recovering([5], [25], reset_after=12), 3, relieved_at=10.0)
    assert broken_streak.verdict == "fail", broken_streak
    assert "rose 4 → 5 after 12 successes, not 25" in broken_streak.detail, broken_streak
    unreported = [e for e in _recovering([5, 6], [25, 5]) if getattr(e, "event", "") != "request_lease_released"]
    assert checks.recovery(unreported, 3, relieved_at=10.0).verdict == "pass", "judged on its steps alone"
    assert checks.recovery(_recovering([5], [25]), 3, 10.0, increase_step=2).verdict == "fail"


def test_a_cooldown_held_beyond_its_retry_after_is_caught_at_the_replicas():
    """A 429's cooldown is its Retry-After: the client's waiting requests reach the replicas
    within a second of it running out (rc1: 6 to 11 ms in three runs). Held for twice the
    Retry-After they come 3 s late; counted from the client's record of the 429, windows that
    overlap end with the last; a window after which nothing came is not judged."""
    limited = [
        request(10.0, 0, 429, "rate_limited", retry_after=3.0),
        request(11.0, 1, 429, "rate_limited", retry_after=3.0),
    ]
    leases = [lease(9.0), lease(14.02)]
    prompt = checks.total_cooldown(
        [*limited, *leases], 2.0, [attempt("total-a", 9.0, 0.5), attempt("total-b", 14.02, 0.1)]
    )
    assert prompt.verdict == "pass" and prompt.metrics["cooldown_overruns"] == 0, prompt
    early_in_the_last = checks.total_cooldown([*limited, *leases], 2.0, [attempt("total-b", 13.6, 0.1)])
    assert early_in_the_last.verdict == "pass", "inside a second of the latest end: the controller learnt earlier"
    held = checks.total_cooldown([*limited, lease(9.0), lease(17.0)], 2.0, [attempt("total-c", 17.0, 0.1)])
    assert held.verdict == "fail" and held.metrics["cooldown_overruns"] == 1, held
    assert "next request 3.00s after its cooldown had run out" in held.detail, held
    ended = checks.total_cooldown([*limited, *leases], 2.0, [attempt("total-a", 9.0, 0.5)])
    assert ended.metrics["cooldown_overruns"] == 0, "no request after the window: nothing held"


def test_a_cooldown_whose_waiters_wait_for_capacity_is_not_judged_by_its_end():
    """At the window's end the controller reported as many requests in flight as its limit
    (vLLM replicas still working off the relief): its waiters wait for a slot, not for the
    cooldown, so a late next request is no overlong cooldown."""
    limited = request(10.0, 0, 429, "rate_limited", retry_after=3.0)
    full = AdmissionChange(t=12.9, event="request_wait_started", limit=4, in_flight=4)
    late = [attempt("total-c", 17.0, 0.1)]
    assert checks.total_cooldown([limited, full, lease(9.0), lease(17.0)], 2.0, late).metrics["cooldown_overruns"] == 0
    room = AdmissionChange(t=12.9, event="request_wait_started", limit=4, in_flight=2)
    assert checks.total_cooldown([limited, room, lease(9.0), lease(17.0)], 2.0, late).metrics["cooldown_overruns"] == 1


def test_the_successes_before_a_rise_are_counted_in_the_order_the_controller_reported_them():
    """The sink stamps each event with the wall clock as it writes it: a clock stepped back
    between the 24th success and the rise must not move the rise before its successes."""
    events = [change(1, "request_limit_decreased", 4)]
    events += [_released(100.0 + n / 1000) for n in range(24)]
    events += [change(99.95, "request_limit_increased", 5), _released(99.951)]
    events += [request(100 + r, r) for r in range(3)]
    fine = checks.recovery(events, 3, relieved_at=10.0)
    assert fine.verdict == "pass" and fine.metrics["increases_off_rule"] == 0, fine


_EXEMPT = ("/health", "/ready", "/metrics", "/version", "/v1/models", "/ping")


def _exempt(statuses_by_path: dict[str, int | None], replicas=(0, 1), rejecting=(0, 1)) -> ExemptAnswers:
    """The evidence as the harness keeps it: the answers of the replicas that were rejecting."""
    answers = tuple((r, path, status) for r in rejecting for path, status in statuses_by_path.items())
    return ExemptAnswers(depth=7, threshold=0, replicas=replicas, rejecting=rejecting, answers=answers)


def test_exempt_paths_answered_by_the_app_pass_whatever_its_own_status():
    statuses = {"/health": 200, "/ready": 404, "/metrics": 200, "/version": 200, "/v1/models": 200, "/ping": 404}
    answers = _exempt(statuses)
    result = checks.admission_exempt(answers, _EXEMPT)
    assert result.verdict == "pass", result
    assert result.observed == (
        "12 GET(s) on the 2 of 2 replica(s) at depth 7 (threshold 0) rejecting the admission probe before and after: "
        "200: 8, 404: 4"
    )
    assert result.metrics == {"exempt_asked": 12, "exempt_refused": 0}


def test_one_gated_exempt_path_fails_and_is_named_with_its_replica():
    answers = _exempt({"/health": 429, "/metrics": 200})
    result = checks.admission_exempt(answers, _EXEMPT)
    assert result.verdict == "fail" and result.metrics == {"exempt_asked": 4, "exempt_refused": 2}
    assert result.observed.endswith("; refused: /health: 2"), result.observed
    assert result.detail == "first refusal: replica 0 answered /health with 429"


def test_a_5xx_or_no_answer_on_an_exempt_path_is_a_refusal():
    for status, said in ((503, "503"), (None, "nothing")):
        answers = _exempt({"/health": 200, "/metrics": status}, replicas=(3,), rejecting=(3,))
        result = checks.admission_exempt(answers, _EXEMPT)
        assert result.verdict == "fail" and result.detail == f"first refusal: replica 3 answered /metrics with {said}"


def test_only_replicas_rejecting_before_and_after_are_judged_and_none_is_no_pass():
    # replica 1 admitted meanwhile (its queue drained): only replica 0's answers are judged
    partly = _exempt({"/health": 429}, replicas=(0, 1), rejecting=(0,))
    result = checks.admission_exempt(partly, _EXEMPT)
    assert result.verdict == "fail" and result.metrics == {"exempt_asked": 1, "exempt_refused": 1}, result
    assert "on the 1 of 2 replica(s)" in result.observed, result
    judged_ok = _exempt({"/health": 200}, replicas=(0, 1), rejecting=(1,))
    assert checks.admission_exempt(judged_ok, _EXEMPT).metrics == {"exempt_asked": 1, "exempt_refused": 0}
    result = checks.admission_exempt(_exempt({"/health": 200}, rejecting=()), _EXEMPT)
    assert result.verdict == "fail" and result.detail.startswith("no replica rejected the admission probe"), result


def test_exempt_paths_never_asked_fail_and_say_so():
    for answers in (None, ExemptAnswers(7, 0, (), (), ())):
        result = checks.admission_exempt(answers, _EXEMPT)
        assert result.verdict == "fail" and result.observed == "no exempt path was asked"


def _round(statuses, retry_after="3", attempts=3):
    client = tuple(
        ClientRequest(t=1.0, mode="raw", record=i, attempt=1, outcome="x", request_id=f"unreachable-0-{i}",
                      status=status, retry_after=retry_after if status == 429 else None)
        for i, status in enumerate(statuses)
    )  # fmt: skip
    return UnreachableRound(resetting=((2, 5),), attempts=attempts, client=client)


def _seen(request: int, *statuses: int | None) -> list[UpstreamAttempt]:
    """A request's attempts in order: a status, or None for a connection the replica reset."""
    return [
        UpstreamAttempt(t=1.0, replica=i, path="/v1/chat/completions", outcome="ok" if status else "reset",
                        started=0.5 + i / 10, duration_s=0.01, request_id=f"unreachable-0-{request}", status=status)
        for i, status in enumerate(statuses)
    ]  # fmt: skip


def test_unreachable_passes_when_each_request_that_met_overload_got_429_with_the_replicas_value():
    # request 0: 429, 429, then a reset (the path); 1: three 429s; 2: reset, 429, 429 (passed on); 3: resets only (502)
    upstream = _seen(0, 429, 429, None) + _seen(1, 429, 429, 429) + _seen(2, None, 429, 429) + _seen(3, None, None)
    result = checks.total_unreachable(_round([429, 429, 429, 502]), upstream, 3, 7)
    assert result.verdict == "pass", result
    assert result.metrics == {"requests": 4, "met_overload": 3, "ended_on_reset": 1, "wrong": 0}
    assert result.observed == (
        "4 request(s), replicas 2, 5 resetting each request, the others answering 429: 3 met overload, 1 of them "
        "ended on a reset; their client statuses 429: 3, Retry-After 3: 3"
    )


def test_unreachable_fails_a_502_after_overload_and_names_the_request_with_its_attempts():
    upstream = _seen(0, 429, 429, None) + _seen(1, 429, 429, 429)
    result = checks.total_unreachable(_round([502, 429]), upstream, 3, 7)
    assert result.verdict == "fail" and result.metrics["wrong"] == 1
    assert result.detail == (
        "request unreachable-0-0: attempts 429, 429, reset at the replicas; the client got 502 (Retry-After None)"
    )


def test_unreachable_tells_the_proxys_own_fallback_from_the_replicas_value():
    result = checks.total_unreachable(_round([429], retry_after="7"), _seen(0, 429, None), 3, 7)
    assert result.verdict == "fail" and result.detail.endswith(
        ": the proxy's own fallback (7), not the replicas' value"
    )


def test_unreachable_fails_when_no_request_ended_on_a_reset_after_a_429():
    # a reset first or in the middle ends on a replica's 429, passed on: the proxy's own answer never asked
    upstream = _seen(0, None, 429, 429) + _seen(1, 429, None, 429)
    result = checks.total_unreachable(_round([429, 429]), upstream, 3, 7)
    assert result.verdict == "fail" and result.metrics["ended_on_reset"] == 0 and result.metrics["wrong"] == 0
    assert result.detail.startswith("no request ended on a reset after a 429")
    assert checks.total_unreachable(None, [], 3, 7).observed == "no request was sent"


def test_every_attempts_th_replica_resets_and_a_shift_moves_them():
    assert resetting_replicas(8, 3) == (2, 5)
    assert resetting_replicas(8, 3, 1) == (1, 4, 7) and resetting_replicas(8, 3, 2) == (0, 3, 6)
    assert resetting_replicas(2, 2) == (1,) and resetting_replicas(2, 2, 1) == (0,)
    assert all(len(resetting_replicas(n, a, k)) < n for n in range(2, 20) for a in range(2, 4) for k in range(a))
