"""The telemetry checks: what the SUT's proxy *reports* about each request and its attempts,
against what the harness *observed* on its own; and its connection and timeout counters
against the events that phases built for them produced.

The independent views: the replicas record every upstream attempt they served (request
id, status, outcome, bytes; `UpstreamAttempt`), the load client every response it got
(status, how it ended, bytes; `ClientRequest`). The SUT's views: its metrics document
(read before and after each phase; the counters' differences are the phase's) and its
per-request log records (the lines its proxy wrote during the phase). A phase is built to
produce what is counted: retries after 429s and 503s, failovers, streams a replica cuts,
idle connections a replica closes (stale), connections idle past the proxy's keep-alive
(expired), responses that close their connection (discarded), responses a replica holds
back past the proxy's timeouts (terminal before the first byte, streaming mid-way).

What the SUT claims to report is its profile's (`[telemetry] claims`); a check of
something it does not claim is `unsupported`, never `pass`. A claimed signal that never
appears (no record, no counter) fails, named after what is missing.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from dd_accept.acceptance.analysis import attempts_by_request
from dd_accept.acceptance.log_shapes import log_records
from dd_accept.acceptance.registry import check
from dd_accept.acceptance.telemetry_failover_checks import connection_errors as connection_errors  # a telemetry check
from dd_accept.base.events import ClientRequest, SutAttemptRecord, UpstreamAttempt
from dd_accept.base.results import CheckResult
from dd_accept.node.loadclient.workload import CREDENTIAL_CANARY, PROMPT_CANARY
from dd_accept.node.replica.openai_shapes import RESPONSE_CANARY
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


def status_of(value: Any) -> int | None:
    """An upstream outcome or final status as a status code, however a record spells it:
    429, "429", "http_429", "429 Too Many Requests", {"status": 429} (or any of
    ATTEMPT_STATUS_KEYS); None for anything else (a connection error, a timeout)."""
    if isinstance(value, dict):
        value = _first(value, ATTEMPT_STATUS_KEYS)
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        digits = value.strip().removeprefix("http_").split(" ", 1)[0]
        return int(digits) if digits.isdigit() else None
    return None


def flagged(value: Any) -> bool:
    """A record's flag as a release may write it: true, "true", 1."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1")
    return value is True or (isinstance(value, int) and value == 1)


def byte_count(value: Any) -> int | None:
    """A byte count written as a number or as digits; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def is_request_record(record: dict[str, Any]) -> bool:
    """A request's record names its final status, however it spells it (a word such as
    "timeout" included); an attempt's record does not."""
    return record.get("final_status") is not None


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
    origins: tuple[str, ...] = ()  # each replica's http://host:port, in --backend order

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
        complete = [r for r in records if not flagged(r.get(profile.incomplete_field))]
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
            wrong.append(_unequal(f"{phase.name}: %d responses, %d records", want, got, _keys, "logged but not seen"))
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


def _unequal(head: str, want: Counter[Any], got: Counter[Any], show: Any, extra_label: str) -> str:
    """What a phase's log holds against what was seen, as two multisets: both sizes, then
    what was not logged and what was logged but never happened."""
    missing, extra = want - got, got - want
    return (
        head % (sum(want.values()), sum(got.values()))
        + (f"; not logged: {show(missing)}" if missing else "")
        + (f"; {extra_label}: {show(extra)}" if extra else "")
    )


def _keys(found: Counter[RecordKey]) -> str:
    shown = [f"{n}x attempts {k[0]} [{','.join(k[1])}] -> {k[2]}" for k, n in found.most_common(3)]
    return ", ".join(shown) + (" ..." if len(found) > 3 else "")


