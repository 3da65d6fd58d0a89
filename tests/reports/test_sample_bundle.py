"""The shipped sample bundle (docs/sample/, `make sample-bundle`) verifies with its public key
and says what it verified; `report` and `compare` read it with no cluster, as the README's
auditor path promises."""

import json
import re
from pathlib import Path

from dd_accept.base.results import READABLE_SCHEMAS
from tests.helpers import run_cli

SAMPLE = Path(__file__).resolve().parents[2] / "docs" / "sample"
BUNDLE, KEY = SAMPLE / "rc1-overload", SAMPLE / "rc1-overload.pub"


def test_the_sample_verifies_with_its_key_and_says_what_it_verified():
    result = run_cli("verify", str(BUNDLE), "--key", str(KEY), "--require-signature", "--require-pass")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    said = {line.split(":", 1)[0]: line.split(":", 1)[1].strip() for line in lines if ":" in line}
    assert said["verdict"].startswith("pass (overload pass"), said
    assert said["sut"] == "data-designer-slurm==1.0.0rc1", said
    assert re.fullmatch(r"data_designer_slurm-1\.0\.0rc1-\S+\.whl sha256:[0-9a-f]{64}", said["wheel"]), said
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ for \d+ s on Slurm \d+\.\d+, \w+", said["ran"]), said
    assert re.fullmatch(r"\d+ listed in the manifest, each held to its sha256", said["files"]), said
    assert said["policy --require-pass"] == "met", said
    assert re.fullmatch(r"verified \(key id [0-9a-f]{16}\)", said["signature"]), said
    assert "the bundle is made by the key holder" in lines[-1], lines[-1]


def test_the_sample_s_facts_are_in_the_json_too():
    result = run_cli("verify", str(BUNDLE), "--key", str(KEY), "--json", "--require-pass")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    facts = document["facts"]
    assert facts["verdict"] == "pass" and facts["scenarios"] == {"overload": "pass"}, facts
    assert facts["policies"] == [{"policy": "--require-pass", "met": True}] and facts["files"] > 3, facts
    assert document["signed_by_key"] and len(facts["wheels"]) >= 1 and facts["where"].startswith("Slurm "), document
    results = json.loads((BUNDLE / "results.json").read_text())
    assert results["schema"] in READABLE_SCHEMAS


def test_report_and_compare_read_the_sample_verified():
    report = run_cli("report", str(BUNDLE), "--format", "md")
    assert report.returncode == 0 and "verified:" in report.stdout.splitlines()[0], report.stdout[:300]
    compared = run_cli("compare", str(BUNDLE), str(BUNDLE), "--fail-on-regression")
    assert compared.returncode == 0, compared.stderr


def test_the_sample_holds_no_private_key():
    assert not [p for p in SAMPLE.rglob("*") if p.is_file() and b"PRIVATE KEY" in p.read_bytes()]
