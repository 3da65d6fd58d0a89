"""The overload checks, as pure functions of the evidence (client, replica and proxy data).

Kept apart from the orchestration so each rule can be tested on hand-made evidence, and so
a reader sees in one place what each check id means.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from dd_accept.acceptance.analysis import (
    Event,
    admission,
    attempts_by_request,
    cooldown_breaches,
    expected_decreases,
    of_kind,
    percentile,
)
from dd_accept.acceptance.results import CheckResult


def _fmt_counts(counter: Counter[Any]) -> str:
    return ", ".join(f"{key}: {value}" for key, value in sorted(counter.items(), key=lambda kv: str(kv[0]))) or "none"


def partial_completes(client: list[Event], records: int, overloaded: int, max_attempts: int) -> CheckResult:
    """Every record completes; while fewer replicas are overloaded than the proxy has
    attempts, failover must absorb the overload entirely (no client-visible 429)."""
    requests = of_kind(client, "request")
    done = {e["record"] for e in requests if e.get("outcome") == "ok"}
    visible = Counter(e.get("status") for e in requests if e.get("outcome") != "ok")
    absorbable = overloaded < max_attempts
    ok = len(done) == records and (not absorbable or not visible)
    expected = f"{records}/{records} records" + (", no client-visible error" if absorbable else "")
    observed = f"{len(done)}/{records} records; client-visible failures by status: {_fmt_counts(visible)}"
    detail = f"{overloaded} overloaded replica(s), {max_attempts} upstream attempts per request"
    latencies = [e["latency_s"] for e in requests if e.get("outcome") == "ok" and e.get("latency_s") is not None]
    error_rate = sum(visible.values()) / len(requests) if requests else 1.0
    metrics = {"records_done": len(done), "client_error_rate": error_rate}
    if latencies:
        metrics["latency_p99_s"] = percentile(latencies, 0.99)
    return CheckResult.judge("overload.partial.completes", ok, expected, observed, detail, metrics)


def partial_failover(upstream: list[Event], proxy_retries: dict[str, int], max_attempts: int) -> CheckResult:
    """Failovers happened (seen by the replicas and in the proxy's metrics) and no request
    used more upstream attempts than the proxy allows."""
    attempts = attempts_by_request(upstream)
    failed_over = sum(1 for tries in attempts.values() if len(tries) > 1)
    most = max((len(tries) for tries in attempts.values()), default=0)
    metric_failovers = int(proxy_retries.get("http_429", 0))
    ok = failed_over > 0 and metric_failovers > 0 and most <= max_attempts
    return CheckResult.judge(
        "overload.partial.failover",
        ok,
        f"failovers observed; at most {max_attempts} upstream attempts per request",
        f"{failed_over} request(s) failed over (replicas), {metric_failovers} 429 retries (proxy metrics); "
        f"most attempts for one request: {most}",
        f"{len(attempts)} client requests matched to upstream attempts by request id",
        {"failovers": failed_over, "max_attempts_seen": most},
    )


def total_attempts(client: list[Event], upstream: list[Event], replicas: int, max_attempts: int) -> CheckResult:
    """Under total overload each proxy 429 comes after exactly min(max_attempts, N) upstream
    attempts, each answered 429."""
    wanted = min(max_attempts, replicas)
    attempts = attempts_by_request(upstream)
    limited = [e for e in of_kind(client, "request") if e.get("status") == 429]
    counts = Counter(len(attempts.get(e["request_id"], [])) for e in limited)
    non_429 = sum(1 for e in limited for a in attempts.get(e["request_id"], []) if a.get("status") != 429)
    ok = bool(limited) and set(counts) == {wanted} and non_429 == 0
    return CheckResult.judge(
        "overload.total.attempts",
        ok,
        f"every client 429 after exactly {wanted} upstream attempts, all 429",
        f"{len(limited)} client 429(s); attempts per 429: {_fmt_counts(counts)}; non-429 attempts: {non_429}",
        metrics={"client_429s": len(limited)},
    )


def total_retry_after(client: list[Event], retry_after: int) -> CheckResult:
    limited = [e for e in of_kind(client, "request") if e.get("status") == 429]
    seen = Counter(e.get("retry_after") for e in limited)
    ok = bool(limited) and set(seen) == {float(retry_after)}
    return CheckResult.judge(
        "overload.total.retry_after",
        ok,
        f"Retry-After: {retry_after} on every 429 the client sees",
        f"Retry-After values: {_fmt_counts(seen)}",
    )


def total_admission_decrease(client: list[Event], limit: int, factor: float, rounds: int = 2) -> CheckResult:
    wanted = expected_decreases(limit, factor, rounds)
    seen = [e["limit"] for e in admission(client, "request_limit_decreased")]
    ok = seen[:rounds] == wanted
    return CheckResult.judge(
        "overload.total.admission_decrease",
        ok,
        " → ".join(map(str, [limit, *wanted])),
        " → ".join(map(str, [limit, *seen])) if seen else f"{limit} (no decrease)",
        f"decrease factor {factor}",
    )


def total_cooldown(client: list[Event], default_cooldown_s: float) -> CheckResult:
    """No request is admitted while a cooldown demanded by a 429 (its Retry-After) runs."""
    limited = [e for e in of_kind(client, "request") if e.get("status") == 429]
    breaches = cooldown_breaches(client, default_cooldown_s)
    ok = bool(limited) and not breaches
    observed = f"{len(limited)} cooldown window(s) from 429s, {len(breaches)} admission(s) inside one"
    detail = ""
    if breaches:
        first = breaches[0]
        into, length = first.admitted_at - first.window_start, first.window_end - first.window_start
        detail = f"first: admitted {into:.2f}s into a {length:.2f}s cooldown"
    return CheckResult.judge(
        "overload.total.cooldown",
        ok,
        "no request admitted inside a cooldown window",
        observed,
        detail,
        {"cooldown_breaches": len(breaches)},
    )


def recovery(client: list[Event], records: int, relieved_at: float) -> CheckResult:
    requests = of_kind(client, "request")
    done = {e["record"] for e in requests if e.get("outcome") == "ok"}
    after = [e for e in admission(client, "request_limit_increased") if e["t"] >= relieved_at]
    decreased = [e["limit"] for e in admission(client, "request_limit_decreased")]
    floor = min(decreased) if decreased else None
    risen = max((e["limit"] for e in after), default=None)
    ok = len(done) == records and risen is not None and floor is not None and risen > floor
    return CheckResult.judge(
        "overload.recovery",
        ok,
        f"{records}/{records} records after overload is lifted; the limit rises above its low point",
        f"{len(done)}/{records} records; low point {floor}, highest after recovery {risen}",
        metrics={"records_done": len(done)},
    )
