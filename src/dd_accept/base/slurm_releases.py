"""The Slurm releases a docker cluster can run, each tied to the Debian suite that carries it.

Sites run more than one Slurm, and the behaviours the drain and health checks judge (how
`srun` forwards a signal, what `scancel --signal` reaches, how a task's end is logged) are
exactly what changes between releases. Each release here is what one Debian suite ships,
so its node image comes from Debian's package archive like the default one, and the
node's Python (which the SUT's wheels are fetched for) is the suite's.

Everything that differs between releases is a field of `SlurmRelease`; the image recipe,
the slurm.conf template, option choices and the docs' table (docs/cluster-and-sut.md) are derived from it.
"""

from __future__ import annotations

from dataclasses import dataclass

from dd_accept.base.errors import UsageError


@dataclass(frozen=True, slots=True)
class SlurmRelease:
    version: str  # the release as sites name it: "24.11"
    suite: str  # the Debian suite whose `slurmd` package is this release
    python: str  # that suite's CPython: the node image's interpreter, the SUT's wheels' target
    glibc_minor: int  # that suite's glibc 2.N: the newest manylinux tag its wheels may carry

    @property
    def python_tag(self) -> str:
        return "cp" + self.python.replace(".", "")


RELEASES: dict[str, SlurmRelease] = {
    release.version: release
    for release in (
        SlurmRelease("22.05", "bookworm", "3.11", 36),
        SlurmRelease("24.11", "trixie", "3.13", 41),
        SlurmRelease("26.05", "sid", "3.14", 43),
    )
}
DEFAULT_RELEASE = "22.05"

# Process tracking, a site setting independent of the release: linuxproc (with task/none)
# needs nothing from the host; cgroup (with task/cgroup) is what most sites run.
PROCTRACK = ("linuxproc", "cgroup")
DEFAULT_PROCTRACK = "linuxproc"


def slurm_release(version: str) -> SlurmRelease:
    """The release a `--slurm` value names; any other value is a usage error naming the choices."""
    release = RELEASES.get(version.strip())
    if release is None:
        raise UsageError(f"--slurm must be one of {', '.join(RELEASES)}, got {version!r}")
    return release
