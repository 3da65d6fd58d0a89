"""The scenarios dd-accept runs: the registry of their declarations, in the order `all`
runs them.

Each scenario is declared once, in its own module (`SCENARIO`, an `acceptance.declaration.
Scenario`: its options model, phases and run state); `dd-accept run`'s scenario names and
arguments, the pytest plugin's options and entry test, gate-file validation and the check
catalog are all read from this registry.
"""

from __future__ import annotations

from dd_accept.acceptance import capacity, drain, health, overload, streaming, telemetry, wire
from dd_accept.acceptance.declaration import Scenario

SCENARIOS: tuple[Scenario, ...] = tuple(
    module.SCENARIO for module in (overload, drain, health, streaming, telemetry, wire, capacity)
)
BY_NAME: dict[str, Scenario] = {scenario.name: scenario for scenario in SCENARIOS}
SCENARIO_NAMES: tuple[str, ...] = tuple(BY_NAME)
ALL_SCENARIOS: tuple[str, ...] = tuple(scenario.name for scenario in SCENARIOS if scenario.in_all)
ALONE = tuple(scenario.name for scenario in SCENARIOS if not scenario.in_all)
# Every option a user sets on some scenario, by its model: what the front ends walk.
SCENARIO_MODELS: tuple[type, ...] = tuple(dict.fromkeys(s.options for s in SCENARIOS))
