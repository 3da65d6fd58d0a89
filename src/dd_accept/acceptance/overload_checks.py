"""The overload checks, as pure functions of the evidence (client, replica and proxy data).

Kept apart from the orchestration so each rule can be tested on hand-made evidence, and so
a reader sees in one place what each check id means.
"""

from __future__ import annotations

from collections import Counter

from dd_accept.acceptance.analysis import (
    COOLDOWN_LINGER_S,
    LimitBreach,
    admission,
    attempts_by_request,
    cooldown_breaches,
    cooldown_overruns,
    counts_text,
    decreases_without_a_new_round,
    expected_decreases,
    first_arrivals,
    limit_breaches,
    requests,
)
from dd_accept.acceptance.overload_unreachable import UnreachableRound, ended_on_a_reset_after_overload
from dd_accept.acceptance.registry import check
from dd_accept.base.events import (
    RESET_UNANSWERED,
    AdmissionChange,
    Event,
    UpstreamAttempt,
    admitted_probe,
    of_type,
)
from dd_accept.base.percentiles import percentile
from dd_accept.base.results import CheckResult
from dd_accept.deployment import AdmissionSample, ColdStart, ExemptAnswers


def _retry_after_matches(value: str | None, wanted: int) -> bool:
    try:
        return value is not None and float(value) == float(wanted)
    except ValueError:
        return False


def _sample_ok(sample: AdmissionSample, retry_after: int) -> bool:
    if sample.must_reject:
        return all(status == 429 for status in sample.statuses) and all(
            _retry_after_matches(value, retry_after) for value in sample.retry_after
        )
    return all(admitted_probe(status) for status in sample.statuses)  # admitted: the app itself answers


def _describe_sample(sample: AdmissionSample) -> str:
    statuses = counts_text(Counter(sample.statuses))
    text = f"threshold {sample.threshold}, depth {sample.depth}: {statuses}"
    if any(status == 429 for status in sample.statuses):
        text += f" (Retry-After {counts_text(Counter(sample.retry_after))})"
    return text


COLD_START_TOLERANCE_S = 0.5  # scheduling on a loaded node, on top of the SUT's own staleness bound


def _cold_text(cold: ColdStart) -> str:
    first = cold.first_reject_s
    when = f"first 429 after {first:.2f}s" if first is not None else f"no 429 in {len(cold.statuses)} probes"
    return (
        f"cold start at depth {cold.depth} (threshold {cold.threshold}): {cold.admitted_before_reject} admitted "
        f"before its first reading (fail-open), {when}"
    )


@check("overload.admission.rejects")
def admission_rejects(
    samples: list[AdmissionSample],
    retry_after: int,
    cold: ColdStart | None = None,
    stale_after_s: float = 1.0,
) -> CheckResult:
    """The SUT's queue admission, measured at the replicas: above its threshold it answers
    429 with the configured Retry-After, at or below it it admits — for the run's threshold
    (the seed's override 0) and for the SUT's default threshold, and again after relief.
    From a cold start (no queue reading yet) it may admit while it has no reading, as the
    SUT documents (fail-open), but must reject a queue held too deep within its own
    staleness bound: the evidence shows how many requests got through meanwhile."""
    wrong = [sample for sample in samples if not _sample_ok(sample, retry_after)]
    bound = stale_after_s + COLD_START_TOLERANCE_S
    cold_late = cold is not None and (cold.first_reject_s is None or cold.first_reject_s > bound)
    ok = bool(samples) and any(s.must_reject for s in samples) and not wrong and not cold_late
    detail = ""
    if wrong:
        first = wrong[0]
        verb = "reject" if first.must_reject else "admit"
        detail = f"first miss: {len(first.replicas)} replica(s) held at depth {first.depth} did not {verb} "
        detail += f"within {first.waited_s:g}s"
    elif cold_late:
        detail = f"from a cold start the middleware kept admitting a queue deeper than its threshold beyond {bound:g}s"
    observed = "; ".join(_describe_sample(sample) for sample in samples) or "no admission sample"
    metrics: dict[str, float] = {"admission_samples": len(samples), "admission_wrong": len(wrong)}
    if cold is not None:
        observed += f"; {_cold_text(cold)}"
        metrics["cold_start_admitted"] = cold.admitted_before_reject
        if cold.first_reject_s is not None:
            metrics["cold_start_first_reject_s"] = cold.first_reject_s
    expected = (
        f"429 with Retry-After: {retry_after} when the queue is deeper than the threshold; admitted (the app answers "
        "the probe itself: a 400 for its empty body, any status below 500 but 429) at or below it"
    )
    if cold is not None:
        expected += f"; from a cold start, the first 429 within {bound:g}s (its {stale_after_s:g}s staleness bound)"
    return CheckResult.judge(admission_rejects.check_id, ok, expected, observed, detail, metrics)


