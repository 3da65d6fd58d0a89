import pytest

from tests.helpers import run_cli

pytestmark = pytest.mark.cluster


def test_doctor_passes_on_a_prepared_machine(slurm_cluster):
    result = run_cli("doctor", env={"COLUMNS": "200"})  # no cell folds
    assert result.returncode == 0, result.stdout
    for check in ("python", "disk", "docker engine", "images", "cgroup process tracking"):
        assert check in result.stdout
    assert "problem" not in result.stdout
    # make test builds every release's image; this machine's engine runs cgroup v1
    assert "images (Slurm 24.11)" in result.stdout and "images (Slurm 26.05)" in result.stdout
    assert "cgroup v1: --slurm-config cgroup available" in result.stdout


def test_an_unavailable_capability_is_named_and_does_not_fail_doctor(monkeypatch):
    from dd_accept.harness import doctor

    class Engine:
        def info(self):
            return {"CgroupVersion": "2"}

    finding = doctor._cgroup_tracking(Engine())
    assert not finding.ok and finding.optional
    assert finding.observed == "the Docker engine reports cgroup v2; --slurm-config cgroup needs a cgroup v1 host"
    from dd_accept.harness import cli, machine_commands

    monkeypatch.setattr(machine_commands, "run_checks", lambda: [finding])
    assert cli.main(["doctor"]) == 0
    monkeypatch.setattr(
        machine_commands, "run_checks", lambda: [finding, doctor.Finding("disk", False, "0.1 GiB free", "free")]
    )
    assert cli.main(["doctor"]) == 2


def test_doctor_names_missing_images_and_the_fix(monkeypatch, capsys):
    from dd_accept.harness import doctor
    from dd_accept.slurm_docker import images

    monkeypatch.setattr(images, "PACKAGES", (*images.PACKAGES, "not-yet-built"))
    findings = {f.name: f for f in doctor.run_checks()}
    assert not findings["images"].ok and findings["images"].fix == "build them: `dd-accept cluster build`"
    assert "debootstrap" in findings
