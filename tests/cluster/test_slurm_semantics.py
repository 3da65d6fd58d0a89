"""The Slurm behaviour every drain and health verdict rests on, pinned for each release.

Brief facts 1 and 2, and what the drain checks read, are facts about Slurm, not about the
SUT; they are exactly what changes between releases and process-tracking plugins. So each
fact is a test, run on a cluster of every release dd-accept builds (base.slurm_releases)
with each process tracking a site may set (linuxproc, cgroup); when a combination changes
one, the failing test names which:

(a) TERM to the srun *launcher* makes srun force job termination: the task is killed
    without its SIGTERM handler running.
(b) `scancel --signal=TERM JOB.STEP` delivers TERM to the task: the handler runs and the
    task exits 0 after finishing its work.
(c) `scancel JOB` sends TERM to the tasks, then KILL after KillWait.
(d) slurmd records each task's end (exit code, or the killing signal) and the signal it
    delivered, in the log format `step_exit` parses: the drain checks read the endpoint's
    exit status and TERM's moment from there.
(e) slurmctld shut down with its state saved (`scontrol shutdown slurmctld`) and started again
    keeps a running job and its steps, whose tasks run on meanwhile: health's controller
    restart judges the SUT on that, through dd-accept's entrypoint (controller_restart).
(f) `scontrol reconfigure` keeps a running job and its steps, and the controller answers every
    query meanwhile, each within the 2 s a bounded wait might allow: nothing a SUT asks of Slurm
    can tell it happened, so no health phase judges a SUT on it. A release where the
    reconfiguration silences the controller (as a restart does) fails here, naming it: then it
    needs the restart's phase.
(g) A job preempted for a higher-priority one (PreemptMode=CANCEL with a GraceTime, as
    dd-accept's own cluster sets it up) has every step sent TERM at once, long before its
    grace time ends, and a task that exits 0 on it leaves its srun exiting 0: to a SUT's wait,
    a preempted backend is a process that ended cleanly. Health's preemption judges the SUT
    on that.
(h) `scancel --signal=TERM JOB.STEP` signals the step twice, milliseconds apart, while a job
    submitted after JOB is pending, and once otherwise: scancel's `_verify_job_ids` keeps
    `job_found` set past the matched record, so the later pending record marks the step id
    pending, and both passes of `_cancel_jobs` (pending jobs, then all) send the request. Its
    verbose output shows each request, and slurmd logs each delivery. Run --interactive and
    answered yes once, then no (`scancel_once_argv`), it sends one: the drain stops' TERM.
    They still count both (`step_exit.signal_requests`, `signals_sent`): an endpoint that
    fails at a second TERM is not judged. A release that fixes scancel fails here, naming it.
"""

import threading
import time
from collections.abc import Callable
from typing import TypeVar

import pytest

from dd_accept.base.slurm_releases import PROCTRACK, RELEASES
from dd_accept.base.waiting import wait_until
from dd_accept.slurm_docker.allocation import Allocation
from dd_accept.slurm_docker.cluster import SlurmCluster
from dd_accept.slurm_docker.controller_restart import restart_controller
from dd_accept.slurm_docker.preemption import preempt
from dd_accept.slurm_docker.spec import CONTROLLER, ClusterSpec
from dd_accept.slurm_docker.step_exit import (
    SLURMD_LOG,
    StepExit,
    from_slurmd_log,
    signal_requests,
    signal_sent_at,
    signals_sent,
)

pytestmark = pytest.mark.cluster

T = TypeVar("T")
KILL_WAIT = 3  # seconds; short, so (c) is quick to observe, and long enough to tell apart

# The task records its step identity, then traps TERM: the handler marks that it ran,
# works for $2 s (or ignores TERM when $2 is "ignore"), marks that it finished, exits $3.
TASK = r"""
d=/shared/semantics/$1
mkdir -p "$d"
if [ "$2" = ignore ]; then
  trap 'date +%s.%N >"$d/handler"' TERM
else
  trap 'echo started >"$d/handler"; sleep "$2"; echo finished >>"$d/handler"; exit "$3"' TERM
fi
echo "$SLURM_JOB_ID.$SLURM_STEP_ID" >"$d/ready"
while :; do sleep 0.1; done
"""


@pytest.fixture(
    scope="module",
    params=[(release, proctrack) for release in sorted(RELEASES) for proctrack in PROCTRACK],
    ids=lambda param: f"slurm-{param[0]}-{param[1]}",
)
def release_cluster(request: pytest.FixtureRequest, slurm_cluster: SlurmCluster):
    """A one-node cluster of each Slurm release and process tracking (KillWait short),
    removed after its tests."""
    release, proctrack = request.param
    spec = ClusterSpec(
        name=f"{slurm_cluster.name}-s{release.replace('.', '')}{proctrack[0]}",
        nodes=1,
        cpus_per_node=4,
        kill_wait=KILL_WAIT,
        slurm=release,
        proctrack=proctrack,
    )
    with SlurmCluster(spec) as cluster:
        yield cluster


