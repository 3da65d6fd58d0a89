"""`dd-accept audit PATH...`: look for anything the sanitizer would still change. Fails closed.

Scans files, directories and archives (tar, gzip, xz, bzip2, zip, wheels; nested too, within
size and ratio limits); prints `location: rule` for each finding and never the matched text.
It runs the sanitizer itself, so "sanitized" and "passes the audit" mean the same thing.
Nothing is called clean that was not read: a file it cannot decode within the limits, a
link, a damaged archive or an unreadable directory is a finding (`unscannable`), and a FIFO,
device or socket is refused (exit 2). Binary files are scanned through their printable
strings; UTF-16 text is decoded. Auditing a bundle checks for the user and host names the
bundle recorded (`redactions.json`), not for the auditor's own.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dd_accept.base.errors import UsageError
from dd_accept.base.user_files import read_user_text
from dd_accept.reports.archive import Member, walk
from dd_accept.reports.sanitize import Sanitizer, sanitizer_for_audit

PRINTABLE_RUN = re.compile(rb"[\x20-\x7e\t]{6,}")
TEXT_SNIFF = 8192


@dataclass(frozen=True, slots=True)
class Finding:
    location: str
    rule: str
    # The line as the sanitizer leaves it (what matched replaced by its placeholder), so a
    # person sees why it matched without the audit printing what it found; "" for none.
    excerpt: str = field(default="", compare=False)
    # sha256 of the line as it is, first 16 hex: what an audit baseline accepts (a line that
    # changes is found again, wherever it moved).
    fingerprint: str = field(default="", compare=False)

    def __str__(self) -> str:
        return f"{self.location}: {self.rule}" + (f"  | {self.excerpt}" if self.excerpt else "")

    def to_json(self) -> dict[str, str]:
        found = {"location": self.location, "rule": self.rule}
        return found | ({"excerpt": self.excerpt, "fingerprint": self.fingerprint} if self.fingerprint else {})

    def baseline_key(self) -> tuple[str, str, str]:
        """What a baseline entry names: the file (without its line, which moves), rule, line."""
        return (
            self.location.rsplit(":", 1)[0] if self.location[-1:].isdigit() else self.location,
            self.rule,
            self.fingerprint,
        )


EXCERPT_CHARS = 100


def text_codec(data: bytes) -> str | None:
    """How to read `data` as text: UTF-8, UTF-16/32 (by BOM or by their NULs); None for a
    binary."""
    for bom, codec in (
        (codecs.BOM_UTF32_LE, "utf-32"),
        (codecs.BOM_UTF32_BE, "utf-32"),
        (codecs.BOM_UTF8, "utf-8-sig"),
        (codecs.BOM_UTF16_LE, "utf-16"),
        (codecs.BOM_UTF16_BE, "utf-16"),
    ):
        if data.startswith(bom):
            return codec
    head = data[:TEXT_SNIFF]
    if b"\0" not in head:
        return "utf-8"
    if len(head) >= 4 and head[1::2].count(0) > len(head) * 0.4 and head[0::2].count(0) < len(head) * 0.1:
        return "utf-16-le"
    if len(head) >= 4 and head[0::2].count(0) > len(head) * 0.4 and head[1::2].count(0) < len(head) * 0.1:
        return "utf-16-be"
    return None


def decode(data: bytes) -> str:
    """Text to scan from any bytes; for a binary, its printable strings, one per line (a
    secret inside a binary is still found)."""
    codec = text_codec(data)
    if codec is not None:
        return data.decode(codec, errors="replace")
    return "\n".join(run.decode("ascii") for run in PRINTABLE_RUN.findall(data))


def audit_member(member: Member, sanitizer: Sanitizer) -> list[Finding]:
    if member.data is None:
        return [Finding(member.location, f"unscannable ({member.problem})")]
    before = len(sanitizer.places)
    text = decode(member.data)
    sanitizer.file_text(text, member.location)
    seen = sorted({(line, rule) for _, line, rule in sanitizer.places[before:]})
    del sanitizer.places[before:]
    lines = text.split("\n")
    found = []
    for line, rule in seen:
        raw = lines[line - 1] if 0 < line <= len(lines) else ""
        found.append(Finding(f"{member.location}:{line}" if line else member.location, rule, *_shown(raw, sanitizer)))
    return found


def _shown(raw: str, sanitizer: Sanitizer) -> tuple[str, str]:
    """(excerpt, fingerprint) of a line that matched: the excerpt is the line sanitized (its
    places not kept), cut to EXCERPT_CHARS; nothing for a match with no line (a JSON value)."""
    if not raw:
        return "", ""
    before = len(sanitizer.places)
    cleaned = " ".join(sanitizer.text(raw, "excerpt").split())
    del sanitizer.places[before:]
    excerpt = cleaned if len(cleaned) <= EXCERPT_CHARS else cleaned[: EXCERPT_CHARS - 1] + "…"
    return excerpt, hashlib.sha256(raw.strip().encode()).hexdigest()[:16]


def licence_findings(path: Path) -> list[Finding]:
    """For wheels: is a licence declared (SPDX expression or licence file)?"""
    if not path.name.endswith(".whl"):
        return []
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            metadata = next(
                (archive.read(n).decode(errors="replace") for n in names if n.endswith(".dist-info/METADATA")), ""
            )
    except (OSError, zipfile.BadZipFile):
        return [Finding(path.name, "unscannable (not a readable wheel)")]
    declared = any(line.startswith(("License-Expression:", "License:")) for line in metadata.splitlines())
    has_file = any(
        "/licenses/" in n.lower() or n.rsplit("/", 1)[-1].upper().startswith(("LICENSE", "COPYING")) for n in names
    )
    return [] if declared and has_file else [Finding(path.name, "licence_missing")]


def recorded_identity(path: Path) -> dict[str, Any] | None:
    """The user and host names a bundle recorded (keyed digests), if `path` is a bundle."""
    record = path / "redactions.json" if path.is_dir() else None
    if record is None or not record.is_file():
        return None
    try:
        identity = json.loads(record.read_text()).get("host_identity")
    except (OSError, ValueError, AttributeError):
        return None
    return identity if isinstance(identity, dict) else None


def read_baseline(path: Path) -> set[tuple[str, str, str]]:
    """An audit baseline (`audit --write-baseline`): one accepted finding a line, `FILE<TAB>RULE<TAB>FINGERPRINT`;
    `#` starts a comment, where a reviewer says why it is accepted."""
    accepted = set()
    for number, line in enumerate(read_user_text(path, "--baseline").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 3 or not re.fullmatch(r"[0-9a-f]{16}", parts[2].strip()):
            raise UsageError(f"audit: --baseline {path.name}:{number}: not FILE<TAB>RULE<TAB>FINGERPRINT")
        accepted.add((parts[0], parts[1], parts[2].strip()))
    return accepted


def baseline_text(findings: list[Finding]) -> str:
    lines = ["# dd-accept audit baseline: accepted findings (file, rule, sha256 of the line); say why beside each"]
    lines += sorted({"\t".join(f.baseline_key()) for f in findings if f.fingerprint})
    return "\n".join(lines) + "\n"


def audit(paths: list[Path], sanitizer: Sanitizer | None = None, licences: bool = False) -> list[Finding]:
    found: list[Finding] = []
    for path in paths:
        scanner = sanitizer_for_audit(recorded_identity(path), sanitizer)
        for member in walk(path, "audit"):
            found += audit_member(member, scanner)
        if licences:
            found += licence_findings(path)
    return found
