"""A path the user gave, as an error line shows it: whole where that names no host detail.

A user who passed `dist/wheels` needs to read `dist/wheels` back, not `wheels`, to tell which
of two directories a line is about. But error lines land in CI logs, which, like evidence,
never hold host paths (the home directory names the user). So a path inside the working
directory is shown relative to it (as it was most likely typed), one inside the home
directory from `~`, and any other absolute path of more than two parts by its last two
after `…/`.
"""

from __future__ import annotations

import os
from pathlib import Path

KEPT_PARTS = 2  # of a path outside the working and home directories: `…/parent/name`


def shown_path(path: Path | str) -> str:
    """How an error line names `path` (see the module's docstring)."""
    given = Path(path)
    if not given.is_absolute():
        return os.path.normpath(given)
    absolute = Path(os.path.normpath(given))
    for base, prefix in _bases():
        try:
            inside = str(absolute.relative_to(base))
        except ValueError:
            continue
        if prefix:
            return prefix + inside if inside != "." else "~"
        return inside
    parts = absolute.parts[1:]
    return "/" + "/".join(parts) if len(parts) <= KEPT_PARTS else "…/" + "/".join(parts[-KEPT_PARTS:])


def _bases() -> list[tuple[Path, str]]:
    """The working and home directories, each with how a path inside it is written; neither
    when it is `/` (everything would be "inside" it) or cannot be told (deleted, no HOME)."""
    bases = []
    for where, prefix in ((Path.cwd, ""), (Path.home, "~/")):
        try:
            base = where()
        except (OSError, RuntimeError, KeyError):
            continue
        if base != Path(base.anchor):
            bases.append((base, prefix))
    return bases
