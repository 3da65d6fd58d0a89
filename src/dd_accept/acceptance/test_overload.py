"""Scenario `overload` as a pytest test: `pytest --pyargs dd_accept.acceptance.test_overload`."""

import dataclasses

import pytest

from dd_accept.acceptance.overload import run_overload
from dd_accept.acceptance.results import ScenarioResult


@pytest.mark.cluster
@pytest.mark.scenario("overload")
def test_overload(
    sut_allocation, run_dir, sut_profile, overload_options, scenario_seed, scenario_progress, record_scenario
):
    options = dataclasses.replace(overload_options, seed=scenario_seed)
    try:
        result = run_overload(sut_allocation, run_dir, sut_profile, options, scenario_progress)
    except Exception as error:  # an environment failure: recorded, reported, never a silent pass
        result = ScenarioResult("overload", error=f"{type(error).__name__}: {error}")
    record_scenario(result)
