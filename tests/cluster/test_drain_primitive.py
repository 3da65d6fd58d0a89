"""The Slurm behaviour every drain check rests on (brief, facts 1 and 2), pinned by a test.

(a) TERM to the srun *launcher* makes srun force job termination: the task is killed
    without its SIGTERM handler running.
(b) `scancel --signal=TERM JOB.STEP` delivers TERM to the task: the handler runs and the
    task exits 0 after finishing its work.
"""

import time

import pytest

from dd_accept.base.waiting import wait_until

pytestmark = pytest.mark.cluster

# The task records its step identity, then traps TERM: the handler marks that it ran,
# works for 2 s, marks that it finished, and exits 0.
TASK = r"""
d=/shared/drain/$1
mkdir -p "$d"
trap 'echo started >"$d/handler"; sleep 2; echo finished >>"$d/handler"; exit 0' TERM
echo "$SLURM_JOB_ID.$SLURM_STEP_ID" >"$d/ready"
while :; do sleep 0.1; done
"""


def _start_task(allocation, cluster, label):
    launcher = allocation.start_step(["bash", "-c", TASK, "task", label], options=["-N1", "-n1"])
    _, host_dir = cluster.shared_path("drain", label)
    step = wait_until(
        lambda: (host_dir / "ready").read_text().strip() if (host_dir / "ready").exists() else "",
        bool,
        timeout=30,
        what=f"task {label} to report its step",
    )
    wait_until(allocation.steps, lambda steps: step in steps, timeout=10, what=f"step {step} running")
    return launcher, step, host_dir


def test_term_to_the_srun_launcher_kills_the_task_without_its_handler(allocation, slurm_cluster):
    launcher, step, host_dir = _start_task(allocation, slurm_cluster, "launcher")
    assert launcher.signal("TERM").ok
    record = launcher.wait(timeout=60)
    assert record.exit_code == 137, record.describe()
    assert "forcing job termination" in record.stderr_tail
    time.sleep(0.5)  # let a (wrongly) running handler get far enough to leave its mark
    assert not (host_dir / "handler").exists(), "the task's TERM handler ran; Slurm semantics changed"
    assert step not in allocation.steps()


def test_scancel_term_to_the_step_runs_the_handler_and_the_task_exits_0(allocation, slurm_cluster):
    launcher, step, host_dir = _start_task(allocation, slurm_cluster, "scancel")
    started = time.monotonic()
    assert allocation.scancel_step(step, "TERM").ok
    record = launcher.wait(timeout=60)
    elapsed = time.monotonic() - started
    assert record.exit_code == 0, record.describe()
    assert (host_dir / "handler").read_text().split() == ["started", "finished"]
    assert elapsed >= 2.0, "the task ended before its 2 s of drain work"
    assert step not in allocation.steps()
