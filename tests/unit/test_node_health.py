"""Slurm's view of a node, as `scontrol` prints it: what the node-loss phase waits for."""

from types import SimpleNamespace

import pytest

from dd_accept.acceptance.health_node_loss import _StepWatch
from dd_accept.base.errors import ClusterError
from dd_accept.base.events import EventWriter, StepChange, read_event_file
from dd_accept.slurm_docker.node_health import NodeCondition, node_condition, set_node_state, slurmd_timeout


@pytest.mark.parametrize(
    ("state", "down", "silent"),
    [
        ("IDLE", False, False),
        ("ALLOCATED", False, False),
        ("ALLOCATED+NOT_RESPONDING", False, True),
        ("IDLE*", False, True),
        ("DOWN+NOT_RESPONDING", True, True),
        ("DOWN", True, False),
        ("MIXED+DRAIN", False, False),
    ],
)
def test_a_state_is_read_as_its_base_and_flags(state, down, silent):
    condition = NodeCondition("node2", state)
    assert (condition.down, condition.not_responding) == (down, silent)
    assert condition.drained == state.endswith("DRAIN")


class Admin:
    """A controller that takes `scontrol update` and then shows the node in `state`."""

    def __init__(self, state, update_exit=0):
        self.state, self.update_exit, self.calls = state, update_exit, []

    def exec(self, argv, timeout):
        self.calls.append(list(argv))
        ok = argv[1] != "update" or self.update_exit == 0
        return SimpleNamespace(stdout=f"NodeName=node1 State={self.state} Reason=x", ok=ok,
                               describe=lambda: f"{argv[0]} {argv[1]} exited {self.update_exit}")  # fmt: skip


def test_a_node_is_set_drain_with_its_reason_and_read_back():
    admin = Admin("ALLOCATED+DRAIN")
    condition = set_node_state(admin, "node1", "DRAIN", "dd-accept: maintenance ahead")
    assert condition.drained and not condition.down, condition
    assert admin.calls[0] == [
        "scontrol",
        "update",
        "NodeName=node1",
        "State=DRAIN",
        "Reason=dd-accept: maintenance ahead",
    ]
    assert admin.calls[1] == ["scontrol", "-o", "show", "node", "node1"]
    assert set_node_state(Admin("ALLOCATED"), "node1", "RESUME").state == "ALLOCATED"
    with pytest.raises(ClusterError, match="could not set node node1 DRAIN: scontrol update exited 1"):
        set_node_state(Admin("ALLOCATED", update_exit=1), "node1", "DRAIN", "r")


class Controller:
    def __init__(self, stdout, exit_code=0):
        self.stdout, self.exit_code = stdout, exit_code
        self.argv = None

    def exec(self, argv, timeout):
        self.argv = argv
        return SimpleNamespace(
            stdout=self.stdout, ok=self.exit_code == 0, describe=lambda: f"{argv[0]} exited {self.exit_code}"
        )


def test_the_condition_and_the_timeout_come_from_the_controller():
    line = "NodeName=node2 Arch=x86_64 CoresPerSocket=1 State=DOWN+NOT_RESPONDING ThreadsPerCore=1 Reason=Not"
    assert node_condition(Controller(line), "node2") == NodeCondition("node2", "DOWN+NOT_RESPONDING")
    config = "SlurmctldTimeout        = 30 sec\nSlurmdTimeout           = 30 sec\nSlurmdUser = root\n"
    assert slurmd_timeout(Controller(config)) == 30.0


def test_an_unreadable_answer_is_a_cluster_error():
    with pytest.raises(ClusterError, match="state of node node2"):
        node_condition(Controller("", exit_code=1), "node2")
    with pytest.raises(ClusterError, match="SlurmdTimeout"):
        slurmd_timeout(Controller("nothing here"))


class Job:
    """A job whose `squeue -s` listings are given in turn (the last one repeats)."""

    def __init__(self, *listings, state="NODE_FAIL"):
        self.listings, self.state = list(listings), state

    def steps(self):
        return self.listings.pop(0) if len(self.listings) > 1 else self.listings[0]

    def job_state(self):
        return self.state


def test_each_step_end_is_an_event_with_its_jobs_state(tmp_path):
    writer = EventWriter(tmp_path / "events.jsonl", "harness")
    watch = _StepWatch(Job(["7.0", "7.1"], ["7.0", "7.1"], ["7.1"], []), writer)
    assert watch.until_ended(timeout=10) is not None
    writer.close()
    seen = [(e.step, e.state, e.job_state) for e in read_event_file(tmp_path / "events.jsonl")]
    assert all(isinstance(e, StepChange) for e in read_event_file(tmp_path / "events.jsonl"))
    assert seen == [
        ("7.0", "running", None), ("7.1", "running", None),
        ("7.0", "ended", "NODE_FAIL"), ("7.1", "ended", "NODE_FAIL"),
    ]  # fmt: skip


def test_a_step_that_does_not_end_is_reported_as_not_seen_to_end(tmp_path):
    writer = EventWriter(tmp_path / "events.jsonl", "harness")
    assert _StepWatch(Job(["7.0"]), writer).until_ended(timeout=0.6) is None
    writer.close()
