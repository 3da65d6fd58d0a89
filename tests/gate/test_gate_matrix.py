"""A gate over several Slurm releases: one bundle per release and role, each judged, and the
matrix (check by release) in gate.json and gate.md. The runs are stand-ins that write the
results a real run would (what each release's run does is pinned by the cluster tests); what
is tested here is how the gate lays out, judges and reports a matrix."""

import json
from pathlib import Path

import pytest

from dd_accept.base.errors import EnvironmentProblem, UsageError
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


def _stand_in_runs(monkeypatch, failing: str, cannot_run: tuple[str, str] | None = None) -> list:
    """Stand-in runs: each writes results for its release and role; the candidate on the
    `failing` release fails overload.partial.failover (with its numbers), every other run
    passes; `cannot_run` (release, reason) is a release this machine cannot run. Returns
    what was run: (release, role, out) in order."""
    made = []

    def run(request, console):
        release, role = request.cluster.release, request.out.name
        if cannot_run and release == cannot_run[0]:
            raise EnvironmentProblem(cannot_run[1])
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


def test_a_release_this_machine_cannot_run_is_marked_not_run_never_pass(tmp_path, monkeypatch):
    """26.05's images cannot be built here: the other releases still run, are judged and
    written; the matrix says 'not run' with the reason; the gate fails and exits 2."""
    made = _stand_in_runs(
        monkeypatch, failing="none", cannot_run=("26.05", "debootstrap of sid failed: Release file expired")
    )
    code, out = _gate(tmp_path, MATRIX, ["sut==2"])
    assert code == 2
    assert [release for release, *_ in made] == ["22.05", "24.11"]
    document = json.loads((out / "gate.json").read_text())
    assert document["verdict"] == "fail"
    top = {c["id"]: (c["verdict"], c["observed"]) for c in document["checks"]}
    assert top["gate.checks@22.05"][0] == "pass" and top["gate.checks@24.11"][0] == "pass"
    assert top["gate.ran@26.05"] == ("fail", "not run: debootstrap of sid failed: Release file expired")
    by_release = document["matrix"]["by_release"]
    assert list(by_release) == ["22.05", "24.11", "26.05"]
    assert by_release["26.05"] == {"verdict": "not run", "reason": "debootstrap of sid failed: Release file expired"}
    assert not (out / "slurm-26.05" / "candidate" / "results.json").exists()
    markdown = (out / "gate.md").read_text()
    assert "- Slurm 26.05: **not run**: debootstrap of sid failed" in markdown
    row = next(line for line in markdown.splitlines() if line.startswith("| `overload.partial.failover`"))
    assert row.endswith("| not run |"), row


def test_a_gate_where_no_release_could_run_leaves_nothing(tmp_path, monkeypatch):
    def run(request, console):
        raise EnvironmentProblem(f"no images for {request.cluster.release}")

    monkeypatch.setattr(gate_module, "run", run)
    with pytest.raises(EnvironmentProblem, match=r"no Slurm release of the gate could run here: no images for 22\.05"):
        _gate(tmp_path, MATRIX, ["sut==2"])
    assert not (tmp_path / "gate").exists()


def test_gate_html_draws_the_matrix_from_gate_json(tmp_path, monkeypatch):
    """One self-contained page: the verdict, links to each bundle's report, the gate checks
    and the matrix, with a release that did not run shown as such, every value escaped."""
    _stand_in_runs(monkeypatch, failing="24.11", cannot_run=("26.05", "sid <suite> moved on"))
    _, out = _gate(tmp_path, MATRIX, ["sut==2"])
    page = (out / "gate.html").read_text()
    document = json.loads((out / "gate.json").read_text())
    assert '<span id="verdict" class="fail">FAIL</span>' in page
    assert '<a href="slurm-24.11/candidate/report.html">' in page
    assert "Slurm 26.05: <b>not run</b>: sid &lt;suite&gt; moved on" in page and "<suite>" not in page
    matrix = page[page.index('<table id="matrix">') :]
    row = next(line for line in matrix.splitlines() if "overload.partial.failover" in line)
    assert row.count('<td class="pass">') == 1 and row.count('<td class="fail">') == 1, row
    assert row.endswith('<td class="not-run">not run</td></tr>'), row
    assert len([line for line in matrix.splitlines() if line.startswith("<tr><td><code>")]) == len(
        document["matrix"]["checks"]
    )
    assert "<script" not in page and "http" not in page  # self-contained
