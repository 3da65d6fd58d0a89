"""Error lines name a path whole where that names no host detail (issue #29)."""

from pathlib import Path

import pytest

from dd_accept.base.shown_paths import shown_path


@pytest.fixture
def places(tmp_path, monkeypatch):
    work, home = tmp_path / "work", tmp_path / "home" / "alice"
    work.mkdir(parents=True)
    home.mkdir(parents=True)
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(home))
    return work, home


def test_a_relative_path_is_shown_as_typed(places):
    assert shown_path("dist/wheels/") == "dist/wheels"
    assert shown_path(Path("./dist/../build/x.whl")) == "build/x.whl"


def test_inside_the_working_directory_relative_to_it_inside_home_from_tilde(places):
    work, home = places
    assert shown_path(work / "dist" / "wheels") == "dist/wheels"
    assert shown_path(home / "keys" / "signing.pem") == "~/keys/signing.pem"
    assert shown_path(home) == "~"


def test_any_other_absolute_path_keeps_its_last_two_parts_and_never_the_rest(places, tmp_path):
    shown = shown_path(tmp_path / "elsewhere" / "build" / "x.whl")
    assert shown == "…/build/x.whl" and str(tmp_path) not in shown
    assert shown_path("/proc") == "/proc" and shown_path("/tmp/login-only") == "/tmp/login-only"


def test_working_from_the_root_does_not_make_every_path_relative(places, monkeypatch, tmp_path):
    monkeypatch.chdir("/")
    assert shown_path(tmp_path / "a" / "b" / "c") == "…/b/c"


def test_the_cli_names_the_path_the_user_gave(tmp_path, monkeypatch):
    from tests.helpers import run_cli

    (tmp_path / "dist").mkdir()
    (tmp_path / "dist" / "x.whl").write_text("not a zip")
    monkeypatch.chdir(tmp_path)
    typed = run_cli("run", "overload", "--sut", "dist/x.whl", "--dry-run")
    assert typed.returncode == 2 and typed.stderr.startswith("dd-accept: error: --sut dist/x.whl is not a wheel")
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    elsewhere = run_cli("verify", str(tmp_path / "dist" / "x.whl"))
    assert elsewhere.returncode == 2 and "verify: …/dist/x.whl " in elsewhere.stderr, elsewhere.stderr
    assert str(tmp_path) not in elsewhere.stderr
