"""Failover on what the proxy retries: the statuses it names, and connection errors, the
failover path no status code drives.

The brief's proxy "retries 429/500/502/503/504 and connection errors" within its three
attempts. `status_failover` is judged on every phase: the forced 429s, replicas 1 and 2
answering each retried 5xx, and one request per retried 5xx while every replica answers it
that status (so that a proxy that sets a failing backend aside, or breaks ties its own way,
still meets every status, at every attempt). `connection_errors` is judged on one phase of
its own, below.

Connection errors:

This check is judged on a phase in which one
replica's port refuses connections (nothing listens: a backend restarting) and another reads
each request whole and then resets its connection unanswered (a backend that crashed
mid-request). With two of four replicas failing that way and three attempts, a proxy that
retries connection errors on another backend completes every request; one that does not
answers 502 (or whatever it answers) for each request whose first attempt met one.

What each side can see: the replica that resets records each reset attempt (its request id,
outcome `reset`, no status); a refused attempt reaches no replica, so it shows only as an
attempt the proxy counted beyond the ones the replicas served. The proxy's retry counter
must then have moved, under a reason that is not a status (`connection_error` in rc1), by
every connection error it met: each was retried, since every request completed.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from dd_accept.acceptance.registry import check
from dd_accept.base.events import RESET_UNANSWERED, ClientRequest, UpstreamAttempt
from dd_accept.base.results import CheckResult

RESET = RESET_UNANSWERED  # the replica's outcome for a request whose connection it reset unanswered


def connection_error_retries(delta: Any) -> float | None:
    """The retries a proxy counted for connection errors in a retries-by-reason delta: every
    reason that names no status and no timeout (rc1: `connection_error`); None when the
    proxy reports no retries by reason at all."""
    if not isinstance(delta, dict):
        return None
    return float(
        sum(
            value
            for reason, value in delta.items()
            if isinstance(value, int | float)
            and not str(reason).startswith("http_")
            and not str(reason).isdigit()
            and "timeout" not in str(reason).lower()
        )
    )


@check("telemetry.status_failover")
def status_failover(phases: list[Any], retried: tuple[int, ...], limit: int) -> CheckResult:
    """Every status the proxy retries is retried on another backend while it has attempts
    left: a request whose last attempt a replica answered with one of them, after fewer than
    `limit` attempts, was given up early, and one tried again on a replica it had already
    tried (while `limit` distinct ones were there to try) was not failed over; either way its
    client got a failure another backend would have spared it. Each of the statuses must
    have been met at the replicas, or the rule was not exercised."""
    expected = (
        f"a request whose attempt a replica answered {', '.join(map(str, retried))} is tried again on a replica it "
        f"has not tried while fewer than {limit} attempts were made; each of those statuses met"
    )
    met: Counter[int] = Counter()
    given_up: list[tuple[str, str, int, int, int | None]] = []  # phase, request, status, attempts, client status
    same: list[tuple[str, str, int]] = []  # phase, request, the replica tried again
    for phase in phases:
        got = {r.request_id: r.status for r in phase.client if r.request_id}
        for request, chain in phase.chains().items():
            met.update(a.status for a in chain if a.status in retried)
            last = chain[-1].status
            if last in retried and len(chain) < limit:
                given_up.append((phase.name, request, last, len(chain), got.get(request)))
            tried = [a.replica for a in chain]
            again = next((r for i, r in enumerate(tried) if r in tried[:i] and len(set(tried[:i])) < limit), None)
            if again is not None:
                same.append((phase.name, request, again))
    missing = [status for status in retried if not met[status]]
    observed = f"met at the replicas: {', '.join(f'{s}: {met[s]}' for s in retried)}; "
    observed += f"{len(given_up)} request(s) given up before {limit} attempts"
    if given_up:
        observed += " (last status " + ", ".join(
            f"{s}: {n}" for s, n in sorted(Counter(g[2] for g in given_up).items())
        )
        observed += ")"
    observed += f", {len(same)} tried again on a replica already tried"
    problems = []
    if given_up:
        phase, request, status, tried_n, client = given_up[0]
        problems.append(
            f"{phase}: request {request}'s attempt {tried_n} answered {status} by a replica, no attempt after it "
            f"(the client got {client})"
        )
    if same:
        phase, request, replica = same[0]
        problems.append(f"{phase}: request {request} was sent to replica {replica} again, not to another backend")
    if missing:
        problems.append(f"never met at the replicas: {', '.join(map(str, missing))} (the rule was not exercised)")
    metrics = {
        "given_up": float(len(given_up)),
        "same_backend": float(len(same)),
        "statuses_met": float(sum(met.values())),
    }
    return CheckResult.judge(status_failover.check_id, not problems, expected, observed, "; ".join(problems), metrics)


@check("telemetry.connection_errors")
def connection_errors(
    client: list[ClientRequest],
    upstream: list[UpstreamAttempt],
    counted: tuple[Any, Any] | None,
    refusing: int,
    resetting: int,
) -> CheckResult:
    """Judged on the phase where replica `refusing` refuses connections and `resetting`
    resets each request it reads (`client` and `upstream`: what the client got, what the
    replicas served): every request completed with 200 exactly once, a connection error
    happened (the replicas saw a reset), and, where the SUT claims its attempt counters
    (`counted`: the phase's attempts and retries-by-reason deltas), its connection-error
    retries moved by every connection error: the resets the replicas saw plus the attempts
    it counted that reached no replica."""
    expected = (
        f"with replica {refusing} refusing connections and replica {resetting} resetting each request it reads, "
        "every request completes with 200, each served once: connection errors are retried on another backend; "
        "the proxy's connection-error retries move by the resets the replicas saw plus the attempts that reached none"
    )
    resets = [a for a in upstream if a.outcome == RESET]
    served = Counter(a.request_id for a in upstream if a.outcome == "ok" and a.request_id)
    completed = [r for r in client if r.outcome == "ok" and r.status == 200]
    failed = Counter(
        str(r.status) if r.status is not None else r.outcome
        for r in client
        if not (r.outcome == "ok" and r.status == 200)
    )
    twice = sorted(request for request, count in served.items() if count > 1)
    unserved_resets = [a for a in resets if a.request_id is not None and served[a.request_id] == 0]
    metrics: dict[str, float] = {
        "requests": float(len(client)),
        "completed": float(len(completed)),
        "resets_seen": float(len(resets)),
        "served_twice": float(len(twice)),
    }
    problems = []
    if not resets:
        problems.append(
            f"no connection error happened: the proxy sent replica {resetting} no request to reset "
            f"({len(upstream)} attempts reached the replicas)"
        )
    if failed:
        shown = ", ".join(f"{count}x {what}" for what, count in sorted(failed.items()))
        problems.append(f"{len(client) - len(completed)} of {len(client)} requests did not complete: {shown}")
    if unserved_resets:
        problems.append(f"{len(unserved_resets)} reset requests were never served by another backend")
    if twice:
        problems.append(f"{len(twice)} requests were served more than once (generated twice after a retry)")
    told = ""
    if counted is not None:
        attempts, retries = counted[0], connection_error_retries(counted[1])
        if not isinstance(attempts, int | float) or retries is None:
            problems.append("the proxy's metrics have no attempts or no retries by reason")
        else:
            refused = attempts - len(upstream)
            metrics |= {"attempts_counted": float(attempts), "refused_attempts": refused}
            metrics["connection_error_retries"] = retries
            want = len(resets) + refused
            told = f"; the proxy counted {attempts:g} attempts ({refused:g} reached no replica), "
            told += f"{retries:g} connection-error retries"
            if refused < 0:
                problems.append(f"the proxy counted {attempts:g} attempts, fewer than the {len(upstream)} served")
            elif retries != want:
                problems.append(
                    f"connection-error retries counted {retries:g}, observed {want:g} "
                    f"({len(resets)} resets seen, {refused:g} attempts that reached no replica)"
                )
    observed = (
        f"{len(completed)} of {len(client)} requests completed with 200; the replicas saw {len(resets)} resets" + told
    )
    return CheckResult.judge(connection_errors.check_id, not problems, expected, observed, "; ".join(problems), metrics)
