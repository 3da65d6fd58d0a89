"""What a gate file demands of the serving metrics: limits, references with tolerances, a
baseline, and goodput under SLOs, each judged as a gate check of its own.

ReFrame states performance as a reference with tolerances; vLLM's `bench serve` judges
goodput as the requests that meet every SLO. A gate file says both, per scenario:

    [metrics.streaming]
    p99_ttft_ms = { max = 250 }                      # gate.metric.streaming.p99_ttft_ms
    request_throughput = { ref = 40, lower = 0.2 }   # at least 32 req/s
    p50_tpot_ms = { vs_baseline = 1.10 }             # at most 1.10 x the baseline's (TPOT: a
                                                     # busy machine's bunched reads move ITL)

    [goodput]                                        # gate.goodput.streaming
    scenario = "streaming"
    ttft_ms = 500
    tpot_ms = 50
    min_fraction = 0.99                              # of all attempts
    min_request_goodput = 20                         # good requests per second (vLLM's request_goodput)

Whether lower or higher is better comes from the metric: `vs_baseline = k` holds a latency
or a rate to at most k x the baseline's and a throughput to at least the baseline's / k.
Goodput is vLLM's: a request is good when it completed and meets every SLO (a request of one
token has TPOT 0), `request_goodput` is the good ones per second of the span, and
`goodput_fraction` the good ones among all attempts, so a failed request counts against it.
It is computed from the bundle's own client events (each attempt's TTFT, TPOT and E2EL), so
anyone holding the bundle can recompute it; the SLOs are the gate's, never the run's. A
client that does not measure an SLO's metric (the SUT's own client measures no TTFT) fails
the check saying so, rather than counting every request as bad.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dd_accept.acceptance.serving import client_attempts, in_phase, output_tokens, span_s, tpot_s
from dd_accept.base.errors import UsageError
from dd_accept.base.events import ClientRequest
from dd_accept.base.results import CheckResult, PhaseRecord
from dd_accept.base.serving_names import METRIC_NAME, better, unit_of
from dd_accept.base.toml_tables import build_table


@dataclass(frozen=True, slots=True)
class MetricDemand:
    """One metric's demand (any of the bounds may be combined)."""

    scenario: str = ""
    metric: str = ""
    max: float | None = None
    min: float | None = None
    ref: float | None = None
    upper: float | None = None  # with ref: at most ref * (1 + upper)
    lower: float | None = None  # with ref: at least ref * (1 - lower)
    vs_baseline: float | None = None  # at most this many times worse than the baseline's

    @property
    def check_id(self) -> str:
        return f"gate.metric.{self.scenario}.{self.metric}"

    def bounds(self, baseline: float | None) -> list[tuple[str, float]]:
        """("<=" or ">=", value) for every bound this demand sets, given the baseline's value."""
        found = []
        if self.max is not None:
            found.append(("<=", self.max))
        if self.min is not None:
            found.append((">=", self.min))
        if self.ref is not None and self.upper is not None:
            found.append(("<=", self.ref * (1 + self.upper)))
        if self.ref is not None and self.lower is not None:
            found.append((">=", self.ref * (1 - self.lower)))
        if self.vs_baseline is not None and baseline is not None:
            higher = better(self.metric) == "higher"
            found.append((">=", baseline / self.vs_baseline) if higher else ("<=", baseline * self.vs_baseline))
        return found


@dataclass(frozen=True, slots=True)
class GoodputSection:
    scenario: str = "streaming"
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None
    min_fraction: float = 1.0
    min_request_goodput: float | None = None

    @property
    def slos(self) -> dict[str, float]:
        pairs = (("ttft", self.ttft_ms), ("tpot", self.tpot_ms), ("e2el", self.e2el_ms))
        return {name: value for name, value in pairs if value is not None}


def parse_metric_demands(table: Any, source: str) -> tuple[MetricDemand, ...]:
    """`[metrics.SCENARIO]` tables of `METRIC = { bound = value, ... }`, each validated."""
    if not isinstance(table, dict):
        raise UsageError(f"gate file {source}: [metrics] must be a table of scenarios")
    demands = []
    for scenario, metrics in table.items():
        if not SCENARIO_NAME.fullmatch(scenario):
            raise UsageError(f"gate file {source}: [metrics.{scenario!r}]: not a scenario's name")
        if not isinstance(metrics, dict) or not metrics:
            raise UsageError(f"gate file {source}: [metrics.{scenario}] must be a table of metrics, not empty")
        for metric, bounds in metrics.items():
            where = f"metrics.{scenario}.{metric!r}"
            if not METRIC_NAME.fullmatch(metric):
                raise UsageError(f"gate file {source}: {where}: unknown serving metric (see results-v5.json)")
            where = f"metrics.{scenario}.{metric}"
            unknown = sorted(set(bounds) - set(_BOUNDS)) if isinstance(bounds, dict) else []
            if unknown:
                raise UsageError(f"gate file {source}: unknown key {where}.{unknown[0]} (known: {', '.join(_BOUNDS)})")
            demand = build_table(MetricDemand, bounds, where, "gate file", source)
            demand = MetricDemand(scenario, metric, *(getattr(demand, f) for f in _BOUNDS))
            _check_bounds(demand, where, source)
            demands.append(demand)
    return tuple(demands)


