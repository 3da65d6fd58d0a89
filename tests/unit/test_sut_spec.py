import zipfile

import pytest

from dd_accept.base.errors import UsageError
from dd_accept.sut.spec import DEFAULT_SUT, SutSpec


def _wheel(path, with_metadata=True):
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("pkg/__init__.py", "")
        if with_metadata:
            archive.writestr("pkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    return path


def test_default_is_the_rc1_requirement():
    spec = SutSpec.parse(DEFAULT_SUT)
    assert (spec.kind, spec.names, spec.display) == ("requirement", ("data-designer-slurm",), DEFAULT_SUT)


def test_a_wheel_file(tmp_path):
    spec = SutSpec.parse(str(_wheel(tmp_path / "pkg-1.0-py3-none-any.whl")))
    assert (spec.kind, spec.names, spec.display) == ("wheel", ("pkg",), "wheel:pkg-1.0-py3-none-any.whl")
    assert str(tmp_path) not in spec.display, "no host path in what is shown"


def test_a_directory_of_wheels(tmp_path):
    _wheel(tmp_path / "pkg-1.0-py3-none-any.whl")
    _wheel(tmp_path / "other_thing-2.0-py3-none-any.whl")
    assert SutSpec.parse(str(tmp_path)).names == ("other-thing", "pkg")


def test_a_source_directory(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname='x'\n")
    assert SutSpec.parse(str(tmp_path)).kind == "source_dir"


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda d: (d / "notes.txt").write_text("hi") and d / "notes.txt", "is not a wheel"),
        (
            lambda d: (d / "pkg-1.0-py3-none-any.whl").write_text("not a zip") and d / "pkg-1.0-py3-none-any.whl",
            "not a zip archive",
        ),
        (lambda d: _wheel(d / "pkg-1.0-py3-none-any.whl", with_metadata=False), "no .dist-info/WHEEL"),
        (lambda d: d / "missing.whl", "no such file"),
        (lambda d: d, "neither wheels nor a pyproject.toml"),
    ],
)
def test_bad_local_specs(tmp_path, make, needle):
    with pytest.raises(UsageError, match=needle):
        SutSpec.parse(str(make(tmp_path)))


@pytest.mark.parametrize("text", ["", "data designer slurm", "pkg==="])
def test_bad_requirements(text):
    with pytest.raises(UsageError):
        SutSpec.parse(text)