@check("overload.admission.exempt")
def admission_exempt(answers: ExemptAnswers | None, paths: tuple[str, ...]) -> CheckResult:
    """The paths the SUT's queue admission documents as exempt (health, readiness, metrics,
    model list) are answered by the app however deep the queue: a proxy's health probe or
    a scrape that the middleware rejected would take an overloaded replica for a failed
    one. Judged on the replicas held too deep that rejected the admission probe before and
    after the paths were asked: a middleware that rejected nothing showed no exemption."""
    expected = f"{', '.join(paths)} answered by the app (no 429, no 5xx) on every replica rejecting inference"
    if answers is None or not answers.replicas:
        return CheckResult.judge(
            admission_exempt.check_id, False, expected, "no exempt path was asked", "the total overload hold never ran"
        )
    judged = [(replica, path, status) for replica, path, status in answers.answers if replica in answers.rejecting]
    refused = [(replica, path, status) for replica, path, status in judged if not admitted_probe(status)]
    held = len(answers.replicas)
    observed = (
        f"{len(judged)} GET(s) on the {len(answers.rejecting)} of {held} replica(s) at depth {answers.depth} "
        f"(threshold {answers.threshold}) rejecting the admission probe before and after: "
        f"{counts_text(Counter(status for _, _, status in judged))}"
    )
    detail = ""
    if refused:
        observed += f"; refused: {counts_text(Counter(path for _, path, _ in refused))}"
        replica, path, status = refused[0]
        detail = f"first refusal: replica {replica} answered {path} with {status if status is not None else 'nothing'}"
    elif not judged:
        detail = "no replica rejected the admission probe before and after: the exemption was not shown"
    metrics = {"exempt_asked": len(judged), "exempt_refused": len(refused)}
    return CheckResult.judge(
        admission_exempt.check_id, bool(judged) and not refused, expected, observed, detail, metrics
    )


@check("overload.partial.completes")
def partial_completes(client: list[Event], records: int, overloaded: int, max_attempts: int) -> CheckResult:
    """Every record completes; while fewer replicas are overloaded than the proxy has
    attempts, failover must absorb the overload entirely (no client-visible 429)."""
    made = requests(client)
    done = {e.record for e in made if e.outcome == "ok"}
    visible = Counter(e.status for e in made if e.outcome != "ok")
    absorbable = overloaded < max_attempts
    ok = len(done) == records and (not absorbable or not visible)
    expected = f"{records}/{records} records" + (", no client-visible error" if absorbable else "")
    observed = f"{len(done)}/{records} records; client-visible failures by status: {counts_text(visible)}"
    detail = f"{overloaded} overloaded replica(s), {max_attempts} upstream attempts per request"
    latencies = [e.latency_s for e in made if e.outcome == "ok" and e.latency_s is not None]
    error_rate = sum(visible.values()) / len(made) if made else 1.0
    metrics = {"records_done": len(done), "client_error_rate": error_rate}
    if latencies:
        metrics["latency_p99_s"] = percentile(latencies, 0.99)
    return CheckResult.judge(partial_completes.check_id, ok, expected, observed, detail, metrics)


@check("overload.partial.failover")
def partial_failover(upstream: list[UpstreamAttempt], retries_429: float | None, max_attempts: int) -> CheckResult:
    """Failovers happened (seen by the replicas and, where the SUT reports them, in the
    proxy's own 429-retry count) and no request used more upstream attempts than the proxy
    allows. `retries_429` is None when the profile names no such metric."""
    attempts = attempts_by_request(upstream)
    failed_over = sum(1 for tries in attempts.values() if len(tries) > 1)
    most = max((len(tries) for tries in attempts.values()), default=0)
    reported = retries_429 is None or retries_429 > 0
    ok = failed_over > 0 and reported and most <= max_attempts
    metric = "not reported by the SUT" if retries_429 is None else f"{retries_429:g} 429 retries (proxy metrics)"
    return CheckResult.judge(
        partial_failover.check_id,
        ok,
        f"failovers observed; at most {max_attempts} upstream attempts per request",
        f"{failed_over} request(s) failed over (replicas), {metric}; most attempts for one request: {most}",
        f"{len(attempts)} client requests matched to upstream attempts by request id",
        {"failovers": failed_over, "max_attempts_seen": most},
    )