# Where a per-attempt record names its backend and its upstream status: the names a release
# that logs "each attempted upstream" (the seed) is read by, the first one present counting.
ATTEMPT_BACKEND_KEYS = ("backend", "backend_index", "upstream", "backend_origin", "origin")
ATTEMPT_STATUS_KEYS = ("status", "status_code", "http_status", "upstream_status", "response_status", "outcome")
# A record of an attempt that got no status may say why instead (status null or absent).
ATTEMPT_ERROR_KEYS = ("error", "error_type", "exception", "reason")
# Where a request's record may list its attempts inline: dicts each naming a backend and a
# status, or a list of backends beside `upstream_outcomes` (rc1's), one per attempt.
INLINE_ATTEMPT_KEYS = ("attempts", "upstream_attempts", "upstreams", "attempt_log")
INLINE_BACKEND_KEYS = ("upstream_backends", "backends", "backend_indexes", "upstream_indexes", "attempt_backends")

AttemptKey = tuple[str, str]  # (backend as a replica index, or what the record said; status)


def backend_named(value: Any, origins: tuple[str, ...]) -> str:
    """A record's backend as a replica index: 2, "2", {"index": 2}, or a string naming the
    replica's host:port ("http://10.0.0.3:8001"); anything else as it was written."""
    if isinstance(value, dict):
        value = value.get("index", value.get("origin", value.get("url")))
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value) if 0 <= value < max(len(origins), 1) or not origins else f"?{value}"
    if isinstance(value, str):
        if value.isdigit():
            return value
        for index, origin in enumerate(origins):
            if origin.removeprefix("http://") in value:
                return str(index)
    return f"?{value}"


def attempt_records(lines: list[str], profile: TelemetryProfile) -> tuple[list[dict[str, Any]], int]:
    """The per-attempt records of a phase: the marked records with no final status (a
    request's record has one; an attempt's record may also say its stream was incomplete),
    those under a sibling marker, or, where a release writes neither, the attempts its
    request records list inline. Also how many per-attempt records name no backend or no
    status (nor why it had none): reported where the phase's attempts do not match."""
    marked = log_records(lines, profile.log_marker)[0]
    records = [r for r in marked if not is_request_record(r)]
    # an incomplete-stream record naming no backend is a request's (incomplete_streams judges it)
    records = [r for r in records if not (flagged(r.get(profile.incomplete_field)) and _backend(r) is None)]
    readable = [r for r in records if names_an_attempt(r)]
    separate = readable + sibling_attempt_records(lines, profile.log_marker)
    if not separate:
        separate = [a for r in marked if is_request_record(r) for a in inline_attempts(r)]
    return separate, len(records) - len(readable)


