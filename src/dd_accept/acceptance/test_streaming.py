"""Scenario `streaming` as a pytest test: `pytest --pyargs dd_accept.acceptance.test_streaming`."""

import pytest

from dd_accept.acceptance.streaming import options_from, run_streaming


@pytest.mark.cluster
@pytest.mark.scenario("streaming")
def test_streaming(sut_allocation, run_dir, sut_profile, scenario_inputs, scenario_progress, record_scenario):
    options = options_from(scenario_inputs)
    record_scenario(
        "streaming",
        lambda: run_streaming(
            sut_allocation, run_dir, sut_profile, options, scenario_progress, checks=scenario_inputs.checks
        ),
    )
