"""`--sut` bad input through the real CLI: one clear line, exit 2, nothing half-written."""

import zipfile

import pytest

from dd_accept.base.state import file_lock, state_root
from tests.helpers import run_cli


def _wheel(path, name="ddcanary", requires=(), extra_files=(), version="1.0"):
    dist = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name}/__init__.py", "")
        for file_name in extra_files:
            archive.writestr(file_name, "x")
        archive.writestr(f"{dist}/METADATA", metadata)
        archive.writestr(
            f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr(f"{dist}/RECORD", "")
    return path


def _one_line_exit_2(result, needle):
    """Exactly one error line; anything else on stderr is a `• ` progress line."""
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("dd-accept: error: ")]
    assert len(errors) == 1, result.stderr
    assert all(line in errors or line.startswith("• ") for line in lines), result.stderr
    assert needle in errors[0], errors[0]
    assert "Traceback" not in result.stderr


@pytest.fixture
def profile_file(tmp_path):
    from importlib import resources

    path = tmp_path / "profile.toml"
    source = resources.files("dd_accept.sut").joinpath("profiles", "data-designer-slurm-1.0.toml")
    path.write_text(source.read_text())
    return str(path)


def _no_scratch_left():
    """Scratch directories left in the wheelhouse cache, looked for under the cache's lock: a
    build in another test worker holds it while its own scratch directory exists (CI once saw
    one such, 'tmp-dtw9k8sp', when this looked without the lock)."""
    root = state_root() / "wheelhouses"
    if not root.exists():
        return []
    with file_lock(root / ".lock"):
        return [p.name for p in root.glob("tmp-*")]


def test_a_file_that_is_not_a_wheel(tmp_path):
    notes = tmp_path / "notes.whl"
    notes.write_text("not a zip")
    _one_line_exit_2(run_cli("sut", "prepare", "--sut", str(notes)), "is not a wheel")


def test_an_unknown_requirement():
    _one_line_exit_2(
        run_cli("sut", "prepare", "--sut", "data-designer-slurm==99.0.0"), "No matching distribution found"
    )
    assert _no_scratch_left() == []


def test_a_wheel_whose_dependency_does_not_exist(tmp_path, profile_file):
    wheel = _wheel(tmp_path / "ddcanary-1.0-py3-none-any.whl", requires=["dd-accept-no-such-package-zzz"])
    result = run_cli("sut", "prepare", "--sut", str(wheel), "--profile", profile_file)
    _one_line_exit_2(result, "cannot fetch the wheels")
    assert _no_scratch_left() == []


@pytest.mark.cluster
def test_a_wheel_that_does_not_install_in_the_node_image(tmp_path, profile_file):
    wheel = _wheel(tmp_path / "ddcanary-1.0-py3-none-any.whl", extra_files=["../escape.txt"])
    result = run_cli("sut", "prepare", "--sut", str(wheel), "--profile", profile_file)
    _one_line_exit_2(result, "the SUT does not install offline in the node image")


def test_an_unreadable_profile(tmp_path):
    _one_line_exit_2(
        run_cli("sut", "prepare", "--profile", str(tmp_path / "nope.toml")),
        f"--profile …/{tmp_path.name}/nope.toml: no such file",  # the path whole but for the host's part
    )


def test_a_source_directory_is_built_into_the_wheelhouse_with_its_digest(tmp_path, monkeypatch):
    from dd_accept.base.hashing import sha256_file
    from dd_accept.sut.spec import SutSpec
    from dd_accept.sut.wheelhouse import build_wheelhouse

    monkeypatch.setenv("DD_ACCEPT_STATE_DIR", str(tmp_path / "state"))
    source = tmp_path / "ddcanary-src"
    (source / "ddcanary_src").mkdir(parents=True)
    (source / "ddcanary_src" / "__init__.py").write_text("VALUE = 1\n")
    (source / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "ddcanary-src"\nversion = "0.3"\n'
    )
    spec = SutSpec.parse(str(source))
    assert spec.kind == "source_dir"
    wheelhouse = build_wheelhouse(spec)
    (wheel,) = wheelhouse.sut_wheels
    assert (wheel.name, wheel.version) == ("ddcanary-src", "0.3")
    assert wheel.sha256 == sha256_file(wheelhouse.path / wheel.file)
    assert "ddcanary-src==0.3" in wheelhouse.install_requirements()
    assert str(tmp_path) not in (wheelhouse.path / "wheelhouse.json").read_text(), "no host path recorded"
    assert build_wheelhouse(spec).path == wheelhouse.path, "an unchanged source tree is not rebuilt"
    (source / "ddcanary_src" / "__init__.py").write_text("VALUE = 2\n")
    assert build_wheelhouse(spec).path != wheelhouse.path, "an edited source tree is"


def test_a_directory_of_several_wheels_is_fetched_whole_with_each_digest(tmp_path, monkeypatch):
    """Every wheel of a --sut directory is the SUT: each is pinned for the node's install over
    the dependency set they resolve to together, and each digest is recorded."""
    from dd_accept.base.hashing import sha256_file
    from dd_accept.sut.spec import SutSpec
    from dd_accept.sut.wheelhouse import build_wheelhouse

    monkeypatch.setenv("DD_ACCEPT_STATE_DIR", str(tmp_path / "state"))
    directory = tmp_path / "wheels"
    directory.mkdir()
    _wheel(directory / "ddcanary-1.0-py3-none-any.whl", requires=["ddcanary-engine==1.0"])
    _wheel(directory / "ddcanary_engine-1.0+rebuilt-py3-none-any.whl", name="ddcanary_engine", version="1.0+rebuilt")
    wheelhouse = build_wheelhouse(SutSpec.parse(str(directory)))
    assert {w.file: w.sha256 for w in wheelhouse.sut_wheels} == {w.name: sha256_file(w) for w in directory.iterdir()}
    assert {"ddcanary==1.0", "ddcanary-engine==1.0+rebuilt"} <= set(wheelhouse.install_requirements())
