"""Reading files, directories and archives one way, with limits, for every reader of evidence.

`verify`, `audit`, `compare`, `report` and `sanitize` all read through here, so an archive
means the same thing to each: a bundle archive holds one top-level directory of regular
files; a duplicate member, a link, a device or anything else is refused (two readers would
otherwise read two different `results.json`). Decompression is bounded in size and ratio,
and non-regular files (FIFOs, devices, sockets) are refused before anything opens them: a
FIFO would block forever and `/dev/zero` never ends.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import stat
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dd_accept.base.errors import UsageError
from dd_accept.base.shown_paths import shown_path

# Evidence files are megabytes; a log that is not is read up to here and reported beyond it.
MAX_FILE_BYTES = 64 * 1024 * 1024  # one file or decompressed member
MAX_TOTAL_BYTES = 512 * 1024 * 1024  # everything decompressed from one path
MAX_RATIO = 100  # decompressed / compressed: beyond it, a decompression bomb (logs compress ~10x)
MAX_DEPTH = 4  # archives inside archives
MAX_MEMBERS = 200_000


class Unreadable(Exception):
    """A file or member that cannot be read within the limits: the audit's "unscannable"."""


@dataclass(frozen=True, slots=True)
class Member:
    location: str  # archive.tar.gz!dir/file.log, or dir/file.log
    data: bytes | None  # None: unreadable (see `problem`)
    problem: str = ""


def refuse_special(path: Path, what: str) -> None:
    """Exit 2 for anything but a regular file or directory: never opened, never followed."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        raise UsageError(f"{what}: {shown_path(path)}: no such file or directory") from None
    except OSError as error:
        raise UsageError(f"{what}: {shown_path(path)}: cannot be read ({error.strerror})") from None
    if stat.S_ISLNK(mode):
        raise UsageError(f"{what}: {shown_path(path)} is a symbolic link; give the file it points to")
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise UsageError(f"{what}: {shown_path(path)} is not a regular file or directory (a FIFO, device or socket)")


def read_regular(path: Path, limit: int = MAX_FILE_BYTES) -> bytes:
    if path.stat().st_size > limit:
        raise Unreadable(f"larger than {limit // (1024 * 1024)} MiB")
    with open(path, "rb") as handle:
        return handle.read(limit + 1)


def _bounded(stream: gzip.GzipFile | lzma.LZMAFile | bz2.BZ2File, compressed: int, budget: list[int]) -> bytes:
    """Read a decompressing stream within the per-file, total and ratio limits."""
    limit = min(MAX_FILE_BYTES, budget[0], max(compressed, 1) * MAX_RATIO + 65536)
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise Unreadable("decompresses beyond the size or ratio limit (a decompression bomb?)")
    budget[0] -= len(data)
    return data


def _kind(data: bytes) -> str | None:
    if data[:2] == b"\x1f\x8b":
        return "gzip"
    if data[:6] == b"\xfd7zXZ\x00":
        return "xz"
    if data[:3] == b"BZh":
        return "bzip2"
    if data[:4] == b"PK\x03\x04" or data[:4] == b"PK\x05\x06":
        return "zip"
    if len(data) > 262 and data[257:262] == b"ustar":
        return "tar"
    return None


def _decompressing(kind: str, source: io.BytesIO) -> gzip.GzipFile | lzma.LZMAFile | bz2.BZ2File:
    if kind == "gzip":
        return gzip.GzipFile(fileobj=source)
    return lzma.LZMAFile(source) if kind == "xz" else bz2.BZ2File(source)


def members(location: str, data: bytes, budget: list[int], depth: int = 0) -> Iterator[Member]:
    """Every file inside `data` (itself when it is no archive), archives opened recursively."""
    kind = _kind(data)
    if kind is None:
        yield Member(location, data)
        return
    if depth >= MAX_DEPTH:
        yield Member(location, None, f"archives nested deeper than {MAX_DEPTH}")
        return
    try:
        if kind in ("gzip", "xz", "bzip2"):
            with _decompressing(kind, io.BytesIO(data)) as stream:
                inner = _bounded(stream, len(data), budget)
            yield from members(location, inner, budget, depth + 1)
        elif kind == "tar":
            yield from _tar_members(location, data, budget, depth)
        else:
            yield from _zip_members(location, data, budget, depth)
    except Unreadable as problem:
        yield Member(location, None, str(problem))
    except (OSError, EOFError, lzma.LZMAError, tarfile.TarError, zipfile.BadZipFile, ValueError) as error:
        yield Member(location, None, f"a damaged {kind} archive ({type(error).__name__})")


def _tar_members(location: str, data: bytes, budget: list[int], depth: int) -> Iterator[Member]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
        for count, info in enumerate(archive):
            if count >= MAX_MEMBERS:
                yield Member(location, None, f"more than {MAX_MEMBERS} members")
                return
            where = f"{location}!{info.name}"
            if info.isdir():
                continue
            if not info.isfile():
                yield Member(where, None, "a link or special file inside an archive")
                continue
            if info.size > min(MAX_FILE_BYTES, budget[0]):
                yield Member(where, None, "larger than the size limit")
                continue
            handle = archive.extractfile(info)
            content = handle.read() if handle is not None else b""
            budget[0] -= len(content)
            yield from members(where, content, budget, depth + 1)


def _zip_members(location: str, data: bytes, budget: list[int], depth: int) -> Iterator[Member]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for count, info in enumerate(archive.infolist()):
            if count >= MAX_MEMBERS:
                yield Member(location, None, f"more than {MAX_MEMBERS} members")
                return
            if info.is_dir():
                continue
            where = f"{location}!{info.filename}"
            limit = min(MAX_FILE_BYTES, budget[0], max(info.compress_size, 1) * MAX_RATIO + 65536)
            if info.file_size > limit:
                yield Member(where, None, "decompresses beyond the size or ratio limit (a decompression bomb?)")
                continue
            with archive.open(info) as handle:
                content = handle.read(limit + 1)
            if len(content) > limit:
                yield Member(where, None, "decompresses beyond its declared size")
                continue
            budget[0] -= len(content)
            yield from members(where, content, budget, depth + 1)


def walk(path: Path, what: str) -> Iterator[Member]:
    """Every file under `path` (a file, a directory or an archive). Links inside a directory
    are reported unreadable, never followed; a FIFO, device or socket is refused (exit 2)."""
    refuse_special(path, what)
    budget = [MAX_TOTAL_BYTES]
    if path.is_dir():
        yield from _walk_directory(path, path.name, what, budget)
    else:
        yield from _file_members(path, path.name, budget)


def _file_members(path: Path, location: str, budget: list[int]) -> Iterator[Member]:
    """A regular file's members (itself, or what its archive holds); unreadable is a member too."""
    try:
        data = read_regular(path)
    except Unreadable as problem:
        yield Member(location, None, str(problem))
        return
    except OSError as error:
        yield Member(location, None, f"cannot be read ({error.strerror})")
        return
    yield from members(location, data, budget)


