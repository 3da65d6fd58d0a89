"""The telemetry scenario: phases built to produce what the seed pull request says the proxy
reports (retries after 429s and 503s, failovers, requests that use every attempt and end in
503, streams cut mid-way), each read from both
sides: the proxy's metrics before and after and the log records it wrote meanwhile, and
the replicas' and the client's own records of every request.

Replicas are steered through their control plane (forced statuses, cut streams), so the
phases run on synthetic replicas only; vLLM replicas have no control plane to steer.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from dd_accept.acceptance import telemetry_checks as checks
from dd_accept.acceptance.analysis import requests, with_prefix
from dd_accept.acceptance.overload import SYNTHETIC_ONLY
from dd_accept.acceptance.phases import DeployedRun, Phase, deploy_proxy, scenario_runner, stop_if_started
from dd_accept.base.waiting import WaitTimeout, wait_until
from dd_accept.fixtures import deployment


@dataclass(frozen=True, slots=True)
class TelemetryOptions:
    replicas: int = 4
    requests: int = 24  # per phase
    concurrency: int = 4
    tokens: int = 8
    forced_429: int = 6  # replica 0 answers 429 (Retry-After 3) to this many requests
    forced_503: int = 4  # replicas 1 and 2 answer 503 to this many each
    exhausted_requests: int = 4  # sent one at a time while every replica answers 503
    client_headers: tuple[str, ...] = ()
    seed: int = 0


@dataclass
class TelemetryRun(DeployedRun):
    options: TelemetryOptions
    phases_seen: list[checks.TelemetryPhase] = field(default_factory=list)


def _deploy_replicas(s: TelemetryRun) -> None:
    s.replicas = deployment.start_replicas(
        s.allocation, s.options.replicas, run=s.run, profile=s.profile, seed=s.options.seed, exact=True,
        options=("--ttft-ms", "10", "--itl-ms", "2", "--max-num-seqs", "64"),
    )  # fmt: skip


def _log_lines(s: TelemetryRun) -> list[str]:
    """The proxy's output so far (its stdout and stderr, as Slurm wrote them)."""
    try:
        return s.deployed[1].log_host_path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return []


def _settled_log(s: TelemetryRun) -> list[str]:
    """The proxy's output once it stops growing: Slurm writes a step's output as it comes."""
    seen: list[int] = []

    def grown() -> int:
        seen.append(len(_log_lines(s)))
        return len(seen) >= 2 and seen[-1] == seen[-2]

    with contextlib.suppress(WaitTimeout):  # still growing after 5 s: what it holds now is read
        wait_until(grown, bool, timeout=5, interval=0.3, max_interval=0.3, what="the proxy's output to settle")
    return _log_lines(s)


def _metrics(s: TelemetryRun) -> dict[str, Any]:
    """The proxy's metrics document; {} when it is not a JSON object (the checks then find
    no counter and say so)."""
    found = s.deployed[1].get(s.profile.proxy.metrics_path).get("json")
    return found if isinstance(found, dict) else {}


def _settled_metrics(s: TelemetryRun, before: dict[str, Any], sent: int) -> dict[str, Any]:
    """The metrics once they count every request the client sent and stop moving: a proxy
    may count a request's end a moment after the client saw it."""
    path = s.profile.telemetry.requests_metric
    reads: list[dict[str, Any]] = []

    def settled() -> bool:
        reads.append(_metrics(s))
        return checks.metrics_delta(before, reads[-1], path) == sent and len(reads) >= 2 and reads[-1] == reads[-2]

    with contextlib.suppress(WaitTimeout):  # never settled: what it holds now is judged
        wait_until(settled, bool, timeout=5, interval=0.2, max_interval=0.2, what="the proxy's metrics to settle")
    return reads[-1]


def _drive(s: TelemetryRun, name: str, *, requests_sent: int | None = None, concurrency: int | None = None) -> None:
    """One phase: metrics and log position before, the client's requests, metrics after."""
    replicas, proxy = s.deployed
    o = s.options
    before = _metrics(s)
    lines_before = len(_settled_log(s))
    sent = requests_sent or o.requests
    client = deployment.run_client(
        s.allocation, proxy, s.run, mode="raw", profile=s.profile, name=name, headers=o.client_headers,
        records=sent, concurrency=concurrency or o.concurrency, max_tokens=o.tokens, max_record_attempts=1,
        deadline_s=60,
    )  # fmt: skip
    record = client.wait(timeout=120)
    if not record.ok:
        raise RuntimeError(f"load client failed: {record.describe()}")
    after = _settled_metrics(s, before, sent)
    s.phases_seen.append(
        checks.TelemetryPhase(
            name=name,
            client=requests(deployment.read_events(s.run, name)),
            upstream=with_prefix(replicas.events(), f"{name}-"),
            metrics_before=before,
            metrics_after=after,
            log_lines=_settled_log(s)[lines_before:],
            replicas=replicas.count,
        )
    )


