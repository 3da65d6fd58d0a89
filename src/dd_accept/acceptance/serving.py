"""Serving metrics, as the people who release serving stacks read them.

vLLM's `bench serve`, AIPerf and guidellm report time to first token (TTFT), inter-token
latency (ITL), time per output token (TPOT) and end-to-end latency (E2EL) in milliseconds as
mean, median, standard deviation and percentiles, with request and output-token throughput;
dd-accept reports them for each scenario and each of its phases, from what its load clients
measured on every attempt, under vLLM's names where vLLM has one (`mean_ttft_ms`,
`median_ttft_ms`, `std_ttft_ms`, `p99_ttft_ms`, `request_throughput`, `output_throughput`) and
its own otherwise (`requests`, `completed`, `duration_s`, `error_rate`, `rate_limited_rate`,
`*_count`). They describe a run; a gate file turns any of them into a check (a limit, a
reference with a tolerance, a baseline) and judges goodput under its SLOs.

Definitions, as vLLM's `calculate_metrics`: percentiles interpolate linearly between the
ordered values (numpy's default), the standard deviation is the population one; TTFT from
the attempt's start to its first chunk; ITL the gaps between consecutive chunks of a stream,
pooled over streams (the first 2048 chunks of each, timed to 0.1 ms); TPOT per stream
(E2EL - TTFT) / (output tokens - 1); throughput over the span from the first attempt's start
to the last one's end. Output tokens are what the client reported from the response's usage
(the SUT's client) or else the SSE chunks it counted (the raw client: one token per chunk
from the synthetic replicas; vLLM sends a role-only first chunk, so slightly more chunks than
tokens). With the SUT's own client (`mode: sut`) E2EL includes the time a request waited in
its admission controller (vLLM reports that as `e2el_including_client_queue`), and TTFT, ITL
and TPOT are not measured. Only attempts that completed count towards latencies;
`error_rate` and `rate_limited_rate` are shares of all attempts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from dd_accept.base.events import ClientRequest, of_type, read_event_file
from dd_accept.base.percentiles import percentile
from dd_accept.base.results import PhaseRecord
from dd_accept.base.serving_names import PERCENTILES

# What the client ended that is no error of the SUT: served, rejected with Retry-After, or left
# by a client that hung up mid-stream on purpose (the wire scenario's hangup and slow reader).
NOT_ERRORS = ("ok", "rate_limited", "hung_up")


def _percentile(ordered: list[float], percent: float) -> float:
    found = percentile(ordered, percent / 100)
    assert found is not None, "a summary is made of values"
    return found


def _summary(name: str, values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    mean = sum(ordered) / len(ordered)
    numbers = {
        f"mean_{name}_ms": mean * 1000,
        f"median_{name}_ms": _percentile(ordered, 50) * 1000,
        f"std_{name}_ms": math.sqrt(sum((v - mean) ** 2 for v in ordered) / len(ordered)) * 1000,
    }
    numbers |= {f"p{p}_{name}_ms": _percentile(ordered, p) * 1000 for p in PERCENTILES}
    return numbers | {f"{name}_count": float(len(ordered))}


def output_tokens(attempt: ClientRequest) -> int | None:
    """The tokens the client reported (usage), else the SSE chunks it counted."""
    return attempt.tokens if attempt.tokens is not None else attempt.chunks


def tpot_s(attempt: ClientRequest) -> float | None:
    """(E2EL - TTFT) / (output tokens - 1), for a stream of more than one token."""
    tokens = output_tokens(attempt)
    if attempt.latency_s is None or attempt.ttft_s is None or tokens is None or tokens <= 1:
        return None
    return (attempt.latency_s - attempt.ttft_s) / (tokens - 1)


def span_s(attempts: list[ClientRequest]) -> float:
    """From the first attempt's start to the last one's end: what throughputs are per second of."""
    return max(a.t for a in attempts) - min(a.began for a in attempts)


def serving_metrics(attempts: list[ClientRequest]) -> dict[str, float]:
    """The metrics of these attempts (empty when there are none)."""
    if not attempts:
        return {}
    ok = [a for a in attempts if a.outcome == "ok"]
    ttft = [a.ttft_s for a in ok if a.ttft_s is not None]
    e2el = [a.latency_s for a in ok if a.latency_s is not None]
    itl = [
        later - earlier
        for a in ok
        for earlier, later in zip(a.chunk_offsets_s or [], (a.chunk_offsets_s or [])[1:], strict=False)
    ]
    tpot = [t for t in map(tpot_s, ok) if t is not None]
    duration = span_s(attempts)
    metrics: dict[str, float] = {"requests": float(len(attempts)), "completed": float(len(ok))}
    if duration > 0:
        metrics["duration_s"] = duration
        metrics["request_throughput"] = len(ok) / duration
        tokens = [t for t in map(output_tokens, ok) if t is not None]
        if tokens:  # absent, never 0, when the client counted none (a client that cannot see them)
            metrics["output_throughput"] = sum(tokens) / duration
    metrics["error_rate"] = sum(a.outcome not in NOT_ERRORS for a in attempts) / len(attempts)
    metrics["rate_limited_rate"] = sum(a.outcome == "rate_limited" for a in attempts) / len(attempts)
    for name, values in (("ttft", ttft), ("itl", itl), ("tpot", tpot), ("e2el", e2el)):
        metrics |= _summary(name, values)
    return metrics


def client_attempts(run_directory: Path) -> list[ClientRequest]:
    """Every load client's attempts in a run directory (its top-level event files)."""
    attempts: list[ClientRequest] = []
    for path in sorted(run_directory.glob("*.jsonl")):
        try:
            attempts += of_type(read_event_file(path), ClientRequest)
        except ValueError:  # EventFormatError, or a line that is not JSON
            continue  # not an event file of the load clients (the harness's own records)
    return attempts


def in_phase(attempt: ClientRequest, phase: PhaseRecord) -> bool:
    """Whether the attempt began in the phase: where its numbers belong."""
    return phase.started <= attempt.began < (phase.ended if phase.ended is not None else math.inf)


def by_phase(
    attempts: Iterable[ClientRequest], phases: list[PhaseRecord], faults: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """The metrics of each phase in which attempts began (phases without any are left out),
    each marked with the fault it drives by design (`faults`, by phase title), if any."""
    listed = list(attempts)
    measured = []
    for phase in phases:
        inside = [a for a in listed if in_phase(a, phase)]
        if inside:
            fault = (faults or {}).get(phase.title)
            measured.append(
                {"title": phase.title, "metrics": serving_metrics(inside)} | ({"fault": fault} if fault else {})
            )
    return measured


def serving_block(
    run_directory: Path, phases: list[PhaseRecord], faults: Mapping[str, str] | None = None
) -> dict[str, Any] | None:
    """A scenario's `serving` in results.json: the whole scenario and each phase; None when
    no load client ran."""
    attempts = client_attempts(run_directory)
    if not attempts:
        return None
    # `events`: where the bundle holds these attempts (events/<run directory>/), so a gate can
    # judge goodput under its own SLOs from the evidence alone.
    return {
        "metrics": serving_metrics(attempts),
        "phases": by_phase(attempts, phases, faults),
        "events": run_directory.name,
    }
