"""Gate files: what a release gate runs and what it demands, validated before anything starts.

A gate file is the contract a release job keeps in its repository: scenarios, their options,
the SUT(s), thresholds, which checks may be `unsupported`, and where the cluster is. Every
name in it is checked against what dd-accept knows, so a typo is exit 2 with the key named,
never a gate that silently checks less.
"""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass, replace
from pathlib import Path

from dd_accept.acceptance.catalog import CHECKS
from dd_accept.acceptance.request import GeneralOptions, RunnerOptions, scenario_options
from dd_accept.acceptance.scenarios import ALL_SCENARIOS, SCENARIO_MODELS
from dd_accept.base.errors import UsageError
from dd_accept.base.noisy_comparison import FEWEST_ROUNDS
from dd_accept.base.options import from_gate, gate_fields, gate_key, gate_values, user_options
from dd_accept.base.toml_tables import build_table, parse_toml
from dd_accept.base.user_files import read_user_text
from dd_accept.deployment.backends.vllm import BackendOptions
from dd_accept.harness.gate_metrics import GoodputSection, MetricDemand, parse_metric_demands
from dd_accept.slurm_docker.cluster_options import ClusterOptions
from dd_accept.sut.profile import DrainTiming
from dd_accept.sut.spec import DEFAULT_SUT


@dataclass(frozen=True, slots=True)
class GateSection:
    name: str
    scenarios: tuple[str, ...]
    # One SUT is judged; with two, the first is the baseline and the second the candidate.
    suts: tuple[str, ...] = (DEFAULT_SUT,)
    profile: str | None = None
    out: str | None = None
    allow_unsupported: tuple[str, ...] = ()
    sign_key: str | None = None
    # With two SUTs: how many times each runs the capacity scenario, in turn (baseline,
    # candidate, candidate, baseline, ...), so its numbers are judged with the statistics of
    # noisy benchmarks (base.noisy_comparison) instead of one run's tolerance. 1: one run each.
    capacity_rounds: int = 1


# Each round is a capacity run of each SUT (about a minute and a half on 2 cores); the exact
# rank test enumerates C(2n, n) splits, 3,432 at seven.
MOST_ROUNDS = 7

# Each section's keys are derived from the option models (base.options), so a gate file
# accepts exactly what `dd-accept run` accepts, under the same bounds.
# [options]: every scenario's options (found through the scenario registry), the run's general
# ones a gate file may set (the seed), and the runner's (parallel).
GateOptions = make_dataclass(
    "GateOptions",
    [*(key for model in (*SCENARIO_MODELS, GeneralOptions, RunnerOptions) for key in gate_fields(model))],
    frozen=True,
    slots=True,
)
# [thresholds]: what the gate demands, plus the drain timing it replaces.
Thresholds = make_dataclass(
    "Thresholds",
    [
        ("max_error_rate", float | None, None),  # client-visible errors / requests where none are intended
        # With two SUTs: how much worse the candidate's capacity numbers may be than the
        # baseline's, a fraction (default: each metric's own, base.regressions).
        ("capacity_tolerance", float | None, None),
        *gate_fields(DrainTiming),
    ],
    frozen=True,
    slots=True,
)
# [cluster]: where to run. `slurm` may name several releases (a matrix): the gate runs every
# scenario on each, so it holds a list (one release, written as a string, is a list of one).
ClusterSection = make_dataclass(
    "ClusterSection",
    [
        ("slurm", tuple[str, ...], field(default_factory=tuple)) if name == "slurm" else (name, hint, default)
        for name, hint, default in gate_fields(ClusterOptions)
    ],
    frozen=True,
    slots=True,
)
BackendSection = make_dataclass("BackendSection", gate_fields(BackendOptions), frozen=True, slots=True)


