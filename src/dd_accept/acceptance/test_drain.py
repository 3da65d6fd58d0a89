"""Scenario `drain` as a pytest test: `pytest --pyargs dd_accept.acceptance.test_drain`."""

import pytest

from dd_accept.acceptance.drain import DrainOptions, run_drain
from dd_accept.acceptance.results import ScenarioResult


@pytest.mark.cluster
@pytest.mark.scenario("drain")
def test_drain(sut_allocation, run_dir, sut_profile, scenario_seed, scenario_progress, record_scenario):
    try:
        result = run_drain(sut_allocation, run_dir, sut_profile, DrainOptions(seed=scenario_seed), scenario_progress)
    except Exception as error:  # an environment failure: recorded, reported, never a silent pass
        result = ScenarioResult("drain", error=f"{type(error).__name__}: {error}")
    record_scenario(result)
