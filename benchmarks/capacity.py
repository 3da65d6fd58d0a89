"""Capacity: rc1's knee on this machine, repeated, with the spread the tolerances rest on.

Runs `dd-accept run capacity` N times through the real CLI (a fresh cluster each time), and
reads from each bundle the knee (load and output tokens/s), the proxy's CPU per chunk and
the harness's share of the CPU at the knee. Prints a table with the median, the range and
the spread ((max - min) / median) of each, and writes JSON. The knee floor in the SUT
profile and the regression tolerances (base.regressions) are grounded in these numbers.

    python benchmarks/capacity.py [-n 5] [--sut SPEC] [--load-mode concurrency|constant|poisson] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from dd_accept.acceptance.capacity import LOAD_MODES
from dd_accept.base.regressions import KNEE_THROUGHPUT, LIGHT_CHUNK_DELAY, PROXY_CPU_PER_CHUNK
from dd_accept.sut.spec import DEFAULT_SUT

NUMBERS = (
    ("knee load", "capacity.knee", "knee_load"),
    ("knee output tok/s", "capacity.knee", KNEE_THROUGHPUT),
    ("chunk delay p95 at knee ms", "capacity.knee", "knee_chunk_delay_p95_ms"),
    ("chunk delay p50 at the lightest level ms", "capacity.knee", LIGHT_CHUNK_DELAY),
    ("proxy CPU us/chunk", "capacity.proxy_cpu_per_chunk", PROXY_CPU_PER_CHUNK),
    ("harness CPU share at knee", "capacity.harness_headroom", "harness_share"),
    ("machine busy at knee", "capacity.harness_headroom", "machine_busy"),
    ("proxy core share at knee", "capacity.harness_headroom", "proxy_core_share"),
    ("proxy run-queue wait share (knee, first broken)", "capacity.harness_headroom", "proxy_wait_share"),
)


def run_once(sut: str, mode: str) -> dict[str, float] | str:
    """The numbers of one `dd-accept run capacity`, or the error line it ended with."""
    with tempfile.TemporaryDirectory(prefix="dd-cap-") as out:
        argv = [sys.executable, "-m", "dd_accept.harness.cli", "--quiet", "run", "capacity", "--out", f"{out}/e"]
        argv += ["--sut", sut, "--load-mode", mode]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        path = Path(out) / "e" / "results.json"
        if not path.is_file():
            return (done.stderr.strip().splitlines() or ["no results"])[-1]
        document = json.loads(path.read_text())
    checks = {c["id"]: c for s in document["scenarios"] for c in s["checks"]}
    knee = checks.get("capacity.knee", {}).get("observed", "")
    print(f"  {knee}", file=sys.stderr)  # where it broke, and why
    found = {}
    for label, check, metric in NUMBERS:
        value = checks.get(check, {}).get("metrics", {}).get(metric)
        if value is not None:
            found[label] = float(value)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=5, help="runs (default: %(default)s)")
    parser.add_argument("--sut", default=DEFAULT_SUT, help="the SUT (default: %(default)s)")
    parser.add_argument("--load-mode", choices=LOAD_MODES, default="concurrency", help="(default: %(default)s)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/capacity.json"))
    args = parser.parse_args()
    runs: list[dict[str, float]] = []
    errors: list[str] = []
    started = time.monotonic()
    for index in range(args.n):
        found = run_once(args.sut, args.load_mode)
        if isinstance(found, str):
            errors.append(found)
        else:
            runs.append(found)
        print(f"run {index + 1}/{args.n}: {found}", file=sys.stderr)
    table = Table(title=f"capacity of {args.sut} ({args.load_mode}; {len(runs)} runs, 2 cores)")
    for column in ("number", *(f"run {i + 1}" for i in range(len(runs))), "median", "min", "max", "spread"):
        table.add_column(column)
    summary = {}
    for label, _, _ in NUMBERS:
        values = [run[label] for run in runs if label in run]
        if not values:
            continue
        median = statistics.median(values)
        spread = (max(values) - min(values)) / median if median else 0.0
        summary[label] = {"values": values, "median": median, "min": min(values), "max": max(values), "spread": spread}
        cells = [f"{v:.4g}" for v in values] + [f"{median:.4g}", f"{min(values):.4g}", f"{max(values):.4g}"]
        table.add_row(label, *cells, f"{spread:.0%}")
    Console(width=200).print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "benchmark": "capacity",
        "sut": args.sut,
        "load_mode": args.load_mode,
        "runs": runs,
        "errors": errors,
        "summary": summary,
        "seconds": round(time.monotonic() - started, 1),
    }
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
