"""Files the user names (keys, gate files, profiles): a FIFO, a directory, a huge or
non-UTF-8 file is one usage error naming the option, never a hang or a traceback."""

import os

import pytest

from dd_accept.base.errors import UsageError
from dd_accept.base.user_files import read_user_text
from tests.helpers import run_cli


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda p: os.mkfifo(p), "not a regular file"),
        (lambda p: p.mkdir(), "not a regular file"),
        (lambda p: p.write_bytes(b"\xff\xfe\x00"), "not UTF-8 text"),
        (lambda p: p.write_bytes(b"x" * (2 * 1024 * 1024)), "larger than 1024 KiB"),
        (lambda p: None, "no such file"),
    ],
)
def test_a_file_that_is_not_a_small_text_file_is_one_usage_error(tmp_path, make, needle):
    path = tmp_path / "given"
    make(path)
    with pytest.raises(UsageError, match=needle):
        read_user_text(path, "--config")


def test_a_fifo_as_a_key_or_a_gate_file_is_refused_at_once(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "bundle").mkdir()
    for argv in (["verify", str(tmp_path / "bundle"), "--key", str(fifo)], ["gate", "--config", str(fifo)]):
        result = run_cli(*argv, timeout=20)
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert "fifo: not a regular file" in result.stderr or "holds no results.json" in result.stderr
