"""`dd-accept sanitize PATH... --out DIR`: the bundle's sanitizer for any logs a user wants to share.

Files, directories and archives are read the one way every reader of evidence reads them
(`archive.walk`), sanitized by kind (JSON and JSONL by structure, text with quoting
understood) and written under DIR, archive members as directories. What cannot be
sanitized is not copied and is named: a binary file, a member beyond the size limits, a link.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dd_accept.base.errors import UsageError
from dd_accept.base.shown_paths import shown_path
from dd_accept.reports.archive import walk
from dd_accept.reports.audit import decode, text_codec
from dd_accept.reports.sanitize import Sanitizer


@dataclass
class Shared:
    sanitizer: Sanitizer
    written: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (location, why)


def sanitize_paths(paths: list[Path], out: Path, sanitizer: Sanitizer | None = None) -> Shared:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"sanitize: --out {shown_path(out)} already exists and is not empty; choose another directory")
    members = [member for path in paths for member in walk(path, "sanitize")]  # every input checked first
    shared = Shared(sanitizer or Sanitizer())
    out.mkdir(parents=True, exist_ok=True)
    for member in members:
        if member.data is None:
            shared.skipped.append((member.location, member.problem))
            continue
        if text_codec(member.data) is None:
            shared.skipped.append((member.location, "binary: cannot be sanitized, not copied"))
            continue
        relative = member.location.replace("!", "/")
        text = shared.sanitizer.file_text(decode(member.data), relative)
        target = out / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        shared.written.append(relative)
    return shared
