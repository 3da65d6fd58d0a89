"""Scenario `streaming` as a pytest test: `pytest --pyargs dd_accept.acceptance.test_streaming`."""

import pytest

from dd_accept.acceptance.results import ScenarioResult
from dd_accept.acceptance.streaming import StreamingOptions, run_streaming


@pytest.mark.cluster
@pytest.mark.scenario("streaming")
def test_streaming(
    sut_allocation, run_dir, sut_profile, scenario_seed, client_headers, scenario_progress, record_scenario
):
    try:
        result = run_streaming(
            sut_allocation,
            run_dir,
            sut_profile,
            StreamingOptions(seed=scenario_seed, client_headers=client_headers),
            scenario_progress,
        )
    except Exception as error:  # an environment failure: recorded, reported, never a silent pass
        result = ScenarioResult("streaming", error=f"{type(error).__name__}: {error}")
    record_scenario(result)
