"""The telemetry checks: what the SUT's proxy *reports* about each request and its attempts,
against what the harness *observed* on its own; and whether the connection and timeout
counters it claims exist at all (their counts are not judged yet: no phase produces them).

The independent views: the replicas record every upstream attempt they served (request
id, status, outcome, bytes; `UpstreamAttempt`), the load client every response it got
(status, how it ended, bytes; `ClientRequest`). The SUT's views: its metrics document
(read before and after each phase; the counters' differences are the phase's) and its
per-request log records (the lines its proxy wrote during the phase). A phase is built to
produce what is counted: retries after 429s and 503s, failovers, streams a replica cuts.

What the SUT claims to report is its profile's (`[telemetry] claims`); a check of
something it does not claim is `unsupported`, never `pass`. A claimed signal that never
appears (no record, no counter) fails, named after what is missing.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from dd_accept.acceptance.analysis import attempts_by_request
from dd_accept.acceptance.registry import check
from dd_accept.base.events import ClientRequest, UpstreamAttempt
from dd_accept.base.results import CheckResult
from dd_accept.sut.profile import TelemetryProfile

COMPLETE = frozenset({"ok", "rate_limited", "http_error"})  # a whole response reached the client


def find(document: Any, dotted: str) -> Any:
    """The value at a dotted path of the metrics JSON; None where it is not."""
    value = document
    for key in dotted.split("."):
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def log_records(lines: list[str], marker: str) -> tuple[list[dict[str, Any]], int]:
    """The records carrying `marker` on the proxy's output: a line that is itself a JSON
    object naming the marker (structured logging), or the marker followed by one (rc1's
    `slurm_proxy_request {json}`; anything after the object is ignored). Also how many
    marked lines held no object at all: a record no operator's tooling could read."""
    decoder = json.JSONDecoder()
    records, malformed = [], 0
    for line in lines:
        at = line.find(marker)
        if at < 0:
            continue
        record: Any = None
        start = line.find("{")
        if 0 <= start < at:  # the whole line may be the record, the marker one of its values
            with contextlib.suppress(ValueError):
                record, _ = decoder.raw_decode(line[start:])
            if isinstance(record, dict) and isinstance(record.get("message"), str) and marker in record["message"]:
                record = None  # the record is inside the message text: read it there
        if not isinstance(record, dict):
            after = line.find("{", at + len(marker))
            with contextlib.suppress(ValueError):
                record = decoder.raw_decode(line[after:])[0] if after >= 0 else None
        if isinstance(record, dict):
            records.append(record)
        else:
            malformed += 1
    return records, malformed


def status_of(value: Any) -> int | None:
    """An upstream outcome or final status as a status code, however a record spells it:
    429, "429", "http_429", {"status": 429}; None for anything else (a connection error)."""
    if isinstance(value, dict):
        value = value.get("status", value.get("status_code"))
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        digits = value.removeprefix("http_")
        return int(digits) if digits.isdigit() else None
    return None


def metrics_delta(before_document: Any, after_document: Any, dotted: str) -> Any:
    """after - before at a dotted path: a number, or a {key: number} table of what changed;
    None where the later document lacks it."""
    after, before = find(after_document, dotted), find(before_document, dotted)
    if isinstance(after, dict):
        earlier = before if isinstance(before, dict) else {}
        changed = {str(k): _number(v) - _number(earlier.get(k)) for k, v in after.items()}
        return {k: v for k, v in changed.items() if v}
    if after is None:
        return None
    return _number(after) - _number(before)


