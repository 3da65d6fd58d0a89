"""One registry of Slurm releases; images, wheelhouses, layouts and options derive from it."""

from pathlib import Path

import pytest

from dd_accept.base.errors import ClusterError, UsageError
from dd_accept.base.options import build
from dd_accept.base.slurm_releases import DEFAULT_RELEASE, RELEASES, slurm_release
from dd_accept.slurm_docker import images
from dd_accept.slurm_docker.cluster_options import ClusterOptions
from dd_accept.slurm_docker.layout import docker_layout
from dd_accept.slurm_docker.slurm_conf import render_slurm_conf
from dd_accept.slurm_docker.spec import ClusterSpec
from dd_accept.sut import wheelhouse
from dd_accept.sut.spec import SutSpec


def test_each_release_is_its_own_suite_and_python():
    assert len({r.suite for r in RELEASES.values()}) == len(RELEASES)
    assert DEFAULT_RELEASE in RELEASES
    for version, release in RELEASES.items():
        assert release.version == version
        assert release.python_tag == "cp" + release.python.replace(".", "")


@pytest.mark.parametrize("value", ["23.02", "", "latest", "22.5"])
def test_an_unknown_release_is_a_usage_error_naming_the_choices(value):
    with pytest.raises(UsageError, match=r"--slurm must be one of 22\.05, 24\.11, 26\.05"):
        slurm_release(value)
    with pytest.raises(UsageError):
        ClusterSpec(slurm=value)


def test_every_release_has_its_own_image_tags_and_the_default_keeps_its_own():
    bases = {images.base_tag(v) for v in RELEASES}
    layers = {images.slurm_tag(v) for v in RELEASES}
    assert len(bases) == len(layers) == len(RELEASES)
    assert images.base_tag() == images.base_tag(DEFAULT_RELEASE)
    assert images.slurm_tag() == images.slurm_tag(DEFAULT_RELEASE)


def test_wheels_are_fetched_for_the_release_python_and_glibc():
    for release in RELEASES.values():
        args = wheelhouse.node_platform_args(release)
        assert args[args.index("--python-version") + 1] == release.python
        assert args[args.index("--abi") + 1] == release.python_tag
        platforms = [args[i + 1] for i, arg in enumerate(args) if arg == "--platform"]
        assert platforms[0].startswith(f"manylinux_2_{release.glibc_minor}_")


def test_each_python_gets_its_own_wheelhouse_and_the_default_keeps_its_cache():
    spec = SutSpec.parse("data-designer-slurm==1.0.0rc1")
    keys = {wheelhouse._cache_key(spec, release) for release in RELEASES.values()}
    assert len(keys) == len({r.python for r in RELEASES.values()})


def test_the_layout_follows_the_release_python():
    for version, release in RELEASES.items():
        assert docker_layout(version).site_packages == f"/opt/sut/lib/python{release.python}/site-packages"


def test_slurm_conf_renders_for_every_release():
    for version in RELEASES:
        text = render_slurm_conf(ClusterSpec(slurm=version, kill_wait=3))
        assert "KillWait=3" in text and "ProctrackType=proctrack/linuxproc" in text


def test_the_option_is_refused_where_it_has_no_effect():
    assert build(ClusterOptions, {}).release == DEFAULT_RELEASE
    assert build(ClusterOptions, {"slurm": "24.11"}).release == "24.11"
    with pytest.raises(ValueError, match="--slurm applies to --cluster docker only"):
        build(ClusterOptions, {"mode": "existing", "run_dir": "/shared/x", "slurm": "24.11"})
    with pytest.raises(ValueError, match="--slurm"):
        build(ClusterOptions, {"slurm": "23.02"})


def _rootfs(tmp_path: Path, python: str, slurmd: str) -> Path:
    (tmp_path / "usr" / "bin").mkdir(parents=True)
    (tmp_path / "usr" / "bin" / f"python{python}").touch()
    (tmp_path / "usr" / "bin" / "python3").symlink_to(f"python{python}")
    (tmp_path / "var" / "lib" / "dpkg").mkdir(parents=True)
    status = f"Package: munge\nVersion: 0.5\n\nPackage: slurmd\nStatus: install ok installed\nVersion: {slurmd}\n"
    (tmp_path / "var" / "lib" / "dpkg" / "status").write_text(status)
    return tmp_path


def test_a_suite_that_moved_on_is_refused_with_what_it_carries(tmp_path):
    release = RELEASES["26.05"]
    images._check_suite_contents(_rootfs(tmp_path / "ok", release.python, "26.05.5-1"), release)
    with pytest.raises(ClusterError, match=r"no longer carries Slurm 26.05 \(found: 26.11.1-1\)"):
        images._check_suite_contents(_rootfs(tmp_path / "slurm", release.python, "26.11.1-1"), release)
    with pytest.raises(ClusterError, match=r"no longer carries Python 3.14 as python3 \(found: python3.15\)"):
        images._check_suite_contents(_rootfs(tmp_path / "python", "3.15", "26.05.5-1"), release)
    # 3.14 installed beside a python3 that still points elsewhere is refused too
    both = _rootfs(tmp_path / "both", "3.13", "26.05.5-1")
    (both / "usr" / "bin" / "python3.14").touch()
    with pytest.raises(ClusterError, match=r"\(found: python3.13\)"):
        images._check_suite_contents(both, release)