@pytest.fixture
def release_allocation(release_cluster: SlurmCluster, request: pytest.FixtureRequest):
    alloc = Allocation.acquire(release_cluster, nodes=1, job_name=request.node.name[:40])
    try:
        yield alloc
    finally:
        leaked = alloc.release()
    assert not leaked, f"leaked steps: {leaked}"


def _start_task(allocation: Allocation, cluster: SlurmCluster, label: str, work: str = "2", code: int = 0):
    launcher = allocation.start_step(["bash", "-c", TASK, "task", label, work, str(code)], options=["-N1", "-n1"])
    _, host_dir = cluster.shared_path("semantics", label)
    step = wait_until(
        lambda: (host_dir / "ready").read_text().strip() if (host_dir / "ready").exists() else "",
        bool,
        timeout=30,
        what=f"task {label} to report its step",
    )
    wait_until(allocation.steps, lambda steps: step in steps, timeout=10, what=f"step {step} running")
    return launcher, step, host_dir


def _recorded_end(cluster: SlurmCluster, node: str, step: str) -> tuple[str, StepExit]:
    """slurmd's log on `node` once it records the end of `step`, and that end as parsed."""
    log = wait_until(
        lambda: cluster.exec(["cat", SLURMD_LOG], node=node, timeout=15).stdout,
        lambda text: from_slurmd_log(text, step) is not None,
        timeout=15,
        what=f"slurmd to record the end of {step}",
    )
    ended = from_slurmd_log(log, step)
    assert ended is not None
    return log, ended


def test_the_release_and_process_tracking_are_the_ones_asked_for(release_cluster, release_allocation):
    versions = release_cluster.versions()
    assert versions["slurm"].split()[-1].startswith(release_cluster.spec.slurm + "."), versions
    python = RELEASES[release_cluster.spec.slurm].python
    assert python in release_cluster.exec(["python3", "--version"], timeout=10).stdout, versions
    config = release_cluster.exec(["scontrol", "show", "config"], timeout=10).stdout
    proctrack = release_cluster.spec.proctrack
    assert f"proctrack/{proctrack}" in config, config[-500:]
    # Under proctrack/cgroup a task lives in its step's freezer cgroup; under linuxproc it does not.
    record = release_allocation.srun(["cat", "/proc/self/cgroup"], options=["-N1", "-n1"])
    freezer = next(line for line in record.stdout.splitlines() if ":freezer:" in line)
    in_step = f"/job_{release_allocation.job_id}/step_" in freezer
    assert in_step == (proctrack == "cgroup"), freezer


CAP_SYS_ADMIN = 21


def test_no_job_step_ever_holds_cap_sys_admin(release_cluster, release_allocation):
    """Least privilege: only a cgroup-tracking compute node is created with CAP_SYS_ADMIN and a
    private cgroup namespace (to mount its own freezer subtree read-write), and it drops the
    capability from its bounding set before slurmd starts, so no job step (the SUT's code) has it."""
    cgroup = release_cluster.spec.proctrack == "cgroup"
    for node in (CONTROLLER, *release_cluster.nodes):
        container = release_cluster.container(node)
        container.reload()
        host = container.attrs["HostConfig"]
        compute_with_cgroup = cgroup and node != CONTROLLER
        assert (host.get("CapAdd") or []) == (["SYS_ADMIN"] if compute_with_cgroup else []), (node, host.get("CapAdd"))
        assert (host.get("CgroupnsMode") == "private") == compute_with_cgroup, (node, host.get("CgroupnsMode"))
        assert not host.get("Privileged") and not host.get("Devices"), node
    record = release_allocation.srun(["grep", "CapBnd", "/proc/self/status"], options=["-N1", "-n1"])
    bounding = int(record.stdout.split()[-1], 16)
    assert not bounding & (1 << CAP_SYS_ADMIN), f"a job step may use CAP_SYS_ADMIN: {record.stdout.strip()}"
    writable = release_allocation.srun(["sh", "-c", "echo a > /sys/fs/cgroup/devices/devices.allow"], options=["-N1"])
    assert not writable.ok, "a job step could widen its container's device access"


