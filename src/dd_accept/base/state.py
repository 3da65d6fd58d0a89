"""Where dd-accept keeps host-side state, and the file lock that serialises shared work.

Host paths live only here: evidence refers to the in-cluster paths, never to these.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

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
