"""The only module that talks to the docker SDK.

Keeping the SDK behind one small surface means the rest of the harness deals in clusters,
nodes and command records, and that every exec becomes a record without exception.
"""

from __future__ import annotations

import io
import tarfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dd_accept.base.errors import EnvironmentProblem
from dd_accept.slurm_docker.records import (
    TIMEOUT_EXIT_CODES,
    CommandLog,
    CommandRecord,
    decode,
    tail,
    utc_now_iso,
)
from dd_accept.slurm_docker.sdk import docker

if TYPE_CHECKING:
    from docker.models.containers import Container

LABEL_CLUSTER = "io.dd-accept.cluster"
LABEL_ROLE = "io.dd-accept.role"
LABEL_IMAGE_RECIPE = "io.dd-accept.recipe"

ENGINE_FIX = (
    "no Docker engine answers; start one (`make accept` and `make test` start it for you, "
    "or run `dockerd &` as root) and check with `dd-accept doctor`"
)


def connect(timeout: int = 120) -> docker.DockerClient:
    """Return a client to a live engine, or fail with the one line a user needs."""
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except docker.errors.DockerException as error:
        raise EnvironmentProblem(ENGINE_FIX) from error
    return client


def engine_version(client: docker.DockerClient) -> str:
    return str(client.version().get("Version", "unknown"))


def cluster_labels(cluster: str, role: str) -> dict[str, str]:
    return {LABEL_CLUSTER: cluster, LABEL_ROLE: role}


def labels_of(item: object) -> dict[str, str]:
    """A container's, network's or volume's labels, as the engine listed them."""
    attrs = getattr(item, "attrs", None) or {}
    return attrs.get("Labels") or attrs.get("Config", {}).get("Labels") or {}


@dataclass(frozen=True, slots=True)
class LabelledObjects:
    """Everything on the engine that carries a dd-accept cluster label."""

    containers: tuple[Container, ...]
    networks: tuple[object, ...]
    volumes: tuple[object, ...]

    def __bool__(self) -> bool:
        return bool(self.containers or self.networks or self.volumes)

    def where(self, label: str, values: set[str]) -> LabelledObjects:
        """The objects whose `label` has one of `values` (e.g. the ones one owner created)."""

        def chosen(items: tuple[Any, ...]) -> tuple[Any, ...]:
            return tuple(item for item in items if labels_of(item).get(label) in values)

        return LabelledObjects(chosen(self.containers), chosen(self.networks), chosen(self.volumes))


def find_labelled(client: docker.DockerClient, cluster: str | None = None) -> LabelledObjects:
    """Objects of one cluster, or of every dd-accept cluster when `cluster` is None."""
    selector = LABEL_CLUSTER if cluster is None else f"{LABEL_CLUSTER}={cluster}"
    filters = {"label": selector}
    # A container removed between the engine's listing and its inspect (a concurrent teardown)
    # is simply gone, not an error.
    return LabelledObjects(
        containers=tuple(client.containers.list(all=True, filters=filters, ignore_removed=True)),
        networks=tuple(client.networks.list(filters=filters)),
        volumes=tuple(client.volumes.list(filters=filters)),
    )


def remove_labelled(client: docker.DockerClient, objects: LabelledObjects) -> list[str]:
    """Remove containers first (they hold the networks and volumes), then the rest.

    Objects already gone count as removed: a concurrent teardown must not fail this one.
    """
    removed: list[str] = []
    for container in objects.containers:
        try:
            container.remove(force=True, v=True)
            removed.append(f"container {container.name}")
        except docker.errors.NotFound:
            pass
    for network in objects.networks:
        try:
            network.remove()
            removed.append(f"network {network.name}")
        except docker.errors.NotFound:
            pass
    for volume in objects.volumes:
        try:
            volume.remove(force=True)
            removed.append(f"volume {volume.name}")
        except docker.errors.NotFound:
            pass
    return removed


def put_file(container: Container, path: str, data: bytes, mode: int = 0o644, uid: int = 0) -> None:
    """Write one file into a container without it ever touching the host's disk.

    Used for the munge key: it exists only in memory and inside the cluster's containers.
    """
    directory, _, name = path.rpartition("/")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = mode
        info.uid = uid
        info.gid = uid
        info.mtime = int(time.time())
        archive.addfile(info, io.BytesIO(data))
    container.put_archive(directory or "/", buffer.getvalue())