@check("overload.total.attempts")
def total_attempts(
    client: list[Event], upstream: list[UpstreamAttempt], replicas: int, max_attempts: int
) -> CheckResult:
    """Under total overload each proxy 429 comes after exactly min(max_attempts, N) upstream
    attempts, each answered 429."""
    wanted = min(max_attempts, replicas)
    attempts = attempts_by_request(upstream)
    limited = [e for e in requests(client) if e.status == 429]
    counts = Counter(len(attempts.get(e.request_id, [])) for e in limited)
    non_429 = sum(1 for e in limited for a in attempts.get(e.request_id, []) if a.status != 429)
    ok = bool(limited) and set(counts) == {wanted} and non_429 == 0
    return CheckResult.judge(
        total_attempts.check_id,
        ok,
        f"every client 429 after exactly {wanted} upstream attempts, all 429",
        f"{len(limited)} client 429(s); attempts per 429: {counts_text(counts)}; non-429 attempts: {non_429}",
        metrics={"client_429s": len(limited)},
    )


@check("overload.total.retry_after")
def total_retry_after(client: list[Event], retry_after: int, proxy_fallback: int | None = None) -> CheckResult:
    """Every 429 the client sees carries the replicas' Retry-After, passed through by the
    proxy. The proxy's own fallback is set to a different value, so a proxy that drops the
    replicas' header and substitutes its own is told apart from one that passes it on."""
    limited = [e for e in requests(client) if e.status == 429]
    seen = Counter(e.retry_after for e in limited)
    ok = bool(limited) and set(seen) == {float(retry_after)}
    detail = ""
    if proxy_fallback is not None:
        detail = f"the replicas answer Retry-After: {retry_after}; the proxy's own fallback is {proxy_fallback}"
        if float(proxy_fallback) in seen:
            detail += ": the proxy substituted its fallback for the replicas' value"
    return CheckResult.judge(
        total_retry_after.check_id,
        ok,
        f"Retry-After: {retry_after} (the replicas' value) on every 429 the client sees",
        f"{len(limited)} client 429(s); Retry-After values: {counts_text(seen)}",
        detail,
    )


@check("overload.total.unreachable")
def total_unreachable(
    round_: UnreachableRound | None, upstream: list[UpstreamAttempt], retry_after: int, proxy_fallback: int
) -> CheckResult:
    """Overload on one attempt, a lost backend on the last: a request that a replica answered
    429 ends at the client as 429 with the replicas' Retry-After, also when its last attempt
    was a connection reset unanswered. The proxy "answers 429 + Retry-After when overload
    was seen" (the brief), never a 502 that takes a full service for a gone one. A request
    that met no 429 is not judged (a 502 is right for it); a round in which no request ended
    on a reset after a 429 never drove the path, and fails."""
    expected = (
        f"each request a replica answered 429 ends at the client as 429 with Retry-After: {retry_after}, also when "
        "its last attempt was a connection reset (at least one such request)"
    )
    if round_ is None or not round_.client:
        return CheckResult.judge(total_unreachable.check_id, False, expected, "no request was sent", "")
    chains = attempts_by_request(upstream)  # each request's attempts in the order they began
    met = [r for r in round_.client if any(a.status == 429 for a in chains.get(r.request_id or "", ()))]
    driven = [r for r in met if ended_on_a_reset_after_overload(chains[r.request_id or ""])]
    wrong = [r for r in met if r.status != 429 or not _retry_after_matches(_text(r.retry_after), retry_after)]
    resetting = " then ".join(", ".join(map(str, lost)) for lost in round_.resetting)
    observed = (
        f"{len(round_.client)} request(s), replicas {resetting} resetting each request, the others answering 429: "
        f"{len(met)} met overload, {len(driven)} of them ended on a reset; their client statuses "
        f"{counts_text(Counter(r.status for r in met))}, Retry-After {counts_text(Counter(r.retry_after for r in met))}"
    )
    detail = ""
    if wrong:
        first = wrong[0]
        seen = ", ".join(
            RESET_UNANSWERED if a.status is None else str(a.status) for a in chains[first.request_id or ""]
        )
        detail = (
            f"request {first.request_id}: attempts {seen} at the replicas; the client got {first.status} "
            f"(Retry-After {first.retry_after})"
        )
        if _retry_after_matches(_text(first.retry_after), proxy_fallback):
            detail += f": the proxy's own fallback ({proxy_fallback}), not the replicas' value"
    elif not driven:
        detail = "no request ended on a reset after a 429: the proxy's answer for it was never asked"
    metrics = {"requests": len(round_.client), "met_overload": len(met), "ended_on_reset": len(driven)}
    metrics["wrong"] = len(wrong)
    return CheckResult.judge(
        total_unreachable.check_id, bool(driven) and not wrong, expected, observed, detail, metrics
    )


