"""`run overload --dry-run`: every Slurm command and environment, nothing started.

(That the plan matches what a real run issues is checked against a real run's command
records in tests/gate/test_gate_runs.py.)
"""

import shlex

from tests.helpers import run_cli

NOTHING = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}  # any engine use would fail the run


def _plan(tmp_path, *args):
    result = run_cli("run", "overload", "--dry-run", *args, env=NOTHING)
    assert result.returncode == 0, result.stderr
    commands = [shlex.split(line) for line in result.stdout.splitlines() if line and not line.startswith("#")]
    return result.stdout, commands


def test_vllm_dry_run_prints_every_slurm_command_with_site_options(tmp_path):
    text, commands = _plan(
        tmp_path, "--backend", "vllm", "--model", "org/model-8b", "--gpus-per-replica", "2",
        "--vllm-arg=--max-num-seqs=64", "--cluster", "existing", "--run-dir", "/lustre/dd", "--partition", "gpu",
        "--account", "llm", "--time", "45:00", "--gres", "gpu:8", "--srun-arg=--mpi=none", "--replicas", "4",
    )  # fmt: skip
    (salloc,) = [c for c in commands if c[0] == "salloc"]
    assert {"--partition=gpu", "--account=llm", "--time=45:00", "--gres=gpu:8", "--exclusive"} <= set(salloc)
    sruns = [c[c.index("srun") :] for c in commands if "srun" in c]
    assert sruns and all("--mpi=none" in c for c in sruns)
    replicas = [c for c in commands if "serve" in c]
    assert len(replicas) == 4
    for index, command in enumerate(replicas):
        assert command[0] == "env" and any(part.startswith("DD_VLLM_MAX_WAITING_REQUESTS=") for part in command)
        assert "--gres=gpu:2" in command and command[command.index("serve") + 1] == "org/model-8b"
        assert command[command.index("--port") + 1] == str(8100 + index) and "--max-num-seqs=64" in command
        middleware = command[command.index("--middleware") + 1]  # vLLM's form: module.Object, no colon
        assert middleware == "data_designer.slurm.runtime.backpressure.QueueDepthBackpressureMiddleware"
        assert command[command.index("serve") - 1].startswith("/lustre/dd/dd-accept-sut/")
        (path,) = [part.partition("=")[2] for part in command if part.startswith("PYTHONPATH=")]
        assert path.endswith("/harness:" + path.split(":")[0].removesuffix("/harness") + "/sut-only")
        assert "site-packages" not in path  # the SUT's dependencies must not shadow vLLM's
    (proxy,) = [c for c in commands if "proxy" in c]
    assert [proxy[i + 1] for i, part in enumerate(proxy) if part == "--backend"] == [
        f"http://$NODE:{8100 + i}" for i in range(4)
    ]
    clients = [c for c in commands if "dd_accept.node.loadclient" in c and c[c.index("--mode") + 1] == "sut"]
    assert [c[c.index("-J") + 1] for c in clients] == ["partial", "total"]
    # vLLM has no control plane: pressure steps hold the queues, 2 replicas (partial overload),
    # lifted, then all four (total overload), lifted: as VllmReplicas.overload/relieve do
    pressure = [c for c in commands if "dd_accept.node.loadclient" in c and c[c.index("--mode") + 1] == "raw"]
    held = [0, 1, 0, 1, 2, 3]
    assert [c[c.index("-J") + 1] for c in pressure] == [f"pressure-{i}" for i in held]
    assert [c[c.index("--endpoint") + 1] for c in pressure] == [f"http://$NODE:{8100 + i}" for i in held]
    assert {c[c.index("--concurrency") + 1] for c in pressure} == {"71"}  # --max-num-seqs=64 running + 7 waiting
    lifted = [c[2] for c in commands if c[:2] == ["scancel", "--signal=TERM"] and c[2].startswith("$PRESSURE")]
    assert lifted == [f"$PRESSURE_STEP_{i}" for i in held]
    # the synthetic-only phase (a replica at the SUT's default threshold) is not planned for vLLM
    assert not [c for c in commands if "dd_accept.node.replica.server" in c]
    assert all(c[c.index("--model") + 1] == "org/model-8b" for c in clients)
    assert commands[-1] == ["scancel", "$JOB"]
    assert "nothing below has been run" in text
    assert not (tmp_path / "evidence").exists()


def test_synthetic_dry_run_on_the_docker_cluster(tmp_path):
    text, commands = _plan(tmp_path, "--replicas", "3", "--overloaded", "1", "--sut", "data-designer-slurm==1.0.0rc1")
    replicas, default = [c for c in commands if "dd_accept.node.replica.server" in c]
    assert "-n3" in replicas and any(part.startswith("DD_ACCEPT_CONTROL_TOKEN=") for part in replicas[:3])
    assert "/opt/sut/bin/python" in replicas
    # the replica left at the SUT's default threshold: one task, beside the others, no override
    assert "-n1" in default and default[default.index("--port-base") + 1] == "8200"
    assert not any(part.startswith("DD_VLLM_MAX_WAITING_REQUESTS=") for part in default)
    # every phase of the declaration is a heading, in the order the run walks them
    from dd_accept.acceptance.overload import PHASES

    headings = [line.removeprefix("# == ") for line in text.splitlines() if line.startswith("# == ")]
    assert headings == ["allocate", *(f"{p.kind}: {p.title}" for p in PHASES), "release"]


def test_the_dry_run_plans_the_paths_of_the_chosen_slurm_release(tmp_path):
    """The SUT's venv on 24.11's nodes is Python 3.13: the plan names its site-packages."""
    default, _ = _plan(tmp_path, "--sut", "data-designer-slurm==1.0.0rc1")
    trixie, _ = _plan(tmp_path, "--sut", "data-designer-slurm==1.0.0rc1", "--slurm", "24.11")
    assert "/opt/sut/lib/python3.11/site-packages/" in default and "python3.13" not in default
    assert "/opt/sut/lib/python3.13/site-packages/" in trixie and "python3.11/" not in trixie


def test_dry_run_and_backend_input_errors_are_one_line_exit_2(tmp_path):
    cases = [
        (["--backend", "vllm", "--dry-run"], "--backend vllm needs --model"),
        (["--model", "m", "--dry-run"], "--model applies to --backend vllm only"),
        (["--model", "m", "--vllm-command", "/x/vllm"], "--model applies to --backend vllm only"),
        (["--dry-run", "--sut", "data-designer-slurm>=1.0"], "pass --profile"),
        (["--dry-run", "--cluster", "existing", "--run-dir", "rel"], "absolute path"),
    ]
    for args, needle in cases:
        result = run_cli("run", "overload", *args, env=NOTHING)
        assert result.returncode == 2 and needle in result.stderr, (args, result.stderr)
        assert result.stderr.count("\n") == 1
    drain = run_cli("run", "drain", "--dry-run", env=NOTHING)
    assert drain.returncode == 2 and "plans the overload scenario" in drain.stderr
    vllm_drain = run_cli("run", "drain", "--backend", "vllm", "--model", "m", "--out", str(tmp_path / "o"), env=NOTHING)
    assert vllm_drain.returncode == 2 and "runs the overload scenario only" in vllm_drain.stderr
    assert vllm_drain.stderr.count("\n") == 1 and not (tmp_path / "o").exists()
