"""Scenario `health` as a pytest test: `pytest --pyargs dd_accept.acceptance.test_health`."""

import pytest

from dd_accept.acceptance.health import options_from, run_health


@pytest.mark.cluster
@pytest.mark.scenario("health")
def test_health(sut_allocation, run_dir, sut_profile, scenario_inputs, scenario_progress, record_scenario):
    options = options_from(scenario_inputs)
    record_scenario(
        "health",
        lambda: run_health(
            sut_allocation, run_dir, sut_profile, options, scenario_progress, checks=scenario_inputs.checks
        ),
    )