def _text(value: str | float | None) -> str | None:
    return None if value is None else str(value)


def _breach_text(breaches: list[LimitBreach]) -> str:
    if not breaches:
        return "never more requests under way at the replicas than the limit allowed"
    worst = max(breaches, key=lambda b: b.in_flight - b.limit)
    return (
        f"{len(breaches)} time(s) more requests under way than the limit; "
        f"worst {worst.in_flight} at limit {worst.limit}"
    )


DECREASE_ROUNDS = 2  # the seed's "8 → 4": two rounds of total overload


@check("overload.total.admission_decrease")
def total_admission_decrease(
    client: list[Event],
    limit: int,
    factor: float,
    rounds: int = DECREASE_ROUNDS,
    upstream: list[UpstreamAttempt] | None = None,
    until: float | None = None,
) -> CheckResult:
    """The limit falls as AIMD says, once a round, and the controller enforces what it
    reports: the client's requests under way at the replicas (counted there, by request id)
    never exceed the limit in force, and each decrease after the first follows a request
    that reached a replica after the one before it (a round admitted under the lower limit).
    `upstream` None judges the reported sequence alone."""
    wanted = expected_decreases(limit, factor, rounds)
    decreases = [e for e in admission(client, "request_limit_decreased") if until is None or e.t < until]
    seen = [e.limit for e in decreases]
    during = [e for e in upstream or [] if until is None or e.started < until]
    breaches = limit_breaches(client, during, limit)
    hasty = [] if upstream is None else decreases_without_a_new_round(decreases, first_arrivals(during))
    unseen = upstream is not None and not during and bool(requests(client))
    ok = seen[: len(wanted)] == wanted and not breaches and not hasty and not unseen
    observed = " → ".join(map(str, [limit, *seen])) if seen else f"{limit} (no decrease)"
    if hasty:
        observed += f"; {len(hasty)} decrease(s) before any new request reached a replica (first to {hasty[0].limit})"
    detail = f"decrease factor {factor}; concurrency counted at the replicas over {len(during)} upstream attempts"
    if unseen:
        detail = "the replicas saw none of the client's request ids (x-dd-request-id): the proxy did not pass them on"
    return CheckResult.judge(
        total_admission_decrease.check_id,
        ok,
        " → ".join(map(str, [limit, *wanted]))
        + ", one decrease a round; never more requests under way at the replicas than the limit",
        f"{observed}; {_breach_text(breaches)}",
        detail,
        {"limit_breaches": len(breaches), "decreases_without_new_round": len(hasty)},
    )


