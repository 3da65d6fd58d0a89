"""`run SCENARIO --dry-run`: every Slurm command and environment, nothing started.

(That the plan matches what a real run issues is checked both ways against real runs'
command records: overload in tests/gate/test_gate_runs.py and tests/sut/test_vllm_backend.py,
the others in each scenario's rc1 control. Here, the comparison itself is checked against
the sample bundle's records: it passes on them and fails on a plan that differs.)
"""

import shlex

import pytest

from dd_accept.acceptance.scenarios import ALL_SCENARIOS, BY_NAME, SCENARIOS
from tests.helpers import (
    REPOSITORY,
    assert_the_plan_is_what_ran,
    planned_commands,
    recorded_by_job,
    run_cli,
)

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
    lifted = [c[-1] for c in commands if c[:2] == ["scancel", "--signal=TERM"] and c[-1].startswith("$PRESSURE")]
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

    headings = [line.removeprefix("# == ") for line in text.splitlines() if line.startswith("# == ")]
    assert headings == ["allocate", *(f"{p.kind}: {p.title}" for p in BY_NAME["overload"].phases), "release"]


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
    vllm_plan = run_cli("run", "drain", "--dry-run", "--backend", "vllm", "--model", "m", env=NOTHING)
    assert vllm_plan.returncode == 2 and "runs the overload scenario only" in vllm_plan.stderr
    assert vllm_plan.stderr.count("\n") == 1 and not vllm_plan.stdout
    unknown = run_cli("run", "drain,nosuch", "--dry-run", env=NOTHING)
    assert unknown.returncode == 2 and "unknown scenario 'nosuch'" in unknown.stderr
    vllm_drain = run_cli("run", "drain", "--backend", "vllm", "--model", "m", "--out", str(tmp_path / "o"), env=NOTHING)
    assert vllm_drain.returncode == 2 and "runs the overload scenario only" in vllm_drain.stderr
    assert vllm_drain.stderr.count("\n") == 1 and not (tmp_path / "o").exists()


def _headings(text):
    return [line.removeprefix("# == ") for line in text.splitlines() if line.startswith("# == ")]


@pytest.mark.parametrize("scenario", [s.name for s in SCENARIOS])
def test_every_scenario_plans_each_of_its_phases_in_the_order_it_runs_them(scenario):
    """No engine: each scenario's plan is its declared phases, one allocation, its release."""
    result = run_cli("run", scenario, "--dry-run", env=NOTHING)
    assert result.returncode == 0, result.stderr
    phases = BY_NAME[scenario].phases
    assert _headings(result.stdout) == ["allocate", *(f"{p.kind}: {p.title}" for p in phases), "release"]
    always, _ = planned_commands(result.stdout)
    assert always[0][:1] == ("salloc",) and f"--job-name=dd-{scenario}" in always[0]
    assert sum(1 for c in always if c[0] == "srun") >= 3, always  # replicas, proxy and a client at least


def test_all_plans_each_scenario_in_its_own_allocation():
    result = run_cli("run", "all", "--dry-run", "--client-header", "Authorization: Bearer ddcanary-secret", env=NOTHING)
    assert result.returncode == 0, result.stderr
    sallocs = [line for line in result.stdout.splitlines() if line.startswith("salloc ")]
    # health's own second jobs, alone on another node: the baseline placed as the next two are,
    # the one Slurm preempts and the one it loses, besides one per scenario
    health_helpers = ["dd-apart", "dd-preempted", "dd-node-loss"]
    assert [s.split("--job-name=")[1].split()[0] for s in sallocs] == [
        name for scenario in ALL_SCENARIOS for name in (f"dd-{scenario}", *health_helpers * (scenario == "health"))
    ]
    assert {h.split(":", 1)[0] for h in _headings(result.stdout)} == set(ALL_SCENARIOS)
    # the header the client sends is named, its value (maybe a secret) never printed
    assert "ddcanary-secret" not in result.stdout and "Authorization: <value given>" in result.stdout


def test_conditional_and_sut_launched_commands_are_marked():
    """A command a run submits only on what it finds says so, and so does one the SUT's own
    functions launch: the reader sees which are certain."""
    text = run_cli("run", "telemetry", "--dry-run", env=NOTHING).stdout
    assert "KILL, the controller's escalation (only if the endpoint still runs 12s after TERM)" in text
    health = run_cli("run", "health", "--dry-run", env=NOTHING).stdout
    assert health.count("(launched by the SUT's register function)") == 9 * (4 + 1)  # 9 attempts: 4 replicas, a client
    existing = run_cli("run", "health", "--dry-run", "--cluster", "existing", "--run-dir", "/lustre/dd", env=NOTHING)
    assert "dd-node-loss" not in existing.stdout  # a site's node is never taken down
    assert "sbatch" in health and "dd-preempted" not in existing.stdout and "sbatch" not in existing.stdout, (
        "nor preempted"
    )
    assert "State=DRAIN" in health and "scontrol update" not in existing.stdout, "nor drained"


SAMPLE = REPOSITORY / "docs" / "sample" / "rc1-overload" / "commands.jsonl"


def _sample_records():
    import json

    return recorded_by_job([json.loads(line) for line in SAMPLE.read_text().splitlines()])["dd-overload"]


def test_the_comparison_passes_on_a_real_runs_records_and_names_what_differs():
    """Positive and negative controls of the both-ways comparison, on the sample bundle's
    real records: the plan matches; a changed argument is "planned but never run"; an srun
    the plan leaves out is "run but not in the plan"."""
    plan = run_cli("run", "overload", "--dry-run", env=NOTHING).stdout
    recorded = _sample_records()
    assert_the_plan_is_what_ran(plan, recorded)
    changed = plan.replace("--records 32 ", "--records 33 ", 1)
    assert changed != plan
    with pytest.raises(AssertionError, match=r"planned but never run:\n.*--records 33"):
        assert_the_plan_is_what_ran(changed, recorded)
    kept = [line for line in plan.splitlines() if " -J total " not in line]
    with pytest.raises(AssertionError, match=r"run but not in the plan:\n.*-J total"):
        assert_the_plan_is_what_ran("\n".join(kept), recorded)
