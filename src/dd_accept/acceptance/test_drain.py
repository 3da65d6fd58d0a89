"""Scenario `drain` as a pytest test: `pytest --pyargs dd_accept.acceptance.test_drain`."""

import pytest

from dd_accept.acceptance.drain import options_from, run_drain


@pytest.mark.cluster
@pytest.mark.scenario("drain")
def test_drain(sut_allocation, run_dir, sut_profile, scenario_inputs, scenario_progress, record_scenario):
    options = options_from(scenario_inputs)
    record_scenario(
        "drain",
        lambda: run_drain(
            sut_allocation, run_dir, sut_profile, options, scenario_progress, checks=scenario_inputs.checks
        ),
    )
