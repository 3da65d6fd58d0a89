"""`--backend vllm`: replicas started from `vllm serve`'s command line, steered by real load.

No GPU here, so `vllm serve` is answered by the stand-in (`--vllm-command`), which takes
vLLM's arguments and has no control plane, like vLLM. What is exercised is dd-accept's whole
vLLM path: one step per replica from the template, readiness by `/health`, overload by a
pressure client, evidence from the recorder middleware. Positive control: rc1 passes every
overload check. Negative control: rc1 with its proxy's failover removed fails the partial
overload checks, for that reason.
"""

from __future__ import annotations

import json

import pytest

from dd_accept.acceptance.overload import OverloadOptions, run_overload
from dd_accept.deployment.backends.vllm import VllmBackend
from tests.controls.controls import run_with_fault
from tests.helpers import assert_the_dry_run_planned_what_the_run_did, run_cli

STANDIN = "/opt/sut/bin/python -m dd_accept.node.replica.vllm_standin"
# Each replica must hold the client's whole admission limit (8) below the SUT's queue
# threshold, or the healthy replicas reject too and 429s reach the client for true reasons.
VLLM_ARGS = ("--max-num-seqs=8",)

pytestmark = pytest.mark.cluster


def test_rc1_passes_every_overload_check_with_vllm_replicas(tmp_path):
    out = tmp_path / "bundle"
    arguments = [
        "--backend", "vllm", "--model", "dd-standin", "--gpus-per-replica", "0", "--vllm-command", STANDIN,
        *(f"--vllm-arg={arg}" for arg in VLLM_ARGS), "--replicas", "4", "--overloaded", "1",
    ]  # fmt: skip
    result = run_cli("--quiet", "run", "overload", *arguments, "--out", str(out), timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    results = json.loads((out / "results.json").read_text())
    assert {c["verdict"] for c in results["scenarios"][0]["checks"]} == {"pass"}
    commands = [json.loads(line)["argv"] for line in (out / "commands.jsonl").read_text().splitlines()]
    replicas = [argv for argv in commands if "serve" in argv]
    assert [argv[argv.index("-J") + 1] for argv in replicas] == [f"replica-{i}" for i in range(4)]
    assert all("dd_accept.node.replica.recorder.RequestEvents" in argv for argv in replicas)
    assert all("--gres=gpu:0" not in " ".join(argv) for argv in replicas)
    steps = {argv[argv.index("-J") + 1] for argv in commands if argv[0] == "srun" and "-J" in argv}
    pressure = {name for name in steps if name.startswith("pressure-")}
    assert pressure == {f"pressure-{i}" for i in range(4)}  # partial overload on replica 0, then all four
    events = [json.loads(line) for path in (out / "events").rglob("replicas/events-*.jsonl") for line in path.open()]
    assert {e["kind"] for e in events} == {"upstream"} and {e["source"] for e in events} >= {"replica-0", "replica-3"}
    assert run_cli("verify", str(out)).returncode == 0
    # the dry run with the same arguments printed exactly what ran: 4 replicas, proxy, pressure on
    # replica 0 (partial), 1 client, pressure on all 4 (total), 1 client
    assert_the_dry_run_planned_what_the_run_did(out / "commands.jsonl", *arguments, srun_steps=12)


def test_no_failover_is_caught_with_vllm_replicas(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    backend = VllmBackend(
        model="dd-standin", gpus_per_replica=0, extra_args=VLLM_ARGS, command_prefix=tuple(STANDIN.split())
    )

    def overload(allocation, run, profile, progress):
        options = OverloadOptions(replicas=4, overloaded=1)
        return run_overload(allocation, run, profile, options, progress, backend=backend)

    checks = run_with_fault(overload, "no-failover", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    assert checks["overload.partial.completes"].verdict == "fail"
    assert "429" in checks["overload.partial.completes"].observed
    assert checks["overload.partial.failover"].verdict == "fail"
