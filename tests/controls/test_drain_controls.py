"""Controls for the drain checks, each asserting the observed numbers behind its verdict.

The contract (seed pull request, brief fact 3): an endpoint drains for at most its 10 s
window and exits 0 by itself; the controller's 12 s allowance and KILL are the last resort.
- rc1 passes drain.scancel_step and fails drain.allowance (it does not bound its drain: the
  20 s stream is still running at 12 s and must be forced) and drain.sut_cleanup.* (its
  cleanup TERMs srun launchers, so every stream is cut: a true finding), and drain.sut_escalation
  (with a stream longer than the allowance, the same KILL comes at once, 12 s too early).
- drain-bounded (the endpoint ends what is left at its window and exits 0) passes allowance.
- drain-6s (the endpoint exits 6 s after TERM) loses the long stream: allowance fails. The 4 s
  streams of the scancel phase, launched 1 s before TERM, need 3 s of it: a 3 s bound left
  them no margin, and CI (2026-12-04, the machine 99% busy) once saw them cut.
- exit-on-term loses every stream: scancel_step fails.
- drain-overruns-window (the endpoint exits 11.5 s after TERM, inside the allowance, past its
  window): the long stream is cut 1.5 s after the window, allowance fails as "overran".
- done-at-term (the endpoint ends every stream with [DONE] and exits 0): every stream reads as
  whole at the client, but no replica generated it whole: scancel_step fails, 4 lost.
- step-aware-cleanup (the seed's fix) passes drain.sut_cleanup.*; hasty-cleanup (the same, but
  forcing the endpoint 5 s after TERM, not 12 s) fails them: the drills' streams have 8 s left.
Each fault runs the phases its checks need: a fault of the endpoint the harness's two stops, a
fault of the cleanup the drills and the scancel stop it must leave passing; rc1 runs them all.
- the request ledger (every scenario's): rc1 passes; a second generation of one request and
  an answer lost on the way, planted in a copy of rc1's records, fail naming that request.
"""

import json
import re
import shutil

import pytest

from dd_accept.acceptance import ledger_checks
from dd_accept.acceptance.drain import DrainOptions, run_drain
from dd_accept.acceptance.ledger import read_ledger
from dd_accept.base.progress import ProgressWriter
from dd_accept.deployment import RunDirectory
from dd_accept.slurm_docker.step_exit import signal_requests
from tests.controls.controls import run_with_fault, stop_story
from tests.helpers import assert_the_dry_run_planned_what_the_run_did, run_cli
from tests.ledger_plants import plant_duplicate, plant_loss

pytestmark = pytest.mark.cluster
CLEANUP_MODES = ("completion", "failure", "cancel")


def _drain(allocation, run, profile, progress):
    return run_drain(allocation, run, profile, DrainOptions(), progress)


def _drain_judging(*checks):
    """The drain scenario's phases those checks need: a fault of the endpoint is judged by the
    harness's stops (not the drills, which judge rc1's own cleanup), one of the cleanup by the
    drills and the scancel stop it must leave passing."""
    return lambda allocation, run, profile, progress: run_drain(
        allocation, run, profile, DrainOptions(), progress, checks=checks
    )


STOPS = _drain_judging("drain.scancel_step", "drain.allowance")
CLEANUP = _drain_judging("drain.scancel_step", "drain.sut_cleanup.*", "drain.sut_escalation")


def test_rc1_is_forced_at_the_allowance_and_its_own_cleanup_cuts_every_stream(
    sut_allocation, sut_profile, sut_cluster, tmp_path
):
    run, since = RunDirectory.create(sut_cluster), len(sut_cluster.records)
    result = _drain(sut_allocation, run, sut_profile, ProgressWriter(None, "drain"))
    # what Slurm and the harness did around each stop, should rc1 ever be judged otherwise
    print("\n".join(f"{c.id} {c.verdict}: {c.observed} | {c.detail}" for c in result.checks))
    print(result.error, "\n" + stop_story(sut_cluster.records, since))
    # Each stop's TERM was sent once, though other control files' jobs may pend behind this
    # one (plain scancel then signals the step twice, and rc1 exits 1 at the second): every
    # stop is judged.
    stops = [r for r in sut_cluster.records.since(since) if r.argv[3:5] == ("scancel", "--signal=TERM")]
    assert len(stops) == 2, [r.argv for r in stops]  # the scancel and the allowance phases
    assert all(signal_requests(r.stderr_tail, r.argv[-1], 15) == 1 for r in stops), [r.stderr_tail for r in stops]
    assert result.error is None, result.error
    checks = {c.id: c for c in result.checks}
    scancel = checks["drain.scancel_step"]
    assert scancel.verdict == "pass", scancel
    allowance = checks["drain.allowance"]
    assert allowance.verdict == "fail" and allowance.observed.startswith("1 long stream(s): 1 forced"), allowance
    assert allowance.metrics["streams_forced"] == 1 and allowance.metrics["streams_lost"] == 0
    assert "does not bound its own drain" in allowance.detail
    _assert_the_ledger_reconciles_and_catches_what_is_planted(checks, run.host_path, tmp_path)
    for mode in CLEANUP_MODES:
        check = checks[f"drain.sut_cleanup.{mode}"]
        assert check.verdict == "fail" and check.observed.startswith(
            "4 of 4 in-flight stream(s) cut; endpoint exit 137"
        ), check
        assert "slurmd step record" in check.detail, "the exit status is Slurm's record, not a default"
        assert check.metrics["endpoint_exit_s"] < 2.0, "rc1 KILLs 0.2 s after its TERM"
        assert "KILL after 0." in check.observed, "srun turns the launcher's TERM into a KILL of the task at once"
    # with a stream longer than the allowance, the same: forced at once, 12 s too early
    escalation = checks["drain.sut_escalation"]
    assert escalation.verdict == "fail" and "before the 12s allowance had run" in escalation.detail, escalation
    assert escalation.metrics["forced_s"] < 2.0 and "endpoint exit 137" in escalation.observed, escalation
    # what `run drain --dry-run` prints is what this run submitted, both ways
    assert_the_dry_run_planned_what_the_run_did(sut_cluster.records, scenario="drain", job=sut_allocation.job_id)


