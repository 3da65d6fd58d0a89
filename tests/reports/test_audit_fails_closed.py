"""The audit calls nothing clean that it did not read, refuses what it must not open, and
every reader of a bundle reads an archive the same one way (each case an issue reproduction)."""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import json
import lzma
import os
import re
import tarfile
import zipfile
from pathlib import Path

import pytest

from dd_accept.base.errors import UsageError
from dd_accept.reports.audit import audit
from dd_accept.reports.reading import ReadingPolicy, read_verified
from dd_accept.reports.sanitize import Sanitizer
from tests.helpers import run_cli

SECRET = "OPENAI_API_KEY=sk-ddcanary0123456789abcdefXYZ"


def _sanitizer() -> Sanitizer:
    return Sanitizer(user_names=["ddcanaryuser"], host_name=["ddcanary-host"], home="/home/ddcanaryuser")


def _rules(found) -> set[str]:
    return {finding.rule for finding in found}


def _tar(members: dict[str, bytes], mode: str = "w:gz") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


CONTAINERS = [
    ("nul-early.log", b"\0\0binary header\n" + SECRET.encode() + b"\n"),
    ("utf16.log", ("line\n" + SECRET + "\n").encode("utf-16")),
    ("utf16le-nobom.log", ("line\n" + SECRET + "\n").encode("utf-16-le")),
    ("run.log.gz", gzip.compress(SECRET.encode(), mtime=0)),
    ("run.tar.xz", _tar({"d/x.log": SECRET.encode()}, "w:xz")),
    ("run.tar.bz2", _tar({"d/x.log": SECRET.encode()}, "w:bz2")),
    ("zip-in-tar.tar.gz", _tar({"d/inner.zip": _zip({"deep/x.log": SECRET.encode()})})),
    ("log.xz", lzma.compress(SECRET.encode())),
    ("log.bz2", bz2.compress(SECRET.encode())),
    ("libx.so", b"\x7fELF\0\0\0" + b"\x01" * 40 + SECRET.encode() + b"\0\0"),
]


@pytest.mark.parametrize(("name", "content"), CONTAINERS, ids=[name for name, _ in CONTAINERS])
def test_a_secret_is_found_whatever_holds_it(tmp_path, name, content):
    (tmp_path / name).write_bytes(content)
    found = audit([tmp_path / name], _sanitizer())
    assert "openai_key" in _rules(found) or "secret_name" in _rules(found), found


def test_what_cannot_be_read_is_a_finding_never_clean(tmp_path):
    (tmp_path / "damaged.tar.gz").write_bytes(gzip.compress(b"not a tar but claims ustar"[:10]) + b"garbage")
    (tmp_path / "link.log").symlink_to("/etc/hostname")
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "x.log").write_text(SECRET)
    locked.chmod(0)
    try:
        found = audit([tmp_path], _sanitizer())
    finally:
        locked.chmod(0o755)
    unscannable = {f.location.rsplit("/", 1)[-1]: f.rule for f in found if f.rule.startswith("unscannable")}
    assert "link.log" in unscannable and "a symbolic link" in unscannable["link.log"]
    assert "damaged.tar.gz" in unscannable
    if os.geteuid() != 0:  # root reads a mode-000 directory anyway
        assert "locked" in unscannable


def test_a_decompression_bomb_is_a_finding_not_a_memory_error(tmp_path):
    (tmp_path / "bomb.log.gz").write_bytes(gzip.compress(b"\0" * (64 * 1024 * 1024)))
    found = audit([tmp_path / "bomb.log.gz"], _sanitizer())
    assert any("decompression bomb" in f.rule for f in found), found


def test_fifos_and_devices_are_refused_with_one_line_and_exit_2(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    for args in (["audit", str(tmp_path / "fifo")], ["audit", "/dev/zero"], ["verify", str(tmp_path / "fifo")],
                 ["compare", str(tmp_path / "fifo"), str(tmp_path / "fifo")], ["report", str(tmp_path / "fifo")],
                 ["audit", str(tmp_path)], ["sanitize", str(tmp_path), "--out", str(tmp_path / "o")]):  # fmt: skip
        result = run_cli(*args, timeout=30)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.count("\n") == 1 and "not a regular file or directory" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    assert not (tmp_path / "o").exists()


def _bundle_tar(tmp_path: Path, extra: dict[str, bytes] | None = None, top: str = "b", duplicate: bool = False) -> Path:
    path = tmp_path / "b.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        members = {f"{top}/results.json": b"{}", **(extra or {})}
        if duplicate:
            members = {**members}
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        if duplicate:
            info = tarfile.TarInfo(f"{top}/results.json")
            info.size = 2
            archive.addfile(info, io.BytesIO(b"[]"))
    return path


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda t: _bundle_tar(t, duplicate=True), "holds b/results.json twice"),
        (lambda t: _bundle_tar(t, extra={"other/x": b"x"}), "exactly one top-level directory"),
        (lambda t: _bundle_tar(t, extra={"../escape": b"x"}), "outside its directory"),
    ],
)
def test_every_reader_refuses_an_archive_that_could_be_read_two_ways(tmp_path, build, message):
    path = build(tmp_path)
    for command in (["verify", str(path)], ["compare", str(path), str(path)], ["report", str(path), "--format", "md"]):
        result = run_cli(*command)
        assert result.returncode == 2 and message in result.stderr, (command, result.stderr)
        assert result.stderr.count("\n") == 1


