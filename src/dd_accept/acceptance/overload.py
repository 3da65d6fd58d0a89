"""The overload scenario: partial overload absorbed by failover, total overload answered
with 429 + Retry-After and met by client admission (AIMD decrease, cooldown), recovery.

Phases, each with its own client run so the evidence of one cannot leak into another:
  partial — K of N replicas held at queue depth D (> threshold); the SUT's real client
            drives R records through the proxy.
  total   — every replica held; the client drives records until two admission decreases
            are seen, then the overload is lifted and the same client recovers.
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

from dd_accept.acceptance import overload_checks as checks
from dd_accept.acceptance.analysis import admission, of_kind, with_prefix
from dd_accept.base.options import OverloadOptions
from dd_accept.base.progress import ProgressWriter
from dd_accept.base.results import ScenarioResult
from dd_accept.base.waiting import WaitTimeout, wait_until
from dd_accept.fixtures import deployment
from dd_accept.fixtures.backends.vllm import VllmBackend
from dd_accept.slurm_docker.allocation import Allocation, BackgroundCommand
from dd_accept.sut.profile import SutProfile


def _watch(
    command: BackgroundCommand,
    run: deployment.RunDirectory,
    name: str,
    progress: ProgressWriter,
    phase: str,
    timeout: float,
) -> list[dict[str, Any]]:
    """Follow a client run to its end, reporting requests, 429s and the admission limit."""
    deadline = time.monotonic() + timeout
    while not command.finished and time.monotonic() < deadline:
        events = deployment.read_events(run, name)
        _report(events, progress, phase)
        time.sleep(0.5)
    record = command.wait(timeout=max(1.0, deadline - time.monotonic()))
    events = deployment.read_events(run, name)
    _report(events, progress, phase)
    if not record.ok:
        raise RuntimeError(f"load client failed: {record.describe()}")
    return events


def _report(events: list[dict[str, Any]], progress: ProgressWriter, phase: str) -> None:
    requests = of_kind(events, "request")
    limits = [e["limit"] for e in of_kind(events, "admission") if e.get("limit") is not None]
    progress.emit(
        phase,
        requests=len(requests),
        done=sum(1 for e in requests if e.get("outcome") == "ok"),
        rate_limited=sum(1 for e in requests if e.get("status") == 429),
        limit=limits[-1] if limits else None,
    )


DEADLINES = {"partial": 120.0, "total": 150.0}  # the load client's own deadline per phase, seconds
# Synthetic replicas answer fast here: overload is about admission and retries, not speed.
FAST_REPLICAS = ("--ttft-ms", "5", "--itl-ms", "1")


def run_overload(
    allocation: Allocation,
    run: deployment.RunDirectory,
    profile: SutProfile,
    options: OverloadOptions,
    progress: ProgressWriter,
    *,
    fast: tuple[str, ...] = FAST_REPLICAS,
    backend: VllmBackend | None = None,
) -> ScenarioResult:
    result = ScenarioResult("overload", started=time.time())
    max_attempts = profile.proxy.max_upstream_attempts
    progress.emit("deploying", replicas=options.replicas)
    replicas = deployment.deploy_replicas(
        allocation,
        options.replicas,
        run=run,
        profile=profile,
        backend=backend,
        threshold=options.threshold,
        retry_after=options.retry_after,
        options=fast,
        seed=options.seed,
    )
    # The proxy's own Retry-After (used when an upstream 429 carries none) differs from the
    # replicas' on purpose: a client seeing the replicas' value proves it was passed through.
    proxy = deployment.start_proxy(
        allocation, replicas, profile=profile, retry_after=proxy_fallback_retry_after(options.retry_after)
    )
    samples: list[deployment.AdmissionSample] = []

    def sut_client(name: str, records: int) -> BackgroundCommand:
        """The SUT's own client through the proxy, at full admission, for one phase."""
        load = client_load(options, records, DEADLINES[name], replicas.model)
        return deployment.run_client(allocation, proxy, run, mode="sut", profile=profile, name=name, **load)

    try:
        # -- queue admission, then partial ----------------------------------------------------
        overloaded = range(options.overloaded)
        if replicas.exact_depths:
            samples.append(replicas.hold_at(overloaded, depth=options.threshold, threshold=options.threshold))
        progress.emit("partial overload", overloaded=options.overloaded)
        samples.append(replicas.overload(overloaded, depth=options.queue_depth, threshold=options.threshold))
        before = proxy.get(profile.proxy.metrics_path)["json"]
        client = sut_client("partial", options.records)
        partial = _watch(client, run, "partial", progress, "partial overload", timeout=150)
        after = proxy.get(profile.proxy.metrics_path)["json"]
        retries = {k: after["retries"].get(k, 0) - before["retries"].get(k, 0) for k in after.get("retries", {})}
        upstream = with_prefix(replicas.events(), "partial-")
        result.add(checks.partial_completes(partial, options.records, options.overloaded, max_attempts))
        result.add(checks.partial_failover(upstream, retries, max_attempts))
        samples.append(replicas.relieve(overloaded, threshold=options.threshold))

        # -- total, then recovery ---------------------------------------------------------------
        progress.emit("total overload", overloaded=options.replicas)
        samples.append(replicas.overload(None, depth=options.queue_depth, threshold=options.threshold))
        client = sut_client("total", options.recovery_records)
        try:
            # A SUT that never decreases is a finding for the checks below, not an error here.
            with contextlib.suppress(WaitTimeout):
                wait_until(
                    lambda: deployment.read_events(run, "total"),
                    lambda events: len(admission(events, "request_limit_decreased")) >= 2 or client.finished,
                    timeout=options.decrease_wait_s,
                    what="two admission decreases under total overload",
                )
        finally:
            relieved_at = time.time()
            samples.append(replicas.relieve(threshold=options.threshold))
        progress.emit("recovery")
        total = _watch(client, run, "total", progress, "recovery", timeout=180)
        upstream = with_prefix(replicas.events(), "total-")
        result.add(checks.total_attempts(total, upstream, options.replicas, max_attempts))
        result.add(
            checks.total_retry_after(total, options.retry_after, proxy_fallback_retry_after(options.retry_after))
        )
        factor, limit = profile.client.decrease_factor, options.admission_limit
        result.add(checks.total_admission_decrease(total, limit, factor, upstream=upstream, until=relieved_at))
        result.add(checks.total_cooldown(total, profile.client.cooldown_seconds))
        result.add(checks.recovery(total, options.recovery_records, relieved_at, upstream=upstream, limit=limit))
        if replicas.exact_depths:  # the default threshold (128) is an exact depth too
            progress.emit("queue admission at the SUT's default threshold")
            samples += _default_threshold(allocation, run, profile, options, fast)
        result.add(checks.admission_rejects(samples, options.retry_after))
        _save_admission(run, samples)
    finally:
        proxy.stop()
        replicas.stop()
        result.ended = time.time()
    progress.emit("done", verdict=result.verdict())
    return result


