"""The wheelhouse: every wheel the SUT needs, fetched on the host, digested, cached by content.

Nodes have no network, so the node image installs offline from this directory. Wheels are
fetched for the node's interpreter (the CPython and glibc of the Debian suite that carries
the cluster's Slurm release, on this machine's architecture), not for whatever Python runs
the harness; each release's Python gets its own wheelhouse and digest. A finished
wheelhouse holds `wheelhouse.json`, written last: a directory without it is incomplete
and is rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from packaging import tags
from packaging.utils import canonicalize_name, parse_wheel_filename

from dd_accept.base.errors import UsageError
from dd_accept.base.hashing import sha256_file
from dd_accept.base.progress import BuildListener, QuietListener
from dd_accept.base.slurm_releases import DEFAULT_RELEASE, RELEASES, SlurmRelease
from dd_accept.base.state import beyond_keeping, file_lock, state_root
from dd_accept.sut.spec import SutSpec, validate_wheel

# What dd-accept's own in-cluster parts need beside the SUT: the replica's server stack, and
# uvloop, on which the replicas and the raw load client run (node.event_loop): it takes a
# fifth to a third off their CPU per chunk (benchmarks/harness_headroom.py). The SUT's own
# programs choose their loop themselves; nothing of the SUT imports it.
HARNESS_REQUIREMENTS = ("uvicorn>=0.30", "prometheus-client>=0.20", "httptools>=0.6", "uvloop>=0.19")
DEFAULT_NODE = RELEASES[DEFAULT_RELEASE]
MANIFEST = "wheelhouse.json"
IGNORED_SOURCE_DIRECTORIES = frozenset(
    {".git", ".venv", "__pycache__", "build", "dist", ".ruff_cache", ".pytest_cache", ".mypy_cache", ".tox"}
)


def _node_platforms(node: SlurmRelease) -> list[str]:
    machine = platform.machine()
    platforms = [f"manylinux_2_{minor}_{machine}" for minor in range(node.glibc_minor, 16, -1)]
    return [*platforms, f"manylinux2014_{machine}", f"manylinux2010_{machine}", f"manylinux1_{machine}"]


def node_platform_args(node: SlurmRelease = DEFAULT_NODE) -> list[str]:
    args = ["--only-binary=:all:", "--python-version", node.python, "--implementation", "cp"]
    args += ["--abi", node.python_tag]
    for tag in _node_platforms(node):
        args += ["--platform", tag]
    return args


def _node_tag_ranks(node: SlurmRelease) -> dict[tags.Tag, int]:
    """The wheel tags the node's interpreter installs, most preferred first (as pip ranks them)."""
    version = tuple(int(part) for part in node.python.split("."))
    platforms = _node_platforms(node)
    supported = [*tags.cpython_tags(version, [node.python_tag], platforms)]
    supported += tags.compatible_tags(version, node.python_tag, platforms)
    ranks: dict[tags.Tag, int] = {}
    for rank, tag in enumerate(supported):
        ranks.setdefault(tag, rank)
    return ranks


def builds_for_node(wheels: list[Path], node: SlurmRelease, sut: str) -> list[Path]:
    """One wheel per project of a wheel directory. The spec refuses a project in two versions;
    one version in several builds (one per platform) gets the build the node ranks first, as
    pip would: given two files of one project, pip refuses both."""
    by_project: dict[str, list[Path]] = {}
    for wheel in wheels:
        by_project.setdefault(str(canonicalize_name(parse_wheel_filename(wheel.name)[0])), []).append(wheel)
    ranks = _node_tag_ranks(node)
    unsupported = len(ranks)

    def rank(wheel: Path) -> int:
        return min(ranks.get(tag, unsupported) for tag in parse_wheel_filename(wheel.name)[3])

    chosen = []
    for name, builds in sorted(by_project.items()):
        best = min(builds, key=lambda build: (rank(build), build.name))
        if len(builds) > 1 and rank(best) == unsupported:
            files = ", ".join(build.name for build in builds)
            raise UsageError(f"--sut {sut}: no build of {name} installs on the node's Python {node.python} ({files})")
        chosen.append(best)
    return sorted(chosen)


