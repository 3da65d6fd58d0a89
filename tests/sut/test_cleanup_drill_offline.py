"""The drain drill (node/drills/sut_cleanup_drill.sh) run offline against the released SUT's
own scripts, with stand-ins for srun and squeue on PATH: it launches the endpoint through the
SUT's launch path from dd-accept's manifest, finds the one step the launch added, stops it
through the SUT's stop function and marks when that returned; where it cannot tell the
endpoint's step (two new ones), it names that as its own failure (the harness's, exit 2)."""

import subprocess
import time
import zipfile
from pathlib import Path

import pytest

import dd_accept
from dd_accept.acceptance.drain import MANIFEST, _drill_argv
from dd_accept.slurm_docker.layout import NodeLayout
from dd_accept.sut.profile import profile_for
from dd_accept.sut.runtime_manifest import endpoint_manifest

SRUN = """#!/bin/bash
touch "$FAKE/launched"
while [[ $1 != -- ]]; do shift; done
shift
exec "$@"
"""
# the job's steps: the batch and a replica, and once srun ran, the endpoint (and maybe one more)
SQUEUE = """#!/bin/bash
printf '9.batch\\n9.0\\n'
[[ -e $FAKE/launched ]] && printf '9.4\\n%s' "${EXTRA_STEP:-}"
exit 0
"""


@pytest.fixture
def drill_setup(sut_wheelhouse, tmp_path):
    """rc1's scripts where a node's venv holds them, the stand-ins on PATH, and the layout."""
    layout = NodeLayout(venv=str(tmp_path / "venv"), harness_dir=str(Path(dd_accept.__file__).parent.parent))
    wheel = next(sut_wheelhouse.path / w.file for w in sut_wheelhouse.wheels if w.name == "data-designer-slurm")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(layout.site_packages, [n for n in archive.namelist() if n.endswith(".sh")])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", SRUN), ("squeue", SQUEUE)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return tmp_path, bin_dir, layout


def _run(tmp_path, bin_dir, layout, extra_step=""):
    state = tmp_path / "state"
    state.mkdir()
    endpoint = ["/bin/sh", "-c", "trap 'exit 0' TERM; sleep 30 & wait"]
    manifest = endpoint_manifest(endpoint, "node-1", str(tmp_path / "o.log"), str(tmp_path / "e.log"))
    (state / MANIFEST).write_text(manifest)
    profile = profile_for("data-designer-slurm", "1.0.0rc1")
    argv = _drill_argv(profile, layout, "completion", str(state), [])
    environment = {"PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE": str(tmp_path), "SLURM_JOB_ID": "9",
                   "HOME": str(tmp_path), "EXTRA_STEP": extra_step}  # fmt: skip
    drill = subprocess.Popen(argv, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 20
    while not (state / "ready").exists() and drill.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    (state / "go").touch()
    _, stderr = drill.communicate(timeout=30)
    return drill.returncode, stderr, state


def test_the_drill_launches_through_the_sut_and_marks_when_its_stop_returned(drill_setup):
    code, stderr, state = _run(*drill_setup)
    assert code == 0, stderr
    assert not (state / "harness-error").exists(), (state / "harness-error").read_text()
    launcher = (state / "launcher-pid").read_text().strip()
    assert (state / "identities" / launcher).read_text().strip() == "9.4"  # the one step the launch added
    returned = float((state / "cleanup-returned").read_text())
    assert float((state / "stop-started").read_text()) <= returned, "marked once the stop function returned"
    assert (state / "cleanup-status").read_text().strip() == "0"


def test_a_launch_that_leaves_two_new_steps_is_the_drills_own_failure(drill_setup):
    code, stderr, state = _run(*drill_setup, extra_step="9.5\n")
    assert code == 3 and not (state / "ready").exists(), stderr
    assert "the launch left 2 new step(s) in the job (9.4 9.5)" in (state / "harness-error").read_text()
