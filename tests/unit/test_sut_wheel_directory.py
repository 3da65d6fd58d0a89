"""`--sut DIR` holding several of the SUT's wheels (the runtime beside a candidate engine
build): the profile follows the wheel a built-in profile names, never the first file; a
directory with no such wheel, or with one project in two versions, is refused in one line
before anything is fetched or started (issue #32)."""

import platform
import zipfile
from pathlib import Path

import pytest

from dd_accept.base.errors import UsageError
from dd_accept.base.slurm_releases import RELEASES
from dd_accept.sut.profile import choose_profile, load_profile
from dd_accept.sut.spec import SutSpec, WheelName
from dd_accept.sut.wheelhouse import builds_for_node
from tests.helpers import run_cli

RUNTIME = "data_designer_slurm-1.0.0rc1-py3-none-any.whl"
ENGINE = "data_designer_engine-1.0.0rc1-py3-none-any.whl"
REBUILT_ENGINE = "data_designer_engine-1.0.0rc1+rebuilt-py3-none-any.whl"
BUILT_IN = "built in: data-designer-slurm >=1.0.0rc1,<1.1"
NOTHING = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}  # any engine use would fail the run


def _wheel(directory: Path, file: str) -> Path:
    """A file that passes as a wheel by its name and its .dist-info/WHEEL (nothing installs it)."""
    name, version, _ = file.split("-", 2)
    directory.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(directory / file, "w") as archive:
        archive.writestr(f"{name}-{version}.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    return directory / file


def _directory(tmp_path: Path, *files: str) -> Path:
    for file in files:
        _wheel(tmp_path / "wheels", file)
    return tmp_path / "wheels"


def _names(*files: str) -> list[WheelName]:
    return [WheelName.of(Path(file)) for file in files]


def test_the_runtime_wheel_decides_the_profile_whichever_file_comes_first():
    # the engine's file sorts first: the profile used to be asked of it, and none matched
    for files in [(ENGINE, RUNTIME), (RUNTIME, ENGINE), (REBUILT_ENGINE, RUNTIME)]:
        choice = choose_profile(_names(*files), sut="wheel_dir:wheels")
        assert choice.profile.name == "data-designer-slurm-1.0" and choice.wheel.file == RUNTIME
        assert choice.describe() == f"profile data-designer-slurm-1.0, chosen by {RUNTIME}"


def test_a_rebuilt_runtime_still_matches_its_profile():
    rebuilt = "data_designer_slurm-1.0.0rc1+ddfault.five.attempts-py3-none-any.whl"
    assert choose_profile(_names(ENGINE, rebuilt)).wheel.file == rebuilt


def test_a_directory_without_a_wheel_a_profile_names_is_refused_naming_every_wheel():
    with pytest.raises(UsageError) as refused:
        choose_profile(_names(ENGINE, "ddcanary-1.0-py3-none-any.whl"), sut="wheel_dir:wheels")
    assert str(refused.value) == (
        "no built-in profile for any wheel of --sut wheel_dir:wheels: data-designer-engine 1.0.0rc1, "
        f"ddcanary 1.0 ({BUILT_IN}); pass --profile FILE"
    )
    with pytest.raises(UsageError) as alone:  # one wheel: the message it always had
        choose_profile(_names(ENGINE), sut="wheel_dir:wheels")
    assert (
        str(alone.value) == f"no built-in profile for data-designer-engine 1.0.0rc1 ({BUILT_IN}); pass --profile FILE"
    )


def test_a_given_profile_follows_the_wheel_of_its_distribution(tmp_path):
    from importlib import resources

    path = tmp_path / "custom.toml"
    text = resources.files("dd_accept.sut").joinpath("profiles", "data-designer-slurm-1.0.toml").read_text()
    path.write_text(text.replace('name = "data-designer-slurm-1.0"', 'name = "custom"'))
    given = load_profile(path)
    choice = choose_profile(_names(ENGINE, RUNTIME), given)
    assert (choice.profile.name, choice.wheel.file, choice.builtin) == ("custom", RUNTIME, False)
    assert choice.describe() == f"profile custom from --profile, for {RUNTIME}"
    nothing = choose_profile(_names(ENGINE), given)  # a --profile is never refused
    assert nothing.wheel is None and nothing.describe() == "profile custom from --profile"


def test_a_directory_lists_its_wheels_by_file_name(tmp_path):
    spec = SutSpec.parse(str(_directory(tmp_path, RUNTIME, REBUILT_ENGINE)))
    assert spec.names == ("data-designer-engine", "data-designer-slurm")
    assert [(w.file, w.name, w.version) for w in spec.local_wheels()] == [
        (REBUILT_ENGINE, "data-designer-engine", "1.0.0rc1+rebuilt"),
        (RUNTIME, "data-designer-slurm", "1.0.0rc1"),
    ]
    assert SutSpec.parse("data-designer-slurm==1.0.0rc1").local_wheels() == ()


def test_one_project_in_two_versions_is_refused_in_one_line(tmp_path):
    directory = _directory(tmp_path, RUNTIME, ENGINE, REBUILT_ENGINE)
    with pytest.raises(UsageError) as refused:
        SutSpec.parse(str(directory))
    shown = f"…/{tmp_path.name}/wheels"  # the path the user gave, but for the host's part
    assert str(refused.value) == (
        f"--sut {shown} holds 2 versions of data-designer-engine ({ENGINE}, {REBUILT_ENGINE}); keep one"
    )


def test_one_version_in_several_builds_is_one_version_and_the_node_gets_its_own_build(tmp_path):
    machine = platform.machine()
    node = RELEASES["22.05"]  # CPython 3.11, glibc 2.36
    builds = [
        f"ddcanary-1.0-cp313-cp313-manylinux_2_17_{machine}.whl",
        f"ddcanary-1.0-cp311-cp311-manylinux_2_17_{machine}.whl",
        "ddcanary-1.0-py3-none-any.whl",
    ]
    directory = _directory(tmp_path, RUNTIME, *builds)
    assert SutSpec.parse(str(directory)).names == ("data-designer-slurm", "ddcanary")
    chosen = builds_for_node(sorted(directory.glob("*.whl")), node, "wheel_dir:wheels")
    assert [w.name for w in chosen] == [RUNTIME, builds[1]]
    assert [w.name for w in builds_for_node([directory / builds[0], directory / builds[2]], node, "d")] == [builds[2]]
    foreign = [
        _wheel(tmp_path / "foreign", f"ddcanary-1.0-cp313-cp313-{tag}.whl")
        for tag in ("win_amd64", "macosx_11_0_arm64")
    ]
    with pytest.raises(UsageError, match=r"^--sut d: no build of ddcanary installs on the node's Python 3\.11 \("):
        builds_for_node(foreign, node, "d")


def test_run_and_its_dry_run_choose_by_the_runtime_wheel_and_refuse_bad_directories_before_anything(tmp_path):
    good = _directory(tmp_path / "good", ENGINE, RUNTIME)
    plan = run_cli("run", "overload", "--sut", str(good), "--replicas", "8", "--dry-run", env=NOTHING)
    assert plan.returncode == 0, plan.stderr
    assert plan.stdout.splitlines()[0] == (
        f"# dd-accept dry run: overload against wheel_dir:wheels (profile data-designer-slurm-1.0, chosen by {RUNTIME})"
    )
    unmatched = _directory(tmp_path / "unmatched", ENGINE, "ddcanary-1.0-py3-none-any.whl")
    two = _directory(tmp_path / "two", RUNTIME, ENGINE, REBUILT_ENGINE)
    for directory, needle in [
        (unmatched, "no built-in profile for any wheel of --sut wheel_dir:wheels: data-designer-engine 1.0.0rc1, "),
        (two, "--sut …/two/wheels holds 2 versions of data-designer-engine ("),
    ]:
        out = tmp_path / "evidence"
        for command in (
            ["run", "overload", "--replicas", "8", "--out", str(out)],
            ["run", "overload", "--dry-run"],
            ["sut", "prepare"],
        ):
            result = run_cli(*command, "--sut", str(directory), env=NOTHING)
            assert result.returncode == 2, (command, result.stderr)
            assert result.stderr.startswith(f"dd-accept: error: {needle}") and result.stderr.count("\n") == 1
            assert "Traceback" not in result.stderr and str(tmp_path) not in result.stderr
        assert not out.exists() and not list(tmp_path.glob(".evidence*")), "nothing half-written"


def test_a_rebuilt_wheel_is_the_same_bytes_each_time_under_its_new_version(tmp_path):
    """A rebuild (what a candidate engine build is, and every fault's variant) is reproducible:
    the same directory is the same wheelhouse and node image on the next run."""
    from tests.variants import rebuild_wheel

    base = tmp_path / ENGINE
    info = "data_designer_engine-1.0.0rc1.dist-info"
    with zipfile.ZipFile(base, "w") as archive:
        script = zipfile.ZipInfo("data_designer/engine/run.sh")
        script.external_attr = 0o755 << 16
        archive.writestr(script, "echo hi\n")
        archive.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: data-designer-engine\nVersion: 1.0.0rc1\n")
        archive.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\n")
        archive.writestr(f"{info}/RECORD", "")
    first = rebuild_wheel(base, tmp_path / "one", "rebuilt")
    second = rebuild_wheel(base, tmp_path / "two", "rebuilt")
    assert first.name == REBUILT_ENGINE and first.read_bytes() == second.read_bytes()
    with zipfile.ZipFile(first) as archive:
        new_info = "data_designer_engine-1.0.0rc1+rebuilt.dist-info"
        assert "\nVersion: 1.0.0rc1+rebuilt\n" in archive.read(f"{new_info}/METADATA").decode()
        assert f"{new_info}/WHEEL," in archive.read(f"{new_info}/RECORD").decode()
        assert archive.getinfo("data_designer/engine/run.sh").external_attr >> 16 == 0o755
    assert WheelName.of(first).version == "1.0.0rc1+rebuilt"
