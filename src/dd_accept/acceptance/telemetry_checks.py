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

from collections import Counter
from typing import Any

from dd_accept.acceptance.drain_checks import StepEnd, described_end
from dd_accept.acceptance.log_shapes import log_records
from dd_accept.acceptance.proxy_metrics import retries_by_status
from dd_accept.acceptance.registry import check
from dd_accept.acceptance.telemetry_failover_checks import connection_errors as connection_errors  # a telemetry check
from dd_accept.acceptance.telemetry_failover_checks import status_failover as status_failover  # a telemetry check
from dd_accept.acceptance.telemetry_records import (
    AttemptKey,
    RecordKey,
    TelemetryPhase,
    attempt_key,
    attempt_records,
    broke_mid_way,
    byte_count,
    flagged,
    match_attempts,
    of_own_endpoint,
    request_record_key,
    served_key,
    shown_numbers,
    unclaimed,
)
from dd_accept.base.events import SutAttemptRecord, UpstreamAttempt
from dd_accept.base.results import CheckResult
from dd_accept.sut.profile import TelemetryProfile

COMPLETE = frozenset({"ok", "rate_limited", "http_error"})  # a whole response reached the client


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
        "retries": retries_by_status(phase.delta(profile.retries_metric)),
        "final_statuses": phase.delta(profile.final_statuses_metric),
    }


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
        return unclaimed(attempt_counters.check_id, expected_text, "attempt_counters")
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
                wrong.append(f"{phase.name}: {name} {shown_numbers(got[name])}, observed {shown_numbers(want[name])}")
        shown.append(
            f"{phase.name}: {int(want['requests'])} requests, {int(want['attempts'])} attempts, "
            f"retries {shown_numbers(want['retries'])}"
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


@check("telemetry.request_log")
def request_log(phases: list[TelemetryPhase], profile: TelemetryProfile) -> CheckResult:
    """Every request that got a whole response is logged once, with how many upstream
    attempts it took and each attempt's status (failovers and 429 retries included) and its
    final status, as the replicas and the client saw it; records compared as a multiset per
    phase (the records carry no request id). A marked line that is not a JSON record fails.
    A proxy may log its own endpoints' requests (`/health`, `/metrics`) under the same
    marker: a record naming a path no client sends is set aside, whatever attempts it lists
    (a /health that probes the backends), and so are records of no upstream attempt beyond
    the responses that had none (a 503 with no backend), where records name no path."""
    marker = profile.log_marker
    expected_text = (
        f"one `{marker}` record per whole response, its attempts and upstream statuses as the replicas served "
        "them and its final status as the client got it"
    )
    if not profile.claimed("request_log"):
        return unclaimed(request_log.check_id, expected_text, "request_log")
    wrong: list[str] = []
    total_expected = total_records = own = 0
    failovers = 0
    for phase in phases:
        records, malformed = log_records(phase.log_lines, marker)
        complete = [r for r in records if not flagged(r.get(profile.incomplete_field))]
        driven = [r for r in complete if not of_own_endpoint(r)]
        own, complete = own + len(complete) - len(driven), driven
        keys = [request_record_key(r) for r in complete]
        requests_logged = [k for k in keys if k is not None]
        unreadable = malformed
        if not requests_logged and complete:  # marked records, none a request's
            unreadable += len(complete)
        got = Counter(requests_logged)
        want = expected_records(phase)
        own_endpoints = Counter({key: n for key, n in got.items() if key[0] == 0 and not key[1]}) - want
        got -= own_endpoints
        own += sum(own_endpoints.values())
        total_expected += sum(want.values())
        total_records += sum(got.values())
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
    if own:
        observed += f"; {own} records set aside (the proxy's own endpoints: another path, or no upstream attempt)"
    return CheckResult.judge(
        request_log.check_id,
        ok,
        expected_text,
        observed,
        "; ".join(wrong[:5]),
        {"records": float(total_records), "responses": float(total_expected), "failovers": float(failovers),
         "records_set_aside": float(own)},
    )  # fmt: skip


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
        return unclaimed(attempt_log.check_id, expected_text, "attempt_log")
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
        unanswered += sum(1 for a in phase.upstream if a.status is None)
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
    drain_end: StepEnd | None = None,
) -> CheckResult:
    """Each stream that broke mid-way (a replica cut it, the proxy's streaming timeout
    abandoned it, or its drain bound ended it, as the replica recorded it) is logged once as
    incomplete, with the bytes the proxy sent downstream: at least what the client received
    and at most what the replica sent (a client's reader may drop what it buffered when the
    stream breaks). No record says incomplete in a phase where no stream broke. An endpoint
    that never ended its streams at its drain window (Slurm's KILL did, at the allowance:
    `drain_killed_after_s`) cannot have logged them, and the check says so. How the endpoint
    ended (`drain_end`, Slurm's record) is reported beside the drain phase's streams."""
    marker, flag, size = profile.log_marker, profile.incomplete_field, profile.bytes_field
    expected_text = (
        f"one `{marker}` record with {flag}=true per stream a replica cut, the proxy abandoned mid-way or its "
        f"drain bound ended, its {size} between the bytes the client received and those the replica sent; "
        "none elsewhere"
    )
    if not profile.claimed("incomplete_streams"):
        return unclaimed(incomplete_streams.check_id, expected_text, "incomplete_streams")
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
    if drained and drain_end is not None:
        kill = "never" if drain_killed_after_s is None else f"after {drain_killed_after_s:.1f}s"
        observed += f"; drain: {described_end(drain_end)}, KILL {kill}"
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
        return unclaimed(probe_routing.check_id, expected_text, "probe_routing")
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
