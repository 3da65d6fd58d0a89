"""In GitHub Actions, a run's failing checks are annotations and its table is in the step
summary; outside Actions nothing is written."""

from dd_accept.harness.github_actions import annotate


def _results():
    check = {"id": "overload.total.cooldown", "verdict": "fail", "expected": "no request inside a window",
             "observed": "3 admitted: 50%\nmore", "detail": "", "metrics": {}}  # fmt: skip
    passing = {**check, "id": "overload.recovery", "verdict": "pass"}
    scenario = {"name": "overload", "verdict": "fail", "started": 1.0, "ended": 2.0, "error": None,
                "checks": [check, passing]}  # fmt: skip
    broken = {**scenario, "name": "drain", "error": "the machine: no CPU", "checks": []}
    return {"verdict": "fail", "sut": {"spec": "x==1", "wheels": []}, "scenarios": [scenario, broken]}


def test_in_actions_each_check_not_passing_is_an_error_annotation_and_the_summary_gets_the_table(
    monkeypatch, tmp_path, capsys
):
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    annotate(_results(), "rc2-overload")
    out, err = capsys.readouterr()
    assert out == "", "stdout stays the --json document's"
    lines = err.splitlines()
    assert lines == [
        "::error title=dd-accept fail%3A overload.total.cooldown::expected no request inside a window; "
        "observed 3 admitted: 50%25%0Amore",
        "::error title=dd-accept%3A drain not judged::the machine: no CPU",
    ], lines
    assert "### dd-accept `rc2-overload`" in summary.read_text() and "overload.total.cooldown" in summary.read_text()


def test_outside_actions_nothing_is_written(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    annotate(_results(), "b")
    assert capsys.readouterr() == ("", "") and not (tmp_path / "summary.md").exists()
