"""The runtime manifest the drain drill writes, read by the released SUT's own launch path:
entrypoint.sh's dd_start_endpoints (plan_reader.sh, step_runner.sh) must start exactly the
endpoint dd-accept asked for, where it asked, with its output where it asked, and register its
launcher with the cleanup, as it does its planner's manifest in production. Run offline: a
stand-in `srun` on PATH records how it was called and runs the command after `--`."""

import json
import subprocess
import zipfile

from dd_accept.sut.profile import profile_for
from dd_accept.sut.runtime_manifest import ENDPOINT_STEP_ID, endpoint_manifest

SRUN = """#!/bin/bash
printf '%s\\n' "$@" >"$SRUN_ARGS"
while [[ $1 != -- ]]; do shift; done
shift
exec "$@"
"""


def test_the_sut_launch_path_starts_the_manifests_endpoint_and_registers_it(sut_wheelhouse, tmp_path):
    wheel = next(sut_wheelhouse.path / w.file for w in sut_wheelhouse.wheels if w.name == "data-designer-slurm")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(tmp_path / "site", [n for n in archive.namelist() if n.endswith(".sh")])
    cleanup = profile_for("data-designer-slurm", "1.0.0rc1").cleanup
    site = str(tmp_path / "site")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(SRUN)
    (bin_dir / "srun").chmod(0o755)
    argv = ["/bin/sh", "-c", "echo endpoint-out; echo endpoint-err >&2"]
    manifest = tmp_path / "runtime-manifest.json"
    manifest.write_text(endpoint_manifest(argv, "node-1", str(tmp_path / "out.log"), str(tmp_path / "err.log")))
    script = f"""
        source {cleanup.script.format(site_packages=site)}
        source {cleanup.launch_script.format(site_packages=site)}
        set +Eeo pipefail
        export {cleanup.manifest_variable}={manifest}
        {cleanup.launch_function} || exit 7
        wait "$DD_LAST_PID"
        echo "launched=$? registered=${{DD_MANAGED_PIDS[*]}} last=$DD_LAST_PID"
    """
    environment = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SRUN_ARGS": str(tmp_path / "srun-args"), "HOME": str(tmp_path)}
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, env=environment)
    assert done.returncode == 0, done.stderr
    launched, registered, last = (part.split("=", 1)[1] for part in done.stdout.split())
    assert launched == "0" and registered == last, done.stdout  # its launcher registered with the cleanup
    srun = (tmp_path / "srun-args").read_text().splitlines()
    assert srun[srun.index("--") + 1 :] == argv, srun  # the command as asked, after the SUT's own options
    assert {"--nodelist=node-1", "--ntasks=1", "--overlap", "--cpus-per-task=1"} <= set(srun), srun
    assert (tmp_path / "out.log").read_text() == "endpoint-out\n"
    assert (tmp_path / "err.log").read_text() == "endpoint-err\n"
    assert [step["step_id"] for step in json.loads(manifest.read_text())["steps"]] == [ENDPOINT_STEP_ID]