def test_a_link_inside_a_bundle_archive_or_directory_is_refused(tmp_path):
    path = tmp_path / "link.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        info = tarfile.TarInfo("b/results.json")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        archive.addfile(info)
    result = run_cli("verify", str(path))
    assert result.returncode == 2 and "a link or special file" in result.stderr
    directory = tmp_path / "dir"
    directory.mkdir()
    (directory / "results.json").symlink_to("/etc/passwd")
    for command in (["verify", str(directory)], ["report", str(directory)]):
        result = run_cli(*command)
        assert result.returncode == 2 and "is a link or special file" in result.stderr, result.stderr


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: (b / "manifest.json").write_text("[]"),
        lambda b: (b / "manifest.json").write_text('{"files": [{"path": 1}]}'),
        lambda b: (b / "provenance.json").write_text('{"predicate": 5}'),
        lambda b: (b / "provenance.json").write_text('{"subject": [{"name": "x"}], "predicate": {}}'),
        lambda b: (b / "results.json").write_text('{"scenarios": [{"checks": [1]}]}'),
        lambda b: (b / "results.json").write_text("[" * 100000),
        lambda b: (b / "provenance.dsse.json").write_text('{"payload": 1, "signatures": "x"}'),
    ],
)
def test_a_malformed_bundle_is_exit_2_or_a_problem_never_a_traceback(tmp_path, damage):
    from tests.reports.test_bundle import _bundle

    bundle = _bundle(tmp_path, Sanitizer(path_roots={str(tmp_path): "<run>"}, user_names=[], host_name="x"))
    damage(bundle)
    for command in (
        ["verify", str(bundle)],
        ["report", str(bundle), "--format", "md"],
        ["compare", str(bundle), str(bundle)],
    ):
        result = run_cli(*command)
        if command[0] == "verify":
            assert result.returncode in (1, 2), (command, result.stderr)
        else:  # they verify first: whatever the damage, the bundle is refused in one line
            assert result.returncode == 2 and result.stderr.count("\n") == 1, (command, result.stderr)
        assert "Traceback" not in result.stderr and "Traceback" not in result.stdout, result.stderr


def test_markup_and_control_characters_from_results_do_not_reach_the_reports_raw(tmp_path):
    from xml.etree import ElementTree

    from dd_accept.reports import render

    check = {"id": "overload.recovery", "verdict": "fail", "expected": "<script>alert(1)</script> | *x*",
             "observed": "\x1b[31mred\x00\x07 </failure>", "detail": "\x0b", "metrics": {}}  # fmt: skip
    results = {"verdict": "fail", "sut": {"spec": "a`b"}, "scenarios": [{"name": "overload", "checks": [check]}]}
    markdown = render.markdown(results)
    assert "<script>" not in markdown and "\x1b" not in markdown and "\x00" not in markdown
    assert "\\<script\\>" in markdown and "\\|" in markdown
    ElementTree.fromstring(render.junit(results).encode())  # well-formed


def test_results_json_with_any_text_still_gives_well_formed_junit():
    from xml.etree import ElementTree

    from hypothesis import given, settings
    from hypothesis import strategies as st

    from dd_accept.reports import render

    @settings(max_examples=300, deadline=None)
    @given(text=st.text(), name=st.text(min_size=1))
    def well_formed(text, name):
        check = {"id": "a.b", "verdict": "fail", "expected": text, "observed": text, "detail": text, "metrics": {}}
        results = {"verdict": "fail", "scenarios": [{"name": name, "error": text or None, "checks": [check]}]}
        ElementTree.fromstring(render.junit(results).encode())
        rows = render.markdown(results).split("|---|---|---|---|\n")[1].splitlines()
        assert all(len(re.findall(r"(?<!\\)\|", row)) == 5 for row in rows), rows

    well_formed()


