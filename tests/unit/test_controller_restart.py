"""The controller's restart against a cluster that plays Slurm's side: the handshake with the
entrypoint (restart and held files, the shutdown, the wait for the controller's silence and
its return) in order, the held file removed whatever fails, and Slurm's view of the job read
before and after."""

import pytest

from dd_accept.base.errors import ClusterError
from dd_accept.slurm_docker import controller_restart
from dd_accept.slurm_docker.allocation import Allocation
from dd_accept.slurm_docker.controller_restart import HELD_FILE, ControllerRestart, restart_controller, serves_only
from dd_accept.slurm_docker.records import CommandRecord
from dd_accept.slurm_docker.step_exit import SLURMD_LOG, from_slurmd_log, signals_sent


class PlayedController:
    """slurmctld as the entrypoint runs it: down from its shutdown until the held file is gone."""

    def __init__(self, shutdown_ok=True, comes_back=True, state_after="RUNNING", jobs=("7",), steps_after=None,
                 ended=(("7.2", " with exit code 0"),)):  # fmt: skip
        self.argvs, self.up, self.held, self.jobs = [], True, False, jobs
        self.shutdown_ok, self.comes_back, self.state_after = shutdown_ok, comes_back, state_after
        self.restarted = False
        self.steps_after = ("7.0", "7.1", "7.2") if steps_after is None else steps_after
        self.ended = ended  # (step, how its task ended) that slurmd logged, at 00:00:05

    def step_exit(self, step, node):  # the Cluster protocol's reading of slurmd's log
        return from_slurmd_log(self.exec(["cat", SLURMD_LOG], node=node).stdout, step)

    def signals_sent(self, step, node, signal):
        return signals_sent(self.exec(["cat", SLURMD_LOG], node=node).stdout, step, signal)

    def exec(self, argv, timeout=None, **_):
        self.argvs.append(tuple(argv))
        out, code = "", 0
        if argv[:2] == ["scontrol", "ping"]:
            out = f"Slurmctld(primary) at controller is {'UP' if self.up else 'DOWN'}\n"
            code = 0 if self.up else 1
        elif argv[:3] == ["scontrol", "shutdown", "slurmctld"]:
            code = 0 if self.shutdown_ok else 1
            self.up = not self.shutdown_ok
        elif argv[0] == "sh":
            self.held = True
        elif argv[:2] == ["rm", "-f"] and HELD_FILE in argv:
            self.held = False
            if not self.up and self.comes_back:
                self.up, self.restarted = True, True
        elif argv[0] == "squeue" and "-j" not in argv:
            out = "".join(f"{job}\n" for job in self.jobs)
        elif argv[0] == "squeue":
            steps = [*(self.steps_after if self.restarted else ("7.0", "7.1", "7.2")), "7.extern"]
            out = (
                "".join(f"{s}\n" for s in steps)
                if "-s" in argv
                else ((self.state_after if self.restarted else "RUNNING") + "\n")
            )
        elif argv[:2] == ["cat", SLURMD_LOG]:
            out = "".join(f"[2026-12-04T00:00:05.000] [{s}] task 0 (35) exited{how}.\n" for s, how in self.ended)
        return CommandRecord(tuple(argv), "controller", "2026-12-04T00:00:00Z", 0.01, code, out[-200:], "", stdout=out)


def _fast(monkeypatch):
    monkeypatch.setattr(controller_restart.time, "sleep", lambda s: None)


