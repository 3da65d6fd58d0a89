"""`--cluster existing`: dd-accept installed on a Slurm login node runs the same scenarios.

The login node here is the controller of a dockerized cluster of our own: dd-accept and its
dependencies are installed there offline (wheels built on the host, for the node's Python),
the SUT's wheels are handed over as files, and `dd-accept run overload --cluster existing`
runs inside it with only srun/salloc/scancel and a shared directory. Nothing in that run
knows about Docker. Bad login-node input is exit 2 with one line and nothing started.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from dd_accept.acceptance import health_checks
from dd_accept.acceptance.catalog import CHECKS
from dd_accept.base.results import load_results
from dd_accept.deployment import ENDPOINT_STARTS
from dd_accept.slurm_docker import engine, images
from dd_accept.slurm_docker.cluster import SlurmCluster
from dd_accept.slurm_docker.spec import ClusterSpec
from dd_accept.sut.wheelhouse import node_platform_args
from tests import variants
from tests.helpers import run_cli

REPOSITORY = Path(__file__).parents[2]
LOGIN = "/shared/login"
VENV_BIN = f"{LOGIN}/venv/bin"


def _pip(*args: str) -> None:
    result = subprocess.run([sys.executable, "-m", "pip", *args, "--disable-pip-version-check", "-q"], check=False,
                            capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.fixture(scope="module")
def login_node(tmp_path_factory, sut_wheelhouse):
    """A two-node cluster whose controller has dd-accept installed like a site would (two
    nodes: scenarios run in parallel allocations, as `run` does by default)."""
    kit, source = tmp_path_factory.mktemp("kit"), tmp_path_factory.mktemp("source")
    # Built from a copy: an in-tree build would leave build/ and *.egg-info in the checkout.
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPOSITORY / name, source / name)
    shutil.copytree(REPOSITORY / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    _pip("wheel", "--no-deps", "-w", str(kit), str(source))
    (harness_wheel,) = kit.glob("dd_accept-*.whl")
    _pip("download", "-d", str(kit), *node_platform_args(), str(harness_wheel))
    client = engine.connect()
    image = images.ensure_images(client)
    spec = ClusterSpec(name=f"ddtest-login-{uuid.uuid4().hex[:8]}", nodes=2, cpus_per_node=64)
    with SlurmCluster(spec, image=image, client=client) as cluster:  # entering starts it
        login = cluster.host_shared_dir / "login"
        shutil.copytree(kit, login / "kit")
        shutil.copytree(sut_wheelhouse.path, login / "sut-wheels")
        for argv in (
            ["python3", "-m", "venv", f"{LOGIN}/venv"],
            [f"{VENV_BIN}/pip", "install", "-q", "--no-index", "--find-links", f"{LOGIN}/kit", "dd-accept"],
        ):
            record = cluster.exec(argv, timeout=600)
            assert record.ok, record.describe()
        (login / "run").mkdir()
        yield cluster, login, sut_wheelhouse


def _dd_accept(cluster: SlurmCluster, *args: str, timeout: float = 900):
    """dd-accept on the login node, offline: pip may only use the wheels handed over."""
    environment = {
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": f"{LOGIN}/sut-wheels",
        "DD_ACCEPT_STATE_DIR": f"{LOGIN}/state",
    }
    return cluster.exec([f"{VENV_BIN}/dd-accept", "--quiet", *args], timeout=timeout, environment=environment)


@pytest.mark.cluster
def test_run_overload_on_an_existing_cluster_from_its_login_node(login_node):
    cluster, login, wheelhouse = login_node
    assert not cluster.exec(["sh", "-c", "command -v docker"]).ok  # the login node has no Docker at all
    (wheel,) = wheelhouse.sut_wheels
    record = _dd_accept(
        cluster, "run", "overload", "--cluster", "existing", "--run-dir", f"{LOGIN}/run",
        "--sut", f"{LOGIN}/sut-wheels/{wheel.file}", "--time", "20:00", "--srun-arg=--mpi=none",
        "--out", f"{LOGIN}/evidence",
    )  # fmt: skip
    assert record.ok, record.describe() + "\n" + record.stdout_tail[-3000:] + record.stderr_tail[-3000:]
    bundle = login / "evidence"
    results = load_results(bundle / "results.json")  # a real bundle follows the published schema
    assert results["verdict"] == "pass"
    assert results["sut"]["cluster"] == "existing" and results["sut"]["node_image"] is None
    (scenario,) = results["scenarios"]
    assert len(scenario["checks"]) == len(_reported("overload"))
    assert {c["verdict"] for c in scenario["checks"]} == {"pass"}
    commands = [json.loads(line) for line in (bundle / "commands.jsonl").read_text().splitlines()]
    sallocs = [c for c in commands if c["argv"][0] == "salloc"]
    assert sallocs and all("--time=20:00" in c["argv"] and c["node"] == "login" for c in sallocs)
    steps = [c for c in commands if c["argv"][0] == "srun" and "--overlap" in c["argv"]]
    assert steps and all("--mpi=none" in c["argv"] for c in steps)
    assert any(c["node"] == "node1" for c in commands)  # proxy probes ran as steps on the compute node
    assert all(str(login) not in line for line in (bundle / "commands.jsonl").read_text().splitlines())
    assert run_cli("verify", str(bundle)).returncode == 0
    assert not cluster.exec(["squeue", "-h"]).stdout.strip()  # nothing left in the queue
    (sut_only,) = (login / "run" / "dd-accept-sut").glob("*/sut-only")  # for a site's vLLM to import the middleware
    assert (sut_only / "data_designer").is_dir() and not (sut_only / "aiohttp").exists()


# rc1's verdicts on the docker cluster (README, "What it finds"): the login-node run must agree.
RC1_FAILS = variants.RC1_FAILS


# dd-accept never takes a site's node down, drains it, restarts its controller or preempts its jobs: those
# phases run on its own cluster only.
ONLY_ON_DDACCEPTS_CLUSTER = {health_checks.node_loss_detected.check_id, health_checks.node_loss_attempt_failed.check_id}
ONLY_ON_DDACCEPTS_CLUSTER |= {health_checks.node_drain_attempt_undisturbed.check_id}
ONLY_ON_DDACCEPTS_CLUSTER |= {health_checks.controller_restart_attempt_undisturbed.check_id}
ONLY_ON_DDACCEPTS_CLUSTER |= {health_checks.preemption_attempt_failed.check_id}


def _reported(scenario, site=False):
    """The checks a scenario reports when its proxy serves (endpoint_starts is reported on
    failure); on a site's cluster, without those that take a node down."""
    skipped = ONLY_ON_DDACCEPTS_CLUSTER if site else set()
    return [check for check in CHECKS[scenario] if not check.endswith(f".{ENDPOINT_STARTS}") and check not in skipped]