def test_audit_of_a_bundle_uses_the_names_the_bundle_recorded(tmp_path):
    """Not the auditor's machine: a bundle whose run user was `ubuntu` flags `ubuntu`; one whose
    run user was someone else keeps `ubuntu:24.04`."""
    for user, flagged in (("ubuntu", True), ("alicejones", False)):
        bundle = tmp_path / user
        bundle.mkdir()
        sanitizer = Sanitizer(user_names=[user], host_name=["h-xyz"], home=f"/home/{user}")
        (bundle / "redactions.json").write_text(json.dumps(sanitizer.report()))
        (bundle / "build.log").write_text("FROM ubuntu:24.04\n")
        found = audit([bundle])
        assert ("host_identity" in _rules(found)) is flagged, found
        assert "ubuntu" not in (bundle / "redactions.json").read_text()


def test_sanitize_command_writes_valid_sanitized_copies(tmp_path):
    source = tmp_path / "logs"
    source.mkdir()
    (source / "cmd.jsonl").write_text(json.dumps({"argv": ["sh", "-c", 'export DB_PASSWORD="hunter2-prod"']}) + "\n")
    (source / "run.log").write_text("curl -u admin:pa55 https://h\n")
    (source / "blob.bin").write_bytes(b"\0\x01\x02" * 100)
    out = tmp_path / "out"
    result = run_cli("sanitize", str(source), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "secret_name: 1" in result.stdout and "curl_user: 1" in result.stdout
    assert "not copied: logs/blob.bin (binary" in result.stderr
    assert json.loads((out / "logs" / "cmd.jsonl").read_text().splitlines()[0])
    assert (
        "hunter2" not in (out / "logs" / "cmd.jsonl").read_text()
        and "pa55" not in (out / "logs" / "run.log").read_text()
    )
    again = run_cli("sanitize", str(source), "--out", str(out))
    assert again.returncode == 2 and "already exists" in again.stderr
    with pytest.raises(UsageError):
        from dd_accept.reports.share import sanitize_paths

        sanitize_paths([tmp_path / "missing"], tmp_path / "o2")


def test_random_damage_to_a_bundle_never_escapes_as_a_traceback(tmp_path):
    """Fuzzed bundles (any JSON value in place of a manifest, statement, results or envelope
    field): `verify`, `report` and `compare` answer with problems or a usage error, never an
    exception of another kind."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from dd_accept.reports import html
    from dd_accept.reports.verify import verify
    from tests.reports.test_bundle import _bundle

    pristine = _bundle(tmp_path, Sanitizer(path_roots={str(tmp_path): "<run>"}, user_names=[], host_name="x"))
    originals = {name: (pristine / name).read_text() for name in ("manifest.json", "provenance.json", "results.json")}
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
        max_leaves=8,
    )

    def replace_somewhere(document, path, value):
        node = document
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = value

    def paths(document, prefix=()):
        yield prefix
        if isinstance(document, dict):
            for key, item in document.items():
                yield from paths(item, (*prefix, key))
        elif isinstance(document, list):
            for index, item in enumerate(document):
                yield from paths(item, (*prefix, index))

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(name=st.sampled_from(sorted(originals)), choice=st.integers(min_value=0), value=json_values)
    def damaged(name, choice, value):
        for original, text in originals.items():
            (pristine / original).write_text(text)
        document = json.loads(originals[name])
        places = [p for p in paths(document) if p]
        place = places[choice % len(places)]
        replace_somewhere(document, place, value)
        (pristine / name).write_text(json.dumps(document))
        with contextlib.suppress(UsageError):
            verify(pristine, [])
        anyway = ReadingPolicy(allow_unverified=True)
        for reader in (lambda: read_verified(pristine, "compare", anyway), lambda: html.render_bundle(pristine)):
            with contextlib.suppress(UsageError):
                reader()

    damaged()


def test_a_directory_that_cannot_be_listed_is_unscannable_even_for_root(tmp_path, monkeypatch):
    """CI runs as root, which reads a mode-000 directory anyway: the failure is simulated."""
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "x.log").write_text(SECRET)
    real_iterdir = Path.iterdir

    def refusing(self):
        if self == locked:
            raise PermissionError(13, "Permission denied")
        return real_iterdir(self)

    monkeypatch.setattr(Path, "iterdir", refusing)
    found = audit([tmp_path], _sanitizer())
    assert [f.rule for f in found if f.location.endswith("/locked")] == [
        "unscannable (directory cannot be read (Permission denied))"
    ]


def test_a_small_archive_that_expands_enormously_is_refused_within_the_limits(tmp_path):
    """The issue's 550 KB archive: expanding it fully took 573 MB; the ratio limit stops it."""
    member = b"\0" * (64 * 1024 * 1024)
    (tmp_path / "bomb.tar.gz").write_bytes(gzip.compress(_tar({"big.log": member}, "w"), mtime=0))
    assert (tmp_path / "bomb.tar.gz").stat().st_size < 200_000
    found = audit([tmp_path / "bomb.tar.gz"], _sanitizer())
    assert [f.rule for f in found] == [
        "unscannable (decompresses beyond the size or ratio limit (a decompression bomb?))"
    ]
