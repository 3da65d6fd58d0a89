"""The harness's KILL, the controller's escalation, comes when the allowance has run from the
moment TERM reached the endpoint's task (the node's log), not from when `scancel` and the read
of that log returned: on a loaded machine those took seconds, and an endpoint that never
bounds its drain outlived its streams' end before the KILL came (a control saw rc1 'exit by
itself')."""

import time
from types import SimpleNamespace

import pytest

from dd_accept.acceptance import drain_stop as drain
from dd_accept.base.errors import ClusterError, SutBehaviourMissing
from dd_accept.slurm_docker.step_exit import StepExit

LOADED = "scancel: select/cons_tres: common_init: select/cons_tres loaded\n"  # scancel --verbose's first lines


def _stop(
    term_reached_s_ago: float,
    exits_after_s: float | None,
    srun_lingers: bool = False,
    terms: int = 1,
    requests: int = 1,
):
    """stop_endpoint_step against fakes: TERM reached the task `term_reached_s_ago` before
    the harness read it; the task exits by itself `exits_after_s` after that (None: never);
    `srun_lingers`: its launcher outlives it, so the harness's wait still times out; `terms`: how
    many TERMs the node's log shows Slurm delivered (0: the log cannot be read); `requests`: how
    many requests scancel's verbose output says it sent."""
    now = time.time()
    term_at = now - term_reached_s_ago
    sent: list[str] = []
    waits: list[float] = []

    def wait(timeout):
        waits.append(timeout)
        exited = exits_after_s is not None and term_reached_s_ago + timeout >= exits_after_s and not srun_lingers
        if "KILL" in sent or exited:
            return SimpleNamespace(exit_code=0, started_at=term_at - 5, duration_s=5 + (exits_after_s or 13))
        raise TimeoutError

    recorded = StepExit(0 if exits_after_s is not None else 137, term_at + (exits_after_s or 13), "slurmd")
    cluster = SimpleNamespace(
        signals_sent=lambda step, node, signal: tuple(term_at + 0.003 * n for n in range(terms)) if terms else None,
        step_exit=lambda step, node: recorded,
    )

    def kill_only(step, signal):
        """Plain scancel repeats TERM while a later job pends: the stop sends TERM only once."""
        assert signal == "KILL", f"the stop sent {signal} through plain scancel"
        sent.append(signal)
        return SimpleNamespace(started_at=time.time())

    allocation = SimpleNamespace(
        steps_by_name=lambda: {"proxy": ["7.1"]},
        signal_step_once=lambda step, signal: (
            sent.append(signal)
            or SimpleNamespace(
                started_at=term_at - 0.1,
                duration_s=0.04,
                stderr_tail=LOADED + "scancel: Signal 15 to step 7.1\n" * requests,
                describe=lambda: "exit 0: scancel --signal=TERM 7.1",
            )
        ),
        scancel_step=kill_only,
        cluster=cluster,
    )
    proxy = SimpleNamespace(node="node1", step=SimpleNamespace(wait=wait), log_tail=lambda lines: "")
    profile = SimpleNamespace(drain=SimpleNamespace(allowance_seconds=12.0))
    stop_at, forced_at, end = drain.stop_endpoint_step(allocation, proxy, profile, "scancel_step")
    return stop_at, forced_at, end, sent, waits


def test_the_kill_waits_only_what_is_left_of_the_allowance_since_term():
    stop_at, forced_at, _, sent, waits = _stop(term_reached_s_ago=8.0, exits_after_s=None)
    assert sent == ["TERM", "KILL"]
    assert 12.0 + drain.KILL_GRACE_S - 8.0 - 0.5 < waits[0] <= 12.0 + drain.KILL_GRACE_S - 8.0, waits
    assert forced_at is not None and forced_at - stop_at < 12.0 + drain.KILL_GRACE_S + 1.0


def test_an_endpoint_that_exits_within_the_allowance_is_not_killed():
    _, forced_at, end, sent, _ = _stop(term_reached_s_ago=2.0, exits_after_s=10.5)
    assert sent == ["TERM"] and forced_at is None and end.exit_code == 0


def test_a_kill_that_found_the_task_exited_0_is_no_force_for_every_reader():
    """srun outlived its task's exit 0 at 11.6 s: the harness KILLed the step, but the forced
    moment it returns (the drain chart's mark, the telemetry drain phase) is None, as the
    allowance check reads it."""
    _, forced_at, end, sent, _ = _stop(term_reached_s_ago=13.0, exits_after_s=11.6, srun_lingers=True)
    assert sent == ["TERM", "KILL"] and end.exit_code == 0 and forced_at is None


