"""Finding and removing clusters on the engine: every one, the orphans of owners that are
gone, one owner's objects, or one by name with its host run directory."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from dd_accept.base.state import cluster_dir
from dd_accept.slurm_docker import engine
from dd_accept.slurm_docker.ownership import LABEL_OWNER, orphaned
from dd_accept.slurm_docker.sdk import docker
from dd_accept.slurm_docker.spec import SHARED_PATH

if TYPE_CHECKING:
    from docker.models.containers import Container


def list_clusters(client: docker.DockerClient) -> dict[str, list[str]]:
    """Cluster name → container names, for every dd-accept cluster on the engine."""
    result: dict[str, list[str]] = {}
    for container in engine.find_labelled(client).containers:
        result.setdefault(container.labels[engine.LABEL_CLUSTER], []).append(container.name)
    return result


def views_of(objects: engine.LabelledObjects) -> list[tuple[dict[str, str], bool | None]]:
    """(labels, running) of each object: running is None for a network or a volume."""
    views: list[tuple[dict[str, str], bool | None]] = [
        (container.labels or {}, container.status == "running") for container in objects.containers
    ]
    return views + [(engine.labels_of(item), None) for item in (*objects.networks, *objects.volumes)]


def sweep_orphans(client: docker.DockerClient) -> list[str]:
    """Remove every cluster whose owner is gone and whose reaper did not remove it (a reaper
    killed too, a machine rebooted): never a kept cluster, a live owner's, or an older
    dd-accept's without an owner label. Best effort: a cluster another reaper or sweep is
    removing at the same moment is left to it."""
    by_cluster: dict[str, list[tuple[dict[str, str], bool | None]]] = {}
    for view in views_of(engine.find_labelled(client)):
        by_cluster.setdefault(view[0].get(engine.LABEL_CLUSTER, ""), []).append(view)
    removed: list[str] = []
    for name, views in by_cluster.items():
        if name and orphaned(views):
            owners = {labels[LABEL_OWNER] for labels, _ in views}
            with contextlib.suppress(docker.errors.APIError):
                removed += remove_owned(client, name, owners)
    return removed


def remove_owned(client: docker.DockerClient, name: str, owners: set[str]) -> list[str]:
    """Remove the objects of cluster `name` that carry one of `owners` — listed now, so an
    object another owner created under the same name since is never touched — and the run
    directory a removed container mounted (or, once nothing of the name is left, its own)."""
    objects = engine.find_labelled(client, name).where(LABEL_OWNER, owners)
    run_dirs = _run_directories(objects.containers, name)
    removed = engine.remove_labelled(client, objects)
    if not engine.find_labelled(client, name):
        run_dirs.add(cluster_dir(name))
    for directory in run_dirs:
        shutil.rmtree(directory, ignore_errors=True)
    return removed


def _run_directories(containers: tuple[Container, ...], name: str) -> set[Path]:
    """The run directories these containers mount: only ever one of the exact shape
    dd-accept creates for this name."""
    directories = set()
    for container in containers:
        for mount in container.attrs.get("Mounts", []):
            source = Path(mount.get("Source", ""))
            if mount.get("Destination") == SHARED_PATH and source.match(f"clusters/{name}/shared"):
                directories.add(source.parent)
    return directories


def remove_cluster(client: docker.DockerClient, name: str) -> list[str]:
    """Remove a cluster's labelled objects and its host run directory, whoever created them."""
    objects = engine.find_labelled(client, name)
    run_dirs = {cluster_dir(name), *_run_directories(objects.containers, name)}
    removed = engine.remove_labelled(client, objects)
    for directory in run_dirs:
        shutil.rmtree(directory, ignore_errors=True)
    return removed
