"""Time to verdict: wall time of each scenario and of `run all` (serial and parallel), with a
warm image, and how `run overload` grows with --replicas 2, 8, 32.

Goals on 2 cores: `run overload --replicas 8` <= 60 s; `run all` <= 3 min. Each run is the
real CLI (`dd-accept run ...`) in a child process, cluster start and teardown included.

With `--slurm`, `run all` is also timed on each named Slurm release (`--only-releases`:
that alone).

    python benchmarks/time_to_verdict.py [--out FILE] [--skip-scaling] [--slurm 22.05 24.11 26.05]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from dd_accept.acceptance.scenarios import ALL_SCENARIOS as SCENARIOS  # `all`: capacity runs alone
from dd_accept.base.slurm_releases import DEFAULT_RELEASE, RELEASES

GOALS = {"overload --replicas 8": 60.0, "all (parallel)": 180.0}


def timed_run(*args: str) -> tuple[float, int, str]:
    with tempfile.TemporaryDirectory(prefix="dd-ttv-") as out:
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "dd_accept.harness.cli", "--quiet", "run", *args, "--out", f"{out}/e"],
            capture_output=True,
            text=True,
            check=False,
        )
        seconds = time.monotonic() - started
        verdict = "?"
        results = Path(out) / "e" / "results.json"
        if results.is_file():
            verdict = json.loads(results.read_text())["verdict"]
        return seconds, result.returncode, verdict


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "time_to_verdict.json")
    parser.add_argument("--skip-scaling", action="store_true")
    parser.add_argument("--slurm", nargs="+", choices=sorted(RELEASES), default=[], metavar="RELEASE")
    parser.add_argument("--only-releases", action="store_true", help="time only `run all` on each --slurm release")
    args = parser.parse_args()
    console = Console()
    rows: list[dict[str, object]] = []

    def measure(label: str, *run_args: str) -> None:
        console.print(f"dd-accept run {' '.join(run_args)} …")
        seconds, code, verdict = timed_run(*run_args)
        rows.append({"run": label, "seconds": round(seconds, 1), "exit": code, "verdict": verdict})

    for release in args.slurm or [DEFAULT_RELEASE]:  # warm: images built, wheelhouses cached
        timed_run("overload", "--replicas", "2", "--slurm", release)
    if not args.only_releases:
        for scenario in SCENARIOS:
            measure(scenario, scenario)
        measure("overload --replicas 8", "overload", "--replicas", "8")
        measure("all (serial)", "all", "--parallel", "1")
        measure("all (parallel)", "all", "--parallel", "2")
    for release in args.slurm:
        measure(f"all (parallel) on Slurm {release}", "all", "--parallel", "2", "--slurm", release)
    if not args.skip_scaling and not args.only_releases:
        for replicas in (2, 32):
            # --overloaded 1: partial overload needs a healthy replica left at --replicas 2
            measure(f"overload --replicas {replicas}", "overload", "--replicas", str(replicas), "--overloaded", "1")

    table = Table(title="dd-accept time to verdict (warm image, 2 cores)")
    for column in ("run", "seconds", "verdict", "exit", "goal"):
        table.add_column(column, justify="left" if column == "run" else "right")
    for row in rows:
        goal = GOALS.get(str(row["run"]))
        met = "" if goal is None else (f"≤ {goal:g} " + ("met" if float(row["seconds"]) <= goal else "NOT met"))
        table.add_row(str(row["run"]), f"{row['seconds']:.1f}", str(row["verdict"]), str(row["exit"]), met)
    console.print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"benchmark": "time_to_verdict", "runs": rows, "goals_s": GOALS}, indent=2) + "\n")
    console.print(f"wrote {args.out.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
