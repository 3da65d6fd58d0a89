import pytest

from dd_accept.base.errors import EnvironmentProblem
from dd_accept.slurm_docker.mirror import MIRROR_ENV, find_mirror


@pytest.fixture(autouse=True)
def _no_override(monkeypatch):
    monkeypatch.delenv(MIRROR_ENV, raising=False)


def test_deb822_primary_archive_is_chosen_over_security(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\nURIs: http://archive.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n"
    )
    assert find_mirror(tmp_path) == "http://archive.example/debian"


def test_disabled_and_source_stanzas_are_ignored(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "a.sources").write_text(
        "Types: deb-src\nURIs: http://src.example/debian\nSuites: bookworm\n\n"
        "Enabled: no\nTypes: deb\nURIs: http://off.example/debian\nSuites: bookworm\n\n"
        "Types: deb\nURIs: http://on.example/debian\nSuites: bookworm\n"
    )
    assert find_mirror(tmp_path) == "http://on.example/debian"


def test_one_line_format_with_options(tmp_path):
    (tmp_path / "sources.list").write_text(
        "# comment\ndeb [signed-by=/k.gpg arch=amd64] http://one.example/debian bookworm main\n"
    )
    assert find_mirror(tmp_path) == "http://one.example/debian"


def test_override_wins(tmp_path, monkeypatch):
    monkeypatch.setenv(MIRROR_ENV, "file:///srv/mirror")
    assert find_mirror(tmp_path) == "file:///srv/mirror"


def test_no_archive_is_an_environment_problem(tmp_path):
    with pytest.raises(EnvironmentProblem, match=MIRROR_ENV):
        find_mirror(tmp_path)