def _assert_the_ledger_reconciles_and_catches_what_is_planted(checks, directory, tmp_path, whole_generations=4):
    """rc1's ledger: the scancel phase's 4 streams generated once and delivered; the streams the
    allowance and the cleanups cut are no whole generation. Planted in a copy of the same
    records, a second generation of one request and a lost answer fail, naming that request."""
    once, whole = checks["drain.ledger.answered_once"], checks["drain.ledger.delivered"]
    assert once.verdict == "pass" and once.metrics["answered_twice"] == 0, once
    assert once.metrics["generations"] >= whole_generations, once
    assert whole.verdict == "pass" and whole.metrics["lost"] == 0 and whole.metrics["answered"] >= whole_generations
    if not whole_generations:
        return  # no whole generation to plant a second of, or to lose
    copy = tmp_path / "planted"
    shutil.copytree(directory, copy)
    twice = plant_duplicate(copy)
    planted = ledger_checks.answered_once(read_ledger(copy), "drain.ledger.answered_once")
    assert planted.verdict == "fail" and planted.metrics["answered_twice"] == 1, planted
    assert f"more than once: planted/{twice}: " in planted.observed, planted
    lost = plant_loss(copy)
    planted = ledger_checks.delivered(read_ledger(copy), "drain.ledger.delivered")
    assert planted.verdict == "fail" and planted.metrics["lost"] == 1, planted
    assert f"not at the client: planted/{lost}: replicas: " in planted.observed, planted
    assert "client: truncated" in planted.observed, planted


