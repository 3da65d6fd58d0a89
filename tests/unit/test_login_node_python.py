"""A site's login node whose python3 is not the one the SUT's wheels were fetched for is one
clear environment error before anything is installed, not a pip failure deep in a run."""

import subprocess
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from dd_accept.base.errors import EnvironmentProblem, UsageError
from dd_accept.slurm_docker.login_node import ExistingCluster


def test_another_python_on_the_login_node_is_refused_before_installing(tmp_path, monkeypatch):
    cluster = ExistingCluster(run_dir=tmp_path)
    ran = []

    def exec_(argv, **kwargs):
        ran.append(argv)
        return SimpleNamespace(ok=True, stdout="3.12\n")

    monkeypatch.setattr(cluster, "exec", exec_)
    wheelhouse = SimpleNamespace(digest="ab" * 32, python="3.11", path=tmp_path / "nowhere")
    with pytest.raises(EnvironmentProblem, match=r"login node's python3 is 3\.12; .* wheels for Python 3\.11"):
        cluster.install_sut(wheelhouse)
    assert len(ran) == 1 and ran[0][0] == "python3"  # asked, then stopped: no venv, no pip
    assert not list((tmp_path / "dd-accept-sut").glob("*/installed"))


def _shared_check(tmp_path, monkeypatch, task):
    """check_shared with srun replaced by `task(argv of the job's own command)`."""
    cluster = ExistingCluster(run_dir=tmp_path)

    def exec_(argv, **kwargs):
        job = argv[argv.index("sh") :]  # what srun would run on the compute node
        return task(job)

    monkeypatch.setattr(cluster, "exec", exec_)
    return cluster


def _run(job, *, hide_stdout=False, marker_from=None):
    if marker_from is not None:
        job = [*job[:4], marker_from, *job[5:]]
    done = subprocess.run(job, capture_output=True, text=True, check=False)
    return SimpleNamespace(ok=done.returncode == 0, stdout="" if hide_stdout else done.stdout, describe=lambda: "")


def test_a_shared_run_dir_is_proven_by_the_reply_file_when_srun_loses_the_output(tmp_path, monkeypatch):
    cluster = _shared_check(tmp_path, monkeypatch, lambda job: _run(job, hide_stdout=True))
    cluster.check_shared(tries=1)
    assert not list(tmp_path.glob(".dd-accept-shared-*")), "marker and reply removed"


def test_a_marker_the_compute_node_sees_a_moment_late_still_proves_sharing(tmp_path, monkeypatch):
    """A network filesystem may show a new file on another host a moment later: the job waits."""

    def late(job):
        marker = Path(job[4])
        away = marker.with_name(marker.name + ".away")
        marker.rename(away)
        threading.Timer(1.2, away.rename, (marker,)).start()
        return _run(job)

    cluster = _shared_check(tmp_path, monkeypatch, late)
    cluster.check_shared(tries=4)


def test_a_run_dir_the_compute_node_does_not_see_is_a_usage_error_saying_what_the_job_did(tmp_path, monkeypatch):
    elsewhere = str(tmp_path / "not-there" / "marker")
    cluster = _shared_check(tmp_path, monkeypatch, lambda job: _run(job, marker_from=elsewhere))
    expected = r"not shared with the compute nodes .* within 1 s; it printed nothing and wrote nothing back"
    with pytest.raises(UsageError, match=expected):
        cluster.check_shared(tries=1)
    assert not list(tmp_path.glob(".dd-accept-shared-*"))


def test_a_login_node_cannot_read_a_nodes_deliveries_and_says_unknown_not_none(tmp_path):
    """A site's slurmd log is not the login node's to read: its deliveries are unknown (None),
    which the drain stops read as 'ask scancel's count or the queue', never as 'no TERM came'."""
    assert ExistingCluster(run_dir=tmp_path).signals_sent("7.1", "node1", 15) is None