def test_a_restart_shuts_down_holds_releases_and_reads_the_job_before_and_after(monkeypatch):
    _fast(monkeypatch)
    cluster = PlayedController()
    restart = restart_controller(Allocation(cluster, "7", nodes=("node1",)), held_s=0.0)
    commands = [a[:3] for a in cluster.argvs if a[0] != "squeue"]
    assert commands[:3] == [("sh", "-c", commands[0][2]), ("scontrol", "shutdown", "slurmctld"), ("scontrol", "ping")]
    assert ("rm", "-f", HELD_FILE) in commands and commands[-1] == ("scontrol", "ping")
    assert (restart.job_state_before, restart.job_state_after, restart.steps_before, restart.steps_after) == (
        "RUNNING", "RUNNING", ("7.0", "7.1", "7.2"), ("7.0", "7.1", "7.2"),
    )  # fmt: skip
    assert restart.job_kept(None) and "job RUNNING before, RUNNING after, steps 3 before, 3 after" in restart.describe()
    assert not any(a[0] == "cat" for a in cluster.argvs), "no step gone: no log read"


LOGGED_AT = 1796342405.0  # 2026-12-04T00:00:05Z, when the played node logged the gone steps' ends


def test_a_step_gone_in_the_restart_is_slurms_loss_unless_it_ended_by_itself_or_by_the_suts_stop(monkeypatch):
    _fast(monkeypatch)
    monkeypatch.setattr(controller_restart, "STEP_END_LOGGED_WITHIN_S", 0.2)
    # 7.2 exited 0 (the attempt's own end), 7.1 vanished with no end logged
    cluster = PlayedController(steps_after=("7.0",), ended=(("7.2", " with exit code 0"),))
    restart = restart_controller(Allocation(cluster, "7", nodes=("node1",)), held_s=0.0)
    assert restart.steps_lost(None) == ("7.1",) and not restart.job_kept(LOGGED_AT + 5), restart
    assert "steps 3 before, 1 after (gone: 7.1 no end logged, 7.2 exit 0)" in restart.describe()
    # 7.1 killed at 00:00:05: by the SUT's stop if its wait had returned before, else Slurm's
    # orphan kill of a step the restarted controller forgot (the node registering again)
    killed = PlayedController(
        steps_after=("7.0",), ended=(("7.1", ". Killed by signal 9"), ("7.2", " with exit code 0"))
    )
    restart = restart_controller(Allocation(killed, "7", nodes=("node1",)), held_s=0.0)
    assert restart.steps_lost(LOGGED_AT - 1) == () and restart.job_kept(LOGGED_AT - 1), "the SUT's stop killed it"
    assert restart.steps_lost(LOGGED_AT + 1) == ("7.1",) and not restart.job_kept(LOGGED_AT + 1), restart
    assert restart.steps_lost(None) == ("7.1",), "a wait that never returned stopped nothing"
    assert "(gone: 7.1 exit 137, 7.2 exit 0)" in restart.describe()


def test_a_refused_shutdown_is_the_clusters_error_and_releases_the_hold(monkeypatch):
    _fast(monkeypatch)
    cluster = PlayedController(shutdown_ok=False)
    with pytest.raises(ClusterError, match="refused to shut down"):
        restart_controller(Allocation(cluster, "7"), held_s=0.0)
    assert not cluster.held and ("rm", "-f", HELD_FILE) in cluster.argvs


def test_a_controller_that_never_returns_is_the_clusters_error(monkeypatch):
    _fast(monkeypatch)
    cluster = PlayedController(comes_back=False)
    with pytest.raises(ClusterError, match="slurmctld to answer again"):
        restart_controller(Allocation(cluster, "7"), held_s=0.0, timeout=0.3)
    assert not cluster.held


def test_a_job_slurm_lost_in_the_restart_is_told():
    restart = ControllerRestart(6.0, "RUNNING", "gone", ("7.0", "7.1", "7.2"), (), 1000.0)
    assert not restart.job_kept(None) and "job RUNNING before, gone after" in restart.describe()


def test_the_controller_is_restarted_only_while_it_serves_the_scenarios_job_alone():
    assert serves_only(Allocation(PlayedController(jobs=("7",)), "7"))
    assert not serves_only(Allocation(PlayedController(jobs=("7", "8")), "7")), "another scenario's job, in parallel"
    assert not serves_only(Allocation(PlayedController(jobs=("8",)), "7"))