_BOUNDS = ("max", "min", "ref", "upper", "lower", "vs_baseline")
SCENARIO_NAME = re.compile(r"[a-z_]+")


def _check_bounds(demand: MetricDemand, where: str, source: str) -> None:
    def fail(message: str) -> UsageError:
        return UsageError(f"gate file {source}: {where}: {message}")

    if all(getattr(demand, name) is None for name in _BOUNDS):
        raise fail("give at least one of max, min, ref with upper or lower, vs_baseline")
    for name in ("max", "min"):
        value = getattr(demand, name)
        if value is not None and value < 0:
            raise fail(f"{name} must be 0 or more: no serving metric is negative")
    if demand.max is not None and demand.min is not None and demand.min > demand.max:
        raise fail(f"min {demand.min:g} is above max {demand.max:g}: no value could pass")
    if demand.ref is not None and demand.ref <= 0:
        raise fail("ref must be above 0 (a tolerance is a fraction of it)")
    if demand.ref is not None and demand.upper is None and demand.lower is None:
        raise fail("ref needs a tolerance: upper (a fraction above it) or lower (below it)")
    if (demand.upper is not None or demand.lower is not None) and demand.ref is None:
        raise fail("upper and lower are tolerances around ref, which is missing")
    for name in ("upper", "lower"):
        value = getattr(demand, name)
        if value is not None and not 0 <= value < (math.inf if name == "upper" else 1):
            raise fail(f"{name} is a fraction of ref ({'>= 0' if name == 'upper' else 'from 0 to below 1'})")
    if demand.vs_baseline is not None and demand.vs_baseline < 1:
        raise fail("vs_baseline is how many times worse than the baseline is allowed, at least 1")


def phase_values(results: dict[str, Any] | None, scenario: str, metric: str) -> tuple[dict[str, float], list[str]]:
    """The metric in each of the scenario's phases that drives no fault by design, by title,
    and the titles of the phases left out as faults. A scenario whose serving block lists no
    phase (an older bundle's) is one phase, the whole scenario's."""
    for entry in (results or {}).get("scenarios", []):
        if entry["name"] != scenario or not entry.get("serving"):
            continue
        phases = entry["serving"].get("phases") or [{"title": scenario, "metrics": entry["serving"]["metrics"]}]
        faults = [p["title"] for p in phases if p.get("fault")]
        values = {
            p["title"]: float(p["metrics"][metric]) for p in phases if not p.get("fault") and metric in p["metrics"]
        }
        return values, faults
    return {}, []


def judge_metric(demand: MetricDemand, candidate: dict[str, Any], baseline: dict[str, Any] | None) -> CheckResult:
    """The demand held in every phase of the scenario that drives no fault by design (a
    stalled replica's TTFT is its phase's point, not the release's latency), against the
    baseline's same phase where it asks for one; the worst phase is named."""
    values, faults = phase_values(candidate, demand.scenario, demand.metric)
    before_values = phase_values(baseline, demand.scenario, demand.metric)[0] if baseline is not None else {}
    unit = f" {unit_of(demand.metric)}".rstrip()
    left_out = f"; left out as faults by design: {', '.join(faults)}" if faults else ""
    higher = better(demand.metric) == "higher"

    def broken_by(title: str) -> float:  # how far past its bounds a phase is (<= 0: within them)
        value = values[title]
        return max(
            (value - limit if op == "<=" else limit - value) for op, limit in demand.bounds(before_values.get(title))
        )

    # A lower-is-better metric the baseline measured as 0 in a phase (a p50 gap of streams whose
    # events all came in one read) gives no ratio to hold: any candidate above 0 would break
    # "3 x 0". Such a phase is left out of the ratio, and said.
    unscaled = [t for t in values if demand.vs_baseline is not None and not higher and before_values.get(t) == 0]
    judged = [t for t in values if (demand.vs_baseline is None or t in before_values) and t not in unscaled]
    if unscaled:
        left_out += f"; left out, the baseline measuring 0 there (no ratio to hold): {', '.join(unscaled)}"
    if not judged:
        wording = " and ".join(
            f"{demand.metric} {'≤' if op == '<=' else '≥'} {v:.4g}{unit}" for op, v in demand.bounds(None)
        )
        expected = wording or f"{demand.metric} within {demand.vs_baseline:g} x the baseline's"
        if values and demand.vs_baseline is not None:
            observed = "the baseline did not measure it" if baseline is not None else "the gate has no baseline"
        else:
            observed = f"{demand.metric} was not measured in {demand.scenario} outside its fault phases"
        return CheckResult.judge(demand.check_id, False, expected, observed, left_out.lstrip("; "))
    worst = (
        max(judged, key=broken_by)
        if any(broken_by(t) > 0 for t in judged)
        else (max(judged, key=lambda t: values[t]) if not higher else min(judged, key=lambda t: values[t]))
    )
    value, before = values[worst], before_values.get(worst)
    bounds = demand.bounds(before)
    expected = " and ".join(f"{demand.metric} {'≤' if op == '<=' else '≥'} {limit:.4g}{unit}" for op, limit in bounds)
    if demand.vs_baseline is not None and before is not None:
        how = "/" if higher else "x"
        expected += f" (the baseline's {before:.4g}{unit} {how} {demand.vs_baseline:g})"
    ok = all(broken_by(t) <= 0 for t in judged)
    observed = f"{value:.4g}{unit}" + (f" in {worst} (the worst of {len(judged)} phases)" if len(judged) > 1 else "")
    metrics = {demand.metric: value} | ({f"baseline_{demand.metric}": before} if before is not None else {})
    detail = "; ".join(f"{t}: {values[t]:.4g}{unit}" for t in judged) + left_out
    return CheckResult.judge(demand.check_id, ok, expected, observed, detail, metrics)


