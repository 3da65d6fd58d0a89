"""Every scenario as a pytest test, one parameter each: `pytest --pyargs
dd_accept.acceptance.test_scenarios -k drain` (or `dd-accept run drain`, which starts this).

The registry decides what runs; the plugin's fixtures hand each scenario its allocation, the
SUT's profile and what the user set, and `record_scenario` keeps its result for results.json.
"""

import pytest

from dd_accept.acceptance.scenarios import SCENARIOS


@pytest.mark.cluster
@pytest.mark.parametrize(
    "scenario", [pytest.param(s, marks=pytest.mark.scenario(s.name), id=s.name) for s in SCENARIOS]
)
def test_scenario(
    scenario, sut_allocation, run_dir, sut_profile, scenario_inputs, scenario_progress, record_scenario, replica_backend
):
    options = scenario.options_from(scenario_inputs)
    record_scenario(
        scenario.name,
        lambda: scenario.run(
            sut_allocation,
            run_dir,
            sut_profile,
            options,
            scenario_progress,
            checks=scenario_inputs.checks,
            backend=replica_backend,
        ),
    )
