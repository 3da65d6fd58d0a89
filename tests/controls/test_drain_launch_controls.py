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


def _cleanup(allocation, run, profile, progress):
    return run_drain(allocation, run, profile, DrainOptions(), progress, checks=("drain.sut_cleanup.*",))


def _cleanup_and_scancel(allocation, run, profile, progress):
    checks = ("drain.scancel_step", "drain.sut_cleanup.*")
    return run_drain(allocation, run, profile, DrainOptions(), progress, checks=checks)


def test_a_cleanup_that_finds_steps_by_what_the_sut_launch_path_recorded_passes_sut_cleanup(
    sut_wheelhouse, sut_image, sut_profile, tmp_path
):
    checks = run_with_fault(_cleanup, "launch-recorded-cleanup", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    assert set(checks) == {f"drain.sut_cleanup.{mode}" for mode in CLEANUP_MODES}, "only the drills ran"
    for mode in CLEANUP_MODES:
        check = checks[f"drain.sut_cleanup.{mode}"]
        assert check.verdict == "pass", check
        assert check.observed.startswith("0 of 4 in-flight stream(s) cut; endpoint exit 0"), check
        assert "steps left: none" in check.observed and "KILL never" in check.observed, check
        # the drill's streams had about 8 s left at TERM: drained, inside the window
        assert 6.0 < check.metrics["endpoint_exit_s"] <= 12.0, check
        # its stop function waited for the endpoint: it returned once the endpoint had ended
        assert check.metrics["stop_returned_s"] >= check.metrics["endpoint_exit_s"] - 1.0, check


def test_a_cleanup_that_returns_while_its_endpoint_drains_is_caught_by_sut_cleanup(
    sut_wheelhouse, sut_image, sut_profile, tmp_path
):
    checks = run_with_fault(_cleanup_and_scancel, "detached-cleanup", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    for mode in CLEANUP_MODES:
        check = checks[f"drain.sut_cleanup.{mode}"]
        print("detached-cleanup:", check.observed, "|", check.detail)
        assert check.verdict == "fail" and "before its endpoint ended" in check.detail, check
        # the reason is the return alone: every stream completed, the endpoint exited 0 on its one TERM
        assert check.observed.startswith("0 of 4 in-flight stream(s) cut; endpoint exit 0"), check
        assert check.metrics["stop_returned_s"] < 2.0 and check.metrics["endpoint_exit_s"] > 6.0, check
    assert checks["drain.scancel_step"].verdict == "pass", "proxy untouched"