def proxy_fallback_retry_after(retry_after: int) -> int:
    """The proxy's own Retry-After: never the replicas' value, so the two can be told apart."""
    return retry_after + 4


def _default_threshold(
    allocation: Allocation,
    run: deployment.RunDirectory,
    profile: SutProfile,
    options: OverloadOptions,
    fast: tuple[str, ...],
) -> list[deployment.AdmissionSample]:
    """One replica left at the SUT's default threshold (no override): it admits at that depth
    and rejects one above it."""
    default = profile.queue_admission.default_threshold
    replica = deployment.start_replicas(
        allocation,
        1,
        run=deployment.RunDirectory.create(allocation.cluster, "admission-default"),
        profile=profile,
        retry_after=options.retry_after,
        options=fast,
        seed=options.seed,
        port_base=deployment.REPLICA_PORT_BASE + 100,
    )
    try:
        return [
            replica.hold_at(None, depth=default, threshold=default),
            replica.overload(None, depth=default + 1, threshold=default),
        ]
    finally:
        replica.stop()


def _save_admission(run: deployment.RunDirectory, samples: list[deployment.AdmissionSample]) -> None:
    _, path = run.path("admission.jsonl")
    path.write_text("".join(json.dumps(sample.to_json()) + "\n" for sample in samples))


def client_load(options: OverloadOptions, records: int, deadline_s: float, model: str | None = None) -> dict[str, Any]:
    """The SUT client at full admission: as many workers as the initial limit, short answers;
    against vLLM replicas it asks for the model they serve."""
    return {
        **({"model": model} if model else {}),
        "records": records,
        "concurrency": options.admission_limit,
        "admission_limit": options.admission_limit,
        "max_tokens": 4,
        "stream": False,
        "deadline_s": deadline_s,
    }
