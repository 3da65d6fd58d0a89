"""Scenario `streaming` as a pytest test: `pytest --pyargs dd_accept.acceptance.test_streaming`."""

import pytest

from dd_accept.acceptance.streaming import StreamingOptions, run_streaming


@pytest.mark.cluster
@pytest.mark.scenario("streaming")
def test_streaming(
    sut_allocation, run_dir, sut_profile, scenario_seed, client_headers, scenario_progress, record_scenario
):
    record_scenario(
        "streaming",
        lambda: run_streaming(
            sut_allocation,
            run_dir,
            sut_profile,
            StreamingOptions(seed=scenario_seed, client_headers=client_headers),
            scenario_progress,
        ),
    )
