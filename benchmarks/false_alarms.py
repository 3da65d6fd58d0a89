"""False alarms: how often a check's verdict on a known SUT differs from the verdict it must give.

Each scenario is run N times through the real CLI against rc1, whose expected verdicts are
known (`variants.RC1_FAILS`: the true findings; everything else must pass), and against each
positive control (an rc1 variant that fixes some findings, `Fault.fixes`: those must pass
too). `--correct` adds the correct variants (`CORRECT`: rc1 changed where no contract rules
it out, its routing, pacing or timing), each judged as rc1 is on every scenario asked: a
check that fails one of them blames a correct release. A *false alarm* is a check that
fails where it must pass; a *miss* is one that passes where it must fail. Zero of both is
the target; any non-zero count needs a cause.

    python benchmarks/false_alarms.py [-n 10] [--scenarios drain,health|all] [--controls] [--correct] [--no-rc1]
        [--slurm RELEASE] [--slurm-config linuxproc|cgroup] [--hogs N] [--out FILE]

`--hogs N` keeps N busy loops on the host for the whole measurement: a loaded machine (a CI
runner's neighbours) must not turn a correct SUT's verdict either.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

import dd_accept.sut
from dd_accept.acceptance.scenarios import ALL_SCENARIOS as SCENARIOS  # `all`: capacity runs alone
from dd_accept.base.options import add_arguments, build, given, to_argv
from dd_accept.slurm_docker.cluster_options import ClusterOptions
from dd_accept.sut.spec import DEFAULT_SUT, SutSpec
from dd_accept.sut.wheelhouse import build_wheelhouse

# The fault catalogue is a test asset the wheel does not ship (tests/variants.py); a benchmark
# run as `python benchmarks/NAME.py` finds it from the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.variants import FAULTS, RC1_FAILS, Fault, make_variant

from benchmarks.busy_loops import busy_loops

CLUSTER = ("slurm", "slurm_config")  # the cluster options a false-alarm run may vary

# The positive controls, by the scenario whose checks they fix.
CONTROLS = {
    "drain": ("drain-bounded", "step-aware-cleanup"),
    "health": ("probe-capacity", "health-watching-wait"),
    "streaming": ("background-health-monitor",),
    "telemetry": ("telemetry-logged",),
}

# The correct variants (tests/variants.py, `fixes` empty), run on every scenario with --correct.
CORRECT = (
    "passive-ejection",
    "retry-after-aside",
    "lowest-index-tie-break",
    "random-tie-break",
    "forwards-each-read",
    "largest-retry-after",
    "sse-comment-first",
    "sampler-50ms",
    "health-cached-1s",
)


def variant_profile(fault: Fault, folder: Path) -> Path | None:
    """The built-in profile with what the variant changed ([telemetry] settings), as a file
    for --profile; None when the built-in profile describes it as it is."""
    if not fault.telemetry_profile:
        return None
    text = (Path(dd_accept.sut.__file__).parent / "profiles" / "data-designer-slurm-1.0.toml").read_text()
    for key, value in fault.telemetry_profile:
        text, found = re.subn(rf"^{key} = .*$", f"{key} = {value!r}", text, count=1, flags=re.MULTILINE)
        if found != 1:
            raise SystemExit(f"the built-in profile has no {key} to change for {fault.name}")
    path = folder / f"{fault.name}.toml"
    path.write_text(text)
    return path


def run_once(scenario: str, sut: str | None, cluster: ClusterOptions, profile: str | None = None) -> dict[str, str]:
    """{check id: verdict} of one `dd-accept run SCENARIO`, or {"<error>": message}."""
    with tempfile.TemporaryDirectory(prefix="dd-fa-") as out:
        argv = [sys.executable, "-m", "dd_accept.harness.cli", "--quiet", "run", scenario, "--out", f"{out}/e"]
        argv += to_argv(cluster, "--")
        if sut is not None:
            argv += ["--sut", sut]
        if profile is not None:
            argv += ["--profile", profile]
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        path = Path(out) / "e" / "results.json"
        if not path.is_file():
            return {"<error>": (result.stderr.strip().splitlines() or ["no results"])[-1]}
        document = json.loads(path.read_text())
        verdicts = {check["id"]: check["verdict"] for s in document["scenarios"] for check in s["checks"]}
        for scenario_result in document["scenarios"]:
            if scenario_result.get("error"):
                verdicts["<error>"] = scenario_result["error"]
        return verdicts


Target = tuple[str, str, str | None, str | None, frozenset[str]]  # scenario, label, SUT, profile, fixes


def measure(target: Target, runs: int, cluster: ClusterOptions, console: Console) -> dict:
    """One row: `runs` runs of a scenario on one SUT, its false alarms, misses and errors."""
    scenario, label, sut, profile, fixes = target
    must_fail = RC1_FAILS - fixes
    false_alarms: Counter[str] = Counter()
    misses: Counter[str] = Counter()
    errors: list[str] = []
    started = time.monotonic()
    for index in range(runs):
        console.print(f"{scenario} on {label}: run {index + 1}/{runs}")
        verdicts = run_once(scenario, sut, cluster, profile)
        if "<error>" in verdicts:
            errors.append(verdicts.pop("<error>"))
        for check, verdict in verdicts.items():
            if verdict == "fail" and check not in must_fail:
                false_alarms[check] += 1
            elif verdict == "pass" and check in must_fail:
                misses[check] += 1
    return {
        "scenario": scenario,
        "sut": label,
        "slurm": cluster.release,
        "slurm_config": cluster.proctrack,
        "runs": runs,
        "false_alarms": dict(false_alarms),
        "misses": dict(misses),
        "errors": errors,
        "seconds": round(time.monotonic() - started, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10, help="runs per scenario and SUT (default: 10)")
    parser.add_argument(
        "--scenarios",
        default=",".join(SCENARIOS),
        help="comma-separated, each run on its own (default: every scenario); 'all' runs them together, "
        "in parallel allocations, as `dd-accept run all` does",
    )
    parser.add_argument("--controls", action="store_true", help="also run the positive controls")
    parser.add_argument("--correct", action="store_true", help="also run the correct variants (CORRECT)")
    parser.add_argument("--no-rc1", action="store_true", help="only the variants (with --controls or --correct)")
    add_arguments(parser.add_argument, ClusterOptions, only=CLUSTER)  # as `dd-accept run` defines them
    parser.add_argument("--hogs", type=int, default=0, help="busy loops on the host meanwhile (default: 0)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "false_alarms.json")
    args = parser.parse_args()
    cluster = build(ClusterOptions, given(ClusterOptions, lambda dest: getattr(args, dest, None)))
    console = Console()
    scenarios = [name for name in args.scenarios.split(",") if name]
    targets: list[Target] = []
    if not args.no_rc1:
        targets += [(s, "rc1", None, None, frozenset()) for s in scenarios]
    if args.controls or args.correct:
        wheelhouse = build_wheelhouse(SutSpec.parse(DEFAULT_SUT))
        (wheel,) = [w for w in wheelhouse.wheels if w.name == "data-designer-slurm"]
        folder = Path(tempfile.mkdtemp(prefix="dd-fa-wheels-"))
        for scenario in scenarios:
            names = [c for s in (SCENARIOS if scenario == "all" else [scenario]) for c in CONTROLS.get(s, ())]
            names = (names if args.controls else []) + (list(CORRECT) if args.correct else [])
            for name in names:
                variant = make_variant(wheelhouse.path / wheel.file, FAULTS[name], folder)
                profile = variant_profile(FAULTS[name], folder)
                targets.append((scenario, name, str(variant), profile and str(profile), FAULTS[name].fixes))

    with busy_loops(args.hogs):
        rows = [measure(target, args.n, cluster, console) for target in targets]
    for row in rows:
        row["hogs"] = args.hogs

    where = f"Slurm {cluster.release}, {cluster.proctrack}" + (f", {args.hogs} busy loops" if args.hogs else "")
    table = Table(title=f"dd-accept false alarms ({args.n} runs each, {where}, 2 cores)")
    for column in ("scenario", "SUT", "runs", "false alarms", "misses", "errors", "seconds"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row["scenario"],
            row["sut"],
            str(row["runs"]),
            ", ".join(f"{k}: {v}" for k, v in sorted(row["false_alarms"].items())) or "0",
            ", ".join(f"{k}: {v}" for k, v in sorted(row["misses"].items())) or "0",
            str(len(row["errors"])),
            f"{row['seconds']:.0f}",
        )
    console.print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"benchmark": "false_alarms", "rows": rows}, indent=2) + "\n")
    console.print(f"wrote {args.out.name}")
    return 0 if all(not r["false_alarms"] and not r["misses"] and not r["errors"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
