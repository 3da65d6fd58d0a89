"""The drain drill launches the endpoint through the SUT's own launch path (entrypoint.sh's
dd_start_endpoints, from a runtime manifest dd-accept writes), so a cleanup that finds each
endpoint's step by what that path recorded is judged on what it does, not on dd-accept's
conventions: launch-recorded-cleanup, the seed pull request's fix as it is worded (the task
records its JOB.STEP before executing the proxy; the cleanup validates it against the job's
steps, TERMs that step, keeps everything alive the 12 s allowance), reads nothing of the
drill's and passes every drain.sut_cleanup check, its endpoint exiting 0 on that one TERM.
(Launched by srun directly, as the drill did before, it found no identity, fell back to rc1's
TERM to the launcher and cut every stream.) detached-cleanup, the same fix returning at once
after its TERMs (the allowance and the force left to a background subshell), lets every
stream complete here, yet fails each drill: its stop function returned seconds before its
endpoint ended, and in production its controller and job would end under the drain. A file of
its own: --dist loadfile hands it its own worker."""

import pytest

from dd_accept.acceptance.drain import DrainOptions, run_drain
from tests.controls.controls import run_with_fault

pytestmark = pytest.mark.cluster
CLEANUP_MODES = ("completion", "failure", "cancel")


def _drills(allocation, run, profile, progress):
    checks = ("drain.sut_cleanup.*", "drain.sut_escalation")
    return run_drain(allocation, run, profile, DrainOptions(), progress, checks=checks)


def _drills_and_scancel(allocation, run, profile, progress):
    checks = ("drain.scancel_step", "drain.sut_cleanup.*", "drain.sut_escalation")
    return run_drain(allocation, run, profile, DrainOptions(), progress, checks=checks)


def test_a_cleanup_that_finds_steps_by_what_the_sut_launch_path_recorded_passes_sut_cleanup(
    sut_wheelhouse, sut_image, sut_profile, tmp_path
):
    checks = run_with_fault(_drills, "launch-recorded-cleanup", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    drills = {f"drain.sut_cleanup.{mode}" for mode in CLEANUP_MODES} | {"drain.sut_escalation"}
    assert set(checks) == drills, "only the drills ran"
    for mode in CLEANUP_MODES:
        check = checks[f"drain.sut_cleanup.{mode}"]
        assert check.verdict == "pass", check
        assert check.observed.startswith("0 of 4 in-flight stream(s) cut; endpoint exit 0"), check
        assert "steps left: none" in check.observed and "KILL never" in check.observed, check
        # the drill's streams had about 8 s left at TERM: drained, inside the window
        assert 6.0 < check.metrics["endpoint_exit_s"] <= 12.0, check
        # its stop function waited for the endpoint: it returned once the endpoint had ended
        assert check.metrics["stop_returned_s"] >= check.metrics["endpoint_exit_s"] - 1.0, check
    # a stream longer than the allowance: rc1's proxy drains on (fact 3), and the cleanup forces it at 12 s
    escalation = checks["drain.sut_escalation"]
    print("launch-recorded-cleanup:", escalation.observed, "|", escalation.detail)
    assert escalation.verdict == "pass", escalation
    assert 10.5 <= escalation.metrics["forced_s"] <= escalation.metrics["endpoint_exit_s"] <= 15.0, escalation
    assert escalation.metrics["stop_returned_s"] >= escalation.metrics["endpoint_exit_s"] - 1.0, escalation


def test_a_cleanup_that_returns_while_its_endpoint_drains_is_caught_by_sut_cleanup(
    sut_wheelhouse, sut_image, sut_profile, tmp_path
):
    checks = run_with_fault(_drills_and_scancel, "detached-cleanup", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    for mode in CLEANUP_MODES:
        check = checks[f"drain.sut_cleanup.{mode}"]
        print("detached-cleanup:", check.observed, "|", check.detail)
        assert check.verdict == "fail" and "before its endpoint ended" in check.detail, check
        # the reason is the return alone: every stream completed, the endpoint exited 0 on its one TERM
        assert check.observed.startswith("0 of 4 in-flight stream(s) cut; endpoint exit 0"), check
        assert check.metrics["stop_returned_s"] < 2.0 and check.metrics["endpoint_exit_s"] > 6.0, check
    escalation = checks["drain.sut_escalation"]
    print("detached-cleanup:", escalation.observed, "|", escalation.detail)
    assert escalation.verdict == "fail" and "before its endpoint ended" in escalation.detail, escalation
    assert escalation.metrics["stop_returned_s"] < 2.0 and escalation.metrics["endpoint_exit_s"] > 10.0, escalation
    assert checks["drain.scancel_step"].verdict == "pass", "proxy untouched"


def test_a_cleanup_that_never_forces_is_caught_by_sut_escalation(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    """The seed's step-aware cleanup waiting for its endpoint without a bound. The drills'
    streams end inside the window, the endpoint exits 0 and the wait returns: every
    drain.sut_cleanup check passes. With a stream longer than the allowance, rc1's proxy
    drains on (fact 3) and is never forced: the stop function returns only once the stream
    has ended, about 19 s after the stop."""
    checks = run_with_fault(_drills, "unbounded-cleanup", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    for mode in CLEANUP_MODES:
        check = checks[f"drain.sut_cleanup.{mode}"]
        assert check.verdict == "pass", check
    escalation = checks["drain.sut_escalation"]
    print("unbounded-cleanup:", escalation.observed, "|", escalation.detail)
    assert escalation.verdict == "fail" and "(unbounded escalation)" in escalation.detail, escalation
    assert "KILL never" in escalation.observed and escalation.metrics["endpoint_exit_s"] > 15.0, escalation
    # the reason is the missing force alone: the stop function did wait for its endpoint
    assert escalation.metrics["stop_returned_s"] >= escalation.metrics["endpoint_exit_s"] - 1.0, escalation
