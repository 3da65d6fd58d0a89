import pytest

from tests.helpers import run_cli

pytestmark = pytest.mark.cluster


def test_doctor_passes_on_a_prepared_machine(slurm_cluster):
    result = run_cli("doctor")
    assert result.returncode == 0, result.stdout
    for check in ("python", "disk", "docker engine", "images"):
        assert check in result.stdout
    assert "problem" not in result.stdout


def test_doctor_names_missing_images_and_the_fix(monkeypatch, capsys):
    from dd_accept.harness import doctor
    from dd_accept.slurm_docker import images

    monkeypatch.setattr(images, "PACKAGES", (*images.PACKAGES, "not-yet-built"))
    findings = {f.name: f for f in doctor.run_checks()}
    assert not findings["images"].ok and findings["images"].fix == "build them: `dd-accept cluster build`"
    assert "debootstrap" in findings