def _steady(s: TelemetryRun) -> None:
    _drive(s, "steady")


def _force_429(s: TelemetryRun) -> None:
    s.deployed[0].control([0], "respond", status=429, retry_after=3, count=s.options.forced_429)


def _retry_429(s: TelemetryRun) -> None:
    _drive(s, "retry-429")


def _force_503(s: TelemetryRun) -> None:
    s.deployed[0].control([1, 2], "respond", status=503, count=s.options.forced_503)


def _failover_503(s: TelemetryRun) -> None:
    _drive(s, "failover-503")


def _stop_forcing(s: TelemetryRun) -> None:
    """What the proxy did not send to a forced replica must not reach the next phase."""
    s.deployed[0].control(None, "respond", status=200, count=0)


def _exhaust(s: TelemetryRun) -> None:
    """Every replica answers 503 to more requests than the phase sends: each request uses
    every attempt the proxy makes, and the client gets the last one's 503."""
    s.deployed[0].control(None, "respond", status=503, count=s.options.exhausted_requests)


def _exhausted(s: TelemetryRun) -> None:
    _drive(s, "exhausted", requests_sent=s.options.exhausted_requests, concurrency=1)


def _cut(s: TelemetryRun) -> None:
    """Replica 3 cuts two streams after 2 chunks, replica 2 one after 5: cut streams of
    different sizes, so a record's bytes must be its own stream's."""
    replicas = s.deployed[0]
    replicas.control([3], "cut", after_chunks=2, count=2)
    replicas.control([2], "cut", after_chunks=5, count=1)


def _cut_streams(s: TelemetryRun) -> None:
    _drive(s, "cut")


def _stop_cutting(s: TelemetryRun) -> None:
    s.deployed[0].control(None, "cut", after_chunks=None)


def _judge(s: TelemetryRun) -> None:
    telemetry, phases = s.profile.telemetry, s.phases_seen
    s.result.add(checks.attempt_counters(phases, telemetry))
    s.result.add(checks.request_log(phases, telemetry))
    s.result.add(checks.incomplete_streams(phases, telemetry))
    last = phases[-1].metrics_after if phases else {}
    s.result.add(checks.connection_lifecycle(last, telemetry))
    s.result.add(checks.timeouts(last, telemetry))


PHASES: tuple[Phase[TelemetryRun], ...] = (
    Phase("deploy", "deploying replicas", _deploy_replicas, numbers=lambda s: {"replicas": s.options.replicas}),
    Phase("deploy", "deploying the SUT's proxy", deploy_proxy),
    Phase("drive", "requests through the proxy, every replica serving", _steady),
    Phase("hold", "replica 0 answers 429 with Retry-After", _force_429, backends=SYNTHETIC_ONLY),
    Phase("drive", "requests while replica 0 answers 429", _retry_429, backends=SYNTHETIC_ONLY),
    Phase("hold", "replicas 1 and 2 answer 503", _force_503, backends=SYNTHETIC_ONLY),
    Phase("drive", "requests while replicas 1 and 2 answer 503", _failover_503, backends=SYNTHETIC_ONLY),
    Phase("relieve", "replicas answer what they serve again", _stop_forcing, backends=SYNTHETIC_ONLY),
    Phase("hold", "every replica answers 503", _exhaust, backends=SYNTHETIC_ONLY),
    Phase("drive", "requests one at a time while every replica answers 503", _exhausted, backends=SYNTHETIC_ONLY),
    Phase("relieve", "no replica answers 503 any more", _stop_forcing, backends=SYNTHETIC_ONLY),
    Phase("hold", "replicas 2 and 3 cut streams mid-way", _cut, backends=SYNTHETIC_ONLY),
    Phase("drive", "requests while replicas 2 and 3 cut streams", _cut_streams, backends=SYNTHETIC_ONLY),
    Phase("relieve", "replicas stream whole again", _stop_cutting, backends=SYNTHETIC_ONLY),
    Phase("judge", "the SUT's telemetry against the replicas' and the client's", _judge, backends=SYNTHETIC_ONLY),
    Phase("stop", "stopping the proxy", stop_if_started("proxy"), teardown=True),
    Phase("stop", "stopping the replicas", stop_if_started("replicas"), teardown=True),
)

run_telemetry = scenario_runner("telemetry", PHASES, TelemetryRun)