def _walk_directory(directory: Path, location: str, what: str, budget: list[int]) -> Iterator[Member]:
    try:
        children = sorted(directory.iterdir())
    except OSError as error:
        yield Member(location, None, f"directory cannot be read ({error.strerror})")
        return
    for child in children:
        where = f"{location}/{child.name}"
        mode = child.lstat().st_mode
        if stat.S_ISLNK(mode):
            yield Member(where, None, "a symbolic link (not followed)")
        elif stat.S_ISDIR(mode):
            yield from _walk_directory(child, where, what, budget)
        elif stat.S_ISREG(mode):
            yield from _file_members(child, where, budget)
        else:
            raise UsageError(f"{what}: {where} is not a regular file or directory (a FIFO, device or socket)")


# ---- bundles -------------------------------------------------------------------------------


def check_bundle_directory(bundle: Path, what: str) -> None:
    """A bundle directory holds regular files and directories only (links are not followed)."""
    refuse_special(bundle, what)
    if not bundle.is_dir():
        raise UsageError(f"{what}: {shown_path(bundle)} is not a bundle directory or .tar.gz")
    for path in bundle.rglob("*"):
        mode = path.lstat().st_mode
        if stat.S_ISLNK(mode) or not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise UsageError(f"{what}: {shown_path(bundle)}/{path.relative_to(bundle)} is a link or special file")


@contextmanager
def opened_bundle(path: Path, what: str) -> Iterator[Path]:
    """A bundle as a directory: itself, or its `.tar.gz` unpacked into a private temporary
    directory after the archive passed the one-reading rules."""
    refuse_special(path, what)
    if path.is_dir():
        check_bundle_directory(path, what)
        yield path
        return
    try:
        with tarfile.open(path, "r:*") as archive:
            infos = _strict_bundle_members(archive, path.name, what)
            with tempfile.TemporaryDirectory(prefix="dd-bundle-") as scratch:
                total = 0
                for info in infos:
                    target = Path(scratch) / info.name
                    if info.isdir():
                        target.mkdir(parents=True, exist_ok=True)
                        continue
                    total += info.size
                    if info.size > MAX_FILE_BYTES or total > MAX_TOTAL_BYTES:
                        raise UsageError(f"{what}: {shown_path(path)} holds more than the size limit")
                    target.parent.mkdir(parents=True, exist_ok=True)
                    handle = archive.extractfile(info)
                    target.write_bytes(handle.read() if handle is not None else b"")
                top = {info.name.split("/", 1)[0] for info in infos}
                yield Path(scratch) / top.pop()
    except (tarfile.TarError, EOFError, OSError, zipfile.BadZipFile, lzma.LZMAError) as error:
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]  # tarfile's can span lines
        shown = shown_path(path)
        raise UsageError(f"{what}: {shown} is not a readable bundle directory or .tar.gz ({reason})") from None


def _strict_bundle_members(archive: tarfile.TarFile, name: str, what: str) -> list[tarfile.TarInfo]:
    infos = []
    seen: set[str] = set()
    for count, info in enumerate(archive):
        if count >= MAX_MEMBERS:
            raise UsageError(f"{what}: {name} has more than {MAX_MEMBERS} members")
        normal = info.name.rstrip("/")
        parts = Path(normal).parts
        if not parts or normal.startswith("/") or ".." in parts:
            raise UsageError(f"{what}: {name} holds a member outside its directory: {info.name!r}")
        if normal in seen:
            raise UsageError(f"{what}: {name} holds {normal} twice; a bundle archive has one of each file")
        seen.add(normal)
        if not (info.isfile() or info.isdir()):
            raise UsageError(f"{what}: {name} holds a link or special file: {normal}")
        infos.append(info)
    tops = {Path(info.name).parts[0] for info in infos}
    if len(tops) != 1:
        raise UsageError(f"{what}: {name} must hold exactly one top-level directory, found {len(tops)}")
    (top,) = tops
    if any(info.name.rstrip("/") == top and not info.isdir() for info in infos):
        raise UsageError(f"{what}: {name} must hold a directory at its top level")
    return infos