@dataclass(frozen=True, slots=True)
class GateFile:
    gate: GateSection
    options: GateOptions = field(default_factory=GateOptions)
    thresholds: Thresholds = field(default_factory=Thresholds)
    cluster: ClusterSection = field(default_factory=ClusterSection)
    backend: BackendSection = field(default_factory=BackendSection)
    goodput: GoodputSection | None = None
    metrics: tuple[MetricDemand, ...] = ()  # [metrics.SCENARIO] METRIC = {...}: parsed apart (gate_metrics)

    def scenarios(self) -> list[str]:
        return list(ALL_SCENARIOS) if "all" in self.gate.scenarios else list(self.gate.scenarios)

    # The option models the run takes, built from the sections (validated when the file is read).
    def scenario_options(self) -> dict[str, object]:
        """Each scenario's options model the [options] section sets a key of, by scenario."""
        return scenario_options(lambda model: gate_values(model, self.options), lambda f: f"options.{gate_key(f)}")

    def general(self) -> GeneralOptions:
        return from_gate(GeneralOptions, self.options, "options")

    def runner(self) -> RunnerOptions:
        return from_gate(RunnerOptions, self.options, "options")

    def drain(self) -> DrainTiming:
        return from_gate(DrainTiming, self.thresholds, "thresholds")

    def releases(self) -> list[str | None]:
        """The Slurm releases the gate runs on, in the file's order (None: the default one)."""
        return list(self.cluster.slurm) or [None]

    def cluster_options(self, release: str | None = None) -> ClusterOptions:
        """Where to run; in a matrix, on `release` (by default the first of the file's)."""
        chosen = release if release is not None else self.releases()[0]
        return from_gate(ClusterOptions, replace(self.cluster, slurm=chosen), "cluster")

    def backend_options(self) -> BackendOptions:
        return from_gate(BackendOptions, self.backend, "backend")


def _fail(source: str, message: str) -> UsageError:
    return UsageError(f"gate file {source}: {message}")


