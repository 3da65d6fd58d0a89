"""What a run is asked to do, validated once: the scenarios, the SUT, each scenario's options
and the run's own (where, with which replicas, the drain timing), and what every scenario
reads (seed, client headers, `--check`).

The CLI and gate files build a request; the runner hands it to its pytest child as one JSON
document (`to_json`), which the pytest plugin reads back (`from_json`) instead of parsing
options again. The plugin builds the same request from its `--dd-*` options under plain
pytest. Every model travels as the options a user set (`base.options.raw_values`) and is
built again through `build`, so what arrives passed the same checks as what was sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import Field, dataclass, field
from pathlib import Path
from typing import Any

from dd_accept.acceptance.catalog import JUDGED
from dd_accept.acceptance.scenarios import ALL_SCENARIOS, ALONE, BY_NAME, SCENARIO_NAMES
from dd_accept.base import check_selection
from dd_accept.base.errors import UsageError
from dd_accept.base.options import build, flag, option, raw_values
from dd_accept.base.scenario_inputs import ScenarioInputs
from dd_accept.deployment.backends.vllm import BackendOptions
from dd_accept.node.loadclient.workload import parse_header
from dd_accept.slurm_docker.cluster_options import ClusterOptions
from dd_accept.sut.profile import DrainTiming

REQUEST_KIND = "dd-accept/request/v1"  # runner → pytest child only: never published, never in a bundle


@dataclass(frozen=True, slots=True)
class GeneralOptions:
    """What every scenario of a run reads, and what the run does with its verdict and cluster:
    `dd-accept run` and the pytest plugin both derive their flags from here, gate files the
    seed."""

    seed: int = option(0, "seed of the replicas' latency jitter", minimum=0)
    client_headers: tuple[str, ...] = option(
        (),
        "extra header the streaming scenario's client sends, NAME: VALUE (never stored in evidence)",
        flag="client-header",
        metavar="'NAME: VALUE'",
        in_gate=False,  # a header may carry a secret, which a gate file kept in a repository must not
    )
    allow_unsupported: bool = option(False, "checks the SUT declares unsupported pass", in_gate=False)
    keep_cluster: bool = option(False, "leave the cluster running afterwards", in_gate=False)

    def __post_init__(self) -> None:
        for header in self.client_headers:
            try:
                parse_header(header)
            except ValueError:
                raise ValueError(
                    "--client-header must be NAME: VALUE (the value is not shown: it may be a secret)"
                ) from None


@dataclass(frozen=True, slots=True)
class RunnerOptions:
    """How `dd-accept run` and a gate file spread several scenarios over the cluster. Plain
    pytest spreads its tests with its own `-n`, so the plugin takes none of these."""

    parallel: int = option(2, "parallel allocations for several scenarios", minimum=1)


# The run's own option models (not a scenario's), by the request field that holds each.
RUN_MODELS: dict[str, type] = {
    "drain": DrainTiming,
    "cluster": ClusterOptions,
    "backend": BackendOptions,
    "general": GeneralOptions,
}


@dataclass
class RunRequest:
    scenario: str  # one scenario, several joined by commas, or `all`
    sut: str
    profile: str | None = None
    out: Path | None = None
    # Each scenario's options model as the user set it, by scenario name (absent: its defaults).
    options: dict[str, Any] = field(default_factory=dict)
    drain: DrainTiming = field(default_factory=DrainTiming)  # replaces the profile's drain window/allowance
    cluster: ClusterOptions = field(default_factory=ClusterOptions)  # docker, or this machine's Slurm cluster
    backend: BackendOptions = field(default_factory=BackendOptions)  # synthetic, or vLLM (its scenarios only)
    general: GeneralOptions = field(default_factory=GeneralOptions)  # seed, client headers, verdict, cluster kept
    sign_key: Path | None = None
    parallel: int = field(default_factory=lambda: RunnerOptions().parallel)
    checks: tuple[str, ...] | None = None  # `--check` patterns (base.check_selection); None: every check

    def scenarios(self) -> list[str]:
        """`all`, one scenario, or several joined by commas (`overload,streaming`), those a
        `--check` pattern chooses a check of; refused (UsageError) before anything starts."""
        names = list(ALL_SCENARIOS) if self.scenario == "all" else [name.strip() for name in self.scenario.split(",")]
        for name in names:
            if name not in BY_NAME:
                raise UsageError(f"unknown scenario {name!r}; valid: {', '.join((*SCENARIO_NAMES, 'all'))}")
        if self.backend.backend != "synthetic":
            unable = [name for name in names if self.backend.backend not in BY_NAME[name].backends]
            if unable:
                able = ", ".join(n for n in SCENARIO_NAMES if self.backend.backend in BY_NAME[n].backends)
                raise UsageError(
                    f"--backend {self.backend.backend} runs the {able} scenario only, got {self.scenario!r}: the other "
                    "scenarios steer replicas through the synthetic replica's control plane, which vLLM does not have"
                )
        names = self._with_chosen_checks(list(dict.fromkeys(names)))
        alone = [name for name in names if name in ALONE]
        if alone and len(names) > 1 and self.parallel > 1:
            raise UsageError(
                f"{alone[0]} measures the machine, so it runs alone: run it by itself, or with --parallel 1"
            )
        for name in names:  # an option only one scenario uses never fails another one
            check = getattr(self.options.get(name), "check_runnable", None)
            if check is not None:
                try:
                    check()
                except ValueError as error:
                    raise UsageError(str(error)) from None
        return names

    def _with_chosen_checks(self, names: list[str]) -> list[str]:
        """The scenarios a `--check` pattern chooses a check of; a pattern that chooses none
        of the named scenarios' checks is a usage error, never a run that judges nothing."""
        if self.checks is None:
            return names
        judged = [check_id for name in names for check_id in JUDGED[name]]
        missing = check_selection.unmatched(self.checks, judged)
        if missing:
            raise UsageError(
                f"--check {missing[0]!r} names none of the checks of {', '.join(names)} "
                "(`dd-accept checks` lists them; endpoint_starts is judged in every run)"
            )
        return [name for name in names if check_selection.chosen(self.checks, JUDGED[name])]

    def inputs(self, client_headers: tuple[str, ...] | None = None) -> ScenarioInputs:
        """What the scenarios read (`client_headers`: shown instead of the real ones, in a plan)."""
        headers = self.general.client_headers if client_headers is None else client_headers
        return ScenarioInputs(self.general.seed, headers, self.checks, dict(self.options))

    def to_json(self) -> str:
        """The request as the runner hands it to its pytest child (a file only it reads: it
        carries the client headers, which may be secrets)."""
        document = {
            "kind": REQUEST_KIND,
            "scenario": self.scenario,
            "sut": self.sut,
            "profile": self.profile,
            "options": {name: raw_values(options) for name, options in self.options.items()},
            **{name: raw_values(getattr(self, name)) for name in RUN_MODELS},
            "parallel": self.parallel,
            "checks": None if self.checks is None else list(self.checks),
        }
        return json.dumps(document, indent=2)

    @classmethod
    def from_json(cls, text: str) -> RunRequest:
        """The request a runner wrote, each model built again (and so checked again)."""
        document = json.loads(text)
        if document.get("kind") != REQUEST_KIND:
            raise UsageError(f"not a {REQUEST_KIND} document")
        options = {name: build(BY_NAME[name].options, raw) for name, raw in document["options"].items()}
        run_models = {name: build(model, document[name]) for name, model in RUN_MODELS.items()}
        checks = document["checks"]
        return cls(
            scenario=document["scenario"],
            sut=document["sut"],
            profile=document["profile"],
            options=options,
            **run_models,
            parallel=document["parallel"],
            checks=None if checks is None else tuple(checks),
        )


def scenario_options(
    given: Callable[[type], Mapping[str, Any]], names: Callable[[Field[Any]], str] = flag
) -> dict[str, Any]:
    """Each scenario's options model from what a front end holds (`given(model)`: the raw
    values set, by field name), only for the scenarios a value was given for; a bad value is
    a UsageError spelled as `names` spells the option."""
    built = {}
    for scenario in BY_NAME.values():
        raw = given(scenario.options)
        if raw:
            try:
                built[scenario.name] = build(scenario.options, raw, names)
            except ValueError as error:
                raise UsageError(str(error)) from None
    return built
