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
import secrets
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dd_accept.base.errors import UsageError
from dd_accept.base.shown_paths import shown_path
from dd_accept.base.user_files import read_user_text
from dd_accept.reports.archive import Member, walk
from dd_accept.reports.sanitize import Sanitizer, sanitizer_for_audit
from dd_accept.reports.secrets import PLACEHOLDER

PRINTABLE_RUN = re.compile(rb"[\x20-\x7e\t]{6,}")
TEXT_SNIFF = 8192


@dataclass(frozen=True, slots=True)
class Finding:
    location: str
    rule: str
    # Why it matched, never what: the few characters before the first placeholder of the line
    # as the sanitizer leaves it (`sorted(attempts, key=[redacted:secret_name]`), nothing after
    # it, digit-bearing words masked, control characters escaped; only for plain-text lines.
    excerpt: str = field(default="", compare=False)
    # The line itself, for `--write-baseline` only (never printed): it is salted and hashed
    # there, so a baseline accepts this line and a changed one is found again.
    line_text: str = field(default="", compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.location}: {self.rule}" + (f"  | {self.excerpt}" if self.excerpt else "")

    def to_json(self) -> dict[str, str]:
        found = {"location": self.location, "rule": self.rule}
        return found | ({"excerpt": self.excerpt} if self.excerpt else {})

    def file(self) -> str:
        """The location without its line number, which moves as the file is edited."""
        return re.sub(r":\d+$", "", self.location)


# How much of the line before a placeholder an excerpt shows.
EXCERPT_BEFORE = 32
_PLACEHOLDER_START = PLACEHOLDER.split("{", 1)[0]
_DIGIT_WORD = re.compile(r"\b(?=\w*\d)\w{4,}\b")  # a word with a digit: an ID, a PIN, a password


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
        return [Finding(_shown_location(member.location, sanitizer), f"unscannable ({member.problem})")]
    before = len(sanitizer.places)
    text = decode(member.data)
    sanitizer.file_text(text, member.location)
    seen = sorted({(line, rule) for _, line, rule in sanitizer.places[before:]})
    del sanitizer.places[before:]
    lines = text.split("\n")
    # JSON and JSON lines are judged value by value (keys, escapes decoded): a line of them
    # read as plain text would not be redacted as the finding was, so they show no excerpt.
    plain = not member.location.endswith((".json", ".jsonl"))
    location = _shown_location(member.location, sanitizer)
    found = []
    for line, rule in seen:
        raw = lines[line - 1] if plain and 0 < line <= len(lines) else ""
        excerpt = _excerpt(raw, rule, sanitizer) if raw else ""
        found.append(Finding(f"{location}:{line}" if line else location, rule, excerpt, raw))
    return found


def _quietly(sanitizer: Sanitizer, text: str) -> str:
    """`text` as the sanitizer leaves it, its redactions neither counted as findings nor kept."""
    before = len(sanitizer.places)
    cleaned = sanitizer.text(text, "excerpt")
    del sanitizer.places[before:]
    return cleaned


def _shown_location(location: str, sanitizer: Sanitizer) -> str:
    """A file or member name as printed: sanitized like its contents (a name can hold a secret)."""
    return _escaped(_quietly(sanitizer, location))


def _excerpt(raw: str, rule: str, sanitizer: Sanitizer) -> str:
    """The sanitized line up to and with the rule's placeholder (else its first one), at most EXCERPT_BEFORE characters
    before it; words holding a digit masked (what the sanitizer did not catch is not printed
    either); control characters escaped, so a file cannot write to the reader's terminal."""
    cleaned = " ".join(_quietly(sanitizer, raw).split())
    own = cleaned.find(PLACEHOLDER.format(rule))
    at = own if own >= 0 else cleaned.find(_PLACEHOLDER_START)
    if at < 0:
        return ""
    close = cleaned.find("]", at)
    head = cleaned[max(0, at - EXCERPT_BEFORE) : at]
    head = ("…" if at > EXCERPT_BEFORE else "") + _DIGIT_WORD.sub("…", head)
    return _escaped(head + cleaned[at : close + 1 if close > at else len(cleaned)])


