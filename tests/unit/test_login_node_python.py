"""A site's login node whose python3 is not the one the SUT's wheels were fetched for is one
clear environment error before anything is installed, not a pip failure deep in a run."""

from types import SimpleNamespace

import pytest

from dd_accept.base.errors import EnvironmentProblem
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
