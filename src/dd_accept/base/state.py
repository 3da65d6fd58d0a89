"""Where dd-accept keeps host-side state, and the file lock that serialises shared work.

Host paths live only here: evidence refers to the in-cluster paths, never to these.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

STATE_ENV = "DD_ACCEPT_STATE_DIR"


def state_root() -> Path:
    """The host directory for build scratch, cluster run directories and locks."""
    configured = os.environ.get(STATE_ENV)
    root = Path(configured) if configured else Path.home() / ".cache" / "dd-accept"
    root.mkdir(parents=True, exist_ok=True)
    return root


def cluster_dir(name: str) -> Path:
    return state_root() / "clusters" / name


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock; the kernel drops it if the holder dies."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def beyond_keeping(
    entries: Iterable[T], last_used: Callable[[T], float], keep: int, protect_s: float, now: float
) -> list[T]:
    """What a cache may drop: all but its `keep` most recently used entries, and never one
    used within `protect_s` (another run may be about to read it). The one eviction rule of
    every host cache dd-accept fills (wheelhouses, SUT and node images)."""
    ordered = sorted(entries, key=last_used, reverse=True)
    return [entry for entry in ordered[keep:] if now - last_used(entry) >= protect_s]