def inline_attempts(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The attempts a request's record lists inline, as attempt records: a list of dicts
    naming a backend and a status, or a list of backends beside `upstream_outcomes`."""
    for key in INLINE_ATTEMPT_KEYS:
        listed = record.get(key)
        if isinstance(listed, list) and listed and all(isinstance(a, dict) for a in listed):
            return [a for a in listed if _backend(a) is not None]
    outcomes = record.get("upstream_outcomes")
    for key in INLINE_BACKEND_KEYS:
        backends = record.get(key)
        if isinstance(backends, list) and isinstance(outcomes, list) and len(backends) == len(outcomes):
            return [{"backend": b, "status": o} for b, o in zip(backends, outcomes, strict=True)]
    return []


def sibling_attempt_records(lines: list[str], marker: str) -> list[dict[str, Any]]:
    """Attempt records a release writes under a marker of its own beside the request's (the
    seed names no marker for "each attempted upstream"): `slurm_proxy_attempt {...}` or
    `slurm_proxy_upstream {...}` beside `slurm_proxy_request`. Only records naming a backend
    and a status, with no final status, under a marker naming an attempt or an upstream,
    count; other lines of the family (a start-up line, a health event) are not judged."""
    family = marker.rsplit("_", 1)[0] + "_" if "_" in marker else None
    if family is None:
        return []
    named = re.compile(re.escape(family) + r"\w*(?:attempt|upstream)")  # not a health or start-up line
    siblings = [line for line in lines if marker not in line and named.search(line)]
    return [r for r in log_records(siblings, family)[0] if not is_request_record(r) and names_an_attempt(r)]


def _first(record: dict[str, Any], keys: tuple[str, ...]) -> Any:
    return next((record[k] for k in keys if record.get(k) is not None), None)


def _backend(record: dict[str, Any]) -> Any:
    return _first(record, ATTEMPT_BACKEND_KEYS)


def _status(record: dict[str, Any]) -> Any:
    return _first(record, ATTEMPT_STATUS_KEYS)


def _error(record: dict[str, Any]) -> Any:
    return _first(record, ATTEMPT_ERROR_KEYS)


def names_an_attempt(record: dict[str, Any]) -> bool:
    """A record an attempt can be read from: its backend, and its status or why it had none."""
    return _backend(record) is not None and (_status(record) is not None or _error(record) is not None)


# An attempt that got no status: the replica held its answer until the proxy gave up on it
# (a timeout), or the connection failed. A record says so in words ("timeout", "error",
# "ClientConnectorError") or with the 504 a proxy answers for it; the replicas' side, with no
# status at all.
NO_RESPONSE = "no response"


# Statuses that say "no response" in some proxies' logs: 0 (nothing received), 599 (a
# network timeout, in Tornado's and others' convention), 504 (the proxy's own gateway timeout).
NO_RESPONSE_CODES = frozenset({0, 504, 599})


def attempt_key(record: dict[str, Any], origins: tuple[str, ...]) -> AttemptKey:
    backend = backend_named(_backend(record), origins)
    status = _status(record)
    code = status_of(status)
    if status is None or (code is None and isinstance(status, str)) or code in NO_RESPONSE_CODES:
        return backend, NO_RESPONSE
    return backend, str(code if code is not None else status)


def served_key(attempt: UpstreamAttempt) -> AttemptKey:
    """An attempt as the replica served it; one it never answered had no response."""
    return str(attempt.replica), NO_RESPONSE if attempt.status is None else str(attempt.status)


def broke_mid_way(attempt: UpstreamAttempt) -> bool:
    """A stream that broke after its status: cut by the replica, or given up on by the proxy
    after its status and some events (a streaming timeout)."""
    return attempt.outcome == "cut" or (attempt.outcome == "abandoned" and attempt.status is not None)


def match_attempts(
    want: Counter[AttemptKey], got: Counter[AttemptKey], broke: Counter[AttemptKey]
) -> Counter[AttemptKey]:
    """`got` with the records of streams that broke after their status read as the replica
    served them: such an attempt got its status and then timed out or was cut, and a record
    may name the status or the failure. For each such (replica, status), as many of that
    replica's spare no-response records as it had such streams, and as that status's records
    fall short, count as that status; never as another status of the replica."""
    matched = Counter(got)
    for key, streams in broke.items():
        gone = (key[0], NO_RESPONSE)
        moved = min(max(0, want[key] - matched[key]), streams, max(0, matched[gone] - want[gone]))
        if moved:
            matched[key] += moved
            matched[gone] -= moved
    return +matched


def placed_attempt_records(phase: TelemetryPhase, profile: TelemetryProfile) -> list[SutAttemptRecord]:
    """The phase's attempt records, each placed on the request of the replicas' attempt of
    the same backend and status, in order of occurrence (the records carry no request id):
    the SUT's view beside the replicas' on the report's request timeline. A view, never a
    verdict: attempt_log judges the records as a multiset."""
    records, _ = attempt_records(phase.log_lines, profile)
    served: dict[AttemptKey, list[UpstreamAttempt]] = {}
    for attempt in sorted(phase.upstream, key=lambda a: a.started):
        served.setdefault(served_key(attempt), []).append(attempt)
    placed = []
    for record in records:
        backend, status = attempt_key(record, phase.origins)
        queue = served.get((backend, status))
        paired = queue.pop(0) if queue else None
        placed.append(
            SutAttemptRecord(
                phase=phase.name,
                backend="?" if backend.startswith("?") else backend,  # never what an unknown backend said
                status=status,
                request_id=paired.request_id if paired else None,
                attempt_started=paired.started if paired else None,
            )
        )
    return placed


@check("telemetry.attempt_log")
def attempt_log(phases: list[TelemetryPhase], profile: TelemetryProfile) -> CheckResult:
    """The proxy logs each upstream attempt (the seed: "log each attempted upstream") with
    the backend it went to and the status it got: per phase, the (backend, status) of its
    per-attempt records equal, as a multiset, the attempts the replicas served (failovers,
    429 retries and, where the profile's timeouts can be driven, attempts that timed out
    included: those the replica never answered are `no response`, and so is a record whose
    status is a word or 504). A per-attempt record is a marked record with no final status;
    one that names no backend or no status fails."""
    expected_text = (
        f"one `{profile.log_marker}` record per upstream attempt naming its backend and status, equal per phase "
        "to the attempts the replicas served"
    )
    if not profile.claimed("attempt_log"):
        return _unclaimed(attempt_log.check_id, expected_text, "attempt_log")
    wrong: list[str] = []
    served = logged = retried = unanswered = 0
    for phase in phases:
        records, unreadable = attempt_records(phase.log_lines, profile)
        want = Counter(served_key(a) for a in phase.upstream)
        broke = Counter(served_key(a) for a in phase.upstream if broke_mid_way(a))
        got = match_attempts(want, Counter(attempt_key(r, phase.origins) for r in records), broke)
        served += sum(want.values())
        logged += sum(got.values())
        retried += sum(want.values()) - len(phase.chains())
        unanswered += sum(n for key, n in want.items() if key[1] == NO_RESPONSE)
        if got != want:  # records naming no backend or no status are said only where they may be why
            wrong.append(
                _unequal(f"{phase.name}: %d attempts served, %d logged", want, got, _attempts, "logged but not served")
                + (f"; {unreadable} attempt records with no backend or no status" if unreadable else "")
            )
    ok = bool(phases) and not wrong and retried > 0
    observed = f"{logged} per-attempt records for {served} attempts the replicas served ({retried} retried)"
    if logged == 0 and served:
        observed = f"no per-attempt `{profile.log_marker}` record for {served} attempts the replicas served"
    detail = "; ".join(wrong[:5])
    if not wrong and retried == 0:
        detail = "no phase produced a retry: a log that names only final attempts could not be told apart"
    return CheckResult.judge(
        attempt_log.check_id, ok, expected_text, observed, detail,
        {"attempts_served": float(served), "attempts_logged": float(logged), "retried": float(retried),
         "attempts_unanswered": float(unanswered)},
    )  # fmt: skip


def _attempts(found: Counter[AttemptKey]) -> str:
    shown = [f"{n}x backend {k[0]} status {k[1]}" for k, n in found.most_common(3)]
    return ", ".join(shown) + (" ..." if len(found) > 3 else "")


def incomplete_records(phase: TelemetryPhase, profile: TelemetryProfile) -> list[dict[str, Any]]:
    return [r for r in log_records(phase.log_lines, profile.log_marker)[0] if flagged(r.get(profile.incomplete_field))]


DRAIN_PHASE = "drain"  # streams longer than the drain allowance, running when the endpoint got TERM
# where replicas cut streams, where the proxy abandons them mid-way, and where its drain bound ends them
CUT_PHASES = ("cut", "timeouts", DRAIN_PHASE)
# What a proxy may add to a broken stream's bytes beyond the replica's: its own error event
# (an SSE `data: {"error": ...}`) and the wire's chunked framing, a few bytes per write.
FRAMING_SLACK = 0.1
ERROR_EVENT_BYTES = 1024


def byte_bounds(received: int, sent: int, stopped_reading: bool = False) -> tuple[int, int]:
    """The bytes a proxy may log as sent downstream for a broken stream: at least what the
    client received or the replica sent, whichever is less (a client's reader may drop what
    it buffered; a proxy may count only what it forwarded, not the error event it added), at
    most the larger plus framing and an error event of its own. A proxy that `stopped_reading`
    (its drain bound) may leave the replica's last writes unread: then neither side shows
    what it forwarded, and the client's bytes less an error event of its own are the floor."""
    larger = max(received, sent)
    low = min(received - ERROR_EVENT_BYTES, sent) if stopped_reading else min(received, sent)
    return max(0, low), int(larger * (1 + FRAMING_SLACK)) + ERROR_EVENT_BYTES


