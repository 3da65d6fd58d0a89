"""The load client's workload travels as command-line flags: what is written is what is read."""

import pytest

from dd_accept.harness.loadclient.__main__ import build_parser
from dd_accept.harness.loadclient.workload import Workload, parse_header


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
    )
    args = build_parser().parse_args(workload.to_argv())
    parsed = Workload(
        endpoint=args.endpoint,
        records=args.records,
        concurrency=args.concurrency,
        max_tokens=args.max_tokens,
        prompt_chars=args.prompt_chars,
        stream=not args.no_stream,
        model=args.model,
        admission_limit=args.admission_limit,
        deadline_s=args.deadline_s,
        max_record_attempts=args.max_record_attempts,
        run_tag=args.run_tag,
        headers=tuple(parse_header(text) for text in args.header),
    )
    assert parsed == workload


def test_a_header_without_a_name_is_rejected_without_echoing_the_value():
    with pytest.raises(ValueError) as caught:
        parse_header("Bearer secret-value")
    assert "secret-value" not in str(caught.value)
    with pytest.raises(ValueError):
        parse_header(": value")
