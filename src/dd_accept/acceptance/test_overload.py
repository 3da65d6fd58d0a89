"""Scenario `overload` as a pytest test: `pytest --pyargs dd_accept.acceptance.test_overload`."""

import pytest

from dd_accept.acceptance.overload import options_from, run_overload


@pytest.mark.cluster
@pytest.mark.scenario("overload")
def test_overload(
    sut_allocation, run_dir, sut_profile, scenario_inputs, scenario_progress, record_scenario, replica_backend
):
    options = options_from(scenario_inputs)
    record_scenario(
        "overload",
        lambda: run_overload(
            sut_allocation,
            run_dir,
            sut_profile,
            options,
            scenario_progress,
            checks=scenario_inputs.checks,
            backend=replica_backend,
        ),
    )
