"""What a user sets that the scenarios read, handed to each scenario as one value.

Each scenario builds its options from it (`Scenario.options_from`): the pytest entry that
runs it and the dry-run plan that prints it call the same function, so the plan shows the
options the run uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# The inputs every scenario may read, filled into the options-model fields named like them.
SHARED_INPUTS = ("seed", "client_headers")


@dataclass(frozen=True, slots=True)
class ScenarioInputs:
    seed: int = 0  # every replica's latency jitter
    client_headers: tuple[str, ...] = ()  # "NAME: VALUE" the load client sends (never stored)
    checks: tuple[str, ...] | None = None  # `--check` patterns (base.check_selection); None: every check
    # Each scenario's options model as the user set it, by scenario name (absent: its defaults).
    options: Mapping[str, Any] = field(default_factory=dict)