def broken_streams(phase: TelemetryPhase) -> list[tuple[int, int]]:
    """The streams of a phase that broke mid-way, as (bytes the client received, bytes the
    replica sent), smallest first: cut by a replica, or abandoned by the proxy after its
    status and some events (a streaming timeout)."""
    received = {r.request_id: r.bytes or 0 for r in phase.client}
    broken = [a for a in phase.upstream if broke_mid_way(a)]
    return sorted(((received.get(a.request_id, 0), a.bytes) for a in broken), key=lambda b: b[1])


@check("telemetry.incomplete_streams")
def incomplete_streams(
    phases: list[TelemetryPhase],
    profile: TelemetryProfile,
    cut_phases: tuple[str, ...] = CUT_PHASES,
    drain_killed_after_s: float | None = None,
) -> CheckResult:
    """Each stream that broke mid-way (a replica cut it, the proxy's streaming timeout
    abandoned it, or its drain bound ended it, as the replica recorded it) is logged once as
    incomplete, with the bytes the proxy sent downstream: at least what the client received
    and at most what the replica sent (a client's reader may drop what it buffered when the
    stream breaks). No record says incomplete in a phase where no stream broke. An endpoint
    that never ended its streams at its drain window (Slurm's KILL did, at the allowance:
    `drain_killed_after_s`) cannot have logged them, and the check says so."""
    marker, flag, size = profile.log_marker, profile.incomplete_field, profile.bytes_field
    expected_text = (
        f"one `{marker}` record with {flag}=true per stream a replica cut, the proxy abandoned mid-way or its "
        f"drain bound ended, its {size} between the bytes the client received and those the replica sent; "
        "none elsewhere"
    )
    if not profile.claimed("incomplete_streams"):
        return _unclaimed(incomplete_streams.check_id, expected_text, "incomplete_streams")
    judged = [p for p in phases if p.name in cut_phases]
    if not judged:
        return CheckResult.judge(incomplete_streams.check_id, False, expected_text, "no phase cut a stream")
    cut: list[tuple[int, int]] = []
    broke: dict[str, int] = {}  # per phase, the streams that broke
    unlogged: dict[str, int] = {}
    flagged_count = matched = 0
    for phase in judged:
        broken = broken_streams(phase)
        cut += broken
        broke[phase.name] = len(broken)
        logged = incomplete_records(phase, profile)
        flagged_count += len(logged)
        sizes = sorted(n for r in logged if (n := byte_count(r.get(size))) is not None)
        hits = 0
        for received, sent in broken:  # each broken stream takes the smallest logged size its bounds allow
            low, high = byte_bounds(received, sent, stopped_reading=phase.name == DRAIN_PHASE)
            hit = next((i for i, value in enumerate(sizes) if low <= value <= high), None)
            if hit is not None:
                sizes.pop(hit)
                hits += 1
        matched += hits
        if hits < len(broken):
            unlogged[phase.name] = len(broken) - hits
    drained = DRAIN_PHASE in broke  # the drain phase ran
    drain_cut = broke.get(DRAIN_PHASE, 0)
    elsewhere = {p.name: n for p in phases if p.name not in cut_phases and (n := len(incomplete_records(p, profile)))}
    ok = bool(cut) and matched == len(cut) == flagged_count and not elsewhere and (not drained or drain_cut > 0)
    observed = (
        f"{len(cut)} streams broken mid-way in {', '.join(p.name for p in judged)} (client got / replica sent: "
        f"{', '.join(f'{low}/{high}' for low, high in cut[:4])}{' ...' if len(cut) > 4 else ''} bytes); "
        f"{flagged_count} records with {flag}=true, {matched} with the bytes sent"
    )
    problems = []
    if not cut:
        problems.append("no replica cut a stream")
    elif unlogged:
        problems.append(
            f"{len(cut) - matched} cut streams not logged with their bytes ("
            + ", ".join(f"{name} {n}" for name, n in unlogged.items())
            + ")"
        )
    if drained and not drain_cut:
        problems.append("no stream broke at the drain bound (streams longer than the allowance, then TERM)")
    if drain_killed_after_s is not None and unlogged.get(DRAIN_PHASE):
        problems.append(
            f"the endpoint still ran {drain_killed_after_s:.0f} s after TERM and was KILLed: it ended no stream at "
            "its drain window itself, and a killed process logs nothing"
        )
    if flagged_count > matched:
        problems.append(f"{flagged_count - matched} incomplete records for no cut stream")
    if elsewhere:
        problems.append(
            "incomplete records where nothing was cut: " + ", ".join(f"{k} {v}" for k, v in elsewhere.items())
        )
    metrics = {
        "cut_streams": float(len(cut)),
        "logged_incomplete": float(flagged_count),
        "logged_with_bytes": float(matched),
    }
    if drained:
        metrics |= {
            "drain_cut_streams": float(drain_cut),
            "drain_logged_with_bytes": float(drain_cut - unlogged.get(DRAIN_PHASE, 0)),
        }
    return CheckResult.judge(incomplete_streams.check_id, ok, expected_text, observed, "; ".join(problems), metrics)


