"""The load client's workload travels as command-line flags: what is written is what is read."""

import pytest

from dd_accept.node.loadclient.__main__ import build_parser, workload_from_args
from dd_accept.node.loadclient.workload import Workload, parse_header


def test_to_argv_is_read_back_as_the_same_workload():
    workload = Workload(
        endpoint="http://127.0.0.1:9000",
        records=7,
        concurrency=3,
        max_tokens=5,
        prompt_chars=9,
        stream=False,
        model="m",
        admission_limit=4,
        deadline_s=12.5,
        max_record_attempts=2,
        run_tag="x-",
        headers=(("Authorization", "Bearer abc"),),
        arrival="poisson",
        rate=12.5,
        duration_s=3.0,
        seed=4,
    )
    parsed = workload_from_args(build_parser().parse_args(workload.to_argv()))
    assert parsed == workload


def test_a_header_without_a_name_is_rejected_without_echoing_the_value():
    with pytest.raises(ValueError) as caught:
        parse_header("Bearer secret-value")
    assert "secret-value" not in str(caught.value)
    with pytest.raises(ValueError):
        parse_header(": value")


def test_a_rate_goes_with_a_rate_arrival_only():
    with pytest.raises(ValueError, match="rate"):
        Workload(endpoint="x", arrival="constant")
    with pytest.raises(ValueError, match="rate"):
        Workload(endpoint="x", rate=5)
    with pytest.raises(ValueError, match="arrival"):
        Workload(endpoint="x", arrival="burst", rate=5)
