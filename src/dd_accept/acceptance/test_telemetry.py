"""Scenario `telemetry` as a pytest test: `pytest --pyargs dd_accept.acceptance.test_telemetry`."""

import pytest

from dd_accept.acceptance.telemetry import TelemetryOptions, run_telemetry


@pytest.mark.cluster
@pytest.mark.scenario("telemetry")
def test_telemetry(
    sut_allocation, run_dir, sut_profile, scenario_seed, client_headers, scenario_progress, record_scenario
):
    record_scenario(
        "telemetry",
        lambda: run_telemetry(
            sut_allocation,
            run_dir,
            sut_profile,
            TelemetryOptions(seed=scenario_seed, client_headers=client_headers),
            scenario_progress,
        ),
    )
