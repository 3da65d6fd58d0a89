"""Scenario `telemetry` as a pytest test: `pytest --pyargs dd_accept.acceptance.test_telemetry`."""

import pytest

from dd_accept.acceptance.telemetry import options_from, run_telemetry


@pytest.mark.cluster
@pytest.mark.scenario("telemetry")
def test_telemetry(sut_allocation, run_dir, sut_profile, scenario_inputs, scenario_progress, record_scenario):
    options = options_from(scenario_inputs)
    record_scenario(
        "telemetry",
        lambda: run_telemetry(
            sut_allocation, run_dir, sut_profile, options, scenario_progress, checks=scenario_inputs.checks
        ),
    )
