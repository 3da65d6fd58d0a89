"""Files a command writes beside the evidence it reads: whole or not at all, never into a
directory that is not there.
"""

from __future__ import annotations

from pathlib import Path

from dd_accept.base.errors import UsageError
from dd_accept.base.shown_paths import shown_path


def refuse_missing_directory(where: Path, target: Path, what: str) -> None:
    """An output file whose directory does not exist is a usage error, before anything runs."""
    if not where.parent.is_dir():
        raise UsageError(f"{what}: cannot write {shown_path(target)}: its directory does not exist")


def write_all(files: dict[Path, str], what: str) -> None:
    """Each file whole or not at all: written beside its target, then renamed over it."""
    written: list[Path] = []
    try:
        for target, text in files.items():
            temporary = target.with_name(f".{target.name}.tmp")
            temporary.write_text(text)
            written.append(temporary)
        for temporary, target in zip(written, files, strict=True):
            temporary.replace(target)
    except OSError as error:
        for temporary in written:
            temporary.unlink(missing_ok=True)
        raise UsageError(f"{what}: cannot write its output: {error.strerror}") from None
