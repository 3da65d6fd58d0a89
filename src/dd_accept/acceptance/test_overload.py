"""Scenario `overload` as a pytest test: `pytest --pyargs dd_accept.acceptance.test_overload`."""

import dataclasses

import pytest

from dd_accept.acceptance.overload import run_overload


@pytest.mark.cluster
@pytest.mark.scenario("overload")
def test_overload(
    sut_allocation,
    run_dir,
    sut_profile,
    overload_options,
    scenario_seed,
    scenario_progress,
    record_scenario,
    replica_backend,
):
    options = dataclasses.replace(overload_options, seed=scenario_seed)
    record_scenario(
        "overload",
        lambda: run_overload(sut_allocation, run_dir, sut_profile, options, scenario_progress, backend=replica_backend),
    )
