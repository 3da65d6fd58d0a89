"""The request ledger and its checks, on records shaped as the client and the replicas write
them: a correct retry passes, a request generated whole twice and an answer lost on the way
fail naming exactly that request, and a client that gave up first is no loss."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dd_accept.acceptance import ledger_checks
from dd_accept.acceptance.ledger import Ledger, read_ledger
from dd_accept.acceptance.phases import chosen_phases
from dd_accept.acceptance.scenarios import BY_NAME, SCENARIO_NAMES
from dd_accept.base.events import ClientRequest, RelayedResponse, UpstreamAttempt
from dd_accept.deployment import RunDirectory, run_directory
from tests.ledger_plants import plant_duplicate, plant_loss

ONCE, WHOLE = "s.ledger.answered_once", "s.ledger.delivered"


def client(rid: str, outcome: str = "ok", *, started: float = 100.0, ended: float = 101.0, status: int = 200):
    return ClientRequest(
        t=ended, source="client", mode="raw", record=0, attempt=0, outcome=outcome, request_id=rid, started=started,
        status=status,
    )  # fmt: skip


def attempt(rid: str, replica: int, status: int | None, outcome: str = "ok", *, started: float = 100.1, s=0.5):
    return UpstreamAttempt(
        t=started + s, source=f"replica-{replica}", replica=replica, path="/v1/completions", outcome=outcome,
        started=started, duration_s=s, request_id=rid, status=status,
    )  # fmt: skip


def test_a_failover_after_a_429_and_a_cut_before_a_retry_are_answered_once():
    ledger = Ledger.of(
        [
            client("a"),
            attempt("a", 0, 429, started=100.1, s=0.01),
            attempt("a", 1, 200, started=100.2),
            client("b"),
            attempt("b", 2, 200, "cut", started=100.1, s=0.1),  # cut mid-way: not a whole generation
            attempt("b", 3, 200, started=100.3),
        ]
    )
    once = ledger_checks.answered_once(ledger, ONCE)
    assert once.verdict == "pass", once
    assert once.observed == "2 request(s), 4 upstream attempt(s), 2 whole generation(s), none twice"
    assert once.metrics == {"requests": 2, "attempts": 4, "generations": 2, "answered_twice": 0}
    assert ledger_checks.delivered(ledger, WHOLE).verdict == "pass"


def test_a_request_generated_whole_twice_fails_named_with_both_attempts():
    ledger = Ledger.of(
        [client("a"), attempt("a", 0, 200), client("dup"), attempt("dup", 0, 200), attempt("dup", 1, 200, started=101)]
    )
    once = ledger_checks.answered_once(ledger, ONCE)
    assert once.verdict == "fail" and once.metrics["answered_twice"] == 1, once
    assert once.observed.endswith("1 generated whole more than once: dup: replica 0 200 ok, replica 1 200 ok")
    assert "a:" not in once.observed, "only the request that shows it is named"
    assert ledger_checks.delivered(ledger, WHOLE).verdict == "pass", "untouched: every answer arrived"


def test_an_answer_finished_while_the_client_waited_and_never_delivered_is_lost():
    ledger = Ledger.of([client("a"), attempt("a", 0, 200), client("cut", "truncated"), attempt("cut", 1, 200)])
    whole = ledger_checks.delivered(ledger, WHOLE)
    assert whole.verdict == "fail" and whole.metrics == {"requests": 2, "answered": 1, "lost": 1}, whole
    assert whole.observed.endswith(
        "1 finished at a replica but not at the client: cut: replicas: replica 1 200 ok; client: truncated 200"
    )
    assert ledger_checks.answered_once(ledger, ONCE).verdict == "pass", "untouched: nothing generated twice"


def test_a_client_that_gave_up_before_the_generation_ended_is_no_loss():
    """Its deadline ended it first: the proxy could not have delivered what was not done."""
    ledger = Ledger.of([client("late", "deadline", ended=100.3), attempt("late", 0, 200, started=100.1, s=2.0)])
    assert ledger_checks.delivered(ledger, WHOLE).verdict == "pass"
    # the same generation, done 0.04 s before the client's end (one moment on two clocks): lost
    done = Ledger.of([client("x", "error", ended=100.56), attempt("x", 0, 200, started=100.0, s=0.6)])
    assert ledger_checks.delivered(done, WHOLE).verdict == "fail"


def test_a_client_that_hung_up_on_a_stream_a_replica_finished_is_no_loss():
    """A slow reader leaves mid-stream an answer its replica finished long before: it left."""
    left = Ledger.of([client("slow", "hung_up", ended=105.0), attempt("slow", 0, 200, started=100.1, s=1.0)])
    assert ledger_checks.delivered(left, WHOLE).verdict == "pass"
    cut = Ledger.of([client("cut", "truncated", ended=105.0), attempt("cut", 0, 200, started=100.1, s=1.0)])
    assert ledger_checks.delivered(cut, WHOLE).verdict == "fail", "the same stream cut, not left: lost"


def test_requests_whose_id_never_reached_a_replica_fail_both_checks():
    ledger = Ledger.of([client("a"), client("b"), attempt(None, 0, 200)])
    for judge, check_id in ((ledger_checks.answered_once, ONCE), (ledger_checks.delivered, WHOLE)):
        result = judge(ledger, check_id)
        assert result.verdict == "fail", result
        assert result.observed == "the replicas recorded none of the client's 2 request ids (x-dd-request-id)"


def test_requests_some_of_whose_attempts_reached_a_replica_without_their_id_fail_both_checks():
    """A proxy that passes the id on first attempts only: a retry generated the answer a second
    time with no id, and nothing shows it but the id-less attempt. Both checks fail, saying so."""
    ledger = Ledger.of(
        [client("a"), attempt("a", 0, 200), client("b"), attempt("b", 1, 200), attempt(None, 2, 200, started=101)]
    )
    for judge, check_id in ((ledger_checks.answered_once, ONCE), (ledger_checks.delivered, WHOLE)):
        result = judge(ledger, check_id)
        assert result.verdict == "fail" and result.metrics["attempts_without_id"] == 1, result
        assert result.observed.startswith(
            "the replicas recorded 1 completion request(s) with no request id (x-dd-request-id), 1 of them answered "
            "whole, beside 2 with one"
        ), result.observed
    probes = Ledger.of([client("a"), attempt("a", 0, 200), attempt("dd-accept-admission-probe", 0, 400)])
    assert ledger_checks.answered_once(probes, ONCE).verdict == "pass", "the harness's own probes are no client's"


def _run_directory(tmp_path: Path, name: str = "run-1") -> Path:
    """A run directory as a scenario leaves it: two client files, the replicas' files, marks."""
    directory = tmp_path / name
    (directory / "replicas").mkdir(parents=True)
    first = [client("p-0"), client("p-1"), client("p-2", "rate_limited", status=429)]
    rows = {
        "partial.jsonl": first,
        "scancel.jsonl": [client("s-0")],
        "replicas/events-0.jsonl": [attempt("p-0", 0, 200), attempt("p-2", 0, 429), attempt("s-0", 0, 200)],
        "replicas/events-1.jsonl": [attempt("p-1", 1, 200), attempt("p-2", 1, 429)],
    }
    for name, events in rows.items():
        (directory / name).write_text("".join(json.dumps(e.to_json()) + "\n" for e in events))
    (directory / "drain-marks.jsonl").write_text('{"phase": "scancel", "stop_at": 1.0}\n')
    (directory / "capacity-curve.jsonl").write_text('{"kind": "capacity_level", "level": 1}\n')
    return directory


