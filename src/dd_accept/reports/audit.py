"""`dd-accept audit PATH...`: look for anything the sanitizer would have removed.

Scans files, directories, `.tar.gz`, `.whl` and `.zip`; prints `location: rule` for each
finding and never the matched text. Uses the sanitizer's own rules, so "sanitized" and
"passes the audit" mean the same thing.
"""

from __future__ import annotations

import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from dd_accept.base.errors import UsageError
from dd_accept.reports.sanitize import PRIVATE_IP, Rule, Sanitizer

BINARY_SNIFF = 8192


@dataclass(frozen=True, slots=True)
class Finding:
    location: str
    rule: str

    def __str__(self) -> str:
        return f"{self.location}: {self.rule}"


def _text(data: bytes) -> str | None:
    if b"\0" in data[:BINARY_SNIFF]:
        return None
    return data.decode("utf-8", errors="replace")


def _members(path: Path) -> Iterator[tuple[str, bytes]]:
    """(location, bytes) for every file inside `path`, archives opened."""
    name = path.name
    if path.is_dir():
        for child in sorted(p for p in path.rglob("*") if p.is_file()):
            yield from (
                (f"{name}/{child.relative_to(path)}{loc[len(child.name) :]}", data) for loc, data in _members(child)
            )
    elif name.endswith((".tar.gz", ".tgz", ".tar")):
        with tarfile.open(path) as archive:
            for member in archive.getmembers():
                handle = archive.extractfile(member) if member.isfile() else None
                if handle is not None:
                    yield f"{name}!{member.name}", handle.read()
    elif name.endswith((".whl", ".zip")):
        with zipfile.ZipFile(path) as archive:
            for member in archive.namelist():
                if not member.endswith("/"):
                    yield f"{name}!{member}", archive.read(member)
    else:
        yield name, path.read_bytes()


def audit_text(location: str, text: str, rules: list[Rule]) -> list[Finding]:
    """Each rule searched once over the whole text; line numbers found only for matches."""
    found = []
    lowered = text.lower()
    for rule in rules:
        if not rule.may_match(lowered):
            continue
        if rule.name == "private_key":  # spans lines: reported for the file
            found += [Finding(location, rule.name)] if rule.pattern.search(text) else []
            continue
        lines = {text.count("\n", 0, match.start()) + 1 for match in rule.pattern.finditer(text)}
        found += [Finding(f"{location}:{number}", rule.name) for number in sorted(lines)]
    lines = {text.count("\n", 0, match.start()) + 1 for match in PRIVATE_IP.finditer(text)}
    found += [Finding(f"{location}:{number}", "private_ip") for number in sorted(lines)]
    return found


def licence_findings(path: Path) -> list[Finding]:
    """For wheels: is a licence declared (SPDX expression or licence file)?"""
    if not path.name.endswith(".whl"):
        return []
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        metadata = next(
            (archive.read(n).decode(errors="replace") for n in names if n.endswith(".dist-info/METADATA")), ""
        )
    declared = any(line.startswith(("License-Expression:", "License:")) for line in metadata.splitlines())
    has_file = any(
        "/licenses/" in n.lower() or n.rsplit("/", 1)[-1].upper().startswith(("LICENSE", "COPYING")) for n in names
    )
    return [] if declared and has_file else [Finding(path.name, "licence_missing")]


def audit(paths: list[Path], sanitizer: Sanitizer | None = None, licences: bool = False) -> list[Finding]:
    rules = (sanitizer or Sanitizer()).rules()
    found: list[Finding] = []
    for path in paths:
        if not path.exists():
            raise UsageError(f"audit: {path.name}: no such file or directory")
        try:
            for location, data in _members(path):
                text = _text(data)
                if text is not None:
                    found += audit_text(location, text, rules)
        except (tarfile.TarError, zipfile.BadZipFile) as error:
            raise UsageError(f"audit: {path.name} is not a readable archive: {error}") from None
        if licences:
            found += licence_findings(path)
    return found