def _tree_digest(root: Path) -> str:
    """Digest of a source tree's tracked-looking files, so an edit means a new wheelhouse."""
    hasher = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        parts = path.relative_to(root).parts
        # Build artefacts (a wheel build writes *.egg-info and build/ into the tree) and caches
        # must not count, or an unchanged source would look new after every build.
        skipped = set(parts) & IGNORED_SOURCE_DIRECTORIES or any(part.endswith(".egg-info") for part in parts)
        if path.is_file() and not skipped:
            hasher.update(str(path.relative_to(root)).encode() + b"\0" + sha256_file(path).encode())
    return hasher.hexdigest()


@dataclass(frozen=True, slots=True)
class Wheel:
    file: str
    name: str
    version: str
    sha256: str
    size: int


@dataclass(frozen=True, slots=True)
class Wheelhouse:
    path: Path
    sut: SutSpec
    sut_names: tuple[str, ...]
    wheels: tuple[Wheel, ...]
    python: str = DEFAULT_NODE.python  # the node interpreter the wheels were fetched for

    @property
    def sut_wheels(self) -> tuple[Wheel, ...]:
        return tuple(w for w in self.wheels if w.name in self.sut_names)

    @property
    def digest(self) -> str:
        """One digest over every wheel: the identity of what gets installed."""
        return hashlib.sha256("".join(f"{w.file}:{w.sha256}\n" for w in self.wheels).encode()).hexdigest()

    def install_requirements(self) -> list[str]:
        """What the node image installs (by name, offline, from this wheelhouse)."""
        pinned = [f"{w.name}=={w.version}" for w in self.sut_wheels]
        return [*pinned, *HARNESS_REQUIREMENTS]

    @classmethod
    def load(cls, path: Path) -> Wheelhouse:
        data = json.loads((path / MANIFEST).read_text())
        spec = SutSpec(data["sut"]["kind"], data["sut"]["value"], tuple(data["sut"]["names"]))
        wheels = tuple(Wheel(**w) for w in data["wheels"])
        # Manifests from before the release matrix were all fetched for the default node.
        python = data.get("node_python", DEFAULT_NODE.python)
        return cls(path, spec, tuple(data["sut_names"]), wheels, python)


def _cache_key(spec: SutSpec, node: SlurmRelease) -> str:
    hasher = hashlib.sha256()
    hasher.update(json.dumps([spec.kind, node.python, platform.machine(), *HARNESS_REQUIREMENTS]).encode())
    source = Path(spec.value)
    if spec.kind == "requirement":
        hasher.update(spec.value.encode())
    elif spec.kind == "wheel":
        hasher.update(sha256_file(source).encode())
    elif spec.kind == "wheel_dir":
        for wheel in sorted(source.glob("*.whl")):
            hasher.update(wheel.name.encode() + sha256_file(wheel).encode())
    else:
        hasher.update(_tree_digest(source).encode())
    return hasher.hexdigest()[:24]


