"""Gate files: what a release gate runs and what it demands, validated before anything starts.

A gate file is the contract a release job keeps in its repository: scenarios, their options,
the SUT(s), thresholds, which checks may be `unsupported`, and where the cluster is. Every
name in it is checked against what dd-accept knows, so a typo is exit 2 with the key named,
never a gate that silently checks less.
"""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass
from pathlib import Path
from typing import Any

from dd_accept.acceptance.catalog import CHECKS
from dd_accept.errors import UsageError
from dd_accept.fixtures.sut.spec import DEFAULT_SUT
from dd_accept.scenario_options import user_options
from dd_accept.toml_tables import build_table, parse_toml

CLUSTER_MODES = ("docker", "existing")


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


def _scenario_options(self: Any) -> dict[str, int]:
    """The overload options, as `dd-accept run` takes them (seed and parallel go separately)."""
    return {f.name: getattr(self, f.name) for f in user_options()}


# [options]: the scenarios' user options (derived from their one definition), seed, parallel.
GateOptions = make_dataclass(
    "GateOptions",
    [(f.name, int, field(default=f.default)) for f in user_options()] + [("seed", int, 0), ("parallel", int, 2)],
    frozen=True,
    slots=True,
    namespace={"scenario_options": _scenario_options},
)


@dataclass(frozen=True, slots=True)
class Thresholds:
    max_error_rate: float | None = None  # client-visible errors / requests where none are intended
    max_ttft_p99_s: float | None = None  # time to first token through the proxy, p99
    drain_window_s: float | None = None  # replaces the profile's drain window
    drain_allowance_s: float | None = None  # replaces the profile's drain allowance


@dataclass(frozen=True, slots=True)
class ClusterSection:
    mode: str = "docker"
    run_dir: str | None = None
    partition: str | None = None
    account: str | None = None
    time: str | None = None
    gres: str | None = None
    srun_args: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class BackendSection:
    kind: str = "synthetic"  # or "vllm" (overload only)
    model: str | None = None
    gpus_per_replica: int = 1
    vllm_args: tuple[str, ...] = ()
    vllm_command: str | None = None

    def vllm(self):
        """The `VllmBackend` this section describes, or None for synthetic replicas."""
        import shlex

        from dd_accept.fixtures.backends.vllm import VllmBackend

        if self.kind != "vllm":
            return None
        prefix = tuple(shlex.split(self.vllm_command)) if self.vllm_command else ()
        assert self.model is not None  # checked when the file is read
        return VllmBackend(self.model, self.gpus_per_replica, self.vllm_args, prefix)


@dataclass(frozen=True, slots=True)
class GateFile:
    gate: GateSection
    options: GateOptions = field(default_factory=GateOptions)
    thresholds: Thresholds = field(default_factory=Thresholds)
    cluster: ClusterSection = field(default_factory=ClusterSection)
    backend: BackendSection = field(default_factory=BackendSection)

    def scenarios(self) -> list[str]:
        return list(CHECKS) if "all" in self.gate.scenarios else list(self.gate.scenarios)

    def drain_overrides(self) -> dict[str, float]:
        limits = self.thresholds
        overrides = {"window_seconds": limits.drain_window_s, "allowance_seconds": limits.drain_allowance_s}
        return {key: value for key, value in overrides.items() if value is not None}


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
    for check in gate.gate.allow_unsupported:
        owner = next((scenario for scenario, checks in CHECKS.items() if check in checks), None)
        if owner is None:
            raise _fail(source, f"gate.allow_unsupported: unknown check {check!r}")
        if owner not in chosen:
            raise _fail(source, f"gate.allow_unsupported: {check} is a check of {owner}, which the gate does not run")
    limits = gate.thresholds
    needs = (
        ("max_error_rate", limits.max_error_rate, "overload"),
        ("max_ttft_p99_s", limits.max_ttft_p99_s, "streaming"),
        ("drain_window_s", limits.drain_window_s, "drain"),
        ("drain_allowance_s", limits.drain_allowance_s, "drain"),
    )
    for key, value, scenario in needs:
        if value is None:
            continue
        if value < 0 or (key != "max_error_rate" and value == 0):
            raise _fail(source, f"thresholds.{key} must be positive, got {value:g}")
        if scenario not in chosen:
            raise _fail(source, f"thresholds.{key} is measured by scenario {scenario}, which the gate does not run")
    if limits.max_error_rate is not None and limits.max_error_rate > 1:
        raise _fail(source, f"thresholds.max_error_rate is a fraction from 0 to 1, got {limits.max_error_rate:g}")
    window, allowance = limits.drain_window_s, limits.drain_allowance_s
    if window is not None and allowance is not None and allowance < window:
        raise _fail(source, "thresholds.drain_allowance_s must be at least drain_window_s")
    options = gate.options
    try:
        from dd_accept.acceptance.overload import OverloadOptions

        OverloadOptions(**options.scenario_options())
    except ValueError as error:
        raise _fail(source, f"options: {error}".replace("--", "options.").replace("-", "_")) from None
    if options.seed < 0 or options.parallel < 1:
        raise _fail(source, "options.seed must be >= 0 and options.parallel >= 1")
    if gate.cluster.mode not in CLUSTER_MODES:
        raise _fail(source, f"cluster.mode must be one of {', '.join(CLUSTER_MODES)}, got {gate.cluster.mode!r}")
    if gate.cluster.mode == "existing" and not gate.cluster.run_dir:
        raise _fail(source, "cluster.mode = existing needs cluster.run_dir (a directory every node shares)")
    backend = gate.backend
    if backend.kind not in ("synthetic", "vllm"):
        raise _fail(source, f"backend.kind must be synthetic or vllm, got {backend.kind!r}")
    if backend.kind == "vllm":
        if not backend.model:
            raise _fail(source, "backend.kind = vllm needs backend.model")
        if chosen != ["overload"]:
            raise _fail(
                source, 'backend.kind = vllm runs the overload scenario only; set gate.scenarios = ["overload"]'
            )
    if backend.gpus_per_replica < 0:
        raise _fail(source, "backend.gpus_per_replica must be >= 0")
    return gate


def parse_gate(text: str, source: str) -> GateFile:
    gate = build_table(GateFile, parse_toml(text, "gate file", source), "", "gate file", source)
    return _validate(gate, source)


def load_gate(path: Path) -> GateFile:
    try:
        text = path.read_text()
    except OSError:
        raise UsageError(f"--config {path.name}: cannot read the gate file") from None
    return parse_gate(text, path.name)
