"""Every shell example in the README is run by a test: the auditor's and the CI job's
commands (verify, audit, report, compare, history, the `--json` ones) run here verbatim in a
directory holding bundles at the README's paths; the ones that start clusters (run, gate,
`make accept`, plain pytest, `sut prepare`) are named below with the test that runs them, and
that test's source must contain the example's command and options. A new example without a
test fails here."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from dd_accept.base.results import SCHEMA
from dd_accept.harness.cli import build_parser
from dd_accept.reports.bundle import RunContext, write_bundle
from dd_accept.reports.sanitize import Sanitizer

REPOSITORY = Path(__file__).parents[2]
WHEEL = "data_designer_slurm-1.0.0rc1-py3-none-any.whl"


# The user documentation: the README's one screen and the pages it links.
USER_DOCS = ("README.md", *sorted(str(p.relative_to(REPOSITORY)) for p in (REPOSITORY / "docs").glob("*.md")))


def readme_examples() -> list[str]:
    """Each command of the user docs' ```sh blocks (continuations joined, comments and a
    leading `$ ` removed); output lines shown in a block are not commands."""
    text = "\n".join((REPOSITORY / name).read_text() for name in USER_DOCS)
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for command in block.replace("\\\n", " ").splitlines():
            command = re.sub(r"\s+#.*$", "", command).strip().removeprefix("$ ")
            if re.match(r"(\.venv/bin/)?dd-accept |make |pytest |out=|cat ", command):
                commands.append(re.sub(r"\s+", " ", command))
    return commands


# The examples that start a cluster, and where each runs: verbatim in another test, or an
# equivalent run that differs only where it must (named), with the words its source holds.
RUN_ELSEWHERE = {
    "dd-accept run capacity": (
        "tests/controls/test_capacity_controls.py::rc1",
        "equivalent: 2 s levels from 18 streams instead of 3 s from 8, with --out in the test's directory",
        ('"run", "capacity"',),
    ),
    "dd-accept run capacity --load-mode poisson --load-start 40": (
        "tests/controls/test_capacity_controls.py::test_a_proxy_that_blocks_per_event_is_caught_by_knee",
        "equivalent: the same ladder in 2 s levels, run as the scenario (the blocking-per-chunk control)",
        ('load_mode="poisson", load_start=40',),
    ),
    "make accept": (
        "tests/gate/test_gate_runs.py::test_the_readme_gate_section_works_as_written",
        "equivalent: `make accept GATE=…` through the same target; its default command runs in the test below",
        ("make accept",),
    ),
    "make test": (".ci/run", "verbatim: CI runs it", ("make test",)),
    "dd-accept run overload --replicas 8": (
        "tests/controls/test_overload_client_faults.py::_run",
        "equivalent: with --sut, a directory of rc1's runtime wheel and its engine rebuilt under a new "
        "version (issue #32's release engineer), and --out in the test's directory: the positive control "
        "(test_positive_control_rc1_passes_every_overload_check_through_the_cli) runs it",
        ('"run", "overload", "--replicas", "8", "--sut", str(directory)',),
    ),
    "dd-accept run overload --replicas 8 --sut ./dist/my.whl": (
        "tests/controls/test_overload_client_faults.py::_run",
        "equivalent: --sut a directory holding rc1's wheels (a .whl is the same path through the wheelhouse), "
        "--out in the test's directory",
        ('"run", "overload", "--replicas", "8", "--sut", str(directory)',),
    ),
    "dd-accept run all": (
        "tests/existing/test_existing_cluster.py::test_drain_and_health_judge_rc1_as_on_the_docker_cluster",
        "equivalent: drain,health in parallel allocations there, overload beside it; `run all` "
        "itself takes 400 s (benchmarks/time_to_verdict.py runs it)",
        ('"drain,health", "--parallel", "2"',),
    ),
    "dd-accept run drain --sut ./dist/my.whl --out evidence/candidate": (
        "tests/gate/test_gate_runs.py::test_a_gate_with_a_threshold_the_sut_misses_fails_and_compares_two_suts",
        "equivalent: a local wheel as --sut and --out through the gate; drain runs in the drain gate test",
        ('"--sut", str(local)',),
    ),
    "pytest --pyargs dd_accept.acceptance.test_scenarios -k drain --dd-out out/": (
        "src/dd_accept/harness/runner.py",
        "equivalent: inside every `dd-accept run` (the runner's pytest child), the same entry test with the "
        "request it validated (--dd-request) choosing the scenarios instead of -k",
        ('"--pyargs", ENTRY_TEST', '"--dd-out"', '"dd_accept.acceptance.test_scenarios"'),
    ),
    "dd-accept run overload --json > run.json": (
        "tests/controls/test_live_canaries.py::test_live_canaries_never_reach_the_bundle",
        "equivalent: `run streaming --json` on 26.05, its stdout validated against dd-accept/run/v1",
        ('"--json"', "dd-accept/run/v1"),
    ),
    "make accept GATE=docs/gate.example.toml": (
        "tests/gate/test_gate_runs.py::test_the_readme_gate_section_works_as_written",
        "verbatim: the README's block, run by bash",
        ("_readme_gate_block()",),
    ),
    "out=$(ls -d evidence/*-gate-release | tail -n 1)": (
        "tests/gate/test_gate_runs.py::test_the_readme_gate_section_works_as_written",
        "verbatim",
        ("_readme_gate_block()",),
    ),
    'cat "$out/gate.md"': (
        "tests/gate/test_gate_runs.py::test_the_readme_gate_section_works_as_written",
        "verbatim",
        ("_readme_gate_block()",),
    ),
    '.venv/bin/dd-accept verify "$out/candidate"': (
        "tests/gate/test_gate_runs.py::test_the_readme_gate_section_works_as_written",
        "verbatim",
        ("_readme_gate_block()",),
    ),
    "dd-accept run overload --cluster existing --run-dir /lustre/team/dd-accept --partition gpu --account "
    "llm-release --time 45:00 --srun-arg=--mpi=none": (
        "tests/existing/test_existing_cluster.py::test_run_overload_on_an_existing_cluster_from_its_login_node",
        "equivalent: from the docker cluster's controller as a login node, with its run directory and no "
        "partition or account (it has one partition and no accounting)",
        ('"--cluster", "existing", "--run-dir"', '"--srun-arg=--mpi=none"', '"--time"'),
    ),
}
RUN_HERE = {  # needs no cluster: run below, verbatim
    "dd-accept run overload --backend vllm --model meta-llama/Llama-3.1-8B-Instruct --dry-run "
    "--vllm-arg=--max-num-seqs=64 --cluster existing --run-dir /lustre/team/dd-accept --partition gpu --gres gpu:8",
    "dd-accept sut prepare --sut data-designer-slurm==1.0.0rc1",
    "dd-accept verify evidence/rc1.tar.gz --json --require-pass | jq .policy_met",
    f"dd-accept verify evidence/20261129T231600Z-overload.tar.gz --wheel {WHEEL}",
    "dd-accept audit evidence/20261129T231600Z-overload/",
    "dd-accept report evidence/20261129T231600Z-overload/ --format junit",
    "dd-accept compare evidence/rc1/ evidence/rc2.tar.gz",
    "dd-accept compare evidence/rc1/ evidence/rc2/ --fail-on-regression",
    "dd-accept history evidence/ --html history.html --csv history.csv",
    "dd-accept history evidence/ --fail-on-change",
}
IN_THE_CHECKOUT = {  # the README's auditor path, on the shipped sample bundle (docs/sample/)
    "dd-accept verify docs/sample/rc1-overload --key docs/sample/rc1-overload.pub --require-signature",
    "dd-accept report docs/sample/rc1-overload --format md",
}


def test_every_example_is_run_by_a_test():
    assert set(readme_examples()) == {*RUN_ELSEWHERE, *RUN_HERE, *IN_THE_CHECKOUT}


@pytest.mark.parametrize("example", sorted(RUN_ELSEWHERE))
def test_the_test_named_for_an_example_runs_it(example):
    where, _, words = RUN_ELSEWHERE[example]
    path, _, name = where.partition("::")
    source = (REPOSITORY / path).read_text()
    if name:
        assert f"def {name}(" in source, f"{where} is gone"
        source = source.split(f"def {name}(", 1)[1].split("\ndef ", 1)[0]
    for word in words:
        assert word in source, f"{where} no longer runs {word!r} ({example})"


def test_every_dd_accept_example_is_a_command_line_dd_accept_accepts():
    for example in readme_examples():
        words = shlex.split(example.split("|")[0].split(">")[0])
        if words[0].endswith("dd-accept") and "$out" not in example:
            build_parser().parse_args(words[1:])  # a usage error exits: the example is out of date


def _bundle(directory: Path, spec: str, wheel: Path) -> None:
    """A bundle as a run writes it, judging `wheel`, at `directory` (and `.tar.gz`)."""
    raw = directory.with_name(f".{directory.name}.raw")
    (raw / "runs" / "run-1").mkdir(parents=True)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    check = {"id": "overload.total.attempts", "verdict": "pass", "expected": "3", "observed": "3", "detail": "",
             "metrics": {"attempts": 3}}  # fmt: skip
    scenario = {"name": "overload", "verdict": "pass", "started": 1.0 + len(spec), "ended": 9.0, "error": None,
                "checks": [check], "phases": []}  # fmt: skip
    sut = {"spec": spec, "profile": "data-designer-slurm-1.0",
           "wheels": [{"file": wheel.name, "sha256": digest, "size": wheel.stat().st_size}]}  # fmt: skip
    results = {"schema": SCHEMA, "verdict": "pass", "allow_unsupported": False, "sut": sut, "scenarios": [scenario]}
    (raw / "results.json").write_text(json.dumps(results))
    context = RunContext(["dd-accept", "run", "overload"], 0.0, 1.0, "0" * 64, "1" * 64, [], [], [])
    directory.mkdir(parents=True)
    write_bundle(raw, directory, context, Sanitizer(path_roots={str(raw): "<run>"}))


@pytest.mark.cluster  # `sut prepare` builds the node image: the engine CI starts
def test_the_auditors_and_ci_examples_run_verbatim(tmp_path):
    wheel = tmp_path / WHEEL
    wheel.write_bytes(b"the wheel the README names")
    for name in ("20261129T231600Z-overload", "rc1", "rc2"):
        _bundle(tmp_path / "evidence" / name, "data-designer-slurm==1.0.0rc1", wheel)
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "dd-accept").write_text(f'#!/bin/sh\nexec {sys.executable} -m dd_accept.harness.cli "$@"\n')
    (shim / "dd-accept").chmod(0o755)
    # `| jq .policy_met`: jq where the machine has it, else the one filter the example uses.
    no_jq = (
        "command -v jq >/dev/null || jq() { python3 -c "
        "'import json,sys; print(json.dumps(json.load(sys.stdin)[sys.argv[1][1:]]))' \"$1\"; }"
    )
    for example in sorted(RUN_HERE | IN_THE_CHECKOUT):
        result = subprocess.run(
            ["bash", "-o", "pipefail", "-c", f"{no_jq}\n{example}"],
            cwd=REPOSITORY if example in IN_THE_CHECKOUT else tmp_path, capture_output=True, text=True, timeout=600,
            env={"PATH": f"{shim}:/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path)},
        )  # fmt: skip
        assert result.returncode == 0, (example, result.stdout[-2000:], result.stderr[-2000:])
        if "--json" in example:
            assert result.stdout.strip() == "true", result.stdout  # jq .policy_met of dd-accept/verify/v2
        if "sut prepare" in example:  # the README shows its output: the same lines, as printed
            assert f"5410c6bca7c035c4cb215cc0319071e00acab3f124a8ebb9a44d24daaa4d4520  {WHEEL}" in result.stdout
    assert (tmp_path / "history.html").is_file() and (tmp_path / "history.csv").is_file()
