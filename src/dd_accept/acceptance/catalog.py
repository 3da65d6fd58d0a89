"""Every check id dd-accept can report, by scenario: read from the checks themselves.

Gate files name checks (which may be `unsupported`, which thresholds apply); a typo there
must be a usage error, not a silently ignored line, so names are validated against this.
The catalog is not kept by hand: each scenario's module imports its checks, which register
their ids (`registry.check`), and every scenario adds `endpoint_starts` (a proxy that never
serves fails it, see `deployment.start_proxy`).
"""

from __future__ import annotations

from dd_accept.acceptance.registry import REGISTRY
from dd_accept.acceptance.scenarios import SCENARIOS
from dd_accept.deployment import ENDPOINT_STARTS

# What each scenario's phases judge (`--check` chooses among these): its registered checks.
JUDGED: dict[str, tuple[str, ...]] = {
    scenario.name: tuple(check_id for check_id, check in REGISTRY.items() if check.scenario == scenario.name)
    for scenario in SCENARIOS
}
# Every id a scenario can report: also `endpoint_starts`, which fails whenever its proxy never
# serves (no phase judges it; it is why the others could not be).
CHECKS: dict[str, tuple[str, ...]] = {name: (f"{name}.{ENDPOINT_STARTS}", *judged) for name, judged in JUDGED.items()}
ALL_CHECKS = frozenset(check for checks in CHECKS.values() for check in checks)

# What each check judges, in one line (`dd-accept checks`): the first sentence of its rule.
ENDPOINT_STARTS_SUMMARY = (
    "The SUT's proxy starts as a Slurm step and serves: a proxy that never serves fails here, "
    "never as could not be judged."
)
SUMMARIES: dict[str, str] = {
    check_id: ENDPOINT_STARTS_SUMMARY if check_id.endswith(f".{ENDPOINT_STARTS}") else REGISTRY[check_id].summary
    for checks in CHECKS.values()
    for check_id in checks
}