@check("telemetry.probe_routing")
def probe_routing(
    upstream: list[UpstreamAttempt],
    window: tuple[float, float] | None,
    probed: int,
    replicas: int,
    profile: TelemetryProfile,
) -> CheckResult:
    """Health probes do not change least-connections choices (the seed: probes must not
    "distort least-connections activity"): while one replica holds the proxy's probe in
    flight and requests go one at a time (no replica has a request in flight), the probed
    replica still gets its turn. A proxy that counts its probe as a request in flight sends
    it none. Judged on the requests that began inside the probe's window, as the replicas
    saw it; with fewer than one per replica the proxy held its probe too briefly to tell."""
    expected_text = (
        f"with a health probe in flight on replica {probed} and requests one at a time, replica {probed} still "
        "gets requests"
    )
    if not profile.claimed("probe_routing"):
        return _unclaimed(probe_routing.check_id, expected_text, "probe_routing")
    if window is None:
        return CheckResult.judge(
            probe_routing.check_id, False, expected_text, f"the proxy sent no health probe to replica {probed}"
        )
    start, end = window
    inside = [a for a in upstream if start <= a.started <= end]
    counts = [sum(1 for a in inside if a.replica == r) for r in range(replicas)]
    others = [n for r, n in enumerate(counts) if r != probed]
    observed = (
        f"{len(inside)} requests began in the probe's {end - start:.1f} s in flight; per replica "
        f"{', '.join(str(n) for n in counts)}"
    )
    numbers = {
        "in_window": float(len(inside)),
        "probed_requests": float(counts[probed]),
        "others_min": float(min(others, default=0)),
        "window_s": round(end - start, 3),
    }
    if len(inside) < replicas:
        return CheckResult(
            probe_routing.check_id, "unsupported", expected_text, observed,
            f"not judged: the proxy held its probe {end - start:.1f} s, too briefly for a request per replica; "
            "never a pass",
            numbers,
        )  # fmt: skip
    detail = "" if counts[probed] else (
        f"replica {probed} got none of the {len(inside)} requests while the probe was in flight: the probe counted "
        "as a request in least-connections"
    )  # fmt: skip
    return CheckResult.judge(probe_routing.check_id, counts[probed] > 0, expected_text, observed, detail, numbers)


