"""What a gate file's sections become: the run request, and the scenarios' pytest options."""

import itertools
from dataclasses import replace

import pytest

from dd_accept.harness.gate import _request
from dd_accept.harness.gate_file import parse_gate
from dd_accept.harness.runner import _pytest_argv

GATE = """
[gate]
name = "site"
scenarios = ["overload", "drain"]
[options]
replicas = 4
overloaded = 1
parallel = 1
[thresholds]
drain_window_s = 8
drain_allowance_s = 9.5
[cluster]
mode = "existing"
run_dir = "/lustre/dd"
partition = "gpu"
account = "llm"
time = "45:00"
gres = "gpu:8"
srun_args = ["--mpi=none", "--cpu-bind=none"]
"""


def test_gate_sections_reach_the_scenarios_as_options(tmp_path):
    gate = parse_gate(GATE, "site.toml")
    request = _request(gate, "data-designer-slurm==1.0.0rc1", tmp_path / "out", None)
    assert request.scenarios() == ["overload", "drain"] and request.allow_unsupported is False
    assert request.cluster.mode == "existing" and request.cluster.run_dir == "/lustre/dd"
    assert request.cluster.salloc_args() == ("--partition=gpu", "--account=llm", "--gres=gpu:8")
    argv = _pytest_argv(request, tmp_path)
    pairs = dict(itertools.pairwise(argv))
    assert pairs["--dd-cluster-mode"] == "existing" and pairs["--dd-run-dir"] == "/lustre/dd"
    assert pairs["--dd-partition"] == "gpu" and pairs["--dd-account"] == "llm" and pairs["--dd-time"] == "45:00"
    assert pairs["--dd-gres"] == "gpu:8" and pairs["--dd-replicas"] == "4" and pairs["--dd-overloaded"] == "1"
    assert "--dd-srun-arg=--mpi=none" in argv and "--dd-srun-arg=--cpu-bind=none" in argv
    assert pairs["--dd-drain-window"] == "8.0" and pairs["--dd-drain-allowance"] == "9.5"
    assert "-n" not in argv  # parallel = 1: one allocation at a time
    assert pairs["--dd-nodes"] == "1", "no scenario here loses a node"


def test_a_vllm_backend_section_reaches_the_scenario(tmp_path):
    gate = parse_gate(
        '[gate]\nname = "v"\nscenarios = ["overload"]\n[backend]\nkind = "vllm"\nmodel = "org/m"\n'
        'gpus_per_replica = 2\nvllm_args = ["--max-num-seqs=64"]\nvllm_command = "/opt/vllm/bin/vllm"\n',
        "v.toml",
    )
    argv = _pytest_argv(_request(gate, "x==1", tmp_path, None), tmp_path)
    pairs = dict(itertools.pairwise(argv))
    assert pairs["--dd-backend"] == "vllm" and pairs["--dd-model"] == "org/m" and pairs["--dd-gpus-per-replica"] == "2"
    assert "--dd-vllm-arg=--max-num-seqs=64" in argv and pairs["--dd-vllm-command"] == "/opt/vllm/bin/vllm"


def test_a_docker_gate_passes_no_login_node_options(tmp_path):
    gate = parse_gate('[gate]\nname = "g"\nscenarios = ["overload"]\n', "g.toml")
    argv = _pytest_argv(_request(gate, "x==1", tmp_path, None), tmp_path)
    assert not [part for part in argv if part.startswith(("--dd-cluster-mode", "--dd-run-dir", "--dd-srun-arg"))]
    assert "--dd-drain-window" not in argv


@pytest.mark.parametrize(
    ("scenarios", "parallel", "workers", "nodes"),
    [("overload", 2, None, "1"), ("health", 2, None, "2"), ("overload,drain", 2, "2", "2"), ("all", 2, "2", "3")],
)
def test_the_cluster_has_a_node_per_worker_and_one_to_lose(tmp_path, scenarios, parallel, workers, nodes):
    gate = parse_gate(f'[gate]\nname = "g"\nscenarios = ["overload"]\n[options]\nparallel = {parallel}\n', "g.toml")
    request = replace(_request(gate, "x==1", tmp_path, None), scenario=scenarios)
    pairs = dict(itertools.pairwise(_pytest_argv(request, tmp_path)))
    assert pairs.get("-n") == workers and pairs["--dd-nodes"] == nodes
