"""Cluster lifecycle benchmark: cold image build, warm `up` for 2/8/16 nodes, srun round trip, `down`.

Prints a table and writes JSON. Targets (2-core machine): warm up <= 5 s (2 nodes) and
<= 15 s (16 nodes); down <= 3 s; `srun -N1 true` round trip <= 0.5 s; cold build <= 120 s.
Numbers are reported whether or not they meet the targets. With `--slurm`, each named
release (its own Debian suite and images) is measured the same way.

    python benchmarks/cluster_lifecycle.py [--skip-cold] [--repeats 3] [--sizes 2 8 16]
                                           [--slurm 22.05 24.11 26.05]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from dd_accept import __version__
from dd_accept.base.slurm_releases import DEFAULT_RELEASE, RELEASES
from dd_accept.slurm_docker import engine, images
from dd_accept.slurm_docker.cluster import SlurmCluster
from dd_accept.slurm_docker.spec import ClusterSpec
from dd_accept.slurm_docker.sweep import remove_cluster

TARGETS = {"cold_build": 120.0, "up_2": 5.0, "up_16": 15.0, "down": 3.0, "srun_round_trip": 0.5}


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median": round(statistics.median(ordered), 3),
        "min": round(ordered[0], 3),
        "max": round(ordered[-1], 3),
        "p95": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 3),
        "n": len(ordered),
    }


def cold_build(client, release: str) -> float:
    for tag in (images.slurm_tag(release), images.base_tag(release)):
        if engine.image_exists(client, tag):
            client.images.remove(tag, force=True)
    started = time.monotonic()
    images.ensure_images(client, version=release)
    return time.monotonic() - started


def lifecycle(client, release: str, nodes: int, repeats: int, srun_samples: int) -> dict[str, object]:
    up_times, down_times, srun_times = [], [], []
    image = images.ensure_images(client, version=release)
    for attempt in range(repeats):
        name = f"bench-{release.replace('.', '')}-{nodes}-{attempt}"
        cluster = SlurmCluster(ClusterSpec(name=name, nodes=nodes, slurm=release), image=image, client=client)
        try:
            started = time.monotonic()
            cluster.up(ready_timeout=120)
            up_times.append(time.monotonic() - started)
            if attempt == 0:
                for _ in range(srun_samples):
                    started = time.monotonic()
                    record = cluster.exec(["srun", "-N1", "true"], timeout=30)
                    srun_times.append(time.monotonic() - started)
                    assert record.ok, record.describe()
            started = time.monotonic()
            cluster.down()
            down_times.append(time.monotonic() - started)
        finally:
            remove_cluster(client, name)
    result: dict[str, object] = {"nodes": nodes, "up_s": _summary(up_times), "down_s": _summary(down_times)}
    if srun_times:
        result["srun_round_trip_s"] = _summary(srun_times)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-cold", action="store_true", help="do not remove and rebuild the images")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 8, 16])
    parser.add_argument("--srun-samples", type=int, default=20)
    parser.add_argument("--slurm", nargs="+", choices=sorted(RELEASES), default=[DEFAULT_RELEASE], metavar="RELEASE")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "cluster_lifecycle.json")
    args = parser.parse_args()

    client = engine.connect()
    console = Console()
    results: dict[str, object] = {
        "benchmark": "cluster_lifecycle",
        "dd_accept_version": __version__,
        "engine_version": engine.engine_version(client),
        "machine": {"cpus": __import__("os").cpu_count(), "python": platform.python_version()},
        "targets_s": TARGETS,
    }
    by_release: dict[str, dict[str, object]] = {}
    for release in args.slurm:
        measured: dict[str, object] = {"debian_suite": RELEASES[release].suite}
        if not args.skip_cold:
            console.print(f"Slurm {release}: cold build (its images removed first)…")
            measured["cold_build_s"] = round(cold_build(client, release), 2)
        sizes = []
        for nodes in args.sizes:
            console.print(f"Slurm {release}: warm up/down with {nodes} nodes, {args.repeats} times…")
            samples = args.srun_samples if nodes == args.sizes[0] else 0
            sizes.append(lifecycle(client, release, nodes, args.repeats, samples))
        measured["sizes"] = sizes
        by_release[release] = measured
    results["releases"] = by_release

    table = Table(title="dd-accept cluster lifecycle (seconds)")
    for column in ("measure", "median", "min", "max", "target", "met"):
        table.add_column(column, justify="right" if column != "measure" else "left")

    def row(label: str, stats: dict[str, float], target: float | None) -> None:
        met = "" if target is None else ("yes" if stats["median"] <= target else "NO")
        table.add_row(
            label,
            f"{stats['median']:.3f}",
            f"{stats['min']:.3f}",
            f"{stats['max']:.3f}",
            "" if target is None else f"≤ {target:g}",
            met,
        )

    for release, measured in by_release.items():
        if "cold_build_s" in measured:
            cold = float(measured["cold_build_s"])  # type: ignore[arg-type]
            row(f"{release}: cold image build", {"median": cold, "min": cold, "max": cold}, TARGETS["cold_build"])
        for size in measured["sizes"]:  # type: ignore[attr-defined]
            nodes = size["nodes"]
            row(f"{release}: warm up, {nodes} nodes", size["up_s"], TARGETS.get(f"up_{nodes}"))
            row(f"{release}: down, {nodes} nodes", size["down_s"], TARGETS["down"])
            if "srun_round_trip_s" in size:
                row(f"{release}: srun -N1 true round trip", size["srun_round_trip_s"], TARGETS["srun_round_trip"])
    console.print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    console.print(f"wrote {args.out.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
