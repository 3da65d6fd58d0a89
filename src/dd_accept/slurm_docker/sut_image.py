"""Two layers on the Slurm image: the SUT, then dd-accept's in-cluster code.

`dd-accept/sut:<hash>` is `/opt/sut`, a venv installed offline from the wheelhouse; its
tag is a hash of the Slurm layer and the wheel digests, so a new SUT means a new image and
the same SUT never reinstalls. `dd-accept/node:<hash>` adds dd-accept's in-cluster code
(`dd_accept.node` and the `base` it imports) in seconds; its tag adds that code's digest. Both are
built with `network_mode=none`: nothing can reach an index.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import dd_accept
from dd_accept.base.errors import ClusterError, UsageError
from dd_accept.base.hashing import sha256_file
from dd_accept.base.progress import BuildListener, QuietListener
from dd_accept.base.slurm_releases import DEFAULT_RELEASE, RELEASES
from dd_accept.base.state import beyond_keeping, file_lock, state_root
from dd_accept.slurm_docker import engine
from dd_accept.slurm_docker.images import BuildResult, ensure_images, slurm_tag
from dd_accept.slurm_docker.layout import DOCKER_LAYOUT
from dd_accept.slurm_docker.sdk import docker
from dd_accept.sut.wheelhouse import Wheelhouse

if TYPE_CHECKING:
    from docker.models.images import Image

SUT_REPOSITORY = "dd-accept/sut"
NODE_REPOSITORY = "dd-accept/node"
SUT_VENV = DOCKER_LAYOUT.venv
SUT_PYTHON = DOCKER_LAYOUT.python
HARNESS_DIR = DOCKER_LAYOUT.harness_dir
INSTALL_MARKER = "dd-accept: installing the SUT"
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

SUT_DOCKERFILE = f"""\
ARG BASE
FROM ${{BASE}}
COPY wheelhouse /tmp/wheelhouse
RUN echo "{INSTALL_MARKER}" \\
 && python3 -m venv {SUT_VENV} \\
 && {SUT_VENV}/bin/pip install --quiet --no-index --no-cache-dir --disable-pip-version-check \\
      --find-links /tmp/wheelhouse -r /tmp/wheelhouse/requirements.txt \\
 && {SUT_VENV}/bin/pip freeze --all > {SUT_VENV}/dd-accept-freeze.txt \\
 && rm -rf /tmp/wheelhouse
"""

NODE_DOCKERFILE = f"""\
ARG BASE
FROM ${{BASE}}
COPY dd_accept {HARNESS_DIR}/dd_accept
RUN {SUT_PYTHON} -c 'import site, sys; open(site.getsitepackages()[0] + "/dd_accept.pth", "w").write(sys.argv[1])' \\
      {HARNESS_DIR} \\
 && {SUT_PYTHON} -m compileall -q {HARNESS_DIR}
"""


NODE_PACKAGES = ("base", "node")  # what runs on compute nodes; the layer contract keeps it light


def harness_files() -> list[Path]:
    """dd-accept's package files (caches excluded): what the provenance digest covers."""
    root = Path(dd_accept.__file__).parent
    return sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")


def node_files() -> list[Path]:
    """The part of dd-accept the nodes run (`dd_accept.node` and the `base` it imports): a
    change to checks, reports or the CLI does not rebuild the node image."""
    root = Path(dd_accept.__file__).parent
    return [
        path
        for path in harness_files()
        if path.relative_to(root).parts[0] in NODE_PACKAGES or path.relative_to(root) == Path("__init__.py")
    ]


def _digest_files(files: list[Path]) -> str:
    root = Path(dd_accept.__file__).parent
    hasher = hashlib.sha256()
    for path in files:
        hasher.update(str(path.relative_to(root)).encode() + b"\0" + sha256_file(path).encode() + b"\n")
    return hasher.hexdigest()


def harness_source_digest() -> str:
    return _digest_files(harness_files())


def node_source_digest() -> str:
    return _digest_files(node_files())


def sut_tag(wheelhouse: Wheelhouse, version: str = DEFAULT_RELEASE) -> str:
    recipe = hashlib.sha256("\n".join([slurm_tag(version), wheelhouse.digest, SUT_DOCKERFILE]).encode()).hexdigest()[
        :16
    ]
    return f"{SUT_REPOSITORY}:{recipe}"


def node_tag(wheelhouse: Wheelhouse, version: str = DEFAULT_RELEASE) -> str:
    recipe = hashlib.sha256(
        "\n".join([sut_tag(wheelhouse, version), node_source_digest(), NODE_DOCKERFILE]).encode()
    ).hexdigest()[:16]
    return f"{NODE_REPOSITORY}:{recipe}"


def _build(client: docker.DockerClient, context: Path, tag: str, base: str, labels: dict[str, str]) -> None:
    try:
        client.images.build(
            path=str(context),
            tag=tag,
            buildargs={"BASE": base},
            labels={engine.LABEL_IMAGE_RECIPE: tag.partition(":")[2], **labels},
            network_mode="none",
            pull=False,
            rm=True,
            forcerm=True,
        )
    except docker.errors.BuildError as error:
        raw = "\n".join(str(item.get("stream", item.get("error", ""))) for item in error.build_log)
        text = [line.strip() for line in ANSI_ESCAPE.sub("", raw).splitlines() if line.strip()]
        if any(INSTALL_MARKER in line for line in text):
            errors = [line for line in text if "ERROR" in line] or text
            detail = errors[-1].removeprefix("ERROR: ")
            raise UsageError(f"the SUT does not install offline in the node image: {detail}") from None
        raise ClusterError(f"building {tag} failed: {' | '.join(text)[-400:]}") from error


