"""What a user sets that the scenarios read, handed to each scenario as one value.

Each scenario builds its own options from it (`options_from` in its module): the pytest
entry that runs it and the dry-run plan that prints it call the same function, so the plan
shows the options the run uses, and a scenario's options are built in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dd_accept.base.options import CapacityOptions, OverloadOptions


@dataclass(frozen=True, slots=True)
class ScenarioInputs:
    seed: int = 0  # every replica's latency jitter
    client_headers: tuple[str, ...] = ()  # "NAME: VALUE" the load client sends (never stored)
    overload: OverloadOptions = field(default_factory=OverloadOptions)
    capacity: CapacityOptions = field(default_factory=CapacityOptions)
    checks: tuple[str, ...] | None = None  # `--check` patterns (base.check_selection); None: every check