def _escaped(text: str) -> str:
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


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
    """The user and host names a bundle recorded (keyed digests), if `path` is a bundle: its
    directory, or its archive (`NAME.tar.gz` holding `NAME/redactions.json`), so an archived
    bundle is audited for the same names as the directory it was made from."""
    text = None
    if path.is_dir() and (path / "redactions.json").is_file():
        try:
            text = (path / "redactions.json").read_text()
        except OSError:
            return None
    elif path.is_file() and path.name.endswith((".tar.gz", ".tgz")):
        text = _archived_record(path)
    if text is None:
        return None
    try:
        identity = json.loads(text).get("host_identity")
    except (ValueError, AttributeError):
        return None
    return identity if isinstance(identity, dict) else None


def _archived_record(path: Path) -> str | None:
    try:
        with tarfile.open(path, "r:*") as archive:
            for info in archive:
                parts = info.name.strip("/").split("/")
                if len(parts) == 2 and parts[1] == "redactions.json" and info.isfile() and info.size < 1 << 20:
                    handle = archive.extractfile(info)
                    return handle.read().decode("utf-8", errors="replace") if handle else None
    except (OSError, tarfile.TarError, EOFError):
        return None
    return None


BASELINE_HEADER = "# dd-accept audit baseline"


@dataclass(frozen=True, slots=True)
class Baseline:
    """Reviewed findings an audit accepts: by file, rule and a salted sha256 of the line. The
    salt is the baseline's own, so its digests say nothing outside it, and the line's text is
    never written; a line that changes (or the same secret on a new line) is found again."""

    salt: str
    accepted: frozenset[tuple[str, str, str]]

    def digest(self, finding: Finding) -> str:
        return hashlib.sha256(f"{self.salt}\0{finding.line_text.strip()}".encode()).hexdigest()[:32]

    def accepts(self, finding: Finding) -> bool:
        return bool(finding.line_text) and (finding.file(), finding.rule, self.digest(finding)) in self.accepted

    @classmethod
    def of(cls, findings: list[Finding]) -> Baseline:
        fresh = cls(secrets.token_hex(16), frozenset())
        return cls(fresh.salt, frozenset((f.file(), f.rule, fresh.digest(f)) for f in findings if f.line_text))

    def text(self) -> str:
        lines = [f"{BASELINE_HEADER}: accepted findings (file, rule, salted sha256 of the line); say why beside each"]
        lines += [f"# salt: {self.salt}", *sorted("\t".join(entry) for entry in self.accepted)]
        return "\n".join(lines) + "\n"


def read_baseline(path: Path) -> Baseline:
    """An audit baseline (`audit --write-baseline`): `# salt: HEX`, then one accepted finding a
    line, `FILE<TAB>RULE<TAB>DIGEST`; any other `#` line is a reviewer's comment."""
    salt, accepted = "", set()
    for number, line in enumerate(read_user_text(path, "--baseline").splitlines(), 1):
        if line.startswith("# salt: "):
            salt = line.removeprefix("# salt: ").strip()
            continue
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 3 or not re.fullmatch(r"[0-9a-f]{32}", parts[2].strip()):
            raise UsageError(f"audit: --baseline {shown_path(path)}:{number}: not FILE<TAB>RULE<TAB>DIGEST")
        accepted.add((parts[0], parts[1], parts[2].strip()))
    if not re.fullmatch(r"[0-9a-f]{32}", salt):
        shown = shown_path(path)
        raise UsageError(f"audit: --baseline {shown}: no `# salt: HEX` line (write one with --write-baseline)")
    return Baseline(salt, frozenset(accepted))


def audit(paths: list[Path], sanitizer: Sanitizer | None = None, licences: bool = False) -> list[Finding]:
    found: list[Finding] = []
    for path in paths:
        scanner = sanitizer_for_audit(recorded_identity(path), sanitizer)
        for member in walk(path, "audit"):
            found += audit_member(member, scanner)
        if licences:
            found += licence_findings(path)
    return found