def test_term_to_the_srun_launcher_kills_the_task_without_its_handler(release_allocation, release_cluster):
    launcher, step, host_dir = _start_task(release_allocation, release_cluster, "launcher")
    assert launcher.signal("TERM").ok
    record = launcher.wait(timeout=60)
    assert record.exit_code == 137, record.describe()
    assert "forcing job termination" in record.stderr_tail, record.describe()
    time.sleep(0.5)  # let a (wrongly) running handler get far enough to leave its mark
    assert not (host_dir / "handler").exists(), "the task's TERM handler ran; Slurm semantics changed"
    assert step not in release_allocation.steps()


def test_scancel_term_to_the_step_runs_the_handler_and_its_exit_is_recorded(release_allocation, release_cluster):
    launcher, step, host_dir = _start_task(release_allocation, release_cluster, "scancel", code=3)
    started = time.monotonic()
    assert release_allocation.scancel_step(step, "TERM").ok
    record = launcher.wait(timeout=60)
    elapsed = time.monotonic() - started
    assert record.exit_code == 3, record.describe()
    assert (host_dir / "handler").read_text().split() == ["started", "finished"]
    assert elapsed >= 2.0, "the task ended before its 2 s of drain work"
    assert step not in release_allocation.steps()
    # (d): what the drain checks read — the task's own exit code and TERM's moment, from slurmd.
    log, ended = _recorded_end(release_cluster, release_allocation.first_node, step)
    assert ended.exit_code == 3, ended
    term_at = signal_sent_at(log, step, 15)
    assert term_at is not None, f"slurmd did not record delivering TERM to {step}"
    assert ended.ended_at is not None and ended.ended_at - term_at >= 1.5, (term_at, ended)


def test_scancel_signals_a_step_twice_while_a_job_submitted_after_it_is_pending(release_allocation, release_cluster):
    launcher, step, _ = _start_task(release_allocation, release_cluster, "repeat", work="ignore")
    node = release_allocation.first_node
    held = release_cluster.exec(["sbatch", "--hold", "--job-name=later", "--output=/dev/null", "--wrap=true"])
    assert held.ok and held.stdout.split()[-1].isdigit(), held.describe()
    later = held.stdout.split()[-1]
    try:

        def delivered() -> int:
            return len(signals_sent(release_cluster.exec(["cat", SLURMD_LOG], node=node).stdout, step, 15))

        repeated = release_cluster.exec(["scancel", "--signal=TERM", "--verbose", step])
        assert repeated.ok and signal_requests(repeated.stderr_tail, step, 15) == 2, repeated.describe()
        assert wait_until(delivered, lambda n: n >= 2, timeout=15, what="two TERMs logged") == 2
        # asked before each request, answered yes once: one request, one delivery, two prompts
        once = release_allocation.signal_step_once(step, "TERM")
        assert once.ok and signal_requests(once.stderr_tail, step, 15) == 1, once.describe()
        assert once.stdout.count(f"Cancel step_id={step} ") == 2, once.describe()
        assert wait_until(delivered, lambda n: n >= 3, timeout=15, what="the once-sent TERM logged") == 3
        assert release_cluster.exec(["scancel", later]).ok
        wait_until(
            lambda: release_cluster.exec(["squeue", "-h", "-t", "PENDING", "-o", "%i"]).stdout.split(),
            lambda pending: later not in pending,
            timeout=15,
            what=f"job {later} to leave the queue",
        )
        single = release_cluster.exec(["scancel", "--signal=TERM", "--verbose", step])
        assert single.ok and signal_requests(single.stderr_tail, step, 15) == 1, single.describe()
        assert wait_until(delivered, lambda n: n >= 4, timeout=15, what="the last TERM logged") == 4
    finally:
        release_cluster.exec(["scancel", later])
        release_allocation.scancel_step(step, "KILL")
        launcher.wait(timeout=30)


def test_scancel_of_the_job_sends_term_then_kill_after_killwait(release_cluster):
    allocation = Allocation.acquire(release_cluster, nodes=1, job_name="killwait")
    try:
        launcher, step, host_dir = _start_task(allocation, release_cluster, "killwait", work="ignore")
        cancelled = time.time()
        assert release_cluster.exec(["scancel", allocation.job_id], timeout=10).ok
        launcher.wait(timeout=KILL_WAIT + 30)
        term_seen = float((host_dir / "handler").read_text())  # the task's own clock, same host
        _, ended = _recorded_end(release_cluster, allocation.first_node, step)
        assert ended.exit_code == 128 + 9, f"not killed by KILL: {ended}"
        assert ended.ended_at is not None
        assert term_seen - cancelled < KILL_WAIT, "TERM did not come first"
        # KILL follows TERM after KillWait (slurmd logs at millisecond resolution).
        assert KILL_WAIT - 0.5 <= ended.ended_at - term_seen <= KILL_WAIT + 5, (term_seen, ended)
    finally:
        allocation.release()