def test_how_many_terms_slurm_delivered_is_read_from_the_node_into_the_stops_end():
    assert _stop(term_reached_s_ago=2.0, exits_after_s=10.5)[2].terms == 1
    twice = _stop(term_reached_s_ago=2.0, exits_after_s=10.5, terms=2)[2]
    assert twice.terms == 2 and round(twice.repeated_after_s, 3) == 0.003, twice
    assert _stop(term_reached_s_ago=2.0, exits_after_s=10.5, terms=0)[2].terms == 1, "an unreadable log: one"


def test_where_the_nodes_log_cannot_be_read_scancels_own_count_of_its_requests_stands_for_the_terms():
    """A login node reads no slurmd log. scancel repeats its request while a job submitted
    after the endpoint's is pending (Slurm 22.05 to 26.05): its verbose output, two "Signal 15
    to step" lines, is then the only word of the second TERM; the repeat lies within
    scancel's own run (0.04 s here). One delivery logged stays one, whatever scancel sent."""
    unread = _stop(term_reached_s_ago=2.0, exits_after_s=10.5, terms=0, requests=2)[2]
    assert (unread.terms, unread.repeated_after_s) == (2, 0.04) and "sent its request 2 times" in unread.term_by
    logged_once = _stop(term_reached_s_ago=2.0, exits_after_s=10.5, terms=1, requests=2)[2]
    assert logged_once.terms == 1, logged_once
    both = _stop(term_reached_s_ago=2.0, exits_after_s=10.5, terms=2, requests=2)[2]
    assert (both.terms, round(both.repeated_after_s, 3)) == (2, 0.003), both
    assert _stop(term_reached_s_ago=2.0, exits_after_s=10.5)[2].term_by == "the harness asked once"


def test_a_stop_whose_scancel_sent_no_request_is_the_harnesss_error_not_a_drain_to_judge():
    """scancel said no "Signal 15 to step" (a site's scancel that refuses --interactive, a job
    it did not find): no TERM went out, so there is nothing to judge an endpoint by; the stop
    raises before it waits out an allowance and KILLs an endpoint that was never told."""
    with pytest.raises(ClusterError, match="the endpoint's TERM was never sent"):
        _stop(term_reached_s_ago=2.0, exits_after_s=10.5, terms=0, requests=0)


def test_a_log_that_cannot_be_read_is_not_waited_for():
    """A login node's answer is None (unknown) at once and for ever: TERM's moment is scancel's
    start after one read, not after 3 s of reads for a line that cannot come; a readable log
    is read until its line shows."""
    answers = {"unreadable": [None], "late": [(), (), (41.5, 41.503)]}
    for kind, script in answers.items():
        reads = []

        def signals_sent(step, node, signal, script=script, reads=reads):
            reads.append(step)
            return script[min(len(reads), len(script)) - 1]

        allocation = SimpleNamespace(cluster=SimpleNamespace(signals_sent=signals_sent))
        moment = drain._term_moment(allocation, "7.1", "node1", fallback=40.0)
        assert (moment, len(reads)) == ({"unreadable": 40.0, "late": 41.5}[kind], len(script)), (kind, reads)


def test_an_endpoint_that_ended_before_its_stop_fails_the_check_the_stop_was_for(monkeypatch):
    """The SUT's proxy crashed under the streams: no step to TERM. That is the SUT's behaviour
    (a failed check named after the stop's, exit 1), not the harness's error (exit 2), and no
    signal goes out."""
    sent = []
    ended = SimpleNamespace(describe=lambda: "exit 1 after 3.2s: srun proxy")
    allocation = SimpleNamespace(
        steps_by_name=lambda: {"replicas": ["7.0"]},
        signal_step_once=lambda step, signal: sent.append(signal),
        scancel_step=lambda step, signal: sent.append(signal),
    )
    proxy = SimpleNamespace(
        node="node1",
        step=SimpleNamespace(finished=True, wait=lambda timeout: ended),
        log_tail=lambda lines: "Traceback: MemoryError",
    )
    profile = SimpleNamespace(drain=SimpleNamespace(allowance_seconds=12.0))
    monkeypatch.setattr(drain, "STEP_LISTED_S", 0.3)
    with pytest.raises(SutBehaviourMissing) as missing:
        drain.stop_endpoint_step(allocation, proxy, profile, "allowance")
    assert missing.value.behaviour == "allowance" and sent == []
    assert "had ended before its stop (exit 1 after 3.2s: srun proxy)" in missing.value.observed
    assert "MemoryError" in missing.value.observed
    # squeue that failed or lags while the endpoint's srun still runs: no finding about the SUT
    proxy.step.finished = False
    with pytest.raises(ClusterError, match="squeue did not list the endpoint's step"):
        drain.stop_endpoint_step(allocation, proxy, profile, "allowance")
    assert sent == []
