"""The shared session cluster: real slurmctld, slurmd and munge, reached only through records."""

import base64

import docker
import pytest

from dd_accept.base.state import state_root
from tests.helpers import LABEL, file_contents_under

pytestmark = pytest.mark.cluster


def test_srun_reaches_every_node(slurm_cluster):
    record = slurm_cluster.exec(["srun", f"-N{slurm_cluster.spec.nodes}", "hostname"])
    assert record.ok, record.describe()
    assert sorted(record.stdout_tail.split()) == slurm_cluster.nodes


def test_every_command_is_recorded_with_its_outcome(slurm_cluster):
    before = len(slurm_cluster.records)
    slurm_cluster.exec(["sh", "-c", "echo out; echo err >&2; exit 3"], node="node1")
    (record,) = slurm_cluster.records.since(before)
    assert record.argv == ("sh", "-c", "echo out; echo err >&2; exit 3")
    assert (record.node, record.exit_code, record.stdout_tail, record.stderr_tail) == ("node1", 3, "out\n", "err\n")
    assert record.start.endswith("Z") and record.duration_s > 0 and not record.timed_out


def test_command_deadline_is_enforced_inside_the_container(slurm_cluster):
    record = slurm_cluster.exec(["sleep", "30"], timeout=1)
    assert record.timed_out and record.duration_s < 10


def test_every_object_is_labelled_and_the_network_is_internal(slurm_cluster):
    client = docker.from_env()
    containers = client.containers.list(filters={"label": f"{LABEL}={slurm_cluster.name}"})
    assert len(containers) == slurm_cluster.spec.nodes + 1
    (network,) = client.networks.list(filters={"label": f"{LABEL}={slurm_cluster.name}"})
    assert network.attrs["Internal"] is True
    for container in containers:
        assert set(container.attrs["NetworkSettings"]["Networks"]) == {network.name}


def test_declared_cpus_are_independent_of_host_cores(slurm_cluster):
    record = slurm_cluster.exec(["sinfo", "-h", "-N", "-o", "%c"])
    assert set(record.stdout_tail.split()) == {str(slurm_cluster.spec.cpus_per_node)}


def test_the_status_lists_each_node_once_though_root_sees_the_hidden_preemptor_partition(slurm_cluster):
    every_partition = slurm_cluster.exec(["sinfo", "-h", "-N", "-o", "%N"]).stdout.split()
    assert len(every_partition) == 2 * len(slurm_cluster.nodes), "root lists each node under both partitions"
    assert [node.name for node in slurm_cluster.status().nodes] == slurm_cluster.nodes


def test_munge_key_never_leaves_the_cluster(slurm_cluster, tmp_path_factory):
    record = slurm_cluster.exec(["base64", "-w0", "/etc/munge/munge.key"])
    key = base64.b64decode(record.stdout_tail)
    assert len(key) == 1024
    node_key = slurm_cluster.exec(["base64", "-w0", "/etc/munge/munge.key"], node="node1").stdout_tail
    assert base64.b64decode(node_key) == key, "all nodes share the cluster's key"
    # a file the cluster wrote into its shared directory: the scan must have read it
    node_path, host_path = slurm_cluster.shared_path("munge-scan", "written-by-node1")
    slurm_cluster.exec(["sh", "-c", f"mkdir -p /shared/munge-scan && hostname > {node_path}"], node="node1")
    # The key is made in memory as the cluster starts (put into the containers at that second):
    # a file last changed before then cannot hold it, so the scan reads only those changed since
    # (gigabytes of wheelhouses and images' caches otherwise, a minute of a CI run).
    made = float(slurm_cluster.exec(["stat", "-c", "%Y", "/etc/munge/munge.key"]).stdout_tail) - 1
    scanned = set()
    for root in (state_root(), tmp_path_factory.getbasetemp()):
        for path, content in file_contents_under(root, changed_since=made):
            scanned.add(path)
            assert key not in content, f"munge key found on the host in {path.name}"
    assert host_path in scanned, "the scan reads the cluster's own files on the host"


def test_shared_directory_is_the_same_on_every_node(slurm_cluster):
    path, host_path = slurm_cluster.shared_path("probe", "hello.txt")
    slurm_cluster.exec(["sh", "-c", f"mkdir -p /shared/probe && hostname > {path}"], node="node1")
    assert slurm_cluster.exec(["cat", path], node=f"node{slurm_cluster.spec.nodes}").stdout_tail == "node1\n"
    assert host_path.read_text() == "node1\n"


def test_names_resolve_from_files_only_so_no_lookup_leaves_the_cluster(slurm_cluster):
    members = ["ctl", *slurm_cluster.nodes]
    for node in members:
        nsswitch = slurm_cluster.exec(["grep", "^hosts:", "/etc/nsswitch.conf"], node=node).stdout_tail.split()
        assert nsswitch == ["hosts:", "files"], node
        resolved = slurm_cluster.exec(["getent", "hosts", *members], node=node).stdout_tail.split("\n")
        assert sorted(line.split()[-1] for line in resolved if line) == sorted(members), node
    assert slurm_cluster.exec(["getent", "hosts", "outside.example"], timeout=5).exit_code == 2


def test_exclusive_allocations_know_their_own_distinct_nodes(slurm_cluster):
    from dd_accept.slurm_docker.allocation import Allocation

    first = Allocation.acquire(slurm_cluster, extra=["--exclusive"])
    try:
        second = Allocation.acquire(slurm_cluster, extra=["--exclusive"])
        try:
            assert {first.first_node, second.first_node} == {"node1", "node2"}
        finally:
            second.release()
    finally:
        first.release()


def test_callers_get_the_whole_output_while_evidence_keeps_a_tail(slurm_cluster):
    record = slurm_cluster.exec(["seq", "1", "5000"])
    assert record.stdout.split() == [str(n) for n in range(1, 5001)]
    assert len(record.stdout_tail) <= 4000 and record.stdout_tail.endswith("5000\n")
    assert "stdout" not in record.to_json()


def test_a_reused_cluster_of_another_release_or_tracking_is_refused(slurm_cluster, tmp_path):
    """--dd-cluster NAME reuses a running cluster only when it runs what the session asks for:
    a bundle must never say 24.11 (or cgroup) while the checks ran on something else."""
    from dataclasses import replace

    from dd_accept.base.errors import UsageError
    from dd_accept.deployment.shared_cluster import SharedCluster

    for asked in (replace(slurm_cluster.spec, slurm="24.11"), replace(slurm_cluster.spec, proctrack="cgroup")):
        shared = SharedCluster(spec=asked, shared_root=tmp_path / asked.slurm, reuse_existing=True)
        with pytest.raises(UsageError, match=f"cluster {slurm_cluster.name} runs Slurm 22.05 with linuxproc"):
            shared.__enter__()
    assert slurm_cluster.exec(["sinfo", "-h"]).ok, "the running cluster is left as it was"
