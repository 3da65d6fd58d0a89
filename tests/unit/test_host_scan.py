"""The host scan that proves a secret never left the cluster reads every file, and survives other workers' cleanup."""

from pathlib import Path

from tests.helpers import file_contents_under


def test_every_file_is_read_with_its_bytes(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "one").write_bytes(b"1")
    (tmp_path / "two").write_bytes(b"22")
    assert {p.name: c for p, c in file_contents_under(tmp_path)} == {"one": b"1", "two": b"22"}


def test_a_file_removed_while_the_scan_runs_is_passed_over(tmp_path, monkeypatch):
    (tmp_path / "kept").write_bytes(b"k")
    (tmp_path / "gone").write_bytes(b"g")
    read_bytes = Path.read_bytes

    def removed_by_another_worker(path: Path) -> bytes:
        if path.name == "gone":
            path.unlink()
        return read_bytes(path)

    monkeypatch.setattr(Path, "read_bytes", removed_by_another_worker)
    assert [(p.name, c) for p, c in file_contents_under(tmp_path)] == [("kept", b"k")]


def test_a_missing_root_has_no_files(tmp_path):
    assert list(file_contents_under(tmp_path / "absent")) == []