def test_a_controller_restart_keeps_the_job_and_its_steps_running(release_allocation, release_cluster):
    launcher, step, host_dir = _start_task(release_allocation, release_cluster, "restart")
    restart, asked = _queries_during(
        release_cluster, release_allocation, lambda: restart_controller(release_allocation, held_s=3.0)
    )
    # what (f) measures is what a restart does to a SUT's queries: the controller is silent
    assert len(_unanswered(asked)) >= 2, f"a restart left every one of {len(asked)} queries answered"
    assert restart.job_state_before == restart.job_state_after == "RUNNING", restart.describe()
    assert step in restart.steps_before and restart.steps_after == restart.steps_before, restart.describe()
    assert restart.job_kept and 3.0 <= restart.down_s < 20, restart.describe()
    assert not launcher.finished and step in release_allocation.steps(), "the step outlived the restart"
    # the restarted controller still reaches the step: TERM runs its handler, as in (b)
    release_allocation.scancel_step(step, "TERM")
    assert launcher.wait(timeout=60).exit_code == 0
    assert (host_dir / "handler").read_text().split() == ["started", "finished"]


QUERY_BOUND_S = 2.0  # the bound of a wait that asks Slurm (health's controller-silence control)


def _queries_during(cluster: SlurmCluster, allocation: Allocation, event: Callable[[], T]) -> tuple[T, list]:
    """What a SUT's wait would see of `event`: `scontrol ping` and the job's state asked over
    and over from a second before it until 5 s after, each bounded in the container, as the
    SUT's wait bounds it (docker exec's own start on a loaded machine is not the controller's
    silence); returns the event's result and the queries' records."""
    asked, done = [], threading.Event()

    def ask() -> None:
        while not done.is_set():
            for argv in (["scontrol", "ping"], ["squeue", "-h", "-j", allocation.job_id, "-o", "%T"]):
                asked.append(cluster.exec(["timeout", str(QUERY_BOUND_S), *argv], timeout=30))

    asking = threading.Thread(target=ask)
    asking.start()
    try:
        time.sleep(1.0)
        result = event()
        time.sleep(5.0)  # a controller that restarts itself to reconfigure is silent within this
    finally:
        done.set()
        asking.join()
    return result, asked


def _unanswered(asked: list) -> list[str]:
    return [r.describe() for r in asked if not r.ok or "DOWN" in r.stdout]


def test_a_reconfigure_keeps_the_job_and_its_steps_and_the_controller_answering(release_allocation, release_cluster):
    launcher, step, host_dir = _start_task(release_allocation, release_cluster, "reconfigure")
    steps_before = release_allocation.steps()
    reconfigured, asked = _queries_during(
        release_cluster, release_allocation, lambda: release_cluster.exec(["scontrol", "reconfigure"], timeout=60)
    )
    assert reconfigured.ok, reconfigured.describe()
    unanswered = _unanswered(asked)
    assert len(asked) >= 10 and not unanswered, f"{len(unanswered)} of {len(asked)} queries unanswered: {unanswered}"
    assert all(r.stdout.strip() == "RUNNING" or " is UP" in r.stdout for r in asked), asked
    assert release_allocation.job_state() == "RUNNING" and release_allocation.steps() == steps_before
    assert not launcher.finished, "the step outlived the reconfiguration"
    release_allocation.scancel_step(step, "TERM")  # and the reconfigured controller still reaches it
    assert launcher.wait(timeout=60).exit_code == 0
    assert (host_dir / "handler").read_text().split() == ["started", "finished"]


def test_a_preemption_terms_every_step_at_once_and_a_clean_exit_leaves_srun_0(release_allocation, release_cluster):
    started = [_start_task(release_allocation, release_cluster, f"preempted-{n}", work="0") for n in range(2)]
    preemption = preempt(release_allocation)
    try:
        # slurmd logs the TERM of each step (CI once saw one of the two not logged within 35 s,
        # its task's handler run all the same): the handlers below are the tasks' own word
        assert set(preemption.steps_signalled) <= {step for _, step, _ in started}, preemption.describe()
        assert preemption.term_after_s < 10 and preemption.job_state == "RUNNING", preemption.describe()
        for launcher, step, host_dir in started:
            assert launcher.wait(timeout=30).exit_code == 0, f"{step}: srun of a task that exited 0 on TERM"
            assert (host_dir / "handler").read_text().split() == ["started", "finished"]
    finally:
        release_cluster.exec(["scancel", preemption.preemptor_job], timeout=10)
