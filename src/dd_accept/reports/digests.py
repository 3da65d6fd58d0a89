"""Digests an auditor can recompute: files, trees, dependency locks, the SUT's runtime source."""

from __future__ import annotations

import hashlib
import zipfile
from collections.abc import Iterable
from pathlib import Path

# The SUT files that run at the edge of the allocation: proxy, middleware, shell helpers.
RUNTIME_SUFFIXES = (".sh",)
RUNTIME_NAMES = ("proxy.py", "backpressure.py")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tree_digest(entries: Iterable[tuple[str, bytes]]) -> str:
    """One digest over (name, content) pairs, order-independent and unambiguous."""
    hasher = hashlib.sha256()
    for name, data in sorted(entries):
        hasher.update(f"{name}\0{sha256_bytes(data)}\n".encode())
    return hasher.hexdigest()


def runtime_source_digest(wheel: Path) -> tuple[str, list[str]]:
    """Digest over the SUT's runtime files inside its wheel, and which files they are."""
    with zipfile.ZipFile(wheel) as archive:
        names = [
            name
            for name in archive.namelist()
            if "/runtime/" in name and (name.endswith(RUNTIME_SUFFIXES) or name.rsplit("/", 1)[-1] in RUNTIME_NAMES)
        ]
        return tree_digest((name, archive.read(name)) for name in names), sorted(names)


def lock_of_environment() -> list[str]:
    """The harness's own environment as a sorted `name==version` list. importlib.metadata is
    imported here, where a bundle is written: every CLI start loads this module, few write."""
    from importlib import metadata

    found = {
        f"{dist.metadata['Name'].lower()}=={dist.version}" for dist in metadata.distributions() if dist.metadata["Name"]
    }
    return sorted(found)


def lock_digest(lines: list[str]) -> str:
    return sha256_bytes("\n".join(sorted(lines)).encode())
