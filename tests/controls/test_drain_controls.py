"""Controls for the drain checks.

rc1 is the positive control of drain.scancel_step and drain.allowance and the negative
control of drain.sut_cleanup.* (its cleanup TERMs srun launchers: a true finding). rc1 with
the seed pull request's step-aware cleanup is the positive control of drain.sut_cleanup.*.
"""

import pytest

from dd_accept.acceptance.drain import DrainOptions, run_drain
from dd_accept.acceptance.progress import ProgressWriter
from dd_accept.fixtures.deployment import RunDirectory
from tests.controls.controls import run_with_fault

pytestmark = pytest.mark.cluster


def _drain(allocation, run, profile, progress):
    return run_drain(allocation, run, profile, DrainOptions(), progress)


def test_rc1_drains_on_scancel_and_its_own_cleanup_cuts_every_stream(sut_allocation, sut_profile, sut_cluster):
    result = _drain(sut_allocation, RunDirectory.create(sut_cluster), sut_profile, ProgressWriter(None, "drain"))
    checks = {c.id: c for c in result.checks}
    assert checks["drain.scancel_step"].verdict == "pass", checks["drain.scancel_step"]
    assert checks["drain.allowance"].verdict == "pass", checks["drain.allowance"]
    assert checks["drain.allowance"].observed.startswith("1 long stream(s): 1 forced")
    for mode in ("completion", "failure", "cancel"):
        check = checks[f"drain.sut_cleanup.{mode}"]
        assert check.verdict == "fail" and check.observed.startswith(
            "4 of 4 in-flight stream(s) cut; endpoint exit 137"
        )


def test_step_aware_cleanup_is_the_positive_control_of_sut_cleanup(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    checks = run_with_fault(_drain, "step-aware-cleanup", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    for mode in ("completion", "failure", "cancel"):
        check = checks[f"drain.sut_cleanup.{mode}"]
        assert check.verdict == "pass", check
        assert check.observed.startswith("0 of 4 in-flight stream(s) cut; endpoint exit 0")


def test_exit_on_term_is_caught_by_scancel_step(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    checks = run_with_fault(_drain, "exit-on-term", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    scancel = checks["drain.scancel_step"]
    assert scancel.verdict == "fail" and "4 lost" in scancel.observed and "endpoint exit 143" in scancel.observed


def test_a_3s_drain_bound_is_caught_by_allowance(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    checks = run_with_fault(_drain, "drain-3s", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    allowance = checks["drain.allowance"]
    assert allowance.verdict == "fail" and "1 lost" in allowance.observed
    assert checks["drain.scancel_step"].verdict == "pass", "4 s streams launched 1 s before TERM fit in 3 s"
