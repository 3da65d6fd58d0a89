"""`--sut SPEC`: which system under test, validated before anything is built or started.

A SPEC is a requirement (`data-designer-slurm==1.0.0rc1`, the default), a local `.whl`,
a directory of wheels (several of the SUT's projects, each in one version: the runtime
beside a candidate engine build), or a source directory that builds a wheel. Errors name
the file by its base name only: host paths never appear in output that may end up in evidence.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from dd_accept.base.errors import UsageError
from dd_accept.base.options import option
from dd_accept.base.shown_paths import shown_path

DEFAULT_SUT = "data-designer-slurm==1.0.0rc1"
SutKind = Literal["requirement", "wheel", "wheel_dir", "source_dir"]


@dataclass(frozen=True, slots=True)
class SutChoice:
    """Which SUT a run judges and which profile drives it: `run`, `sut prepare` and the pytest
    plugin derive `--sut`/`--profile` (`--dd-sut`/`--dd-profile`) from here. A gate file
    names its SUTs in its own list (one, or a baseline and a candidate), so neither is a gate key."""

    sut: str = option(
        DEFAULT_SUT,
        "a requirement, a .whl, a directory of wheels, or a source directory",
        metavar="SUT",
        in_gate=False,
    )
    profile: str | None = option(
        None,
        "SUT profile file (default: the built-in profile matching the SUT)",
        metavar="PROFILE.toml",
        in_gate=False,
    )


def validate_wheel(path: Path) -> str:
    """Return the distribution name of a wheel file, or raise a one-line usage error."""
    try:
        name, *_ = parse_wheel_filename(path.name)
    except InvalidWheelFilename:
        raise UsageError(f"--sut {shown_path(path)} is not a wheel: the file name is not a wheel name") from None
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError):
        raise UsageError(f"--sut {shown_path(path)} is not a wheel: it is not a zip archive") from None
    if not any(entry.endswith(".dist-info/WHEEL") for entry in names):
        raise UsageError(f"--sut {shown_path(path)} is not a wheel: it has no .dist-info/WHEEL")
    return str(name)


@dataclass(frozen=True, slots=True)
class WheelName:
    """A wheel as its file name states it: what a profile is chosen by before anything is fetched."""

    file: str
    name: str  # canonical
    version: str

    @classmethod
    def of(cls, path: Path) -> WheelName:
        name, version, *_ = parse_wheel_filename(path.name)
        return cls(path.name, str(canonicalize_name(name)), str(version))


def _one_version_each(directory: Path, wheels: list[Path]) -> None:
    """Refuse a directory holding one project in two versions: which one the SUT is would be a guess.
    Builds of one version for several platforms are one version (the node's build is used)."""
    versions: dict[str, dict[Version, str]] = {}
    for wheel in wheels:
        name, version, *_ = parse_wheel_filename(wheel.name)
        versions.setdefault(str(canonicalize_name(name)), {}).setdefault(version, wheel.name)
    for name, found in sorted(versions.items()):
        if len(found) > 1:
            files = ", ".join(found[version] for version in sorted(found))
            raise UsageError(f"--sut {shown_path(directory)} holds {len(found)} versions of {name} ({files}); keep one")


@dataclass(frozen=True, slots=True)
class SutSpec:
    kind: SutKind
    value: str  # the requirement text, or an absolute path
    names: tuple[str, ...]  # canonical distribution names that make up the SUT

    @property
    def display(self) -> str:
        """How the SUT is named in output and evidence (no host path)."""
        return self.value if self.kind == "requirement" else f"{self.kind}:{Path(self.value).name}"

    def local_wheels(self) -> tuple[WheelName, ...]:
        """The wheels a local SUT is made of, by file name (none for a requirement or a source)."""
        if self.kind == "wheel":
            return (WheelName.of(Path(self.value)),)
        if self.kind == "wheel_dir":
            return tuple(WheelName.of(wheel) for wheel in sorted(Path(self.value).glob("*.whl")))
        return ()

    @classmethod
    def parse(cls, text: str) -> SutSpec:
        text = text.strip()
        if not text:
            raise UsageError("--sut is empty; give a requirement, a .whl, a wheel directory or a source directory")
        path = Path(text).expanduser()
        looks_like_path = path.exists() or "/" in text or text.endswith(".whl")
        if looks_like_path:
            return cls._from_path(path)
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            raise UsageError(f"--sut {text!r} is neither an existing path nor a valid requirement") from None
        return cls("requirement", str(requirement), (canonicalize_name(requirement.name),))

    @classmethod
    def _from_path(cls, path: Path) -> SutSpec:
        if not path.exists():
            raise UsageError(f"--sut {shown_path(path)}: no such file or directory")
        path = path.resolve()
        if path.is_file():
            return cls("wheel", str(path), (canonicalize_name(validate_wheel(path)),))
        wheels = sorted(path.glob("*.whl"))
        if wheels:
            names = tuple(sorted({canonicalize_name(validate_wheel(wheel)) for wheel in wheels}))
            _one_version_each(path, wheels)
            return cls("wheel_dir", str(path), names)
        if (path / "pyproject.toml").is_file() or (path / "setup.py").is_file():
            return cls("source_dir", str(path), ())
        raise UsageError(f"--sut {shown_path(path)} is a directory with neither wheels nor a pyproject.toml")
