"""Controls for the streaming checks: rc1 passes them all; three proxy faults are caught."""

import pytest

from dd_accept.acceptance.progress import ProgressWriter
from dd_accept.acceptance.streaming import StreamingOptions, run_streaming
from dd_accept.fixtures.deployment import RunDirectory
from tests.controls.controls import run_with_fault

pytestmark = pytest.mark.cluster


def _streaming(allocation, run, profile, progress):
    return run_streaming(allocation, run, profile, StreamingOptions(), progress)


def test_rc1_passes_every_streaming_check(sut_allocation, sut_profile, sut_cluster):
    result = _streaming(sut_allocation, RunDirectory.create(sut_cluster), sut_profile, ProgressWriter(None, "s"))
    assert [c.verdict for c in result.checks] == ["pass", "pass", "pass"], result.checks


def test_a_dropped_done_event_is_caught_by_integrity(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    checks = run_with_fault(_streaming, "done-stripped", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    integrity = checks["streaming.integrity"]
    assert integrity.verdict == "fail" and "64 truncated" in integrity.observed
    assert checks["streaming.no_buffering"].verdict == "pass"


def test_a_buffering_proxy_is_caught_by_no_buffering(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    checks = run_with_fault(_streaming, "buffering", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    buffering = checks["streaming.no_buffering"]
    assert buffering.verdict == "fail", buffering
    assert checks["streaming.integrity"].verdict == "pass", "every byte still arrives, only late"


def test_swapped_counters_are_caught_by_connection_accounting(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    checks = run_with_fault(_streaming, "swapped-connection-counters", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    assert checks["streaming.connection_accounting"].verdict == "fail"
    assert checks["streaming.integrity"].verdict == "pass"
