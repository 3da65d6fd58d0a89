"""Shared machinery of the controls: run a scenario against rc1 with one deliberate fault."""

from __future__ import annotations

import uuid
from contextlib import contextmanager

from dd_accept.acceptance import overload
from dd_accept.acceptance.overload import OverloadOptions, run_overload
from dd_accept.acceptance.phases import scenario_runner
from dd_accept.base.progress import ProgressWriter
from dd_accept.base.results import write_results
from dd_accept.base.slurm_releases import RELEASES
from dd_accept.base.state import file_lock, state_root
from dd_accept.deployment import RunDirectory
from dd_accept.slurm_docker import engine
from dd_accept.slurm_docker.allocation import Allocation
from dd_accept.slurm_docker.cluster import SlurmCluster
from dd_accept.slurm_docker.spec import ClusterSpec
from dd_accept.slurm_docker.sut_image import build_overlay_image
from tests.variants import FAULTS, make_variant

OWN_JOB = "dd-control"  # the job name of a control's allocation on a cluster of its own


def run_with_fault(scenario, fault_name, wheelhouse, base_image, profile, tmp_path, *, nodes=1):
    """Run `scenario(allocation, run, profile, progress)` on a cluster whose SUT carries the
    fault; returns {check id: CheckResult}."""
    with faulty_image(fault_name, wheelhouse, base_image, profile, tmp_path) as (image, profile, installed):
        return run_on_own_cluster(scenario, image, wheelhouse, profile, tmp_path, f"ctl-{fault_name}", nodes, installed)


@contextmanager
def faulty_image(fault_name, wheelhouse, base_image, profile, tmp_path):
    """The image of rc1 with one fault, its profile, and the check that the variant is what a
    cluster of it installed; the image is removed after."""
    fault = FAULTS[fault_name]
    profile = fault.profile(profile)  # what the variant changed that its profile states
    (wheel,) = [w for w in wheelhouse.wheels if w.name == fault.distribution]
    variant = make_variant(wheelhouse.path / wheel.file, fault, tmp_path)
    client = engine.connect()
    # Two controls may install one variant at once (no-failover: the proxy-fault and the vLLM
    # controls): each runs its own tag of the image and removes only that, so one control's
    # cleanup never takes the image from under the other's cluster.
    with file_lock(state_root() / "locks" / "variant-tags.lock"):
        shared = build_overlay_image(client, base_image, [variant])
        image = f"{shared}-{uuid.uuid4().hex[:8]}"
        repository, tag = image.rsplit(":", 1)
        client.images.get(shared).tag(repository, tag)
        client.images.remove(shared)  # untags the shared name; the layers stay under this control's tag

    def installed(cluster):
        found = cluster.exec(["grep", "-c", "ddfault", "/opt/sut/dd-accept-freeze.txt"], node="node1")
        assert found.stdout_tail.strip() == "1", "the variant must be what is installed"

    try:
        yield image, profile, installed
    finally:  # 1 GB a control: removed once the last control's tag of it is
        client.images.remove(image, force=True)


@contextmanager
def own_allocation(image, wheelhouse, name, before=None, nodes=1):
    """An exclusive allocation on a cluster of its own (`nodes` compute nodes), kept for as
    many runs as the caller makes."""
    # The base image is the session's (--dd-slurm): its release is the one whose Python the
    # wheelhouse was fetched for, and the cluster's layout must follow it.
    release = next(r.version for r in RELEASES.values() if r.python == wheelhouse.python)
    spec = ClusterSpec(name=f"{name}-{uuid.uuid4().hex[:6]}", nodes=nodes, cpus_per_node=64, slurm=release)
    with SlurmCluster(spec, image=image) as cluster:
        if before is not None:
            before(cluster)
        with Allocation.acquire(cluster, job_name=OWN_JOB, extra=["--exclusive"]) as allocation:
            yield allocation, cluster


def run_on_own_cluster(scenario, image, wheelhouse, profile, tmp_path, name, nodes=1, before=None, records=None):
    """Run `scenario` on a cluster of its own (`nodes` compute nodes; a scenario that loses a
    node needs one beyond its allocation); returns {check id: CheckResult}. `records`, a
    list, gets the cluster's command records (its allocation's job is named `OWN_JOB`)."""
    with own_allocation(image, wheelhouse, name, before, nodes) as (allocation, cluster):
        result = scenario(allocation, RunDirectory.create(cluster), profile, ProgressWriter(None, "control"))
    if records is not None:  # once the allocation is released: a launcher it stopped is recorded then
        records.extend(cluster.records)
    assert result.error is None, result.error
    write_results(tmp_path / "results.json", [result], {}, False)  # refuses what the published schema does not allow
    return {check.id: check for check in result.checks}


def run_against_fault(fault_name, wheelhouse, base_image, profile, tmp_path, options=None, checks=None):
    """The overload scenario against rc1 with one fault; `checks` (patterns, as `--check`
    takes them) runs only the phases those checks need, and reports only them."""

    def overload(allocation, run, profile, progress):
        return run_overload(allocation, run, profile, options or OverloadOptions(), progress, checks=checks)

    return run_with_fault(overload, fault_name, wheelhouse, base_image, profile, tmp_path)


def overload_phases(*titles, options=None):
    """The overload scenario's phases titled `titles` (exactly), with `options` (its defaults
    when None): a control that needs some phases and none of those between them (which
    `--check` keeps, taking every phase up to the last one a chosen check needs)."""
    phases = [p for p in overload.PHASES if p.title in titles]
    assert len(phases) == len(titles), f"phases {titles} are not all declared"
    runner = scenario_runner("overload", phases, overload.OverloadRun)
    chosen = options or OverloadOptions()
    return lambda allocation, run, profile, progress: runner(allocation, run, profile, chosen, progress)


# The rounds after recovery (backends lost, routing), which only their own checks read.
LATE_ROUNDS = (
    "overload with backends lost", "overload with backends lost: what the proxy answers",
    "routing once the faults are over: requests at once to idle replicas",
)  # fmt: skip


def overload_without_late_rounds(options=None):
    """The overload scenario without its late rounds: every check but total.unreachable and
    routing_restored judged as in a whole run."""
    return overload_phases(*(p.title for p in overload.PHASES if p.title not in LATE_ROUNDS), options=options)


def stop_story(records, since: int = 0) -> str:
    """What Slurm and the harness did around each stop since record `since`, a line each: the
    scancels, the node-log reads of TERM's delivery and the tasks' ends (their lines are the
    node's own), and the proxy's launcher. Printed by a control whose rc1 stop came out
    otherwise than rc1 does (seen rarely, under 4 control files at once)."""
    lines = []
    for r in records.since(since):
        argv = " ".join(r.argv)
        if "scancel" in r.argv or "Sent signal" in argv or "] task " in argv or (r.background and "proxy" in argv):
            told = " | ".join(t.strip()[-400:] for t in (r.stdout_tail, r.stderr_tail) if t.strip())
            lines.append(f"{r.start} +{r.duration_s:.2f}s exit {r.exit_code}: {argv[-100:]} | {told}")
    return "\n".join(lines)
