"""Reading a small file the user names (a key, a gate file, a profile) the one safe way.

A path can name a FIFO (a read that never returns), a device, a directory or a huge file;
a text file can be in another encoding. Each is one usage error naming the option and the
file, never a hang or a traceback. Symbolic links are followed: keys are often mounted as
links (a secrets volume).
"""

from __future__ import annotations

import stat
from pathlib import Path

from dd_accept.base.errors import UsageError
from dd_accept.base.shown_paths import shown_path

MAX_USER_FILE_BYTES = 1024 * 1024  # keys, gate files and profiles are a few KiB


def read_user_file(path: Path, what: str, limit: int = MAX_USER_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; `what` names the option."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise UsageError(f"{what} {shown_path(path)}: no such file") from None
    except OSError as error:
        raise UsageError(f"{what} {shown_path(path)}: cannot be read ({error.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(f"{what} {shown_path(path)}: not a regular file (a directory, FIFO, device or socket)")
    if info.st_size > limit:
        raise UsageError(f"{what} {shown_path(path)}: larger than {limit // 1024} KiB, which no such file is")
    try:
        with open(path, "rb") as handle:
            return handle.read(limit + 1)
    except OSError as error:
        raise UsageError(f"{what} {shown_path(path)}: cannot be read ({error.strerror})") from None


def read_user_text(path: Path, what: str, limit: int = MAX_USER_FILE_BYTES) -> str:
    """The text of a UTF-8 file (see read_user_file)."""
    try:
        return read_user_file(path, what, limit).decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{what} {shown_path(path)}: not UTF-8 text") from None