def test_a_run_directory_is_read_whole_and_planted_faults_are_named(tmp_path):
    directory = _run_directory(tmp_path)
    ledger = read_ledger(directory)
    assert list(ledger.rows) == ["run-1/p-0", "run-1/p-1", "run-1/p-2", "run-1/s-0"], "known by directory and id"
    assert ledger.attempts == 5, "the drain marks and capacity's levels are passed over"
    assert ledger_checks.answered_once(ledger, ONCE).verdict == "pass"
    assert ledger_checks.delivered(ledger, WHOLE).verdict == "pass"
    duplicated = plant_duplicate(directory)
    once = ledger_checks.answered_once(read_ledger(directory), ONCE)
    assert once.verdict == "fail" and f"run-1/{duplicated}: replica 0 200 ok, replica 1 200 ok" in once.observed
    lost = plant_loss(directory)
    whole = ledger_checks.delivered(read_ledger(directory), WHOLE)
    assert (
        whole.verdict == "fail"
        and f"run-1/{lost}: replicas: " in whole.observed
        and "client: truncated" in whole.observed
    )


def test_the_sub_runs_of_a_scenario_are_read_beside_its_own_and_their_ids_kept_apart(tmp_path):
    """health's drills run clients in run directories of their own, each numbering its
    requests afresh: the same id in two directories is two requests."""
    first, second = _run_directory(tmp_path, "run-1"), _run_directory(tmp_path, "attempt-2")
    ledger = read_ledger(first, second, first)
    assert len(ledger.rows) == 8 and ledger.attempts == 10, "each directory once"
    assert ledger_checks.answered_once(ledger, ONCE).verdict == "pass"


