"""How the telemetry scenario's phases drive the SUT and read it back: load sent through the
proxy, the proxy's metrics and log lines read until they settle, and a phase's client,
replica and proxy views put side by side (`TelemetryPhase`). Shared by the scenario's
phases (telemetry) and its connection and timeout phases (telemetry_connections).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from dd_accept import deployment
from dd_accept.acceptance import telemetry_records
from dd_accept.acceptance.analysis import requests, with_prefix
from dd_accept.base.waiting import WaitTimeout, wait_until

if TYPE_CHECKING:  # the run state is the scenario's (telemetry), which imports this module
    from dd_accept.acceptance.telemetry import TelemetryOptions, TelemetryRun


def _log_lines(s: TelemetryRun) -> list[str]:
    """The proxy's output so far (its stdout and stderr, as Slurm wrote them)."""
    try:
        return s.deployed[1].log_host_path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return []


def settled_log(s: TelemetryRun) -> list[str]:
    """The proxy's output once it stops growing: Slurm writes a step's output as it comes."""
    seen: list[int] = []

    def grown() -> int:
        seen.append(len(_log_lines(s)))
        return len(seen) >= 2 and seen[-1] == seen[-2]

    with contextlib.suppress(WaitTimeout):  # still growing after 5 s: what it holds now is read
        wait_until(grown, bool, timeout=5, interval=0.3, max_interval=0.3, what="the proxy's output to settle")
    return _log_lines(s)


def read_metrics(s: TelemetryRun) -> dict[str, Any]:
    """The proxy's metrics document; {} when it is not a JSON object (the checks then find
    no counter and say so)."""
    found = s.deployed[1].get(s.profile.proxy.metrics_path).get("json")
    return found if isinstance(found, dict) else {}


def settled_metrics(s: TelemetryRun, before: dict[str, Any], sent: int) -> dict[str, Any]:
    """The metrics once they count every request the client sent and stop moving: a proxy
    may count a request's end a moment after the client saw it."""
    path = s.profile.telemetry.requests_metric
    reads: list[dict[str, Any]] = []

    def settled() -> bool:
        reads.append(read_metrics(s))
        return (
            telemetry_records.metrics_delta(before, reads[-1], path) == sent
            and len(reads) >= 2
            and reads[-1] == reads[-2]
        )

    with contextlib.suppress(WaitTimeout):  # never settled: what it holds now is judged
        wait_until(settled, bool, timeout=5, interval=0.2, max_interval=0.2, what="the proxy's metrics to settle")
    return reads[-1]


def load_for(
    o: TelemetryOptions, canary: str, sent: int, concurrency: int | None = None, deadline_s: float = 60, **more: Any
) -> dict[str, Any]:
    """What the load client sends (the run's and the plan's keywords): one attempt each,
    every prompt and credential carrying the run's canary."""
    return {
        "headers": o.client_headers, "records": sent, "concurrency": concurrency or o.concurrency,
        "max_tokens": o.tokens, "max_record_attempts": 1, "deadline_s": deadline_s, "canary": canary, **more,
    }  # fmt: skip


def send_load(s: TelemetryRun, name: str, sent: int, *, concurrency: int | None = None, deadline_s: float = 60) -> None:
    """The load client's requests, one attempt each; on their own (no settling), they are
    what a phase sends, or what fills the proxy's pool for the moment after."""
    load = load_for(s.options, s.canary, sent, concurrency, deadline_s)
    client = deployment.run_client(s.allocation, s.deployed[1], s.run, mode="raw", profile=s.profile, name=name, **load)
    record = client.wait(timeout=2 * deadline_s)
    if not record.ok:
        raise RuntimeError(f"load client failed: {record.describe()}")


def drive_phase(
    s: TelemetryRun, name: str, *, requests_sent: int | None = None, concurrency: int | None = None
) -> None:
    """One phase of the attempt and record checks."""
    s.phases_seen.append(client_phase(s, name, requests_sent=requests_sent, concurrency=concurrency))


def client_phase(
    s: TelemetryRun,
    name: str,
    *,
    requests_sent: int | None = None,
    concurrency: int | None = None,
    before: dict[str, Any] | None = None,
    deadline_s: float = 60,
) -> telemetry_records.TelemetryPhase:
    """One phase: metrics and log position before, the client's requests, metrics after."""
    before = read_metrics(s) if before is None else before
    lines_before = len(settled_log(s))
    sent = requests_sent or s.options.requests
    send_load(s, name, sent, concurrency=concurrency, deadline_s=deadline_s)
    return phase_seen(s, name, lines_before, before, settled_metrics(s, before, sent))


def phase_seen(
    s: TelemetryRun, name: str, lines_before: int, before: dict[str, Any], after: dict[str, Any]
) -> telemetry_records.TelemetryPhase:
    """A phase as each side saw it: the client's requests, the replicas' attempts, the
    proxy's metrics around it and the output it wrote since `lines_before`."""
    replicas = s.deployed[0]
    return telemetry_records.TelemetryPhase(
        name=name,
        client=requests(deployment.read_events(s.run, name)),
        upstream=with_prefix(replicas.events(), f"{name}-"),
        metrics_before=before,
        metrics_after=after,
        log_lines=settled_log(s)[lines_before:],
        replicas=replicas.count,
        origins=tuple(replicas.url(i) for i in range(replicas.count)),
    )
