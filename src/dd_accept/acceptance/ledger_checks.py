"""The request ledger's checks, judged after every scenario (the scenario's last judge phase).

A proxy may retry a request on another replica only while nothing of it has been generated
for the client (the seed: failover before the first byte; a 429 or 503 carries no
generation), so no request is generated whole twice; and an answer a replica finished while
the client was still waiting must reach the client. Both are read from the replicas' records
and the client's, never from the SUT's own accounting (`acceptance.ledger`). A failure names
the smallest set of requests that shows it: each request id, and what each side saw of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dd_accept.acceptance.ledger import Ledger, LedgerRow, attempt_end, read_ledger
from dd_accept.acceptance.phases import Phase, ScenarioRun
from dd_accept.acceptance.registry import check
from dd_accept.base.results import CheckResult
from dd_accept.deployment.run_directory import created_since

LEDGER = "ledger"
ANSWERED_ONCE = "ledger.answered_once"
DELIVERED = "ledger.delivered"
SHOWN = 5  # request ids named in an observation: the rest are counted
# The client reads the last byte after the replica wrote it; an end this much earlier is the
# two clocks' reading of one moment, not a client that gave up first.
SAME_MOMENT_S = 0.05


def _attempts_text(row: LedgerRow) -> str:
    return ", ".join(f"replica {a.replica} {a.status} {a.outcome}" for a in row.attempts)


def _named(rows: list[LedgerRow], what: Callable[[LedgerRow], str]) -> str:
    shown = "; ".join(f"{row.request_id}: {what(row)}" for row in rows[:SHOWN])
    return shown + (f"; and {len(rows) - SHOWN} more" if len(rows) > SHOWN else "")


def _unforwarded(check_id: str, expected: str, ledger: Ledger) -> CheckResult | None:
    """A ledger with requests that reached a replica without their id: none of them (the
    proxy does not pass the request's headers on), or some (it drops the id on some
    attempts, a retry's say): what those attempts did cannot be set beside the client's
    requests, so nothing can be vouched for (a failed check, not an error: it is the SUT
    that drops them). The client sends an id with every request it makes."""
    metrics = {"requests": len(ledger.rows), "attempts_without_id": len(ledger.anonymous)}
    if ledger.rows and not ledger.attempts:
        observed = f"the replicas recorded none of the client's {len(ledger.rows)} request ids (x-dd-request-id)"
        return CheckResult.judge(check_id, False, expected, observed, metrics=metrics)
    if ledger.rows and ledger.anonymous:
        whole = sum(1 for a in ledger.anonymous if a.generated_whole)
        observed = (
            f"the replicas recorded {len(ledger.anonymous)} completion request(s) with no request id "
            f"(x-dd-request-id), {whole} of them answered whole, beside {ledger.attempts} with one: the proxy did "
            "not pass every request's id on"
        )
        return CheckResult.judge(check_id, False, expected, observed, metrics=metrics)
    return None


def answered_once(ledger: Ledger, check_id: str) -> CheckResult:
    """No request is generated whole twice: a proxy retries only what no replica has answered
    (a 429, a 503, a connection that failed, a stream cut before its first byte), so every
    request id has at most one attempt a replica answered 200 and wrote whole."""
    expected = "every request generated whole by the replicas at most once (retries only of what was not answered)"
    unforwarded = _unforwarded(check_id, expected, ledger)
    if unforwarded is not None:
        return unforwarded
    twice = [row for row in ledger.rows.values() if len(row.generations) > 1]
    metrics = {
        "requests": len(ledger.rows),
        "attempts": ledger.attempts,
        "generations": sum(len(row.generations) for row in ledger.rows.values()),
        "answered_twice": len(twice),
    }
    observed = f"{len(ledger.rows)} request(s), {ledger.attempts} upstream attempt(s)"
    if twice:
        observed += f"; {len(twice)} generated whole more than once: " + _named(twice, _attempts_text)
    else:
        observed += f", {metrics['generations']} whole generation(s), none twice"
    return CheckResult.judge(check_id, not twice, expected, observed, metrics=metrics)


def _lost(row: LedgerRow) -> bool:
    """A whole generation finished while the client still waited, and the client has no answer
    (a client that gave up first, its own deadline or timeout, ended before the generation).
    A client that hung up mid-stream was owed nothing: it left an answer that was reaching it
    (a slow reader's, finished at the replica long before its last byte could be read)."""
    if row.answered or any(record.outcome == "hung_up" for record in row.client):
        return False
    ends = [record.t for record in row.client]
    return any(attempt_end(g) <= max(ends) + SAME_MOMENT_S for g in row.generations)


def delivered(ledger: Ledger, check_id: str) -> CheckResult:
    """Every answer a replica generated whole while the client was still waiting reaches the
    client whole: a request the client saw fail, cut or rejected must not have a finished
    generation behind it (the proxy lost the answer on the way)."""
    expected = "every request a replica answered whole while the client waited reached the client whole"
    unforwarded = _unforwarded(check_id, expected, ledger)
    if unforwarded is not None:
        return unforwarded
    lost = [row for row in ledger.rows.values() if _lost(row) and not row.broken_on_purpose]
    answered = sum(1 for row in ledger.rows.values() if row.answered)
    on_purpose = sum(1 for row in ledger.rows.values() if row.broken_on_purpose)
    metrics = {"requests": len(ledger.rows), "answered": answered, "lost": len(lost)}
    observed = f"{len(ledger.rows)} request(s), {answered} answered whole at the client"
    if on_purpose:  # what the fault point broke on the way is the wire checks' to judge
        observed += f" ({on_purpose} broken on purpose between proxy and replica)"
    if lost:

        def seen(row: LedgerRow) -> str:
            client = ", ".join(f"{r.outcome}" + (f" {r.status}" if r.status is not None else "") for r in row.client)
            return f"replicas: {_attempts_text(row)}; client: {client}"

        observed += f"; {len(lost)} finished at a replica but not at the client: " + _named(lost, seen)
    else:
        observed += "; no finished generation lost on the way"
    return CheckResult.judge(check_id, not lost, expected, observed, metrics=metrics)


def ledger_phase(scenario: str, parts: tuple[str, ...] = ()) -> Phase[Any]:
    """The judge phase every scenario ends with: its run directory's ledger, reconciled. Its
    checks are registered here, one id per scenario, as each scenario is declared. It belongs
    to every part of the scenario (`parts`, the segments its phases declare): a run that
    chooses only its checks runs the whole scenario, whose every request it reconciles."""
    once = check(f"{scenario}.{ANSWERED_ONCE}")(answered_once)
    whole = check(f"{scenario}.{DELIVERED}")(delivered)

    def reconcile(state: ScenarioRun) -> None:
        directories = [state.run, *created_since(state.run_directories_before)]
        ledger = read_ledger(*(directory.host_path for directory in directories))
        if not ledger.rows:  # every scenario's clients write their requests there: none is a harness fault
            raise RuntimeError(f"the request ledger of {state.run.host_path.name} holds no client request")
        state.result.add(once(ledger, f"{scenario}.{ANSWERED_ONCE}"))
        state.result.add(whole(ledger, f"{scenario}.{DELIVERED}"))

    return Phase(
        "judge",
        "the request ledger: every request as the client and the replicas saw it",
        reconcile,
        # judged where the replicas' own records say how each stream ended (the synthetic
        # replica's); in front of vLLM it is not judged yet
        backends=frozenset({"synthetic"}),
        judges=(f"{scenario}.{ANSWERED_ONCE}", f"{scenario}.{DELIVERED}"),
        segments=parts,
    )
