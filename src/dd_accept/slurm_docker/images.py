"""Node images built from Debian packages alone: no container registry is ever contacted.

Two content-addressed layers per Slurm release. The base is a debootstrapped root
filesystem of the Debian suite that carries the release (bookworm: 22.05, trixie: 24.11,
sid: 26.05) with Slurm, munge and Python, imported through the SDK; the Slurm layer adds
dd-accept's entrypoint and helpers. Each tag is a hash of its recipe inputs, so an unchanged recipe
is found on the engine and never rebuilt, and a changed one can never be mistaken for it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from dd_accept.base.child_processes import stop_child
from dd_accept.base.errors import ClusterError, EnvironmentProblem
from dd_accept.base.progress import BuildListener, QuietListener
from dd_accept.base.slurm_releases import DEFAULT_RELEASE, RELEASES, SlurmRelease
from dd_accept.base.state import file_lock, state_root
from dd_accept.slurm_docker import engine
from dd_accept.slurm_docker.mirror import find_mirror
from dd_accept.slurm_docker.sdk import docker

VARIANT = "minbase"
PACKAGES = (
    "slurmctld",
    "slurmd",
    "slurm-client",
    "munge",
    "python3",
    "python3-venv",
    "procps",
    "iproute2",
    # what a SUT's allocation runtime asks of a node (data-designer-slurm's entrypoint checks for
    # jq and curl): its own launch path reads its runtime manifest with jq (the drain drill)
    "jq",
    "curl",
)
RECIPE_VERSION = "1"  # bump to force a rebuild when the build procedure itself changes
BASE_REPOSITORY = "dd-accept/base"
SLURM_REPOSITORY = "dd-accept/slurm"
RECIPE_FILES = ("Dockerfile", "dd-node-entrypoint", "dd-bg")


def _digest(*parts: str | bytes) -> str:
    hasher = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        hasher.update(len(data).to_bytes(8, "big"))
        hasher.update(data)
    return hasher.hexdigest()[:16]


def _recipe_bytes(name: str) -> bytes:
    return resources.files("dd_accept.slurm_docker").joinpath("recipe", name).read_bytes()


def base_tag(version: str = DEFAULT_RELEASE) -> str:
    release = RELEASES[version]
    recipe = _digest(RECIPE_VERSION, release.suite, VARIANT, ",".join(sorted(PACKAGES)))
    return f"{BASE_REPOSITORY}:{recipe}"


def slurm_tag(version: str = DEFAULT_RELEASE) -> str:
    recipe = _digest(base_tag(version), *(name.encode() + _recipe_bytes(name) for name in RECIPE_FILES))
    return f"{SLURM_REPOSITORY}:{recipe}"


@dataclass(frozen=True, slots=True)
class BuildResult:
    tag: str
    built: bool
    seconds: float


def _run_streaming(argv: list[str], listener: BuildListener, what: str) -> None:
    """Run a host build tool, feeding its lines to the listener and keeping a tail for errors."""
    tail_lines: list[str] = []
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert process.stdout is not None
        for line in process.stdout:
            line = line.rstrip()
            if line:
                listener.on_detail(line[:120])
                tail_lines = [*tail_lines[-19:], line]
        code = process.wait()
    except BaseException:
        stop_child(process, signal.SIGTERM, grace_s=10)
        raise
    if code != 0:
        raise ClusterError(f"{what} failed (exit {code}): {' | '.join(tail_lines[-5:])}")


def build_base(client: docker.DockerClient, listener: BuildListener, version: str = DEFAULT_RELEASE) -> BuildResult:
    release = RELEASES[version]
    tag = base_tag(version)
    if engine.image_exists(client, tag):
        return BuildResult(tag, built=False, seconds=0.0)
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None:
        raise EnvironmentProblem(
            "debootstrap is missing and the base image is not built: apt-get install -y debootstrap"
        )
    mirror = find_mirror()
    started = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="build-", dir=state_root()))
    try:
        rootfs = scratch / "rootfs"
        listener.on_step(f"debootstrap {release.suite} for Slurm {version} ({len(PACKAGES)} packages)")
        _run_streaming(
            [
                debootstrap,
                f"--variant={VARIANT}",
                f"--include={','.join(PACKAGES)}",
                release.suite,
                str(rootfs),
                mirror,
            ],
            listener,
            "debootstrap",
        )
        _check_suite_contents(rootfs, release)
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for entry in (rootfs / cache).glob("*"):
                if entry.is_file():
                    entry.unlink()
        listener.on_step("packing root filesystem")
        archive = scratch / "rootfs.tar"
        _run_streaming(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(archive), "."], listener, "tar")
        listener.on_step(f"importing {tag}")
        repository, _, version = tag.partition(":")
        client.api.import_image_from_file(
            str(archive),
            repository=repository,
            tag=version,
            changes=[f"LABEL {engine.LABEL_IMAGE_RECIPE}={version}", 'CMD ["/bin/bash"]'],
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if not engine.image_exists(client, tag):
        raise ClusterError(f"import of {tag} reported success but the image is not on the engine")
    return BuildResult(tag, built=True, seconds=time.monotonic() - started)


def _check_suite_contents(rootfs: Path, release: SlurmRelease) -> None:
    """A suite moves (sid above all): when it no longer carries the release's Slurm or
    Python, say so instead of building an image whose name promises what it lacks."""
    # `python3` is what the SUT's venv is made with: it must be the release's Python.
    python3 = rootfs / "usr" / "bin" / "python3"
    target = Path(os.readlink(python3)).name if python3.is_symlink() else ("python3" if python3.exists() else "none")
    if target != f"python{release.python}":
        raise ClusterError(
            f"{release.suite} no longer carries Python {release.python} as python3 (found: {target}); "
            f"update Slurm {release.version}'s entry in dd_accept/base/slurm_releases.py"
        )
    status = (rootfs / "var" / "lib" / "dpkg" / "status").read_text(errors="replace")
    match = re.search(r"^Package: slurmd\n(?:[^\n]+\n)*?Version: (?P<version>\S+)", status, re.MULTILINE)
    if match is None or not match["version"].startswith(release.version + "."):
        found = match["version"] if match else "no slurmd"
        raise ClusterError(
            f"{release.suite} no longer carries Slurm {release.version} (found: {found}); "
            f"update dd_accept/base/slurm_releases.py"
        )


def build_slurm_layer(
    client: docker.DockerClient, listener: BuildListener, version: str = DEFAULT_RELEASE
) -> BuildResult:
    tag = slurm_tag(version)
    if engine.image_exists(client, tag):
        return BuildResult(tag, built=False, seconds=0.0)
    started = time.monotonic()
    listener.on_step(f"building {tag}")
    with tempfile.TemporaryDirectory(prefix="ctx-", dir=state_root()) as context:
        for name in RECIPE_FILES:
            (Path(context) / name).write_bytes(_recipe_bytes(name))
        try:
            client.images.build(
                path=context,
                tag=tag,
                buildargs={"BASE": base_tag(version)},
                labels={engine.LABEL_IMAGE_RECIPE: tag.partition(":")[2]},
                network_mode="none",
                pull=False,
                rm=True,
                forcerm=True,
            )
        except docker.errors.BuildError as error:
            lines = [str(item.get("stream", item.get("error", ""))).strip() for item in error.build_log]
            raise ClusterError(f"building {tag} failed: {' | '.join(x for x in lines if x)[-400:]}") from error
    return BuildResult(tag, built=True, seconds=time.monotonic() - started)


def ensure_images(
    client: docker.DockerClient, listener: BuildListener | None = None, version: str = DEFAULT_RELEASE
) -> str:
    """Build whatever is missing, once, even when several processes ask at the same time."""
    listener = listener or QuietListener()
    with file_lock(state_root() / "locks" / "images.lock"):
        build_base(client, listener, version)
        return build_slurm_layer(client, listener, version).tag


def images_present(client: docker.DockerClient, version: str = DEFAULT_RELEASE) -> dict[str, bool]:
    return {tag: engine.image_exists(client, tag) for tag in (base_tag(version), slurm_tag(version))}
