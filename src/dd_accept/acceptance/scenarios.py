"""The scenarios dd-accept runs, declared once.

`dd-accept run`'s scenario names, the pytest module each runs as, gate-file validation and
the check catalog are all read from this declaration (and from the checks that register
themselves in `checks_module`), so adding a scenario is one entry here plus its code.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    summary: str
    # Compute nodes it takes down beyond its allocation's (a node it loses on purpose): a run
    # starts its cluster with one node per worker plus the most any chosen scenario needs.
    spare_nodes: int = 0
    # Whether `all` runs it. A scenario that measures the machine (capacity) needs it to
    # itself: run beside others, it would measure them.
    in_all: bool = True

    @property
    def test_module(self) -> str:
        """The pytest module that runs it (the runner passes it with --pyargs)."""
        return f"dd_accept.acceptance.test_{self.name}"

    @property
    def phases_module(self) -> str:
        """Where its phases are declared (`PHASES`): what the run and the dry-run plan walk."""
        return f"dd_accept.acceptance.{self.name}"

    @property
    def checks_module(self) -> str:
        """Where its checks are written, as pure functions that register themselves."""
        return f"dd_accept.acceptance.{self.name}_checks"


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("overload", "partial and total overload through the SUT's proxy, admission and client"),
    Scenario("drain", "graceful drain with real srun and scancel, and the SUT's own cleanup"),
    Scenario("health", "backend and node loss, unresponsive backends: detected and failing the attempt", spare_nodes=1),
    Scenario("streaming", "streams passed through whole, unbuffered, with honest connection accounting"),
    Scenario("telemetry", "the proxy's request records, attempt and retry counters against what replicas saw"),
    Scenario(
        "capacity",
        "rising load through the proxy until its SLO breaks: the knee, CPU per chunk, headroom",
        in_all=False,
    ),
)
SCENARIO_NAMES: tuple[str, ...] = tuple(scenario.name for scenario in SCENARIOS)
ALL_SCENARIOS: tuple[str, ...] = tuple(scenario.name for scenario in SCENARIOS if scenario.in_all)
ALONE = tuple(scenario.name for scenario in SCENARIOS if not scenario.in_all)
