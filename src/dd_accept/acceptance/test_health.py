"""Scenario `health` as a pytest test: `pytest --pyargs dd_accept.acceptance.test_health`."""

import pytest

from dd_accept.acceptance.health import HealthOptions, run_health
from dd_accept.acceptance.results import ScenarioResult


@pytest.mark.cluster
@pytest.mark.scenario("health")
def test_health(sut_allocation, run_dir, sut_profile, scenario_seed, scenario_progress, record_scenario):
    try:
        result = run_health(sut_allocation, run_dir, sut_profile, HealthOptions(seed=scenario_seed), scenario_progress)
    except Exception as error:  # an environment failure: recorded, reported, never a silent pass
        result = ScenarioResult("health", error=f"{type(error).__name__}: {error}")
    record_scenario(result)
