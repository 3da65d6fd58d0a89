"""A scenario, declared once, in its own module: its name, what it is about, its options
model, its phases and the run state they share.

The registry (`acceptance.scenarios`) lists the declarations; `dd-accept run`'s arguments
and scenario names, the pytest plugin's options and its one entry test, gate files, the dry
run and the check catalog are all read from them. Adding a scenario option is one field in
the scenario's options model; adding a scenario is one module and one line in the registry.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from dd_accept.acceptance.ledger_checks import ledger_phase
from dd_accept.acceptance.phases import Phase, ScenarioRunner, scenario_runner
from dd_accept.acceptance.plan import BackendKind
from dd_accept.base.options import user_options
from dd_accept.base.scenario_inputs import SHARED_INPUTS, ScenarioInputs


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    # The options model: fields users set (`option(...)`) and fields the scenario fixes; the
    # run's shared inputs (base.scenario_inputs.SHARED_INPUTS) fill the fields named like them.
    options: type
    phases: tuple[Phase[Any], ...]  # the module's PHASES; the request ledger's judge goes before the teardown
    state: type  # the run state its phases share (acceptance.phases.ScenarioRun)
    options_title: str = ""  # the heading of its options in `run --help` (needed when it has any)
    # Compute nodes it takes down beyond its allocation's (a node it loses on purpose): a run
    # starts its cluster with one node per worker plus the most any chosen scenario needs.
    spare_nodes: int = 0
    # Whether `all` runs it. A scenario that measures the machine (capacity) needs it to
    # itself: run beside others, it would measure them.
    in_all: bool = True
    # The replicas it can run with: vLLM has no control plane, so only a scenario that steers
    # replicas by real load alone runs against it.
    backends: frozenset[BackendKind] = frozenset({"synthetic"})
    run: ScenarioRunner = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # every scenario ends by reconciling its request ledger (acceptance.ledger_checks)
        parts = tuple(dict.fromkeys(segment for phase in self.phases for segment in phase.segments))
        work = len(self.phases)
        while work and self.phases[work - 1].teardown:  # before the teardown, declared last where it runs
            work -= 1
        phases = (*self.phases[:work], ledger_phase(self.name, parts), *self.phases[work:])
        object.__setattr__(self, "phases", phases)
        object.__setattr__(self, "run", scenario_runner(self.name, self.phases, self.state))
        if user_options(self.options) and not self.options_title:
            raise ValueError(f"scenario {self.name}: options users set need an options_title for `run --help`")

    def options_from(self, inputs: ScenarioInputs) -> Any:
        """Its options as the user set them (its defaults where none were given), with the
        run's shared inputs in the fields it has for them."""
        given = inputs.options.get(self.name) or self.options()
        names = {f.name for f in dataclasses.fields(self.options)}
        shared = {name: getattr(inputs, name) for name in SHARED_INPUTS if name in names}
        return dataclasses.replace(given, **shared)