# Enough of a canary that no other text holds it by chance, little enough that a record
# that cuts the prompt or the credential short still shows it.
CANARY_SHOWN = 8
METRIC_NAMES = {"prompt": "prompt", "credential": "header", "response": "response"}


def sent_secrets(headers: tuple[str, ...]) -> tuple[str, ...]:
    """The parts of the user's own credential headers (`Authorization`, an API key, a token,
    a cookie) that only they hold: each word of 8 characters or more of the value."""
    found = []
    for header in headers:
        name, _, value = header.partition(":")
        if any(word in name.lower() for word in ("auth", "key", "token", "cookie", "secret", "password")):
            found += [word for word in value.split() if len(word) >= 8]
    return tuple(found)


@check("telemetry.no_payloads")
def no_payloads(lines: list[str], canary: str, user_secrets: tuple[str, ...] = ()) -> CheckResult:
    """The proxy's output holds no request text, no response text and no credential (the
    seed: its records carry no "payloads or credentials"). Every prompt of the run carried
    the canary, every request a credential made from it (or the user's own, whose words
    are looked for), every token the replicas streamed: text found nowhere but in what
    the client and the replicas sent, even cut short to its first characters. Judged
    whatever the SUT claims: a proxy that writes nothing leaks nothing."""
    expected_text = "no line the proxy wrote holds a prompt, a response's text or a credential the client sent"
    shown = canary[:CANARY_SHOWN]
    marks = {
        "prompt": (f"{PROMPT_CANARY}{shown}",),
        "credential": (f"{CREDENTIAL_CANARY}{shown}", *user_secrets),
        "response": (f"{RESPONSE_CANARY}{shown}",),
    }
    found = {what: [i for i, line in enumerate(lines) if any(m in line for m in ms)] for what, ms in marks.items()}
    leaked = {what: where for what, where in found.items() if where}
    observed = f"{len(lines)} lines written by the proxy in the run" + (
        "; " + ", ".join(f"{what} text in {len(where)}" for what, where in leaked.items()) if leaked else ""
    )
    detail = "; ".join(
        f"{what} text on the proxy's output (line {', '.join(str(i + 1) for i in where[:3])}"
        f"{' ...' if len(where) > 3 else ''})"
        for what, where in leaked.items()
    )
    return CheckResult.judge(
        no_payloads.check_id,
        not leaked,
        expected_text,
        observed,
        detail,
        # a metric named after a credential would be redacted as one: the header it rode in names it
        {
            "lines": float(len(lines)),
            **{f"{METRIC_NAMES[what]}_lines": float(len(where)) for what, where in found.items()},
        },
    )


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
        observed.append(f"{phase.name}: {path} +{_show(counted)} ({phase.seen})")
        if max(allowed) <= 0:
            never.append(f"{phase.name}: no event for {path} happened ({phase.seen})")
        elif not isinstance(counted, int | float) or counted not in allowed:
            wrong.append(f"{phase.name}: {path} counted {_show(counted)}, the replicas saw {allowed_text(allowed)}")
    for phase in phases:  # every window also holds the counters its events must not move
        for path, allowed in phase.also.items():
            counted = phase.counted(path)
            if path in counters and (not isinstance(counted, int | float) or counted not in allowed):
                wrong.append(
                    f"{phase.name}: {path} counted {_show(counted)} where the replicas saw {allowed_text(allowed)} "
                    "of its events"
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
                wrong.append(f"{phase.name}: {path} counted {_show(moved)} where none of its events could happen")
        values = [v for document in readings if isinstance(v := find(document, path), int | float)]
        if any(later < earlier for earlier, later in itertools.pairwise(values)):
            wrong.append(f"{path} fell between two readings of the run ({', '.join(_show(v) for v in values)})")
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