@pytest.mark.parametrize("scenario", SCENARIO_NAMES)
def test_every_scenario_ends_with_its_ledger_and_choosing_it_runs_the_whole_scenario(scenario):
    phases = BY_NAME[scenario].phases
    ids = (f"{scenario}.ledger.answered_once", f"{scenario}.ledger.delivered")
    (ledger,) = [p for p in phases if p.judges == ids]
    assert [p for p in phases if p.judges][-1] is ledger and all(p.teardown for p in phases[phases.index(ledger) + 1 :])
    chosen = chosen_phases(phases, set(ids))
    assert [p.title for p in chosen] == [p.title for p in phases], "the ledger reconciles every part"
    others = [p for p in phases if p.judges and p is not ledger]
    assert ledger not in chosen_phases(phases, set(others[0].judges)), "a run of another check leaves it out"


def test_a_ledger_with_no_client_request_is_a_harness_fault(tmp_path):
    directory = tmp_path / "empty"
    (directory / "replicas").mkdir(parents=True)

    class State:
        run = RunDirectory("/shared/runs/empty", directory)
        run_directories_before = len(run_directory.CREATED)

    with pytest.raises(RuntimeError, match="holds no client request"):
        next(
            p for p in BY_NAME["drain"].phases if p.judges == ("drain.ledger.answered_once", "drain.ledger.delivered")
        ).act(State())


def test_a_stream_the_fault_point_broke_on_purpose_is_no_loss_but_one_it_passed_whole_is():
    """The wire scenario's fault point may take a replica's whole answer (buffered in its
    socket before the cut) and reset it on purpose: the client's error is the wire checks' to
    judge, never an answer the proxy lost. One it passed whole and the client lacks is lost."""
    whole, reset = [
        RelayedResponse(request_id=rid, upstream=0, fault=fault, status=200, ended=ended)
        for rid, fault, ended in (("kept", "split", "whole"), ("cut", "reset", "reset"))
    ]
    ledger = Ledger.of(
        [
            client("cut", "error", ended=102.0),
            attempt("cut", 0, 200),  # the replica wrote it all into the fault point's socket
            reset,
            client("kept", "error", ended=102.0),
            attempt("kept", 1, 200),
            whole,
        ]
    )
    result = ledger_checks.delivered(ledger, WHOLE)
    assert result.verdict == "fail" and result.metrics["lost"] == 1, result
    assert "kept" in result.observed and "cut:" not in result.observed
    assert "(1 broken on purpose between proxy and replica)" in result.observed
