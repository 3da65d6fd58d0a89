"""The health scenario's drilled attempts: the SUT's client run under its own health wait
function (the drill) while a replica is lost or stops answering, and the proxy's health
reports read back, each bounded by what the SUT's profile promises.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dd_accept import deployment
from dd_accept.acceptance import health_checks as checks
from dd_accept.acceptance.analysis import requests
from dd_accept.base.waiting import WaitTimeout, wait_for_finding, wait_until
from dd_accept.node.environment import TOKEN_ENV
from dd_accept.slurm_docker.allocation import Allocation, start_background
from dd_accept.slurm_docker.layout import NodeLayout
from dd_accept.sut.profile import SutProfile

if TYPE_CHECKING:  # the options are the scenario's (health), which imports this module
    from dd_accept.acceptance.health import HealthOptions


def _serving(
    allocation: Allocation, run: deployment.RunDirectory, profile: SutProfile, options: HealthOptions
) -> tuple[deployment.ReplicaSet, deployment.Proxy]:
    """N paced replicas and the SUT's proxy in front of them (the detection phases' setting)."""
    replicas = deployment.start_replicas(allocation, options.replicas, run=run, profile=profile, **paced(options))
    try:
        return replicas, deployment.start_proxy(allocation, replicas, profile=profile)
    except BaseException:
        replicas.stop("KILL")
        raise


def first_report(proxy: deployment.Proxy, since: float, bound_s: float, what: str, ready: int) -> checks.Probe | None:
    """The first /health answer other than 200 that counts `ready` backends ready, within
    the bound: a proxy may learn of a lost node's backends one by one (a monitor per
    backend), so an answer on the way there ends no wait. Where none came, the last answer
    other than 200 (what the proxy did report), or None (a finding for the check, not an
    error)."""
    reported: list[checks.Probe] = []

    def probe() -> checks.Probe:
        answer = _probe(proxy, since)
        if answer.status != 200:
            reported.append(answer)
        return answer

    found = wait_for_finding(
        probe,
        lambda p: p.status != 200 and (p.body or {}).get("backends_ready") == ready,
        timeout=bound_s,
        what=f"the proxy's /health to report {what}",
    )
    return found if found is not None else (reported[-1] if reported else None)


def _write_command(path: Path, argv: list[str]) -> None:
    path.write_bytes(b"".join(part.encode() + b"\0" for part in argv))


def drilled_attempt(
    allocation: Allocation,
    profile: SutProfile,
    options: HealthOptions,
    name: str,
    fault: Callable[[deployment.ReplicaSet], object],
    *,
    records: int = 24,
    port_offset: int = 0,
    deadline_s: float = 60.0,
    replicas_in: Allocation | None = None,
    observe: Callable[[deployment.Proxy, float], float | None] | None = None,
    record_attempts: int = 3,
) -> checks.AttemptOutcome:
    """An attempt under the SUT's own controller functions (required replica steps, its wait
    function), in a run directory of its own named `name`, on replica ports shifted by
    `port_offset` (a previous attempt's replicas may still hold theirs): `fault` is done to
    replica 0 mid-generation; returns how the attempt ended. The replicas run in
    `replicas_in` (another job, on a node the fault may take down) or with the proxy and
    the client; `observe(proxy, fault_time)` watches what follows the fault and may say how
    much longer the controller's verdict is worth waiting for; the client gives up after
    `deadline_s`, or on a record after `record_attempts`."""
    run = deployment.RunDirectory.create(allocation.cluster, name)
    port_base = deployment.REPLICA_PORT_BASE + port_offset
    placement = replicas_in or allocation
    node = placement.first_node
    layout = allocation.cluster.layout
    state_cluster, state_host = run.path("health-drill")
    replica_dir, replica_host = run.path("replicas")
    state_host.mkdir(parents=True, exist_ok=True)
    replica_host.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(16)
    for index in range(options.replicas):
        replica, step = drilled_replica(profile, layout.python, replica_dir, options, port_base, index, node)
        _write_command(state_host / f"replica-{index}.cmd", placement.srun_argv(replica, step))
    urls = [f"http://{node}:{port_base + index}/health" for index in range(options.replicas)]
    (state_host / "health-urls").write_text(" ".join(urls))
    drill = start_background(
        allocation.cluster,
        drill_argv(profile, layout, state_cluster),
        environment={"SLURM_JOB_ID": allocation.job_id, TOKEN_ENV: token},
    )
    allocation.background.append(drill)
    wait_until(
        lambda: len(list(replica_host.glob("ready-*.json"))),
        lambda n: n == options.replicas,
        timeout=60,
        what="replica steps to be ready",
        terminal=lambda _: "the drill ended" if drill.finished else None,
    )
    info = deployment.read_ready_files(replica_host)
    replicas = deployment.SyntheticReplicas(allocation, run, options.replicas, info, step=drill, token=token)
    proxy = deployment.start_proxy(allocation, replicas, profile=profile)
    client = deployment.client_command(
        proxy, run, mode="raw", profile=profile, name=name, **attempt_load(records, deadline_s, record_attempts)
    )
    _write_command(state_host / "client.cmd", allocation.srun_argv(client, DRILLED_CLIENT_STEP(proxy.node)))
    allocation.cluster.exec(["touch", f"{state_cluster}/go"])
    try:
        replicas.wait_running(4)
        time.sleep(1.0)
        lost_at = time.time()
        running_at_fault = not drill.finished and not (state_host / "wait-status").exists()
        fault(replicas)
        patience = observe(proxy, lost_at) if observe is not None else None
        try:
            record = drill.wait(timeout=deadline_s + 30 if patience is None else patience)
            ended_at: float | None = time.time()
        except TimeoutError:
            record, ended_at = None, None
        wait_file = state_host / "wait-status"
        status_text = wait_file.read_text().strip() if wait_file.exists() else ""
        if wait_file.exists():  # the moment the SUT's wait returned, not when dd-accept looked
            ended_at = wait_file.stat().st_mtime
        wait_status = int(status_text) if status_text.lstrip("-").isdigit() else (record.exit_code if record else None)
        done = records_done_by(deployment.read_events(run, name), ended_at)
    finally:  # a fault that failed leaves nothing running to the allocation's release either
        for job in [allocation] if placement is allocation else [allocation, placement]:
            named = job.steps_by_name()
            for step in named.get("replicas", []) + named.get("client", []):
                job.scancel_step(step, "KILL")
        proxy.stop("KILL")  # its shutdown is not what this judges; streams to a lost node never end
    ended_after = None if ended_at is None else ended_at - lost_at
    apart = placement is not allocation
    return checks.AttemptOutcome(wait_status, ended_after, done, records, running_at_fault, ended_at, apart)


def loss_detection(
    allocation: Allocation, run: deployment.RunDirectory, profile: SutProfile, options: HealthOptions
) -> checks.CheckResult:
    """Kill one of N replicas under load: the proxy's /health must report N-1 ready."""
    loss_run = deployment.RunDirectory.create(allocation.cluster, "loss")
    replicas, proxy = _serving(allocation, loss_run, profile, options)
    try:
        client = deployment.run_client(
            allocation, proxy, loss_run, mode="raw", profile=profile, name="detect", **DETECT_LOAD
        )
        replicas.wait_running(4)
        lost_at = time.time()
        replicas.control([0], "kill")
        probe = first_report(proxy, lost_at, options.loss_detect_timeout_s, "the loss", options.replicas - 1)
        client.wait(timeout=90)
        return checks.backend_loss_detected(
            probe, options.replicas, profile.capabilities.health_monitor, options.loss_detect_timeout_s
        )
    finally:
        proxy.stop()
        replicas.stop("KILL")


# For /health to report a replica ready again once it serves: a proxy that sets a failed
# backend aside for a while before it tries it again (Envoy's base ejection is 30 s) is given
# that and more; rc1, probing on demand, answers 200 at once.
RECOVERY_WAIT_S = 90.0


def unresponsive_detection(allocation: Allocation, profile: SutProfile, options: HealthOptions) -> checks.CheckResult:
    """A replica that stops answering, then one whose /health fails while it generates: the
    proxy's /health must report each within the bound."""
    unresponsive_run = deployment.RunDirectory.create(allocation.cluster, "unresponsive-detect")
    replicas, proxy = _serving(allocation, unresponsive_run, profile, options)
    bound = options.unresponsive_detect_timeout_s
    found: dict[str, checks.Probe | None] = {}
    unrecovered = None
    modes = (
        ("hung", 0, "hang", {"on": True}, {"on": False}),
        ("/health 503", 1, "health", {"ok": False}, {"ok": True}),
    )
    try:
        for position, (mode, index, action, on, off) in enumerate(modes):
            since = time.time()
            replicas.control([index], action, **on)
            found[mode] = first_report(proxy, since, bound, f"a {mode} replica", options.replicas - 1)
            replicas.control([index], action, **off)
            if position == len(modes) - 1:  # no fault follows the last: nothing waits on its recovery
                break
            try:
                wait_until(
                    lambda: proxy.get("/health", timeout=30).get("status"),
                    lambda status: status == 200,
                    timeout=RECOVERY_WAIT_S,
                    what="the proxy's /health to recover",
                )
            except WaitTimeout:  # the SUT's /health, never the harness's: the check fails, the scenario goes on
                unrecovered = f"/health not 200 again {RECOVERY_WAIT_S:g}s after replica {index} served again"
                break
        return checks.unresponsive_detected(found, options.replicas, bound, unrecovered)
    finally:
        proxy.stop()
        replicas.stop("KILL")


def probe_isolation(
    allocation: Allocation, run: deployment.RunDirectory, profile: SutProfile, options: HealthOptions
) -> checks.CheckResult:
    saturation_run = deployment.RunDirectory.create(allocation.cluster, "saturation")
    limit, streams = profile.proxy.upstream_connection_limit, saturating_streams(profile, options)
    replicas = deployment.start_replicas(
        allocation, options.saturation_replicas, run=saturation_run, profile=profile, **saturating_replicas(options)
    )
    proxy = deployment.start_proxy(allocation, replicas, profile=profile)
    try:
        replicas.control(None, "stall", on=True)
        load = saturating_load(streams)
        client = deployment.run_client(
            allocation, proxy, saturation_run, mode="raw", profile=profile, name="saturate", **load
        )
        held = wait_until(
            lambda: sum(s["running"] + s["waiting"] for s in replicas.control(None, "state")),
            lambda n: n >= limit,
            timeout=60,
            what=f"{limit} streams holding upstream connections",
        )
        probe = _probe(proxy, time.time())
        replicas.control(None, "stall", on=False)
        client.wait(timeout=120)
        return checks.probe_isolation(probe, held)
    finally:
        proxy.stop()
        replicas.stop()


def records_done_by(client_rows: list[Any], ended_at: float | None) -> int:
    """Records the client had done when the SUT's wait returned (None: it never did): what
    the client did after is not the attempt's, for nothing of the drill stops the client."""
    return len({e.record for e in requests(client_rows) if e.outcome == "ok" and (ended_at is None or e.t <= ended_at)})


def _probe(proxy: deployment.Proxy, since: float) -> checks.Probe:
    """One /health answer; how long it took as the node timed it (the proxy's answer, not
    the exec's way there, which a busy machine stretches), else as the harness did."""
    started = time.monotonic()
    row = proxy.get("/health", timeout=30)
    took = row.get("elapsed_s")
    elapsed = float(took) if isinstance(took, int | float) else time.monotonic() - started
    return checks.Probe(row.get("status"), elapsed, row.get("json"), time.time() - since)


def saturating_streams(profile: SutProfile, options: HealthOptions) -> int:
    """Streams enough to hold every upstream connection the proxy allows, and some over."""
    return profile.proxy.upstream_connection_limit + options.saturating_over_limit


DETECT_LOAD = {"records": 16, "concurrency": 8, "max_tokens": 80, "max_record_attempts": 3, "deadline_s": 60}


def DRILLED_CLIENT_STEP(node: str) -> list[str]:
    return ["-J", "client", "-N1", "-n1", f"--nodelist={node}"]


def paced(options: HealthOptions) -> dict[str, Any]:
    """The detection phases' replicas (the run's and the plan's keywords)."""
    return {"options": PACED_REPLICAS, "seed": options.seed}


def saturating_replicas(options: HealthOptions) -> dict[str, Any]:
    return {"options": ("--ttft-ms", "5", "--itl-ms", "5", "--max-num-seqs", "64"), "seed": options.seed}


def saturating_load(streams: int) -> dict[str, Any]:
    return {"records": streams, "concurrency": streams, "max_tokens": 4, "max_record_attempts": 1, "deadline_s": 90}


def attempt_load(records: int, deadline_s: float, record_attempts: int = 3) -> dict[str, Any]:
    """The client of a drilled attempt: up to three attempts a record unless told."""
    return {
        "records": records, "concurrency": 8, "max_tokens": 80, "max_record_attempts": record_attempts,
        "deadline_s": deadline_s,
    }  # fmt: skip


def drilled_replica(
    profile: SutProfile, python: str, replica_dir: str, options: HealthOptions, port_base: int, index: int, node: str
) -> tuple[list[str], list[str]]:
    """One replica of a drilled attempt, a step of its own (the SUT's register function
    launches it): its command and its srun options."""
    replica = deployment.replica_command(
        profile, replica_dir, python=python, seed=options.seed,
        options=deployment.replica_options((*PACED_REPLICAS, *DRILLED_REPLICAS)), port=port_base + index,
        port_base=port_base,
    )  # fmt: skip
    return replica, ["-J", "replicas", "-N1", "-n1", f"--nodelist={node}", "-o", f"{replica_dir}/replica-{index}.log"]


def drill_argv(profile: SutProfile, layout: NodeLayout, state: str) -> list[str]:
    """The attempt's drill on the controller's host: the SUT's cleanup script sourced, its
    register, wait and stop functions run on the command files in `state`."""
    cleanup = profile.cleanup
    script = cleanup.script.format(site_packages=layout.site_packages)
    functions = [cleanup.register_function, cleanup.wait_function, cleanup.stop_function]
    return ["bash", layout.drill(DRILL), script, *functions, state]


DRILL = "sut_health_drill.sh"


PACED_REPLICAS = ("--ttft-ms", "20", "--itl-ms", "50")  # every health phase: streams long enough to fault
# An attempt's replicas stop on TERM as vLLM's server does (at once, exit 0): what Slurm's
# preemption leaves a SUT's wait to see. No other phase sends them TERM.
DRILLED_REPLICAS = ("--exit-on-term",)
