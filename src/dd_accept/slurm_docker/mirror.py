"""Find the Debian mirror this machine already uses, from its own apt configuration.

No registry host is named anywhere in dd-accept: images come from whatever archive the
host's apt is configured for, which is what an operator has already vetted.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from dd_accept.base.errors import EnvironmentProblem

MIRROR_ENV = "DD_ACCEPT_DEBIAN_MIRROR"
APT_DIR = Path("/etc/apt")


def _is_primary(uri: str, suites: Iterable[str]) -> bool:
    """The main archive, not the security or updates pockets (debootstrap needs the release)."""
    if "security" in uri:
        return False
    return any("-" not in suite for suite in suites)


def _from_deb822(text: str) -> list[str]:
    uris: list[str] = []
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[:1].isspace():
                continue
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        if fields.get("enabled", "yes").lower() == "no":
            continue
        if "deb" not in fields.get("types", "").split():
            continue
        suites = fields.get("suites", "").split()
        uris.extend(uri for uri in fields.get("uris", "").split() if _is_primary(uri, suites))
    return uris


def _from_one_line(text: str) -> list[str]:
    uris: list[str] = []
    for raw in text.splitlines():
        line = re.sub(r"\[[^\]]*\]", " ", raw.split("#", 1)[0])  # drop [signed-by=...] options
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "deb" and _is_primary(parts[1], [parts[2]]):
            uris.append(parts[1])
    return uris


def find_mirror(apt_dir: Path = APT_DIR) -> str:
    """Return the first primary Debian archive URI configured for apt."""
    override = os.environ.get(MIRROR_ENV)
    if override:
        return override
    candidates: list[str] = []
    sources_list = apt_dir / "sources.list"
    if sources_list.is_file():
        candidates += _from_one_line(sources_list.read_text(errors="replace"))
    parts = apt_dir / "sources.list.d"
    if parts.is_dir():
        for path in sorted(parts.iterdir()):
            if path.suffix == ".sources":
                candidates += _from_deb822(path.read_text(errors="replace"))
            elif path.suffix == ".list":
                candidates += _from_one_line(path.read_text(errors="replace"))
    if not candidates:
        raise EnvironmentProblem(
            f"no Debian archive found in apt's configuration; set {MIRROR_ENV} to the mirror to build from"
        )
    return candidates[0]