def test_an_endpoint_that_bounds_its_drain_at_the_window_passes_allowance(
    sut_wheelhouse, sut_image, sut_profile, tmp_path
):
    checks = run_with_fault(STOPS, "drain-bounded", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    allowance = checks["drain.allowance"]
    assert allowance.verdict == "pass", allowance
    assert allowance.observed.startswith("1 long stream(s): 1 bounded") and "forced at -" in allowance.observed
    assert 9.5 <= allowance.metrics["endpoint_exit_s"] <= 12.0, allowance
    assert checks["drain.scancel_step"].verdict == "pass", "short streams still complete"


def test_step_aware_cleanup_is_the_positive_control_of_sut_cleanup(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    checks = run_with_fault(CLEANUP, "step-aware-cleanup", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    for mode in CLEANUP_MODES:
        check = checks[f"drain.sut_cleanup.{mode}"]
        assert check.verdict == "pass", check
        assert check.observed.startswith("0 of 4 in-flight stream(s) cut; endpoint exit 0")
        assert "steps left: none" in check.observed and "KILL never" in check.observed
        # the drill's streams had about 8 s left at TERM: the endpoint drained them all, inside its window
        assert 6.0 < check.metrics["endpoint_exit_s"] <= 12.0, check
    assert checks["drain.scancel_step"].verdict == "pass", "proxy untouched"
    assert "drain.allowance" not in checks, "only the phases the chosen checks need ran"
    # a stream longer than the allowance: rc1's proxy drains on, and the cleanup forces it after its 12 s wait
    escalation = checks["drain.sut_escalation"]
    assert escalation.verdict == "pass" and 10.5 <= escalation.metrics["forced_s"] <= 15.0, escalation


def test_a_cleanup_that_forces_the_endpoint_before_its_allowance_is_caught_by_sut_cleanup(
    sut_wheelhouse, sut_image, sut_profile, tmp_path
):
    """The seed's step-aware cleanup with a 5 s allowance, not 12 s: its TERM reaches the
    endpoint's task, which drains, and the KILL to its step 5 s later cuts the streams that
    had about 8 s left. Only the cleanup drills judge the SUT's cleanup; the harness's own
    stops are untouched."""
    checks = run_with_fault(CLEANUP, "hasty-cleanup", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    kills = []
    for mode in CLEANUP_MODES:
        check = checks[f"drain.sut_cleanup.{mode}"]
        assert check.verdict == "fail" and check.observed.startswith("4 of 4 in-flight stream(s) cut"), check
        # bash's SECONDS counts whole seconds: its "5 s" wait ends 4 to 5 s after the TERM
        assert "endpoint exit 137" in check.observed and 3.5 < check.metrics["endpoint_exit_s"] < 7.0, check
        kill = re.search(r"KILL after (\d+\.\d)s", check.observed)
        kills.append(float(kill[1]) if kill else None)
    # the node's log shows the KILL to the step where it could be read in time (once, in the
    # cancel drill, it was not: "KILL never" beside "exit 137 after 4.5s")
    assert any(kills) and all(3.5 < k < 6.5 for k in kills if k is not None), kills
    assert checks["drain.scancel_step"].verdict == "pass", "proxy untouched"
    # with a stream longer than the allowance, the same early force, by its moment
    escalation = checks["drain.sut_escalation"]
    assert escalation.verdict == "fail" and "before the 12s allowance had run" in escalation.detail, escalation
    assert 3.5 < escalation.metrics["forced_s"] < 7.0, escalation


def test_exit_on_term_is_caught_by_scancel_step(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    checks = run_with_fault(STOPS, "exit-on-term", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    scancel = checks["drain.scancel_step"]
    assert scancel.verdict == "fail" and "4 lost" in scancel.observed and "endpoint exit 143" in scancel.observed
    assert checks["drain.allowance"].metrics["streams_lost"] == 1


def test_a_6s_drain_bound_loses_the_long_stream(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    checks = run_with_fault(STOPS, "drain-6s", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    allowance = checks["drain.allowance"]
    assert allowance.verdict == "fail" and "1 lost" in allowance.observed, allowance
    assert allowance.metrics["streams_lost"] == 1 and allowance.metrics["streams_forced"] == 0
    assert checks["drain.scancel_step"].verdict == "pass", "4 s streams launched 1 s before TERM fit in 6 s"


def test_an_endpoint_that_drains_past_its_window_inside_the_allowance_overran(
    sut_wheelhouse, sut_image, sut_profile, tmp_path
):
    checks = run_with_fault(STOPS, "drain-overruns-window", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    allowance = checks["drain.allowance"]
    assert allowance.verdict == "fail" and "drained beyond its bound" in allowance.detail, allowance
    assert allowance.metrics["streams_overran"] == 1 and allowance.metrics["streams_forced"] == 0, allowance
    assert 11.0 < allowance.metrics["endpoint_exit_s"] <= 12.0, allowance
    assert checks["drain.scancel_step"].verdict == "pass", "4 s streams complete long before 11.5 s"


def test_an_endpoint_that_ends_its_streams_with_a_made_up_done_loses_them(
    sut_wheelhouse, sut_image, sut_profile, tmp_path
):
    """The client reads [DONE] on every stream: only the replicas' records show that none
    was generated whole (base.drain_outcomes.whole_streams)."""
    checks = run_with_fault(STOPS, "done-at-term", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    scancel = checks["drain.scancel_step"]
    assert scancel.verdict == "fail" and "4 lost" in scancel.observed and "endpoint exit 0" in scancel.observed, scancel
    assert checks["drain.allowance"].metrics["streams_lost"] == 1, checks["drain.allowance"]


def test_a_chosen_check_runs_only_the_phases_it_needs_and_is_judged_as_in_a_whole_run(tmp_path):
    """`run drain -k drain.sut_cleanup.cancel`: the replicas, that one drill and the teardown
    run (not scancel's, the allowance's or the other drills' phases); rc1 fails it for the
    reason a whole run gives (its cleanup TERMs srun launchers: every stream cut); the bundle
    says it is partial and never meets --require-pass; the dry run of the same selection
    planned exactly what ran."""
    out = tmp_path / "evidence"
    chosen = ("-k", "drain.sut_cleanup.cancel")
    result = run_cli("--quiet", "run", "drain", *chosen, "--out", str(out), timeout=900)
    assert result.returncode == 1, result.stdout + result.stderr
    (scenario,) = json.loads((out / "results.json").read_text())["scenarios"]
    assert scenario["selected"] == ["drain.sut_cleanup.cancel"] and scenario["error"] is None
    assert [p["title"] for p in scenario["phases"]] == [
        "deploying replicas",
        "SUT cleanup: cancel",
        "stopping the replicas",
    ]
    (check,) = scenario["checks"]
    assert check["id"] == "drain.sut_cleanup.cancel" and check["verdict"] == "fail", check
    assert check["observed"].startswith("4 of 4 in-flight stream(s) cut; endpoint exit 137"), check
    verified = run_cli("verify", str(out), "--require-pass")
    assert verified.returncode == 1, verified.stdout + verified.stderr
    assert (
        "partial: only the checks chosen with --check were judged (drain: drain.sut_cleanup.cancel)" in verified.stdout
    )
    assert "policy --require-pass: NOT met" in verified.stdout
    assert "a partial run" in (out / "summary.md").read_text()
    assert_the_dry_run_planned_what_the_run_did(out / "commands.jsonl", *chosen, scenario="drain")
