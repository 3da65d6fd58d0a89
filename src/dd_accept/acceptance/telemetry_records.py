"""How the telemetry checks read what a SUT's proxy wrote: values at dotted paths of its
metrics document, and its per-request and per-attempt log records however a release spells
them (a backend as an index or an origin, a status as a number, a word or a code a proxy
uses for "no response"), and a phase as every side saw it (`TelemetryPhase`). Only reading
and showing here; what the readings must show is judged in telemetry_checks and
telemetry_counter_checks.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from dd_accept.acceptance.analysis import attempts_by_request
from dd_accept.acceptance.log_shapes import log_records
from dd_accept.base.events import COMPLETION_PATHS, ClientRequest, UpstreamAttempt
from dd_accept.base.results import CheckResult
from dd_accept.sut.profile import TelemetryProfile


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
        changed = {str(k): as_number(v) - as_number(earlier.get(k)) for k, v in after.items()}
        return {k: v for k, v in changed.items() if v}
    if after is None:
        return None
    return as_number(after) - as_number(before)


def as_number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


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
    """An attempt as the replica served it; one it never answered had no response. A 504 a
    replica answered reads as no response too: a record's 504 cannot be told from the proxy's
    own gateway timeout (`NO_RESPONSE_CODES`), so both sides say the same of it."""
    unanswered = attempt.status is None or attempt.status in NO_RESPONSE_CODES
    return str(attempt.replica), NO_RESPONSE if unanswered else str(attempt.status)


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
        return attempts_by_request(self.upstream)

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
            deltas[index] = as_number(row.get("requests")) - as_number(earlier.get(index, {}).get("requests"))
        return deltas


RecordKey = tuple[int, tuple[str, ...], int]  # (attempts, upstream statuses, final status)


def request_record_key(record: dict[str, Any]) -> RecordKey | None:
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


# Where a record may name the path of the request it is of (a path, or a request line). Not
# a URL: "endpoint", "url" or "target" name the upstream as often (a backend's base URL).
_PATH_FIELDS = ("path", "request_path", "route", "request")
# A request's path as a record writes it: no route pattern (aiohttp's catch-all `/{path:.*}`),
# no repr's brackets.
_PATH = re.compile(r"/[^\s{}*<>()\[\]]*")


def named_path(record: dict[str, Any]) -> str | None:
    """The path a record says it served ("/health", "GET /metrics?x HTTP/1.1"), or None when
    it names none (a field that holds a route's pattern names none: the next is read)."""
    for name in _PATH_FIELDS:
        value = record.get(name)
        for token in value.split() if isinstance(value, str) else ():
            if _PATH.fullmatch(token.split("?")[0]):
                return token.split("?")[0]
    return None


def of_own_endpoint(record: dict[str, Any]) -> bool:
    """A record of a path no client of the run sends: the proxy's own endpoints (its /health
    may probe the backends and list those probes as attempts)."""
    path = named_path(record)
    return path is not None and path not in COMPLETION_PATHS


def unclaimed(check_id: str, expected: str, claim: str) -> CheckResult:
    why = f"the SUT's profile does not claim {claim!r} ([telemetry] claims)"
    return CheckResult.unsupported(check_id, expected, why)


def shown_numbers(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(f"{v:g}" for v in value) + "]"
    return f"{value:g}" if isinstance(value, float | int) else str(value)
