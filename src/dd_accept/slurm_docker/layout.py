"""Where the SUT's environment and dd-accept's in-cluster code live on the cluster's nodes.

The docker cluster bakes both into its node image (`/opt/sut`, `/opt/dd-accept`); on an
existing cluster they are installed into the shared run directory. Scenarios ask the
cluster for its layout instead of assuming either, so the same scenario code runs on both.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dd_accept.base.slurm_releases import DEFAULT_RELEASE, RELEASES


@dataclass(frozen=True, slots=True)
class NodeLayout:
    venv: str  # the SUT's virtual environment, with dd-accept's in-cluster code on its path
    harness_dir: str  # holds the `dd_accept` package the nodes run (replica, load client, drills)
    # The SUT's own packages without their dependencies, for a Python that is not the SUT's
    # (a site's vLLM) to import the SUT's middleware without the SUT's dependency versions.
    sut_only: str | None = None
    python_version: str = RELEASES[DEFAULT_RELEASE].python  # the venv's interpreter, X.Y

    @property
    def python(self) -> str:
        return f"{self.venv}/bin/python"

    @property
    def site_packages(self) -> str:
        return f"{self.venv}/lib/python{self.python_version}/site-packages"

    def drill(self, name: str) -> str:
        return f"{self.harness_dir}/dd_accept/node/drills/{name}"


DOCKER_LAYOUT = NodeLayout(venv="/opt/sut", harness_dir="/opt/dd-accept")


def docker_layout(version: str = DEFAULT_RELEASE) -> NodeLayout:
    """The docker cluster's layout on nodes of Slurm `version` (whose suite sets the Python)."""
    return replace(DOCKER_LAYOUT, python_version=RELEASES[version].python)
