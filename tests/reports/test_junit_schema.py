"""junit.xml validates against the JUnit schema CI systems read: Jenkins xunit's junit-10.xsd.

The schema is not vendored: it is taken from the published pytest source distribution on
PyPI (pytest validates its own JUnit output against the same file), once per pytest
version, and cached in the dd-accept state directory.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from xml.etree import ElementTree

import pytest
import xmlschema

from dd_accept.base.state import file_lock, state_root
from dd_accept.reports.render import junit

SCHEMA_MEMBER = "testing/example_scripts/junit-10.xsd"


def _published_junit_schema() -> Path:
    version = pytest.__version__
    target = state_root() / "schemas" / f"junit-10-pytest-{version}.xsd"
    target.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(target.parent / ".lock"):
        if not target.is_file():
            with tempfile.TemporaryDirectory() as scratch:
                subprocess.run(
                    [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                     "--disable-pip-version-check", "-d", scratch, f"pytest=={version}"],
                    check=True, capture_output=True,
                )  # fmt: skip
                (sdist,) = Path(scratch).glob("pytest-*.tar.gz")
                with tarfile.open(sdist) as archive:
                    member = archive.extractfile(f"pytest-{version}/{SCHEMA_MEMBER}")
                    assert member is not None
                    target.write_bytes(member.read())
    return target


@pytest.fixture(scope="module")
def schema() -> xmlschema.XMLSchema:
    return xmlschema.XMLSchema(str(_published_junit_schema()))


def _results() -> dict:
    def check(check_id, verdict, detail=""):
        return {"id": check_id, "verdict": verdict, "expected": "e <&> 1", "observed": "o", "detail": detail}

    return {
        "scenarios": [
            {
                "name": "overload",
                "checks": [check("overload.recovery", "pass"), check("overload.total.cooldown", "fail", "d")],
            },
            {"name": "health", "checks": [check("health.probe_isolation", "unsupported", "no monitor")]},
            {"name": "drain", "error": "ClusterError: replicas did not start", "checks": []},
        ]
    }


def test_every_verdict_kind_validates_against_the_published_schema(schema):
    document = junit(_results())
    schema.validate(document)  # raises with the offending element when it does not
    assert "<failure" in document and "<skipped" in document and "<error" in document


def test_the_schema_rejects_what_ci_systems_would_not_read(schema):
    """Negative control: the validator is real — a testcase without its name fails."""
    broken = junit(_results()).replace('name="overload.recovery"', "", 1)
    with pytest.raises(xmlschema.XMLSchemaValidationError):
        schema.validate(broken)


def test_suites_carry_time_timestamp_and_the_sut_and_cluster_as_properties(schema):
    """What a CI system shows beside the cases: when each scenario ran and for how long,
    and which wheels were judged on which Slurm."""
    results = _results()
    results["scenarios"][0] |= {"started": 1796062534.25, "ended": 1796062557.5}
    results["sut"] = {
        "spec": "data-designer-slurm==1.0.0rc1",
        "wheelhouse_digest": "ab" * 32,
        "wheels": [{"file": "data_designer_slurm-1.0.0rc1-py3-none-any.whl", "sha256": "cd" * 32, "size": 1}],
    }
    results["cluster"] = {"kind": "docker", "slurm_release": "24.11", "proctrack": "cgroup"}
    document = junit(results)
    schema.validate(document)
    root = ElementTree.fromstring(document)
    overload = root.find("testsuite[@name='overload']")
    assert overload.get("time") == "23.250" and overload.get("timestamp") == "2026-11-30T18:15:34"
    assert root.find("testsuite[@name='health']").get("time") is None  # not recorded: not invented
    properties = {p.get("name"): p.get("value") for p in overload.find("properties")}
    assert properties == {
        "dd-accept.sut": "data-designer-slurm==1.0.0rc1",
        "dd-accept.wheelhouse_sha256": "ab" * 32,
        "dd-accept.wheel.data_designer_slurm-1.0.0rc1-py3-none-any.whl": "sha256:" + "cd" * 32,
        "dd-accept.cluster.kind": "docker",
        "dd-accept.cluster.slurm_release": "24.11",
        "dd-accept.cluster.proctrack": "cgroup",
    }


def test_a_testcase_takes_the_time_of_the_phases_that_gathered_its_evidence(schema):
    """A check's time runs from the previous phase that judged a check (the scenario's start
    for the first) to the end of the phase that judged it: a CI dashboard shows which checks
    are slow. Checks judged together share their span; one no phase names gets no time."""

    def phase(kind, started, ended, judged=()):
        return {"kind": kind, "title": kind, "started": started, "ended": ended, "outcome": "done", "judged": judged}

    results = _results()
    results["scenarios"][0] |= {
        "started": 100.0,
        "ended": 190.0,
        "phases": [
            phase("deploy", 100.0, 110.0),
            phase("drive", 110.0, 140.5),
            phase("judge", 140.5, 141.0, ["overload.recovery"]),
            phase("drive", 141.0, 180.0),
            phase("judge", 180.0, 180.25, ["overload.total.cooldown"]),
            phase("stop", 180.25, 190.0),
        ],
    }
    document = junit(results)
    schema.validate(document)
    root = ElementTree.fromstring(document)
    times = {case.get("name"): case.get("time") for case in root.iter("testcase")}
    assert times["overload.recovery"] == "41.000"  # deploy, drive and its judgment: 100 -> 141
    assert times["overload.total.cooldown"] == "39.250"  # from the previous judgment: 141 -> 180.25
    assert times["health.probe_isolation"] is None  # no phase recorded it: not invented