@pytest.mark.cluster
def test_drain_and_health_judge_rc1_as_on_the_docker_cluster(login_node):
    """The scenarios with drills from the login node: background launchers signalled by PID,
    steps signalled with scancel, node-local probes of /health behave as on the docker cluster,
    and rc1 gets the same verdicts check by check. (Streaming drives the proxy as overload does,
    which the test above runs from here; on the docker cluster it runs in its own controls.)"""
    cluster, login, wheelhouse = login_node
    (wheel,) = wheelhouse.sut_wheels
    record = _dd_accept(
        cluster, "run", "drain,health", "--parallel", "2", "--cluster", "existing",
        "--run-dir", f"{LOGIN}/run", "--sut", f"{LOGIN}/sut-wheels/{wheel.file}", "--out", f"{LOGIN}/evidence-rest",
        timeout=1500,
    )  # fmt: skip
    assert record.exit_code == 1, record.describe() + "\n" + record.stderr_tail[-3000:]  # rc1 fails, as it should
    results = json.loads((login / "evidence-rest" / "results.json").read_text())
    assert [s["name"] for s in results["scenarios"]] == ["drain", "health"]
    assert all(s["error"] is None for s in results["scenarios"])
    verdicts = {c["id"]: c["verdict"] for s in results["scenarios"] for c in s["checks"]}
    assert set(verdicts) == {check for name in ("drain", "health") for check in _reported(name, site=True)}
    assert {check for check, verdict in verdicts.items() if verdict == "fail"} == RC1_FAILS & set(verdicts)
    assert {verdict for check, verdict in verdicts.items() if check not in RC1_FAILS} == {"pass"}
    assert run_cli("verify", str(login / "evidence-rest")).returncode == 0
    assert not cluster.exec(["squeue", "-h"]).stdout.strip()


@pytest.mark.cluster
def test_a_run_dir_the_compute_nodes_do_not_share_is_exit_2(login_node):
    cluster, login, wheelhouse = login_node
    (wheel,) = wheelhouse.sut_wheels
    cluster.exec(["mkdir", "-p", "/tmp/login-only"])
    record = _dd_accept(
        cluster, "run", "overload", "--cluster", "existing", "--run-dir", "/tmp/login-only",
        "--sut", f"{LOGIN}/sut-wheels/{wheel.file}", "--out", f"{LOGIN}/not-written",
    )  # fmt: skip
    assert record.exit_code == 2, record.describe()
    expected = "/tmp/login-only is not shared with the compute nodes (a job could not read it there within 5 s"
    assert expected in record.stderr_tail
    assert record.stderr_tail.count("\n") == 1
    assert not (login / "not-written").exists()
    assert not cluster.exec(["squeue", "-h"]).stdout.strip()


def test_existing_cluster_input_errors_are_one_line_exit_2(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    no_slurm = {"PATH": str(empty)}
    cases = [
        (["--cluster", "existing", "--run-dir", str(tmp_path)], no_slurm, "missing: salloc, srun, scancel"),
        (["--run-dir", str(tmp_path)], None, "--run-dir applies to --cluster existing only"),
        (["--srun-arg=--mpi=none"], None, "--srun-arg applies to --cluster existing only"),
    ]
    fake = tmp_path / "fake-slurm"
    fake.mkdir()
    for command in ("salloc", "srun", "scancel", "squeue", "sinfo", "scontrol"):
        (fake / command).write_text("#!/bin/sh\nexit 99\n")
        (fake / command).chmod(0o755)
    with_slurm = {"PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"}
    cases += [
        (["--cluster", "existing"], with_slurm, "needs --run-dir DIR"),
        (["--cluster", "existing", "--run-dir", "relative/dir"], with_slurm, "must be an absolute path"),
        (["--cluster", "existing", "--run-dir", str(tmp_path / "absent")], with_slurm, "no such directory"),
        (["--cluster", "existing", "--run-dir", "/proc"], with_slurm, "is not writable"),
    ]
    out = tmp_path / "out"
    for args, environment, needle in cases:
        result = run_cli("run", "overload", *args, "--out", str(out), env=environment)
        assert result.returncode == 2 and needle in result.stderr, (args, result.stderr)
        assert result.stderr.count("\n") == 1 and not out.exists()
