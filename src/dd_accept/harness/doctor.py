"""`dd-accept doctor`: every precondition checked at once, each problem with its exact fix."""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from typing import Any

from dd_accept.base.errors import DDAcceptError
from dd_accept.base.slurm_releases import DEFAULT_RELEASE, RELEASES
from dd_accept.base.state import state_root
from dd_accept.slurm_docker import engine, images
from dd_accept.slurm_docker.mirror import find_mirror

MIN_FREE_BYTES = 3 * 1024**3


@dataclass(frozen=True, slots=True)
class Finding:
    name: str
    ok: bool
    observed: str
    fix: str = ""
    optional: bool = False  # a capability some runs use: "not available" never fails doctor


def _release_images(client) -> list[Finding]:
    """The other Slurm releases' images: built on first use, so their absence is no problem."""
    findings = []
    for version in RELEASES:
        if version == DEFAULT_RELEASE:
            continue
        present = images.images_present(client, version)
        built = all(present.values())
        findings.append(
            Finding(
                f"images (Slurm {version})",
                built,
                "all built" if built else "not built (built on first use)",
                f"`dd-accept cluster build --slurm {version}`",
                optional=True,
            )
        )
    return findings


def _cgroup_tracking(client) -> Finding:
    """--slurm-config cgroup mounts each node's own cgroup v1 subtree; say whether this host can."""
    version = str(client.info().get("CgroupVersion", "unknown"))
    usable = version == "1"
    observed = (
        "cgroup v1: --slurm-config cgroup available"
        if usable
        else f"the Docker engine reports cgroup v{version}; --slurm-config cgroup needs a cgroup v1 host"
    )
    return Finding("cgroup process tracking", usable, observed, "use --slurm-config linuxproc", optional=True)


def to_json(findings: list[Finding], exit_status: int) -> dict[str, Any]:
    """The `dd-accept/doctor/v1` document (`doctor --json`)."""
    return {
        "schema": "dd-accept/doctor/v1",
        "ok": all(f.ok or f.optional for f in findings),
        "exit_status": exit_status,
        "findings": [
            {"name": f.name, "ok": f.ok, "optional": f.optional, "observed": f.observed, "fix": "" if f.ok else f.fix}
            for f in findings
        ],
    }


def run_checks() -> list[Finding]:
    findings: list[Finding] = []
    version = sys.version_info
    findings.append(
        Finding(
            "python",
            version >= (3, 11),
            f"{version.major}.{version.minor}.{version.micro}",
            "install Python 3.11 or newer (apt-get install -y python3 python3-venv)",
        )
    )
    free = shutil.disk_usage(state_root()).free
    findings.append(
        Finding(
            "disk",
            free >= MIN_FREE_BYTES,
            f"{free / 1024**3:.1f} GiB free for images and run directories",
            f"free at least {MIN_FREE_BYTES // 1024**3} GiB (try `dd-accept cluster prune --images`)",
        )
    )
    try:
        client = engine.connect(timeout=10)
    except DDAcceptError:
        findings.append(Finding("docker engine", False, "not answering", "start it: `dockerd &` as root"))
        client = None
    else:
        findings.append(Finding("docker engine", True, f"version {engine.engine_version(client)}"))
    present = images.images_present(client) if client is not None else {}
    images_ok = bool(present) and all(present.values())
    if client is not None:
        missing = [tag for tag, ok in present.items() if not ok]
        findings.append(
            Finding(
                "images",
                images_ok,
                "all built" if images_ok else f"missing {', '.join(missing)}",
                "build them: `dd-accept cluster build`",
            )
        )
        findings += _release_images(client)
        findings.append(_cgroup_tracking(client))
    if not images_ok:
        has_debootstrap = shutil.which("debootstrap") is not None
        findings.append(
            Finding(
                "debootstrap",
                has_debootstrap,
                "present" if has_debootstrap else "missing (needed to build the base image)",
                "apt-get install -y debootstrap",
            )
        )
        try:
            find_mirror()
        except DDAcceptError as error:
            findings.append(Finding("debian mirror", False, str(error), "configure apt sources or set the variable"))
        else:
            findings.append(Finding("debian mirror", True, "found in apt's configuration"))
    return findings
