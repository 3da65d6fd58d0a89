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


class PlayedController:
    """slurmctld as the entrypoint runs it: down from its shutdown until the held file is gone."""

    def __init__(self, shutdown_ok=True, comes_back=True, state_after="RUNNING", jobs=("7",)):
        self.argvs, self.up, self.held, self.jobs = [], True, False, jobs
        self.shutdown_ok, self.comes_back, self.state_after = shutdown_ok, comes_back, state_after
        self.restarted = False

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
            steps = "7.0\n7.1\n7.2\n7.extern\n"
            out = steps if "-s" in argv else ((self.state_after if self.restarted else "RUNNING") + "\n")
        return CommandRecord(tuple(argv), "controller", "2026-12-04T00:00:00Z", 0.01, code, out[-200:], "", stdout=out)


def _fast(monkeypatch):
    monkeypatch.setattr(controller_restart.time, "sleep", lambda s: None)


def test_a_restart_shuts_down_holds_releases_and_reads_the_job_before_and_after(monkeypatch):
    _fast(monkeypatch)
    cluster = PlayedController()
    restart = restart_controller(Allocation(cluster, "7"), held_s=0.0)
    commands = [a[:3] for a in cluster.argvs if a[0] != "squeue"]
    assert commands[:3] == [("sh", "-c", commands[0][2]), ("scontrol", "shutdown", "slurmctld"), ("scontrol", "ping")]
    assert ("rm", "-f", HELD_FILE) in commands and commands[-1] == ("scontrol", "ping")
    assert (restart.job_state_before, restart.job_state_after, restart.steps_before, restart.steps_after) == (
        "RUNNING", "RUNNING", 3, 3,
    )  # fmt: skip
    assert restart.job_kept and "job RUNNING before, RUNNING after, steps 3 before, 3 after" in restart.describe()


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
    restart = ControllerRestart(6.0, "RUNNING", "gone", 3, 0)
    assert not restart.job_kept and "job RUNNING before, gone after" in restart.describe()


def test_the_controller_is_restarted_only_while_it_serves_the_scenarios_job_alone():
    assert serves_only(Allocation(PlayedController(jobs=("7",)), "7"))
    assert not serves_only(Allocation(PlayedController(jobs=("7", "8")), "7")), "another scenario's job, in parallel"
    assert not serves_only(Allocation(PlayedController(jobs=("8",)), "7"))