def _pip(args: list[str], what: str) -> None:
    command = [sys.executable, "-m", "pip", *args, "--disable-pip-version-check", "--no-input"]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR")]
        last = (errors or result.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(f"{what}: {last.removeprefix('ERROR: ')}")


def build_wheelhouse(
    spec: SutSpec, listener: BuildListener | None = None, node: SlurmRelease = DEFAULT_NODE
) -> Wheelhouse:
    """Fetch (or reuse) the wheelhouse for a SUT on `node`'s Python; raise a usage error when
    it cannot resolve there (a SUT without wheels for that Python cannot run on that release)."""
    listener = listener or QuietListener()
    root = state_root() / "wheelhouses"
    final = root / _cache_key(spec, node)
    with file_lock(root / ".lock"):
        if (final / MANIFEST).is_file():
            os.utime(final / MANIFEST)  # its last use: what eviction goes by
            return Wheelhouse.load(final)
        root.mkdir(parents=True, exist_ok=True)
        evict_wheelhouses(root)
        scratch = Path(tempfile.mkdtemp(prefix="tmp-", dir=root))
        try:
            requirements, extra, sut_names = _resolve_inputs(spec, scratch, listener, node)
            listener.on_step(f"fetching wheels for {spec.display} (Python {node.python})")
            _pip(
                ["download", "-q", "-d", str(scratch), *extra, *node_platform_args(node), *requirements],
                f"cannot fetch the wheels for --sut {spec.display} on Python {node.python}",
            )
            _write_manifest(scratch, spec, sut_names, node)
            shutil.rmtree(final, ignore_errors=True)
            os.replace(scratch, final)
            wheelhouse = Wheelhouse.load(final)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
    return wheelhouse


KEEP_WHEELHOUSES = 12  # about 150 MB each with rc1's whole dependency set
IN_USE_SECONDS = 3600.0  # used this recently: maybe still being read by another run


def evict_wheelhouses(root: Path, keep: int = KEEP_WHEELHOUSES, now: float | None = None) -> list[str]:
    """Remove all but the `keep` most recently used wheelhouses (each SUT, release and
    harness version has its own, and without this the cache grew past 12 GB in a day of
    test runs); one used within the last hour is never removed. Call under the cache lock."""
    cached = [entry for entry in root.iterdir() if (entry / MANIFEST).is_file()]
    last_used = {entry: (entry / MANIFEST).stat().st_mtime for entry in cached}
    stale = beyond_keeping(cached, last_used.__getitem__, keep, IN_USE_SECONDS, time.time() if now is None else now)
    for entry in stale:
        shutil.rmtree(entry, ignore_errors=True)
    return [entry.name for entry in stale]


def _resolve_inputs(
    spec: SutSpec, scratch: Path, listener: BuildListener, node: SlurmRelease
) -> tuple[list[str], list[str], tuple[str, ...]]:
    """(requirements for pip download, extra pip options, the SUT's distribution names)."""
    harness = list(HARNESS_REQUIREMENTS)
    if spec.kind == "requirement":
        return [spec.value, *harness], [], spec.names
    if spec.kind == "wheel":
        copied = scratch / Path(spec.value).name
        shutil.copy2(spec.value, copied)
        return [str(copied), *harness], [], spec.names
    if spec.kind == "wheel_dir":
        # Every project of the directory is installed, each from its own wheel, over the
        # dependency set they resolve to together (the index supplies the rest).
        wheels = builds_for_node(sorted(Path(spec.value).glob("*.whl")), node, spec.display)
        for wheel in wheels:
            shutil.copy2(wheel, scratch / wheel.name)
        return [str(scratch / w.name) for w in wheels] + harness, ["--find-links", str(scratch)], spec.names
    listener.on_step(f"building a wheel from {Path(spec.value).name}")
    built = scratch / "built"
    _pip(["wheel", "-q", "--no-deps", "-w", str(built), spec.value], f"cannot build --sut {spec.display}")
    wheels = sorted(built.glob("*.whl"))
    if not wheels:
        raise UsageError(f"--sut {spec.display} built no wheel")
    names = []
    for wheel in wheels:
        names.append(canonicalize_name(validate_wheel(wheel)))
        shutil.move(wheel, scratch / wheel.name)
    shutil.rmtree(built)
    return [str(scratch / w.name) for w in wheels] + harness, ["--find-links", str(scratch)], tuple(names)


def _write_manifest(directory: Path, spec: SutSpec, sut_names: tuple[str, ...], node: SlurmRelease) -> None:
    wheels = []
    for path in sorted(directory.glob("*.whl")):
        name, version, *_ = parse_wheel_filename(path.name)
        wheels.append(
            {
                "file": path.name,
                "name": str(canonicalize_name(name)),
                "version": str(version),
                "sha256": sha256_file(path),
                "size": path.stat().st_size,
            }
        )
    missing = set(sut_names) - {w["name"] for w in wheels}
    if missing:
        raise UsageError(f"--sut {spec.display}: the wheelhouse lacks {', '.join(sorted(missing))}")
    manifest = {
        # The display form only: a local SUT's host path is never stored.
        "sut": {"kind": spec.kind, "value": spec.display, "names": list(spec.names)},
        "sut_names": list(sut_names),
        "node_python": node.python,
        "wheels": wheels,
    }
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=1))


def install_local(wheelhouse: Wheelhouse, target: Path) -> Path:
    """Install only the SUT's own wheels into `target` (for local-process mode on the host).

    The harness venv already has what the SUT's runtime parts import at their edges
    (aiohttp, prometheus_client); the node image installs the full closure instead.
    """
    if not (target / ".installed").is_file():
        files = [str(wheelhouse.path / w.file) for w in wheelhouse.sut_wheels]
        _pip(["install", "-q", "--no-deps", "--target", str(target), *files], "cannot install the SUT")
        (target / ".installed").write_text(wheelhouse.digest)
    return target
