"""Serving metrics, as the people who release serving stacks read them.

vLLM's `bench serve`, AIPerf and guidellm report time to first token (TTFT), inter-token
latency (ITL), time per output token (TPOT) and end-to-end latency (E2EL) as mean and
percentiles in milliseconds, with request and output-token throughput; dd-accept reports the
same, under vLLM's names (`p99_ttft_ms`, `request_throughput`, ...), for each scenario and each
of its phases, from what its load clients measured on every attempt. They describe a run; a
gate file turns any of them into a check (a limit, a reference with a tolerance, a baseline).

Definitions (vLLM's): TTFT from the attempt's start to its first chunk; ITL the gaps between
consecutive chunks of a stream, pooled over streams; TPOT per stream (E2EL - TTFT) / (chunks
- 1); throughput over the span from the first attempt's start to the last one's end. One SSE
chunk counts as one output token (the synthetic replicas send one token per chunk; vLLM
streams one per chunk unless it batches). Only attempts that completed count towards
latencies; `error_rate` and `rate_limited_rate` are shares of all attempts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from dd_accept.base.events import ClientRequest, of_type, read_event_file
from dd_accept.base.results import PhaseRecord
from dd_accept.base.serving_names import PERCENTILES


def _percentile(ordered: list[float], percent: float) -> float:
    """Nearest-rank percentile of sorted values."""
    return ordered[min(len(ordered) - 1, max(0, math.ceil(percent / 100 * len(ordered)) - 1))]


def _summary(name: str, values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    numbers = {f"mean_{name}_ms": sum(ordered) / len(ordered) * 1000}
    numbers |= {f"p{p}_{name}_ms": _percentile(ordered, p) * 1000 for p in PERCENTILES}
    return numbers | {f"{name}_count": float(len(ordered))}


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
    tpot = [
        (a.latency_s - a.ttft_s) / (a.chunks - 1)
        for a in ok
        if a.latency_s is not None and a.ttft_s is not None and a.chunks is not None and a.chunks > 1
    ]
    start = min(a.began for a in attempts)
    duration = max(a.t for a in attempts) - start
    metrics: dict[str, float] = {"requests": float(len(attempts)), "completed": float(len(ok))}
    if duration > 0:
        metrics["duration_s"] = duration
        metrics["request_throughput"] = len(ok) / duration
        metrics["output_throughput"] = sum(a.chunks or 0 for a in ok) / duration
    metrics["error_rate"] = sum(a.outcome not in ("ok", "rate_limited") for a in attempts) / len(attempts)
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


def by_phase(attempts: Iterable[ClientRequest], phases: list[PhaseRecord]) -> list[dict[str, Any]]:
    """The metrics of each phase in which attempts began (phases without any are left out)."""
    listed = list(attempts)
    measured = []
    for phase in phases:
        end = phase.ended if phase.ended is not None else math.inf
        inside = [a for a in listed if phase.started <= a.began < end]
        if inside:
            measured.append({"title": phase.title, "metrics": serving_metrics(inside)})
    return measured


def serving_block(run_directory: Path, phases: list[PhaseRecord]) -> dict[str, Any] | None:
    """A scenario's `serving` in results.json: the whole scenario and each phase; None when
    no load client ran."""
    attempts = client_attempts(run_directory)
    if not attempts:
        return None
    # `events`: where the bundle holds these attempts (events/<run directory>/), so a gate can
    # judge goodput under its own SLOs from the evidence alone.
    return {"metrics": serving_metrics(attempts), "phases": by_phase(attempts, phases), "events": run_directory.name}