@dataclass(frozen=True, slots=True)
class TelemetryPhase:
    """One phase as every side saw it."""

    name: str
    client: list[ClientRequest]
    upstream: list[UpstreamAttempt]  # this phase's attempts (by request id), probes excluded
    metrics_before: dict[str, Any]
    metrics_after: dict[str, Any]
    log_lines: list[str] = field(default_factory=list)  # the proxy's output written during the phase
    replicas: int = 0

    def chains(self) -> dict[str, list[UpstreamAttempt]]:
        """Each client request's upstream attempts, in the order they began."""
        grouped = attempts_by_request(self.upstream)
        return {key: sorted(attempts, key=lambda a: a.started) for key, attempts in grouped.items()}

    def delta(self, dotted: str) -> Any:
        return metrics_delta(self.metrics_before, self.metrics_after, dotted)

    def backend_deltas(self, dotted: str) -> list[float] | None:
        after, before = find(self.metrics_after, dotted), find(self.metrics_before, dotted)
        if not isinstance(after, list):
            return None
        earlier = {row.get("index"): row for row in (before or []) if isinstance(row, dict)}
        deltas = [0.0] * self.replicas
        for position, row in enumerate(after):
            if not isinstance(row, dict):
                return None
            index = row.get("index", position)
            if not isinstance(index, int) or not 0 <= index < self.replicas:
                return None
            deltas[index] = _number(row.get("requests")) - _number(earlier.get(index, {}).get("requests"))
        return deltas


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def expected_counters(phase: TelemetryPhase) -> dict[str, Any]:
    """The counters as the replicas and the client saw the phase: requests the client sent,
    attempts the replicas served (each its own), retries by the status that caused them
    (every attempt of a request but its last), final statuses of the whole responses."""
    chains = phase.chains()
    retries: Counter[str] = Counter()
    for attempts in chains.values():
        retries.update(f"http_{a.status}" for a in attempts[:-1])
    finals = Counter(r.status for r in phase.client if r.outcome in COMPLETE)
    per_replica = [0.0] * phase.replicas
    for attempt in phase.upstream:
        if 0 <= attempt.replica < phase.replicas:
            per_replica[attempt.replica] += 1
    return {
        "requests": float(len(phase.client)),
        "attempts": float(len(phase.upstream)),
        "backends": per_replica,
        "retries": {k: float(v) for k, v in sorted(retries.items())},
        "final_statuses": {str(k): float(v) for k, v in sorted(finals.items())},
    }


def reported_counters(phase: TelemetryPhase, profile: TelemetryProfile) -> dict[str, Any]:
    return {
        "requests": phase.delta(profile.requests_metric),
        "attempts": phase.delta(profile.attempts_metric),
        "backends": phase.backend_deltas(profile.backends_metric),
        "retries": phase.delta(profile.retries_metric),
        "final_statuses": phase.delta(profile.final_statuses_metric),
    }


def _unclaimed(check_id: str, expected: str, claim: str) -> CheckResult:
    why = f"the SUT's profile does not claim {claim!r} ([telemetry] claims)"
    return CheckResult.unsupported(check_id, expected, why)


@check("telemetry.attempt_counters")
def attempt_counters(phases: list[TelemetryPhase], profile: TelemetryProfile) -> CheckResult:
    """In every phase, the proxy's counters moved by what the replicas and the client saw:
    requests, upstream attempts (in all and per backend), retries by cause, and the final
    status of each whole response (a stream cut mid-way has no final status the client saw
    whole; `telemetry.incomplete_streams` judges those)."""
    expected_text = (
        "per phase, the metrics' requests, attempts, per-backend requests, retries by cause and final statuses "
        "moved by what the replicas served and the client received"
    )
    if not profile.claimed("attempt_counters"):
        return _unclaimed(attempt_counters.check_id, expected_text, "attempt_counters")
    wrong: list[str] = []
    shown: list[str] = []
    retried = 0
    for phase in phases:
        want, got = expected_counters(phase), reported_counters(phase, profile)
        retried += int(sum(want["retries"].values()))
        judged = [name for name in want if not (name == "final_statuses" and phase.name == "cut")]
        for name in judged:
            if got[name] is None:
                wrong.append(f"{phase.name}: the metrics have no {name}")
            elif got[name] != want[name]:
                wrong.append(f"{phase.name}: {name} {_show(got[name])}, observed {_show(want[name])}")
        shown.append(
            f"{phase.name}: {int(want['requests'])} requests, {int(want['attempts'])} attempts, "
            f"retries {_show(want['retries'])}"
        )
    ok = bool(phases) and not wrong and retried > 0
    detail = "; ".join(wrong[:6]) + (f"; and {len(wrong) - 6} more" if len(wrong) > 6 else "")
    if not wrong and retried == 0:
        detail = "no phase produced a retry: a proxy that does not count them could not be told apart"
    return CheckResult.judge(
        attempt_counters.check_id,
        ok,
        expected_text,
        "observed (replicas, client): " + "; ".join(shown),
        detail,
        {"phases_disagreeing": float(len({w.split(":")[0] for w in wrong})), "retries_observed": float(retried)},
    )


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(f"{v:g}" for v in value) + "]"
    return f"{value:g}" if isinstance(value, float | int) else str(value)


