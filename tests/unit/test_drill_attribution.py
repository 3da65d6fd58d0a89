"""A cleanup drill that goes wrong is the SUT's finding only where the SUT's script was what
ran: sourcing it and its register function (until the drill writes `launcher-pid`) and its
stop function (until it writes `cleanup-status`). After those, the drill and Slurm are
dd-accept's: exit 2, never a failed check against a correct SUT."""

from types import SimpleNamespace

import pytest

from dd_accept.acceptance import drain
from dd_accept.base.errors import ClusterError, SutBehaviourMissing


def _drill(finished):
    ended = SimpleNamespace(describe=lambda: "exit 1: bash drill")
    return SimpleNamespace(finished=finished, wait=lambda timeout: ended)


def test_a_register_function_that_never_returns_fails_the_drills_check(tmp_path, monkeypatch):
    monkeypatch.setattr(drain, "DRILL_READY_S", 0.2)
    with pytest.raises(SutBehaviourMissing) as missing:
        drain._drill_ready(_drill(False), tmp_path, "cleanup.sh sources and its register returns", "sut_cleanup.cancel")
    assert missing.value.behaviour == "sut_cleanup.cancel" and "within 0.2s" in missing.value.expected


def test_a_step_lookup_that_never_ends_after_registration_is_the_harnesss(tmp_path, monkeypatch):
    monkeypatch.setattr(drain, "DRILL_READY_S", 0.2)
    (tmp_path / "launcher-pid").write_text("41\n")
    with pytest.raises(ClusterError, match="did not find the endpoint's step"):
        drain._drill_ready(_drill(False), tmp_path, "registers", "sut_cleanup.cancel")


def test_a_drill_ended_by_the_suts_script_is_the_suts_and_after_it_the_harnesss(tmp_path):
    with pytest.raises(SutBehaviourMissing, match="the controller ended first: exit 1"):
        drain._drill_ready(_drill(True), tmp_path, "registers", "sut_cleanup.failure")
    (tmp_path / "launcher-pid").write_text("41\n")
    with pytest.raises(ClusterError, match="ended after launching the endpoint"):
        drain._drill_ready(_drill(True), tmp_path, "registers", "sut_cleanup.failure")


def test_a_drill_that_got_ready_raises_nothing(tmp_path):
    (tmp_path / "ready").write_text("ready\n")
    assert drain._drill_ready(_drill(False), tmp_path, "registers", "sut_cleanup.completion") is None
