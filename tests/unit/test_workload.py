"""The load client's workload travels as command-line flags: what is written is what is read."""

from dataclasses import fields

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
        canary="00ff00ff00ff",
    )
    parsed = workload_from_args(build_parser().parse_args(workload.to_argv()))
    assert parsed == workload
    # every field, each away from its default: a field added to the workload travels too
    changed = {f.name: _changed(getattr(Workload(endpoint="x"), f.name)) for f in fields(Workload)}
    changed |= {"endpoint": "http://e", "arrival": "constant", "canary": "00ff00ff"}
    everything = Workload(**changed)
    assert workload_from_args(build_parser().parse_args(everything.to_argv())) == everything
    assert workload_from_args(build_parser().parse_args(["--endpoint", "http://e/"])) == Workload("http://e")


def _changed(default):
    if isinstance(default, bool):
        return not default
    if isinstance(default, tuple):
        return (("X-Name", "a value"),)
    return default + 1 if isinstance(default, int | float) else default + "z"


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


def test_a_canary_rides_in_every_prompt_and_a_credential_unless_the_user_sends_their_own():
    plain = Workload(endpoint="http://e", prompt_chars=40)
    assert plain.prompt() == "x" * 40 and plain.request_headers == ()
    marked = Workload(endpoint="http://e", prompt_chars=40, canary="abcdef0123")
    assert len(marked.prompt()) == 40 and marked.prompt().startswith("ddpromptabcdef0123 ddprompt")
    assert Workload(endpoint="http://e", prompt_chars=4, canary="abcdef0123").prompt() == "ddpromptabcdef0123 "
    assert marked.request_headers == (("Authorization", "Bearer ddcredentialabcdef0123"),)
    own = Workload(endpoint="http://e", canary="abcdef0123", headers=(("authorization", "Bearer mine"),))
    assert own.request_headers == (("authorization", "Bearer mine"),), "the user's credential is the one sent"
    assert "ddprompt" not in " ".join(marked.to_argv()), "the prompt text never travels on a command line"
    for bad in ("ABCDEF0123", "abc", "g" * 12, "a" * 33):
        with pytest.raises(ValueError, match="canary"):
            Workload(endpoint="http://e", canary=bad)