RecordKey = tuple[int, tuple[str, ...], int]


def expected_records(phase: TelemetryPhase) -> Counter[RecordKey]:
    """One record per whole response: its attempts, each attempt's upstream status in order,
    and the status the client got."""
    chains = phase.chains()
    found: Counter[RecordKey] = Counter()
    for request in phase.client:
        if request.outcome not in COMPLETE:
            continue
        attempts = chains.get(request.request_id or "", [])
        found[(len(attempts), tuple(str(a.status) for a in attempts), int(request.status or 0))] += 1
    return found


def _record_key(record: dict[str, Any]) -> RecordKey | None:
    """(attempts, upstream statuses, final status) of a request's record; None for a marked
    record that is not a request's (a per-attempt event: no final status)."""
    final = status_of(record.get("final_status"))
    outcomes = record.get(
        "upstream_outcomes", record.get("attempts") if isinstance(record.get("attempts"), list) else None
    )
    if final is None or not isinstance(outcomes, list):
        return None
    statuses = tuple(str(status_of(o)) if status_of(o) is not None else str(o) for o in outcomes)
    count = record.get("attempts")
    attempts = count if isinstance(count, int) and not isinstance(count, bool) else len(statuses)
    return attempts, statuses, final


@check("telemetry.request_log")
def request_log(phases: list[TelemetryPhase], profile: TelemetryProfile) -> CheckResult:
    """Every request that got a whole response is logged once, with how many upstream
    attempts it took and each attempt's status (failovers and 429 retries included) and its
    final status, as the replicas and the client saw it; records compared as a multiset per
    phase (the records carry no request id). A marked line that is not a JSON record fails."""
    marker = profile.log_marker
    expected_text = (
        f"one `{marker}` record per whole response, its attempts and upstream statuses as the replicas served "
        "them and its final status as the client got it"
    )
    if not profile.claimed("request_log"):
        return _unclaimed(request_log.check_id, expected_text, "request_log")
    wrong: list[str] = []
    total_expected = total_records = 0
    failovers = 0
    for phase in phases:
        records, malformed = log_records(phase.log_lines, marker)
        complete = [r for r in records if not r.get(profile.incomplete_field)]
        keys = [_record_key(r) for r in complete]
        requests_logged = [k for k in keys if k is not None]
        unreadable = malformed
        if not requests_logged and complete:  # marked records, none a request's
            unreadable += len(complete)
        got = Counter(requests_logged)
        want = expected_records(phase)
        total_expected += sum(want.values())
        total_records += len(requests_logged)
        failovers += sum(n for key, n in want.items() if key[0] > 1)
        if unreadable:
            wrong.append(
                f"{phase.name}: {unreadable} marked lines with no request record (final_status, upstream_outcomes)"
            )
        if got != want:
            missing, extra = want - got, got - want
            wrong.append(
                f"{phase.name}: {sum(want.values())} responses, {sum(got.values())} records"
                + (f"; not logged: {_keys(missing)}" if missing else "")
                + (f"; logged but not seen: {_keys(extra)}" if extra else "")
            )
    ok = bool(phases) and not wrong and failovers > 0
    observed = f"{total_records} `{marker}` records for {total_expected} whole responses ({failovers} with failover)"
    if total_records == 0 and total_expected:
        observed = f"no `{marker}` record was written for {total_expected} whole responses"
    return CheckResult.judge(
        request_log.check_id,
        ok,
        expected_text,
        observed,
        "; ".join(wrong[:5]),
        {"records": float(total_records), "responses": float(total_expected), "failovers": float(failovers)},
    )


def _keys(found: Counter[RecordKey]) -> str:
    shown = [f"{n}x attempts {k[0]} [{','.join(k[1])}] -> {k[2]}" for k, n in found.most_common(3)]
    return ", ".join(shown) + (" ..." if len(found) > 3 else "")


