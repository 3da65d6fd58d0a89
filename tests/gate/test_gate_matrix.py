"""A gate over several Slurm releases: one bundle per release and role, each judged, and the
matrix (check by release) in gate.json and gate.md. The runs are stand-ins that write the
results a real run would (what each release's run does is pinned by the cluster tests); what
is tested here is how the gate lays out, judges and reports a matrix."""

import json
from pathlib import Path

import pytest

from dd_accept.base.errors import UsageError
from dd_accept.harness import gate as gate_module
from dd_accept.harness.console import ConsoleListener
from dd_accept.harness.gate_file import parse_gate
from tests.gate.test_judge_and_compare import _results

MATRIX = """
[gate]
name = "m"
scenarios = ["overload", "streaming", "health"]
allow_unsupported = ["health.probe_isolation"]
[cluster]
slurm = ["22.05", "24.11", "26.05"]
"""


def _stand_in_runs(monkeypatch, failing: str) -> list:
    """Stand-in runs: each writes results for its release and role; the candidate on the
    `failing` release fails overload.partial.failover (with its numbers), every other run
    passes. Returns what was run: (release, role, out) in order."""
    made = []

    def run(request, console):
        release, role = request.cluster.release, request.out.name
        fails = release == failing and role == "candidate"
        request.out.mkdir(parents=True)
        results = _results(spec=request.sut, failover="fail" if fails else "pass")
        (request.out / "results.json").write_text(json.dumps(results))
        made.append((release, role, request.out))
        return 1 if fails else 0

    monkeypatch.setattr(gate_module, "run", run)
    return made


@pytest.fixture
def runs(monkeypatch):
    """24.11's candidate fails; every other run passes."""
    return _stand_in_runs(monkeypatch, failing="24.11")


def _gate(tmp_path: Path, text: str, suts: list[str]) -> tuple[int, Path]:
    out = tmp_path / "gate"
    code = gate_module.run_gate(parse_gate(text, "m.toml"), suts, out, ConsoleListener(quiet=True), None)
    return code, out


def test_a_matrix_gate_runs_every_release_and_fails_where_one_release_fails(tmp_path, runs):
    code, out = _gate(tmp_path, MATRIX, ["sut==2"])
    assert code == 1
    assert [(release, role) for release, role, _ in runs] == [
        ("22.05", "candidate"),
        ("24.11", "candidate"),
        ("26.05", "candidate"),
    ]
    assert [path.relative_to(out).as_posix() for *_, path in runs] == [
        "slurm-22.05/candidate",
        "slurm-24.11/candidate",
        "slurm-26.05/candidate",
    ]
    document = json.loads((out / "gate.json").read_text())
    assert document["verdict"] == "fail"
    # the top level covers every release, never the first one only
    top = {c["id"]: c["verdict"] for c in document["checks"]}
    assert top == {"gate.checks@22.05": "pass", "gate.checks@24.11": "fail", "gate.checks@26.05": "pass"}
    assert document["run_exit_status"] == {"candidate@22.05": 0, "candidate@24.11": 1, "candidate@26.05": 0}
    assert document["bundles"]["candidate@24.11"] == "slurm-24.11/candidate"
    by_release = document["matrix"]["by_release"]
    assert {release: part["verdict"] for release, part in by_release.items()} == {
        "22.05": "pass",
        "24.11": "fail",
        "26.05": "pass",
    }
    assert by_release["24.11"]["run_exit_status"] == {"candidate": 1}
    assert "overload.partial.failover" in by_release["24.11"]["checks"][0]["observed"]
    failover = document["matrix"]["checks"]["overload.partial.failover"]
    assert {r: cell["verdict"] for r, cell in failover.items()} == {"22.05": "pass", "24.11": "fail", "26.05": "pass"}
    assert failover["24.11"]["metrics"] == {"failovers": 10}
    markdown = (out / "gate.md").read_text()
    assert "| `gate.checks@24.11` | fail |" in markdown and "| `gate.checks@22.05` | pass |" in markdown
    assert "| check | 22.05 | 24.11 | 26.05 |" in markdown
    row = "| `overload.partial.failover` | pass (failovers 10) | fail (failovers 10) | pass (failovers 10) |"
    assert row in markdown


def test_a_matrix_gate_where_every_release_passes_passes_and_compares_per_release(tmp_path, runs):
    text = MATRIX.replace('["22.05", "24.11", "26.05"]', '["22.05", "26.05"]')
    code, out = _gate(tmp_path, text, ["sut==1", "sut==2"])
    assert code == 0
    assert [(release, role) for release, role, _ in runs] == [
        ("22.05", "baseline"),
        ("22.05", "candidate"),
        ("26.05", "baseline"),
        ("26.05", "candidate"),
    ]
    document = json.loads((out / "gate.json").read_text())
    assert document["verdict"] == "pass" and document["matrix"]["releases"] == ["22.05", "26.05"]
    for release in ("22.05", "26.05"):
        assert (out / f"slurm-{release}" / "comparison.md").is_file()
        assert document["matrix"]["by_release"][release]["comparison"]["regressed"] == []
    assert document["comparison"]["regressed"] == [] and document["comparison"]["headline"].count("baseline") == 2


def test_a_regression_on_one_release_is_a_regression_of_the_gate(tmp_path, monkeypatch):
    _stand_in_runs(monkeypatch, failing="26.05")
    text = MATRIX.replace('["22.05", "24.11", "26.05"]', '["22.05", "26.05"]')
    code, out = _gate(tmp_path, text, ["sut==1", "sut==2"])
    document = json.loads((out / "gate.json").read_text())
    assert code == 1 and document["verdict"] == "fail"
    assert document["comparison"]["regressed"] == ["overload.partial.failover@26.05"]


def test_one_release_keeps_the_plain_layout(tmp_path, runs):
    code, out = _gate(tmp_path, MATRIX.replace('["22.05", "24.11", "26.05"]', '"26.05"'), ["sut==2"])
    assert code == 0 and [(r, role) for r, role, _ in runs] == [("26.05", "candidate")]
    assert runs[0][2] == out / "candidate"
    document = json.loads((out / "gate.json").read_text())
    assert "matrix" not in document and document["bundles"] == {"candidate": "candidate"}
    assert list(document) == ["schema", "gate", "verdict", "time", "bundles", "run_exit_status", "checks"]
    assert [c["id"] for c in document["checks"]] == ["gate.checks"] and document["run_exit_status"] == {"candidate": 0}


@pytest.mark.parametrize(
    ("slurm", "message"),
    [
        ('["22.05", "23.02"]', "cluster.slurm must be one of 22.05, 24.11, 26.05, got '23.02'"),
        ('["24.11", "24.11"]', "cluster.slurm names a release twice"),
        ("[1]", r"cluster.slurm\[0\] must be a string"),
    ],
)
def test_a_bad_release_list_is_refused_before_anything_runs(slurm, message):
    with pytest.raises(UsageError, match=message):
        parse_gate(MATRIX.replace('["22.05", "24.11", "26.05"]', slurm), "m.toml")