def build_node_image(
    client: docker.DockerClient,
    wheelhouse: Wheelhouse,
    listener: BuildListener | None = None,
    version: str = DEFAULT_RELEASE,
) -> BuildResult:
    """The image a SUT's cluster runs: Slurm `version` + `/opt/sut` + dd-accept's in-cluster code."""
    listener = listener or QuietListener()
    python = RELEASES[version].python
    if wheelhouse.python != python:
        raise ClusterError(
            f"the wheelhouse was fetched for Python {wheelhouse.python}, but Slurm {version}'s nodes run {python}"
        )
    slurm = ensure_images(client, listener, version)
    sut, node = sut_tag(wheelhouse, version), node_tag(wheelhouse, version)
    started = time.monotonic()
    built = False
    with file_lock(state_root() / "locks" / "sut-image.lock"):
        if not engine.image_exists(client, sut):
            listener.on_step(f"installing the SUT into {sut} ({len(wheelhouse.wheels)} wheels, offline)")
            with tempfile.TemporaryDirectory(prefix="sutctx-", dir=state_root()) as context_dir:
                context = Path(context_dir)
                (context / "Dockerfile").write_text(SUT_DOCKERFILE)
                shutil.copytree(wheelhouse.path, context / "wheelhouse")
                requirements = "\n".join(wheelhouse.install_requirements())
                (context / "wheelhouse" / "requirements.txt").write_text(requirements)
                _build(client, context, sut, slurm, {"io.dd-accept.sut": wheelhouse.digest})
            built = True
        if not engine.image_exists(client, node):
            listener.on_step(f"adding dd-accept's in-cluster code ({node})")
            with tempfile.TemporaryDirectory(prefix="nodectx-", dir=state_root()) as context_dir:
                context = Path(context_dir)
                (context / "Dockerfile").write_text(NODE_DOCKERFILE)
                package = Path(dd_accept.__file__).parent
                for path in node_files():
                    target = context / "dd_accept" / path.relative_to(package)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, target)
                _build(client, context, node, sut, {"io.dd-accept.sut": wheelhouse.digest})
            built = True
        if built:
            for repository in (SUT_REPOSITORY, NODE_REPOSITORY):
                evict_images(client, repository)
    return BuildResult(node, built=built, seconds=time.monotonic() - started)


KEEP_IMAGES = 12  # per repository: each SUT, release and harness version builds its own
RECENT_SECONDS = 7200.0  # built this recently: maybe about to be used by a run under way (CI runs < 90 min)


def evict_images(
    client: docker.DockerClient, repository: str, keep: int = KEEP_IMAGES, now: float | None = None
) -> list[str]:
    """Remove all but the `keep` newest images of `repository` (without this, a day of test
    runs left 160 SUT and node images and filled the disk). Never one built in the last two hours,
    one a container uses or one a kept image is built on: the engine refuses those, and they stay."""

    def built_at(image: Image) -> float:
        return datetime.fromisoformat(image.attrs["Created"][:19]).replace(tzinfo=UTC).timestamp()

    images = client.images.list(name=repository)
    removed = []
    for image in beyond_keeping(images, built_at, keep, RECENT_SECONDS, time.time() if now is None else now):
        try:
            client.images.remove(image.id, force=False)
        except docker.errors.APIError:
            continue
        removed.append(image.id)
    return removed


OVERLAY_DOCKERFILE = f"""\
ARG BASE
FROM ${{BASE}}
COPY wheels /tmp/overlay
RUN {SUT_VENV}/bin/pip install --quiet --no-index --no-deps --force-reinstall --disable-pip-version-check \\
      /tmp/overlay/*.whl \\
 && {SUT_VENV}/bin/pip freeze --all > {SUT_VENV}/dd-accept-freeze.txt \\
 && rm -rf /tmp/overlay
"""


def build_overlay_image(client: docker.DockerClient, base_image: str, wheels: list[Path]) -> str:
    """The base node image with some wheels force-reinstalled over it (for control variants).

    Seconds instead of a full offline install: only the changed wheels are installed.
    """
    digests = sorted(f"{w.name}:{sha256_file(w)}" for w in wheels)
    tag = (
        "dd-accept/variant:"
        + hashlib.sha256("\n".join([base_image, *digests, OVERLAY_DOCKERFILE]).encode()).hexdigest()[:16]
    )
    with file_lock(state_root() / "locks" / "sut-image.lock"):
        if engine.image_exists(client, tag):
            return tag
        with tempfile.TemporaryDirectory(prefix="overlayctx-", dir=state_root()) as context_dir:
            context = Path(context_dir)
            (context / "Dockerfile").write_text(OVERLAY_DOCKERFILE)
            (context / "wheels").mkdir()
            for wheel in wheels:
                shutil.copy2(wheel, context / "wheels" / wheel.name)
            _build(client, context, tag, base_image, {"io.dd-accept.variant": ",".join(w.name for w in wheels)})
    return tag