@check("telemetry.incomplete_streams")
def incomplete_streams(phases: list[TelemetryPhase], profile: TelemetryProfile, cut_phase: str = "cut") -> CheckResult:
    """Each stream a replica cut mid-way (as the replica recorded it) is logged once as
    incomplete, with the bytes the proxy sent downstream: at least what the client received
    and at most what the replica sent (a client's reader may drop what it buffered when the
    stream breaks). No record says incomplete in a phase where no stream was cut."""
    marker, flag, size = profile.log_marker, profile.incomplete_field, profile.bytes_field
    expected_text = (
        f"one `{marker}` record with {flag}=true per stream a replica cut, its {size} between the bytes the client "
        "received and those the replica sent; none elsewhere"
    )
    if not profile.claimed("incomplete_streams"):
        return _unclaimed(incomplete_streams.check_id, expected_text, "incomplete_streams")
    phase = next((p for p in phases if p.name == cut_phase), None)
    if phase is None:
        return CheckResult.judge(incomplete_streams.check_id, False, expected_text, "no phase cut a stream")
    received = {r.request_id: r.bytes or 0 for r in phase.client}
    cut = sorted(
        ((received.get(a.request_id, 0), a.bytes) for a in phase.upstream if a.outcome == "cut"), key=lambda b: b[1]
    )
    flagged = [r for r in log_records(phase.log_lines, marker)[0] if r.get(flag) is True]
    sizes = sorted(int(r[size]) for r in flagged if isinstance(r.get(size), int) and not isinstance(r[size], bool))
    matched = 0
    for low, high in cut:  # each cut stream takes the smallest logged size its bounds allow
        hit = next((i for i, value in enumerate(sizes) if low <= value <= high), None)
        if hit is not None:
            sizes.pop(hit)
            matched += 1
    elsewhere = {
        p.name: n
        for p in phases
        if p.name != cut_phase and (n := sum(1 for r in log_records(p.log_lines, marker)[0] if r.get(flag) is True))
    }
    ok = bool(cut) and matched == len(cut) == len(flagged) and not elsewhere
    observed = (
        f"{len(cut)} streams cut by a replica (client got / replica sent: "
        f"{', '.join(f'{low}/{high}' for low, high in cut[:4])}{' ...' if len(cut) > 4 else ''} bytes); "
        f"{len(flagged)} records with {flag}=true, {matched} with the bytes sent"
    )
    problems = []
    if not cut:
        problems.append("no replica cut a stream")
    elif matched < len(cut):
        problems.append(f"{len(cut) - matched} cut streams not logged with their bytes")
    if len(flagged) > matched:
        problems.append(f"{len(flagged) - matched} incomplete records for no cut stream")
    if elsewhere:
        problems.append(
            "incomplete records where nothing was cut: " + ", ".join(f"{k} {v}" for k, v in elsewhere.items())
        )
    return CheckResult.judge(
        incomplete_streams.check_id,
        ok,
        expected_text,
        observed,
        "; ".join(problems),
        {"cut_streams": float(len(cut)), "logged_incomplete": float(len(flagged)), "logged_with_bytes": float(matched)},
    )


def _counters_reported(
    check_id: str, claim: str, counters: tuple[str, ...], metrics: dict[str, Any], profile: TelemetryProfile, what: str
) -> CheckResult:
    expected_text = f"the metrics count {what} ({', '.join(counters)})"
    if not profile.claimed(claim):
        return _unclaimed(check_id, expected_text, claim)
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
    # Reported: judging the counts needs phases dd-accept does not run yet (an idle expiry of
    # the SUT's keep-alive, replicas closing idle connections, stalls past the SUT's timeouts).
    return CheckResult(
        check_id,
        "unsupported",
        expected_text,
        f"reported ({', '.join(f'{p}={find(metrics, p)}' for p in counters)})",
        "not judged: dd-accept does not yet drive the phases that produce these events; never a pass",
    )


@check("telemetry.connection_lifecycle")
def connection_lifecycle(metrics: dict[str, Any], profile: TelemetryProfile) -> CheckResult:
    """The proxy counts upstream connections that expired idle, went stale (closed by the
    backend while idle, found on reuse) and were discarded. Opened and reused are
    `streaming.connection_accounting`'s."""
    return _counters_reported(
        connection_lifecycle.check_id, "connection_lifecycle", profile.connection_counters, metrics, profile,
        "expired, stale and discarded upstream connections",
    )  # fmt: skip


@check("telemetry.timeouts")
def timeouts(metrics: dict[str, Any], profile: TelemetryProfile) -> CheckResult:
    """The proxy counts terminal timeouts (no first byte in time) and streaming timeouts (a
    stream that stalls mid-way)."""
    return _counters_reported(
        timeouts.check_id, "timeouts", profile.timeout_counters, metrics, profile, "terminal and streaming timeouts"
    )
