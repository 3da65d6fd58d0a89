"""`dd-accept cluster` as a user runs it: up, status, exec, down, stale leftovers, Ctrl-C."""

import signal
import subprocess
import sys
import time
import uuid

import docker
import pytest

from dd_accept.base.errors import ClusterError
from dd_accept.base.waiting import wait_until
from dd_accept.slurm_docker import cluster as cluster_module
from dd_accept.slurm_docker import engine
from dd_accept.slurm_docker.cluster import SlurmCluster
from dd_accept.slurm_docker.spec import ClusterSpec
from dd_accept.slurm_docker.sweep import remove_cluster
from tests.helpers import labelled_objects, run_cli
from tests.unit.test_json_output import document_of

pytestmark = pytest.mark.cluster


def _name(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def cleanup_names():
    names = []
    yield names
    client = docker.from_env()
    for name in names:
        remove_cluster(client, name)


def test_up_status_exec_down_through_the_cli(cleanup_names):
    name = _name("clitest")
    cleanup_names.append(name)
    up = run_cli("--quiet", "cluster", "up", "--name", name, "--nodes", "1", "--subnet", "10.213.7.0/28")
    assert up.returncode == 0, up.stderr
    network = docker.from_env().networks.get(f"{name}-net")
    assert network.attrs["IPAM"]["Config"][0]["Subnet"] == "10.213.7.0/28"

    status = run_cli("cluster", "status", "--name", name)
    assert status.returncode == 0 and "node1" in status.stdout and "idle" in status.stdout

    held = run_cli("cluster", "exec", "--name", name, "--", "salloc", "--no-shell", "-N1", "-J", "held")
    assert held.returncode == 0, held.stderr
    step = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dd_accept.harness.cli",
            "cluster",
            "exec",
            "--name",
            name,
            "--",
            "srun",
            "--jobid=1",
            "--overlap",
            "-J",
            "napping",
            "sleep",
            "60",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        busy = wait_until(
            lambda: run_cli("cluster", "status", "--name", name).stdout,
            lambda out: "1.0" in out,
            timeout=30,
            what="the step in status",
        )
        assert "job" in busy and "RUNNING" in busy and "step" in busy and "napping" in busy
        seen = run_cli("cluster", "status", "--name", name, "--json")
        (cluster,) = document_of(seen, "dd-accept/cluster-status/v1")["clusters"]
        assert cluster["name"] == name and [n["name"] for n in cluster["nodes"]] == ["node1"]
        assert cluster["nodes"][0]["cpus"] > 0
        assert {"id": "1", "name": "held", "state": "RUNNING", "nodes": 1, "nodelist": "node1"} in cluster["jobs"]
        assert {"id": "1.0", "name": "napping", "nodelist": "node1"} in cluster["steps"]
    finally:
        run_cli("cluster", "exec", "--name", name, "--", "scancel", "1")
        step.wait(timeout=30)

    hostname = run_cli("cluster", "exec", "--name", name, "--", "srun", "-N1", "hostname")
    assert (hostname.returncode, hostname.stdout.strip()) == (0, "node1")
    failing = run_cli("cluster", "exec", "--name", name, "--", "sh", "-c", "exit 7")
    assert failing.returncode == 7

    down = run_cli("cluster", "down", "--name", name)
    assert down.returncode == 0, down.stderr
    assert labelled_objects(name) == []

    again = run_cli("cluster", "down", "--name", name)
    assert again.returncode == 2 and "no dd-accept cluster named" in again.stderr


def test_up_removes_a_stale_cluster_of_the_same_name_first(cleanup_names):
    name = _name("stale")
    cleanup_names.append(name)
    client = docker.from_env()
    client.networks.create(f"{name}-net", internal=True, labels={engine.LABEL_CLUSTER: name})
    leftover = client.containers.create(
        SlurmClusterImage.tag(),
        command=["true"],
        name=f"{name}-leftover",
        labels={engine.LABEL_CLUSTER: name},
        entrypoint=["true"],
    )
    with SlurmCluster(ClusterSpec(name=name, nodes=1)) as cluster:
        assert cluster.exec(["srun", "-N1", "true"]).ok
        with pytest.raises(docker.errors.NotFound):
            client.containers.get(leftover.id)
    assert labelled_objects(name) == []


class SlurmClusterImage:
    @staticmethod
    def tag():
        from dd_accept.slurm_docker.images import slurm_tag

        return slurm_tag()


def test_a_node_that_never_registers_times_out_with_log_tails(cleanup_names, monkeypatch):
    """slurm.conf declares a second node that no container provides: readiness must time out."""
    name = _name("notready")
    cleanup_names.append(name)
    real = cluster_module.render_slurm_conf
    monkeypatch.setattr(
        cluster_module, "render_slurm_conf", lambda spec: real(spec).replace("NodeName=node1 ", "NodeName=node[1-2] ")
    )
    with pytest.raises(ClusterError) as caught:
        SlurmCluster(ClusterSpec(name=name, nodes=1)).up(ready_timeout=8)
    message = str(caught.value)
    assert "not ready: timed out after 8.0s" in message and "last observed:" in message
    assert len(message.splitlines()[0]) < 600, "the first line must stay readable"
    assert "--- ctl log" in message and "--- node1 log" in message
    assert labelled_objects(name) == []


def test_a_daemon_that_exits_aborts_readiness_at_once_with_its_log(cleanup_names, monkeypatch):
    """A node whose slurmd cannot find itself in slurm.conf exits; up must not wait it out."""
    name = _name("deadnode")
    cleanup_names.append(name)
    real = cluster_module.render_slurm_conf
    monkeypatch.setattr(
        cluster_module, "render_slurm_conf", lambda spec: real(spec).replace("NodeName=node1 ", "NodeName=nodeX ")
    )
    started = time.monotonic()
    with pytest.raises(ClusterError) as caught:
        SlurmCluster(ClusterSpec(name=name, nodes=1)).up(ready_timeout=60)
    assert time.monotonic() - started < 30
    assert "container node1 exited" in str(caught.value)
    assert labelled_objects(name) == []


@pytest.mark.parametrize("delay", [0.0, 0.4, 2.0], ids=["creating", "starting", "waiting-ready"])
def test_ctrl_c_during_up_removes_everything_started(cleanup_names, delay):
    name = _name("sigint")
    cleanup_names.append(name)
    process = subprocess.Popen(
        [sys.executable, "-m", "dd_accept.harness.cli", "--quiet", "cluster", "up", "--name", name, "--nodes", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(
            lambda: labelled_objects(name),
            lambda found: any("container" in f for f in found),
            timeout=60,
            what="the first container",
            interval=0.05,
        )
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    assert labelled_objects(name) == []


def test_sigterm_during_up_is_cleaned_up_like_ctrl_c(cleanup_names):
    name = _name("sigterm")
    cleanup_names.append(name)
    process = subprocess.Popen(
        [sys.executable, "-m", "dd_accept.harness.cli", "--quiet", "cluster", "up", "--name", name, "--nodes", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: labelled_objects(name), bool, timeout=60, what="the network", interval=0.05)
        time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130
    assert labelled_objects(name) == []
