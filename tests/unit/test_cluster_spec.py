import pytest

from dd_accept.base.errors import UsageError
from dd_accept.slurm_docker.slurm_conf import render_slurm_conf
from dd_accept.slurm_docker.spec import ClusterSpec


@pytest.mark.parametrize("nodes", [0, -1, "abc", 100000, "1.5", ""])
def test_bad_node_counts_are_usage_errors(nodes):
    with pytest.raises(UsageError, match="--nodes"):
        ClusterSpec(nodes=nodes)


@pytest.mark.parametrize(
    "subnet", ["10.0.0.1/33", "10.0.0.1/24", "not-a-net", "8.8.8.0/24", "fd00::/64", "10.0.0.0/30"]
)
def test_bad_subnets_are_usage_errors(subnet):
    with pytest.raises(UsageError, match="--subnet"):
        ClusterSpec(subnet=subnet)


@pytest.mark.parametrize("name", ["", "UPPER", "1abc", "a b", "x" * 41, "a_b"])
def test_bad_names_are_usage_errors(name):
    with pytest.raises(UsageError, match="cluster name"):
        ClusterSpec(name=name)


def test_slurm_conf_declares_cpus_independent_of_the_host():
    conf = render_slurm_conf(ClusterSpec(name="unit", nodes=3, cpus_per_node=48))
    assert "NodeName=node[1-3] CPUs=48 State=UNKNOWN" in conf
    assert "SlurmdParameters=config_overrides" in conf
    for setting in ("ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/cons_tres"):
        assert setting in conf
    assert "{{" not in conf


def test_single_node_range_is_not_a_bracket_expression():
    assert "NodeName=node1 CPUs=" in render_slurm_conf(ClusterSpec(name="unit", nodes=1))


def test_process_tracking_is_a_site_setting_rendered_into_slurm_conf():
    from dd_accept.base.slurm_releases import PROCTRACK

    assert PROCTRACK == ("linuxproc", "cgroup")
    plain = render_slurm_conf(ClusterSpec())
    assert "ProctrackType=proctrack/linuxproc" in plain and "TaskPlugin=task/none" in plain
    tracked = render_slurm_conf(ClusterSpec(proctrack="cgroup"))
    assert "ProctrackType=proctrack/cgroup" in tracked and "TaskPlugin=task/cgroup" in tracked
    with pytest.raises(UsageError, match="--slurm-config must be one of linuxproc, cgroup, got 'v2'"):
        ClusterSpec(proctrack="v2")


def test_process_tracking_is_refused_where_it_has_no_effect():
    from dd_accept.base.options import build
    from dd_accept.slurm_docker.cluster_options import ClusterOptions

    assert build(ClusterOptions, {}).proctrack == "linuxproc"
    assert build(ClusterOptions, {"slurm_config": "cgroup"}).proctrack == "cgroup"
    with pytest.raises(ValueError, match="--slurm-config applies to --cluster docker only"):
        build(ClusterOptions, {"mode": "existing", "run_dir": "/shared/x", "slurm_config": "cgroup"})
