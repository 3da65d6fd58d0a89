import pytest

from dd_accept.base.waiting import WaitAborted, WaitTimeout, wait_until


def test_returns_the_value_that_satisfied_the_predicate():
    values = iter([1, 2, 3, 4])
    assert wait_until(lambda: next(values), lambda v: v >= 3, timeout=5, what="three", interval=0.001) == 3


def test_timeout_names_what_and_the_last_observed_value():
    with pytest.raises(WaitTimeout) as caught:
        wait_until(lambda: "pending", lambda v: v == "done", timeout=0.05, what="the job", interval=0.01)
    assert "the job" in str(caught.value)
    assert "'pending'" in str(caught.value)
    assert caught.value.last == "pending"


def test_terminal_state_aborts_before_the_timeout():
    with pytest.raises(WaitAborted, match="container exited"):
        wait_until(
            lambda: "exited",
            lambda v: v == "running",
            timeout=30,
            what="x",
            terminal=lambda v: "container exited" if v == "exited" else None,
        )


def test_transient_errors_are_retried_and_reported_on_timeout():
    def probe():
        raise ConnectionError("refused")

    with pytest.raises(WaitTimeout, match="ConnectionError: refused"):
        wait_until(probe, bool, timeout=0.05, what="x", interval=0.01, transient=(ConnectionError,))


def test_non_transient_errors_propagate():
    def probe():
        raise ValueError("bug")

    with pytest.raises(ValueError):
        wait_until(probe, bool, timeout=1, what="x")


def test_wait_for_finding_returns_the_value_or_none_for_a_behaviour_that_never_came():
    from dd_accept.base.waiting import wait_for_finding

    values = iter([1, 2, 3])
    assert wait_for_finding(lambda: next(values), lambda v: v >= 2, timeout=1, what="two") == 2
    assert wait_for_finding(lambda: 0, lambda v: v > 0, timeout=0.2, what="never") is None