@check("overload.total.cooldown")
def total_cooldown(
    client: list[Event], default_cooldown_s: float, upstream: list[UpstreamAttempt] | None = None
) -> CheckResult:
    """No request is admitted while a cooldown demanded by a 429 (its Retry-After) runs, none
    is held back long after it (`cooldown_overruns`: the cooldown is the Retry-After, not
    more), and the rule was actually exercised: the controller's lease events were recorded
    and at least one cooldown window was followed by a lease (the client came back after it).
    `upstream` dates each 429 where the replicas answered it (cooldown_breaches)."""
    limited = [e for e in requests(client) if e.status == 429]
    leases = admission(client, "request_lease_acquired")
    breaches = cooldown_breaches(client, default_cooldown_s, upstream or ())
    overruns = cooldown_overruns(client, default_cooldown_s, upstream or ())
    judged = sum(1 for e in limited if any(lease.t > e.t for lease in leases))
    ok = bool(limited) and bool(leases) and judged > 0 and not breaches and not overruns
    observed = (
        f"{len(limited)} cooldown window(s) from 429s, {judged} followed by a lease; "
        f"{len(leases)} lease(s); {len(breaches)} admission(s) inside a window; "
        f"{len(overruns)} cooldown(s) held beyond their Retry-After"
    )
    detail = ""
    if breaches:
        first = breaches[0]
        into, length = first.admitted_at - first.window_start, first.window_end - first.window_start
        detail = f"first: admitted {into:.2f}s into a {length:.2f}s cooldown"
    elif overruns:
        worst = max(overruns, key=lambda o: o.next_attempt - o.window_end)
        detail = (
            f"the replicas saw the client's next request {worst.next_attempt - worst.window_end:.2f}s after its "
            f"cooldown had run out (at most {COOLDOWN_LINGER_S:g}s): the controller holds a cooldown longer than "
            "the Retry-After"
        )
    elif not limited or not leases or not judged:
        detail = "cooldown not observed: no 429 with a lease after it, so no window could be judged"
    return CheckResult.judge(
        total_cooldown.check_id,
        ok,
        "no request admitted inside a cooldown window, nor held back beyond it; at least one window judged",
        observed,
        detail,
        {"cooldown_breaches": len(breaches), "cooldown_windows_judged": judged, "cooldown_overruns": len(overruns)},
    )


@check("overload.recovery")
def recovery(
    client: list[Event],
    records: int,
    relieved_at: float,
    upstream: list[UpstreamAttempt] | None = None,
    limit: int = 8,
    successes_until_increase: int = 25,
    increase_step: int = 1,
) -> CheckResult:
    """After relief every record completes and the limit rises above its low point, each rise
    by `increase_step` after `successes_until_increase` successes (the controller's AIMD: +1
    after 25), while the requests under way at the replicas never exceed the limit the
    controller reports."""
    made = requests(client)
    done = {e.record for e in made if e.outcome == "ok"}
    after = [e for e in admission(client, "request_limit_increased") if e.t >= relieved_at]
    decreased = [e.limit for e in admission(client, "request_limit_decreased")]
    floor = min(decreased) if decreased else None
    risen = max((e.limit for e in after), default=None)
    after_relief = [e for e in upstream or [] if e.started >= relieved_at]
    breaches = limit_breaches(client, after_relief, limit)
    off = increases_off_contract(client, limit, increase_step, successes_until_increase)
    ok = len(done) == records and risen is not None and floor is not None and risen > floor
    ok = ok and not breaches and not off
    return CheckResult.judge(
        recovery.check_id,
        ok,
        f"{records}/{records} records after overload is lifted; the limit rises above its low point, "
        f"+{increase_step} after {successes_until_increase} successes; never more requests under way at the "
        "replicas than the limit",
        f"{len(done)}/{records} records; low point {floor}, highest after recovery {risen}; "
        f"{len(off)} rise(s) off the rule; {_breach_text(breaches)}",
        "; ".join(off[:3]),
        metrics={"records_done": len(done), "limit_breaches": len(breaches), "increases_off_rule": len(off)},
    )


def increases_off_contract(client: list[Event], limit: int, step: int, successes: int) -> list[str]:
    """Each rise of the limit that breaks the additive rule: by other than `step` over the limit
    before it, or after fewer than `successes` successful releases since the last change or
    429 (counted from the controller's own `request_lease_released` events, whose reason is
    the outcome; the release that completes the streak may be reported just after the rise,
    so one fewer is enough). A controller that reports no releases is judged on its steps."""
    changes = ("request_limit_decreased", "request_limit_increased")
    previous, streak, reported, off = limit, 0, False, []
    for event in of_type(client, AdmissionChange):  # as the controller reported them: a clock step reorders `t`
        if event.event == "request_lease_released":
            reported = True
            streak = streak + 1 if event.reason == "success" else 0 if event.reason == "rate_limited" else streak
            continue
        if event.event not in changes or event.limit is None:
            continue
        if event.event == "request_limit_increased":
            if event.limit - previous != step:
                off.append(f"the limit rose {previous} → {event.limit}, not by {step}")
            elif reported and streak < successes - 1:
                off.append(f"the limit rose {previous} → {event.limit} after {streak} successes, not {successes}")
        previous, streak = event.limit, 0
    return off
