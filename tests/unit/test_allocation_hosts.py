"""An allocation knows its nodes: squeue is asked again until it names them, never taken as none."""

import pytest

from dd_accept.base.errors import ClusterError
from dd_accept.slurm_docker.allocation import Allocation, allocated_hosts
from dd_accept.slurm_docker.records import CommandRecord


class ScriptedCluster:
    """Answers each command with the next scripted (exit code, stdout) for its program."""

    salloc_args: tuple[str, ...] = ()
    time_limit = ""
    allocation_timeout = 10.0

    def __init__(self, **answers: list[tuple[int, str]]) -> None:
        self.answers = answers
        self.ran: list[tuple[str, ...]] = []
        self.told: list[tuple[str, list[str]]] = []

    def exec(self, argv, timeout=None, node="ctl"):
        self.ran.append(tuple(argv))
        code, out, *said = self.answers[argv[0]].pop(0) if len(self.answers[argv[0]]) > 1 else self.answers[argv[0]][0]
        err = "salloc: Granted job allocation 7\n" if argv[0] == "salloc" else "".join(said)
        return CommandRecord(tuple(argv), node, "2026-12-02T00:00:00Z", 0.01, code, out[-100:], err, stdout=out)

    def allocated(self, job_id, nodes):
        self.told.append((job_id, list(nodes)))


def test_a_node_list_squeue_shows_late_is_waited_for():
    cluster = ScriptedCluster(
        salloc=[(0, "")],
        squeue=[(1, ""), (0, "\n"), (0, "node[1-2]\n")],  # a timed-out query, then the job without nodes
        scontrol=[(0, "node1\nnode2\n")],
    )
    allocation = Allocation.acquire(cluster, nodes=2)  # type: ignore[arg-type]
    assert (allocation.job_id, allocation.nodes, allocation.first_node) == ("7", ("node1", "node2"), "node1")
    assert [argv[0] for argv in cluster.ran].count("squeue") == 3 and cluster.told == [("7", ["node1", "node2"])]


def test_an_allocation_whose_nodes_never_show_is_refused_and_released():
    cluster = ScriptedCluster(salloc=[(0, "")], squeue=[(0, "")], scontrol=[(0, "")], scancel=[(0, "")])
    with pytest.raises(ClusterError, match="allocation 7 was granted but squeue names no node for it within 1 s"):
        allocated_hosts(cluster, "7", timeout=1)  # type: ignore[arg-type]


def test_acquire_cancels_the_job_it_could_not_place():
    cluster = ScriptedCluster(salloc=[(0, "")], squeue=[(0, "node1")], scontrol=[(0, "")], scancel=[(0, "")])
    with pytest.raises(ClusterError, match="expands its node list 'node1' to no host"):
        Allocation.acquire(cluster)  # type: ignore[arg-type]
    assert cluster.ran[-1] == ("scancel", "7") and cluster.told == []


@pytest.mark.parametrize(
    ("listed", "leaked"),
    [
        ([(0, "7.0\n"), (0, "7.0\n"), (0, "")], []),  # a finished step, listed a moment longer
        ([(0, "7.0\n")], ["7.0"]),  # still running after the grace: a leak
    ],
)
def test_a_step_listed_a_moment_after_its_srun_returned_is_no_leak(listed, leaked):
    cluster = ScriptedCluster(salloc=[(0, "")], squeue=[(0, "node1\n")], scontrol=[(0, "node1\n")])
    allocation = Allocation.acquire(cluster, nodes=1)  # type: ignore[arg-type]
    cluster.answers["squeue"] = [*listed]
    cluster.answers["scancel"] = [(0, "")]
    allocation.job_state = lambda: "CANCELLED"  # type: ignore[method-assign]
    assert allocation.release(grace_s=1.0) == leaked


def test_a_later_pending_job_is_one_submitted_after_this_one():
    """Plain scancel signals a step twice while a job submitted after the step's job pends
    (semantics test (h)): job ids rise with submission; an array's or a het job's id is read
    by its number."""
    cluster = ScriptedCluster(salloc=[(0, "")], squeue=[(0, "node1")], scontrol=[(0, "node1\n")])
    allocation = Allocation.acquire(cluster, nodes=1)  # type: ignore[arg-type]
    for pending, later in (("3\n6_[1-4]\n", False), ("3\n12_[1-4]\n", True), ("8+0\n", True), ("", False)):
        cluster.answers["squeue"] = [(0, pending)]
        assert allocation.later_job_pending() is later, (pending, later)
    assert cluster.ran[-1] == ("squeue", "-h", "-t", "PENDING", "-o", "%i")


def test_a_step_still_listed_a_moment_after_its_task_ended_is_not_left_running():
    """squeue lists an ended step a moment while its node finishes it: read once, a correct
    stop was blamed for a step left running. One listed until the grace has passed is."""
    cluster = ScriptedCluster(salloc=[(0, "")], squeue=[(0, "node1\n")], scontrol=[(0, "node1\n")])
    allocation = Allocation.acquire(cluster, nodes=1)  # type: ignore[arg-type]
    cluster.answers["squeue"] = [
        (0, "7.0 replicas\n7.1 proxy\n"),
        (0, "7.0 replicas\n7.1 proxy\n"),
        (0, "7.0 replicas\n"),
    ]
    assert allocation.steps_left("proxy", grace_s=2.0) == []
    reads = sum(1 for argv in cluster.ran if argv[:2] == ("squeue", "-h") and "-s" in argv)
    assert reads == 3, cluster.ran
    cluster.answers["squeue"] = [(0, "7.0 replicas\n7.1 proxy\n")]
    assert allocation.steps_left("proxy", grace_s=0.3) == ["7.1"]
    assert allocation.steps_left("replicas", grace_s=0.3) == ["7.0"]
    assert allocation.steps_left("drill-endpoint", grace_s=0.3) == []


def test_a_failed_squeue_is_asked_again_never_read_as_no_step():
    """A busy slurmctld times a query out: its empty output read as 'no step' would let a
    leaked step pass for gone. Asked again, the leak shows; a job Slurm has forgotten runs no
    step; a squeue that always fails is the harness's error."""
    cluster = ScriptedCluster(salloc=[(0, "")], squeue=[(0, "node1\n")], scontrol=[(0, "node1\n")])
    allocation = Allocation.acquire(cluster, nodes=1)  # type: ignore[arg-type]
    cluster.answers["squeue"] = [
        (1, "", "slurm_load_jobs error: Socket timed out on send/recv operation"),
        (0, "7.0\n"),
    ]
    cluster.answers["scancel"] = [(0, "")]
    allocation.job_state = lambda: "CANCELLED"  # type: ignore[method-assign]
    assert allocation.release(grace_s=0.3) == ["7.0"]
    cluster.answers["squeue"] = [(1, "", "slurm_load_jobs error: Invalid job id specified")]
    assert allocation.steps() == [] and allocation.steps_by_name() == {}
    cluster.answers["squeue"] = [(1, "", "slurm_load_jobs error: Socket timed out on send/recv operation")]
    with pytest.raises(ClusterError, match="squeue could not list the steps of job 7"):
        allocation.steps()
