"""Scenario `capacity` as a pytest test: `pytest --pyargs dd_accept.acceptance.test_capacity`."""

import pytest

from dd_accept.acceptance.capacity import CapacitySettings, run_capacity


@pytest.mark.cluster
@pytest.mark.scenario("capacity")
def test_capacity(
    sut_allocation, run_dir, sut_profile, capacity_options, scenario_seed, scenario_progress, record_scenario
):
    record_scenario(
        "capacity",
        lambda: run_capacity(
            sut_allocation,
            run_dir,
            sut_profile,
            CapacitySettings(load=capacity_options, seed=scenario_seed),
            scenario_progress,
        ),
    )