def exec_command(
    container: Container,
    argv: Sequence[str],
    *,
    node: str,
    log: CommandLog,
    timeout: float = 60.0,
    environment: Mapping[str, str] | None = None,
    user: str = "",
    workdir: str | None = None,
) -> CommandRecord:
    """Run argv in a container under coreutils `timeout`, record it, and return the record.

    The docker exec API has no deadline of its own, so the deadline is enforced inside the
    container: a hung `srun` cannot hang the harness.
    """
    wrapped = ["timeout", "--kill-after=2", f"{max(timeout, 0.1):.1f}", *argv]
    start = utc_now_iso()
    started = time.monotonic()
    result = container.exec_run(
        wrapped,
        demux=True,
        environment=dict(environment or {}),
        user=user,
        workdir=workdir,
    )
    duration = time.monotonic() - started
    stdout, stderr = result.output if result.output else (b"", b"")
    exit_code = result.exit_code
    timed_out = exit_code in TIMEOUT_EXIT_CODES and duration >= timeout - 0.05
    record = CommandRecord(
        argv=tuple(argv),
        node=node,
        start=start,
        duration_s=round(duration, 4),
        exit_code=exit_code,
        stdout_tail=tail(decode(stdout)),
        stderr_tail=tail(decode(stderr)),
        timed_out=timed_out,
        stdout=decode(stdout),
    )
    return log.add(record)


def set_frozen(container: Container, *, node: str, log: CommandLog, frozen: bool) -> CommandRecord:
    """Freeze (`docker pause`) or thaw a container, recorded like a command: freezing stops
    every process on a node at once and leaves its connections silent, without a reset, as
    when a machine hangs or loses power."""
    start, started = utc_now_iso(), time.monotonic()
    exit_code, error = 0, ""
    try:
        container.pause() if frozen else container.unpause()
    except docker.errors.APIError as problem:
        exit_code, error = 1, tail(str(problem.explanation or problem))
    record = CommandRecord(
        argv=("docker", "pause" if frozen else "unpause", node),
        node=node,
        start=start,
        duration_s=round(time.monotonic() - started, 4),
        exit_code=exit_code,
        stdout_tail="",
        stderr_tail=error,
    )
    return log.add(record)


# runc could not stop every task of the container in time (a busy machine: moby#48205) and
# thawed them again: the node runs as before, and a second try usually freezes it.
TRANSIENT_FREEZE = "unable to freeze"
FREEZE_ATTEMPTS = 3


def freeze(container: Container, *, node: str, log: CommandLog, wait_s: float = 0.5) -> CommandRecord:
    """`set_frozen(frozen=True)`, tried again (each try recorded) while runc reports the
    transient failure; the last try's record, frozen or not."""
    for attempt in range(FREEZE_ATTEMPTS):
        record = set_frozen(container, node=node, log=log, frozen=True)
        if record.ok or TRANSIENT_FREEZE not in record.stderr_tail or attempt == FREEZE_ATTEMPTS - 1:
            return record
        time.sleep(wait_s)
    raise AssertionError("unreachable")


def exec_detached(container: Container, argv: Sequence[str], environment: Mapping[str, str] | None = None) -> None:
    """Start a process in a container and return at once; its wrapper reports through files."""
    container.exec_run(list(argv), detach=True, environment=dict(environment or {}))


def container_log_tail(container: Container, lines: int = 40) -> str:
    try:
        return decode(container.logs(tail=lines))
    except docker.errors.APIError:
        return ""


def image_exists(client: docker.DockerClient, tag: str) -> bool:
    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def image_id(client: docker.DockerClient, tag: str) -> str:
    return str(client.images.get(tag).id)


def remove_images(client: docker.DockerClient, label: str) -> list[str]:
    """Remove every image carrying `label`, children before parents (newest first).

    The engine refuses to remove an image that another image is built on, even forced.
    """
    images = sorted(client.images.list(filters={"label": label}), key=lambda i: i.attrs["Created"], reverse=True)
    removed: list[str] = []
    for image in images:
        try:
            client.images.remove(image.id, force=True)
        except docker.errors.NotFound:
            continue
        removed.append(f"image {', '.join(image.tags) or image.short_id}")
    return removed
