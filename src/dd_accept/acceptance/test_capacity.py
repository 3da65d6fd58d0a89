"""Scenario `capacity` as a pytest test: `pytest --pyargs dd_accept.acceptance.test_capacity`."""

import pytest

from dd_accept.acceptance.capacity import options_from, run_capacity


@pytest.mark.cluster
@pytest.mark.scenario("capacity")
def test_capacity(sut_allocation, run_dir, sut_profile, scenario_inputs, scenario_progress, record_scenario):
    options = options_from(scenario_inputs)
    record_scenario(
        "capacity",
        lambda: run_capacity(
            sut_allocation, run_dir, sut_profile, options, scenario_progress, checks=scenario_inputs.checks
        ),
    )
