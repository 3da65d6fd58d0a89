"""What a gate file's sections become: the run request, and what the runner hands the
scenarios' pytest child (its command line and the request document it reads)."""

import itertools
import json
import stat
from dataclasses import replace

import pytest

from dd_accept.acceptance.request import RunRequest
from dd_accept.harness.gate import _request
from dd_accept.harness.gate_file import parse_gate
from dd_accept.harness.runner import _pytest_argv, write_request


def _handed(request: RunRequest, tmp_path) -> tuple[list[str], dict]:
    """The child's argv and the request document it reads, as the runner writes them."""
    path = write_request(request, tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600, "it carries the client headers: this user's only"
    argv = _pytest_argv(request, tmp_path, path)
    assert argv[argv.index("--dd-request") + 1] == str(path)
    assert RunRequest.from_json(path.read_text()).scenarios() == request.scenarios()
    return argv, json.loads(path.read_text())


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
    assert request.scenarios() == ["overload", "drain"] and request.general.allow_unsupported is False
    assert request.cluster.mode == "existing" and request.cluster.run_dir == "/lustre/dd"
    assert request.cluster.salloc_args() == ("--partition=gpu", "--account=llm", "--gres=gpu:8")
    argv, sent = _handed(request, tmp_path)
    pairs = dict(itertools.pairwise(argv))
    assert sent["cluster"] == {
        "mode": "existing",
        "run_dir": "/lustre/dd",
        "partition": "gpu",
        "account": "llm",
        "time": "45:00",
        "gres": "gpu:8",
        "srun_args": ["--mpi=none", "--cpu-bind=none"],
    }
    assert sent["options"]["overload"] == {"replicas": 4, "overloaded": 1}
    assert sent["drain"] == {"window_seconds": 8.0, "allowance_seconds": 9.5}
    assert "-n" not in argv  # parallel = 1: one allocation at a time
    assert pairs["--dd-nodes"] == "1", "no scenario here loses a node"


def test_a_vllm_backend_section_reaches_the_scenario(tmp_path):
    gate = parse_gate(
        '[gate]\nname = "v"\nscenarios = ["overload"]\n[backend]\nkind = "vllm"\nmodel = "org/m"\n'
        'gpus_per_replica = 2\nvllm_args = ["--max-num-seqs=64"]\nvllm_command = "/opt/vllm/bin/vllm"\n',
        "v.toml",
    )
    _, sent = _handed(_request(gate, "x==1", tmp_path, None), tmp_path)
    assert sent["backend"] == {
        "backend": "vllm",
        "model": "org/m",
        "gpus_per_replica": 2,
        "vllm_args": ["--max-num-seqs=64"],
        "vllm_command": "/opt/vllm/bin/vllm",
    }


def test_a_docker_gate_passes_no_login_node_options(tmp_path):
    gate = parse_gate('[gate]\nname = "g"\nscenarios = ["overload"]\n', "g.toml")
    _, sent = _handed(_request(gate, "x==1", tmp_path, None), tmp_path)
    assert sent["cluster"] == {} and sent["drain"] == {}, "only what the file sets travels"


@pytest.mark.parametrize(
    ("scenarios", "parallel", "workers", "nodes"),
    [("overload", 2, None, "1"), ("health", 2, None, "2"), ("overload,drain", 2, "2", "2"), ("all", 2, "2", "3")],
)
def test_the_cluster_has_a_node_per_worker_and_one_to_lose(tmp_path, scenarios, parallel, workers, nodes):
    gate = parse_gate(f'[gate]\nname = "g"\nscenarios = ["overload"]\n[options]\nparallel = {parallel}\n', "g.toml")
    request = replace(_request(gate, "x==1", tmp_path, None), scenario=scenarios)
    pairs = dict(itertools.pairwise(_handed(request, tmp_path)[0]))
    assert pairs.get("-n") == workers and pairs["--dd-nodes"] == nodes