def _validate(gate: GateFile, source: str) -> GateFile:
    known = (*CHECKS, "all")
    if not gate.gate.scenarios:
        raise _fail(source, "gate.scenarios is empty; name at least one of " + ", ".join(known))
    for name in gate.gate.scenarios:
        if name not in known:
            raise _fail(source, f"gate.scenarios: unknown scenario {name!r} (known: {', '.join(known)})")
    if not 1 <= len(gate.gate.suts) <= 2:
        raise _fail(source, f"gate.suts must name one SUT, or two (baseline, candidate); got {len(gate.gate.suts)}")
    chosen = gate.scenarios()
    if not 1 <= gate.gate.capacity_rounds <= MOST_ROUNDS:
        raise _fail(source, f"gate.capacity_rounds is from 1 to {MOST_ROUNDS}, got {gate.gate.capacity_rounds}")
    if gate.gate.capacity_rounds > 1 and "capacity" not in chosen:
        raise _fail(source, "gate.capacity_rounds repeats scenario capacity, which the gate does not run")
    if gate.gate.capacity_rounds > 1 and gate.thresholds.capacity_tolerance is not None:
        raise _fail(source, "thresholds.capacity_tolerance is the single comparison's; with gate.capacity_rounds "
                    "the rounds' statistics judge the capacity numbers: set one or the other")  # fmt: skip
    if 1 < gate.gate.capacity_rounds < FEWEST_ROUNDS:
        raise _fail(source, f"gate.capacity_rounds: {FEWEST_ROUNDS} rounds or more are needed for the rank test "
                    "to say anything at 5% (1 keeps one run each)")  # fmt: skip
    for check in gate.gate.allow_unsupported:
        owner = next((scenario for scenario, checks in CHECKS.items() if check in checks), None)
        if owner is None:
            raise _fail(source, f"gate.allow_unsupported: unknown check {check!r}")
        if owner not in chosen:
            raise _fail(source, f"gate.allow_unsupported: {check} is a check of {owner}, which the gate does not run")
    limits = gate.thresholds
    needs = (
        ("max_error_rate", limits.max_error_rate, "overload"),
        *((gate_key(f), getattr(limits, gate_key(f)), "drain") for f in user_options(DrainTiming)),
    )
    for key, value, scenario in needs:
        if value is None:
            continue
        if value < 0 or (key != "max_error_rate" and value == 0):
            raise _fail(source, f"thresholds.{key} must be positive, got {value:g}")
        if scenario not in chosen:
            raise _fail(source, f"thresholds.{key} is measured by scenario {scenario}, which the gate does not run")
    if limits.capacity_tolerance is not None:
        if not 0 < limits.capacity_tolerance < 1:
            raise _fail(source, f"thresholds.capacity_tolerance is a fraction above 0 and below 1, got "
                        f"{limits.capacity_tolerance:g}")  # fmt: skip
        if "capacity" not in chosen:
            raise _fail(
                source, "thresholds.capacity_tolerance is judged on scenario capacity, which the gate does not run"
            )
    if limits.max_error_rate is not None and limits.max_error_rate > 1:
        raise _fail(source, f"thresholds.max_error_rate is a fraction from 0 to 1, got {limits.max_error_rate:g}")
    try:
        gate.scenario_options()
        gate.general()
        gate.runner()
        gate.drain()
        gate.backend_options()
        for release in gate.releases():
            gate.cluster_options(release)
    except (ValueError, UsageError) as error:
        raise _fail(source, str(error)) from None
    if len(set(gate.cluster.slurm)) != len(gate.cluster.slurm):
        raise _fail(source, f"cluster.slurm names a release twice: {', '.join(gate.cluster.slurm)}")
    if gate.cluster.mode == "existing" and not gate.cluster.run_dir:
        raise _fail(source, "cluster.mode = existing needs cluster.run_dir (a directory every node shares)")
    for demand in gate.metrics:
        if demand.scenario not in chosen:
            raise _fail(source, f"metrics.{demand.scenario}: the gate does not run scenario {demand.scenario!r}")
    if gate.goodput is not None:
        if gate.goodput.scenario not in chosen:
            raise _fail(source, f"goodput.scenario: the gate does not run scenario {gate.goodput.scenario!r}")
        if not gate.goodput.slos:
            raise _fail(source, "goodput needs at least one SLO: ttft_ms, tpot_ms or e2el_ms")
        if not 0 <= gate.goodput.min_fraction <= 1 or any(v <= 0 for v in gate.goodput.slos.values()):
            raise _fail(source, "goodput: SLOs must be positive and min_fraction from 0 to 1")
        if gate.goodput.min_request_goodput is not None and gate.goodput.min_request_goodput <= 0:
            raise _fail(source, "goodput.min_request_goodput must be positive (requests per second)")
    if gate.backend.kind == "vllm" and chosen != ["overload"]:
        raise _fail(source, 'backend.kind = vllm runs the overload scenario only; set gate.scenarios = ["overload"]')
    return gate


# The one way a gate bounds TTFT p99: vLLM's percentile of the serving metrics, in ms.
TTFT_P99_DEMAND = "[metrics.streaming] p99_ttft_ms = { max = MS }"


def parse_gate(text: str, source: str) -> GateFile:
    data = parse_toml(text, "gate file", source)
    cluster = data.get("cluster")
    if isinstance(cluster, dict) and isinstance(cluster.get("slurm"), str):
        cluster["slurm"] = [cluster["slurm"]]  # one release is a matrix of one
    thresholds = data.get("thresholds")
    if isinstance(thresholds, dict) and "max_ttft_p99_s" in thresholds:  # one TTFT p99 knob, vLLM's, in ms
        raise _fail(source, f"thresholds.max_ttft_p99_s is replaced by {TTFT_P99_DEMAND}")
    metrics = data.pop("metrics", {})
    gate = build_table(GateFile, data, "", "gate file", source)
    gate = replace(gate, metrics=parse_metric_demands(metrics, source))
    return _validate(gate, source)


def load_gate(path: Path) -> GateFile:
    return parse_gate(read_user_text(path, "--config"), path.name)