def goodput(attempts: list[ClientRequest], slos: dict[str, float]) -> dict[str, float]:
    """vLLM's goodput: the attempts that completed and meet every SLO (ms); per second of the
    span (`request_goodput`) and as a share of all attempts (`goodput_fraction`)."""
    if not attempts:
        return {"good": 0.0, "attempts": 0.0}

    def meets(a: ClientRequest) -> bool:
        if a.outcome != "ok":
            return False
        tokens = output_tokens(a)
        values = {
            "ttft": a.ttft_s,
            "e2el": a.latency_s,
            "tpot": 0.0 if tokens is not None and tokens <= 1 else tpot_s(a),
        }
        return all(values[name] is not None and values[name] * 1000 <= slo for name, slo in slos.items())

    good = sum(meets(a) for a in attempts)
    span = span_s(attempts)
    measured = {"good": float(good), "attempts": float(len(attempts)), "goodput_fraction": good / len(attempts)}
    return measured | ({"request_goodput": good / span} if span > 0 else {})


def _unmeasured(attempts: list[ClientRequest], slos: dict[str, float]) -> list[str]:
    """The SLOs whose metric the client measured on no completed attempt."""
    ok = [a for a in attempts if a.outcome == "ok"]
    measured = {"ttft": any(a.ttft_s is not None for a in ok), "e2el": any(a.latency_s is not None for a in ok)}
    measured["tpot"] = measured["ttft"] and measured["e2el"] and any(output_tokens(a) is not None for a in ok)
    return [name for name in slos if ok and not measured[name]]


def judge_goodput(section: GoodputSection, bundle: Path, results: dict[str, Any]) -> CheckResult:
    check_id = f"gate.goodput.{section.scenario}"
    slos = ", ".join(f"{name.upper()} ≤ {value:g} ms" for name, value in section.slos.items())
    expected = f"at least {section.min_fraction:.0%} of all attempts complete within every SLO ({slos})"
    if section.min_request_goodput is not None:
        expected += f" and at least {section.min_request_goodput:g} such requests/s"
    entry = next((s for s in results.get("scenarios", []) if s["name"] == section.scenario), None)
    events = (entry or {}).get("serving", {}).get("events") if entry else None
    if events is None or not (bundle / "events" / events).is_dir():
        return CheckResult.judge(check_id, False, expected, f"no client events of {section.scenario} in the bundle")
    faults = {p["title"] for p in entry["serving"].get("phases", []) if p.get("fault")}
    by_design = [PhaseRecord(**p) for p in entry.get("phases", []) if p["title"] in faults]
    attempts = [
        a for a in client_attempts(bundle / "events" / events) if not any(in_phase(a, phase) for phase in by_design)
    ]
    if faults:
        expected += f", outside the phases that drive a fault by design ({', '.join(sorted(faults))})"
    missing = _unmeasured(attempts, section.slos)
    if missing:
        names = ", ".join(name.upper() for name in missing)
        return CheckResult.judge(check_id, False, expected, f"the client measured no {names} in {section.scenario}")
    measured = goodput(attempts, section.slos)
    if not measured["attempts"]:
        return CheckResult.judge(check_id, False, expected, "no request was sent", metrics=measured)
    fraction, rate = measured["goodput_fraction"], measured.get("request_goodput")
    ok = fraction >= section.min_fraction and (
        section.min_request_goodput is None or (rate is not None and rate >= section.min_request_goodput)
    )
    shown_rate = f", {rate:.3g} req/s" if rate is not None else ""
    observed = f"{measured['good']:.0f} of {measured['attempts']:.0f} attempts ({fraction:.1%}){shown_rate}"
    return CheckResult.judge(check_id, ok, expected, observed, metrics=measured)
