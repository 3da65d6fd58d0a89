"""slurm.conf (and cgroup.conf) for a cluster spec, rendered from the package's template."""

from __future__ import annotations

import re
from importlib import resources

from dd_accept.base.slurm_releases import slurm_release
from dd_accept.slurm_docker.spec import (
    CONTROLLER,
    PARTITION,
    PREEMPT_GRACE_S,
    PREEMPTOR_PARTITION,
    SLURMD_TIMEOUT_S,
    ClusterSpec,
)

# proctrack/cgroup on a cgroup v1 host: the freezer tracks a step's processes; nothing is
# constrained (cores, memory and devices stay the container's, and task/cgroup touches none
# of those hierarchies), so 8+ replicas fit 2 cores.
CGROUP_CONF = """\
CgroupPlugin=cgroup/v1
CgroupMountpoint=/sys/fs/cgroup
ConstrainCores=no
ConstrainRAMSpace=no
ConstrainDevices=no
"""


def render_slurm_conf(spec: ClusterSpec) -> str:
    """Imports jinja2 here, where a cluster is made: every CLI start loads this module
    (through the cluster's options), and most make none."""
    import jinja2

    template_text = resources.files("dd_accept.slurm_docker").joinpath("templates", "slurm.conf.j2").read_text()
    template = jinja2.Template(template_text, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return template.render(
        cluster_name=spec.name,
        slurm_cluster_name=re.sub(r"[^a-z0-9]", "", spec.name)[:30] or "dd",
        controller_host=CONTROLLER,
        node_range=spec.node_range,
        cpus_per_node=spec.cpus_per_node,
        partition=PARTITION,
        kill_wait=spec.kill_wait,
        slurm=slurm_release(spec.slurm),
        proctrack=spec.proctrack,
        slurmd_timeout=SLURMD_TIMEOUT_S,
        preemptor_partition=PREEMPTOR_PARTITION,
        preempt_grace_s=PREEMPT_GRACE_S,
    )
