"""Preemption against a cluster that plays Slurm's side: the higher-priority job submitted for
the preempted job's node, the wait for the node's TERM to each of its steps (read from slurmd's
log, on the node's clock), and the preemptor cancelled when Slurm never preempts."""

import pytest

from dd_accept.base.errors import ClusterError
from dd_accept.slurm_docker.allocation import Allocation
from dd_accept.slurm_docker.preemption import PREEMPTOR_JOB, preempt, preemptor_argv, with_exits
from dd_accept.slurm_docker.records import CommandRecord
from dd_accept.slurm_docker.spec import PREEMPTOR_PARTITION
from dd_accept.slurm_docker.step_exit import SLURMD_LOG, from_slurmd_log, signals_sent

TERM_LINE = "[2026-12-04T00:00:{second:02d}.500] [{step}] Sent signal 15 to StepId={step}\n"


class PlayedSlurm:
    """A node whose slurmd logs TERM to the job's steps once the preemptor has been asked for
    `reads_before_term` log reads (None: never)."""

    def __init__(self, reads_before_term=1, steps=("7.0", "7.1"), exits=()):
        self.argvs, self.reads, self.submitted = [], 0, False
        self.reads_before_term, self.steps, self.exits = reads_before_term, steps, exits

    def step_exit(self, step, node):  # the Cluster protocol's reading of slurmd's log
        return from_slurmd_log(self.exec(["cat", SLURMD_LOG], node=node).stdout, step)

    def signals_sent(self, step, node, signal):
        return signals_sent(self.exec(["cat", SLURMD_LOG], node=node).stdout, step, signal)

    def exec(self, argv, timeout=None, node=None, **_):
        self.argvs.append((tuple(argv), node))
        out = ""
        if argv[0] == "sbatch":
            self.submitted, out = True, "99;dd\n"
        elif argv[:2] == ["cat", SLURMD_LOG]:
            self.reads += 1
            if self.submitted and self.reads_before_term is not None and self.reads > self.reads_before_term:
                logged = getattr(self, "logged_only", self.steps)
                out = "".join(TERM_LINE.format(second=n + 1, step=s) for n, s in enumerate(self.steps) if s in logged)
                out = "[2026-12-04T00:00:00.100] [7.0] Sent signal 18 to StepId=7.0\n" + out
                out += "".join(f"[2026-12-04T00:00:03.000] [{s}] task 0 (9) exited{how}.\n" for s, how in self.exits)
        elif argv[0] == "squeue" and "-s" in argv:
            out = "".join(f"{s}\n" for s in (*self.steps, "7.extern"))
        elif argv[0] == "squeue":
            out = "RUNNING\n"
        return CommandRecord(tuple(argv), node or "ctl", "2026-12-04T00:00:00Z", 0.01, 0, out[-200:], "", stdout=out)


def test_the_preemptor_asks_for_the_whole_node_in_the_higher_tier():
    argv = preemptor_argv("node2")
    assert argv[0] == "sbatch" and f"--partition={PREEMPTOR_PARTITION}" in argv
    assert "--nodelist=node2" in argv and "--exclusive" in argv and f"--job-name={PREEMPTOR_JOB}" in argv
    assert "--wrap=true" in argv, "one that starts all the same (cancelled too late) ends at once"


def test_a_preemption_is_the_nodes_term_to_every_step(monkeypatch):
    monkeypatch.setattr("time.time", lambda: 1796342400.0)  # 2026-12-04T00:00:00Z
    cluster = PlayedSlurm(reads_before_term=2)
    preemption = preempt(Allocation(cluster, "7", nodes=("node2",)))
    assert preemption.preemptor_job == "99" and preemption.steps_signalled == ("7.0", "7.1")
    # TERM's moment is the node's first one (SIGCONT before it is not TERM), from the ask
    assert preemption.term_after_s == 1.5 and preemption.job_state == "RUNNING"
    assert all(node == "node2" for argv, node in cluster.argvs if argv[0] == "cat"), "the preempted job's node"
    assert "TERM to its steps 7.0, 7.1; job RUNNING" in preemption.describe()
    assert (("scancel", "99"), None) in cluster.argvs, "the preemptor cancelled once the TERM is sent"
    # how the steps' tasks then ended, from the node's log
    cluster.exits = (("7.0", " with exit code 0"), ("7.1", ". Killed by signal 9"))
    ended = with_exits(preemption, Allocation(cluster, "7", nodes=("node2",)))
    assert [(end.exit_code, end.ended_at) for end in ended.exits] == [(0, 1796342403.0), (137, 1796342403.0)]
    assert "TERM to its steps 7.0, 7.1, which ended: exit 0, exit 137" in ended.describe()


def test_steps_whose_term_slurmd_never_logged_are_left_out_of_those_signalled(monkeypatch):
    monkeypatch.setattr("dd_accept.slurm_docker.preemption.ALL_TERMS_WITHIN_S", 0.2)
    monkeypatch.setattr("time.time", lambda: 1796342400.0)  # 2026-12-04T00:00:00Z, the played log's day
    cluster = PlayedSlurm(steps=("7.0", "7.1"))
    cluster.logged_only = ("7.1",)
    preemption = preempt(Allocation(cluster, "7", nodes=("node2",)))
    assert preemption.steps_signalled == ("7.1",) and (("scancel", "99"), None) in cluster.argvs


def test_a_job_with_no_step_listed_is_not_preempted_for_nothing():
    cluster = PlayedSlurm(steps=())
    with pytest.raises(ClusterError, match="lists no step to preempt"):
        preempt(Allocation(cluster, "7", nodes=("node2",)))
    assert not cluster.submitted


def test_slurm_that_never_preempts_is_the_clusters_error_and_the_preemptor_is_cancelled(monkeypatch):
    cluster = PlayedSlurm(reads_before_term=None)
    with pytest.raises(ClusterError, match="did not preempt job 7"):
        preempt(Allocation(cluster, "7", nodes=("node2",)), timeout=0.3)
    assert (("scancel", "99"), None) in cluster.argvs
