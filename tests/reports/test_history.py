"""`dd-accept history`: bundles in the order they ran, a worse change beyond the tolerance
and a check that stopped passing flagged, as a table, one HTML page and a CSV."""

from __future__ import annotations

import csv
import io
import json
import tarfile

from dd_accept.base.results import CheckResult, ScenarioResult, write_results
from tests.helpers import run_cli, sealed


def _bundle(directory, started, ttft_p99, throughput, failover="pass", requests=64.0):
    directory.mkdir(parents=True)
    serving = {
        "metrics": {"requests": requests, "completed": requests, "error_rate": 0.0, "rate_limited_rate": 0.0,
                    "p99_ttft_ms": ttft_p99, "request_throughput": throughput},
        "phases": [], "events": "run-1",
    }  # fmt: skip
    checks = [CheckResult.judge("overload.partial.failover", failover == "pass", "x", "y", metrics={"failovers": 3})]
    scenario = ScenarioResult("streaming", checks=checks, started=started, ended=started + 10, serving=serving)
    write_results(directory / "results.json", [scenario], {"spec": "sut==1"}, False)
    sealed(directory)


def test_history_orders_by_time_and_flags_only_what_got_worse_beyond_the_tolerance(tmp_path):
    runs = tmp_path / "evidence"
    _bundle(runs / "c-newest", 3_000.0, 150.0, 30.0, failover="fail", requests=10.0)
    _bundle(runs / "a-oldest", 1_000.0, 100.0, 40.0)
    _bundle(runs / "b-middle", 2_000.0, 105.0, 39.0)  # +5% TTFT, -2.5% throughput: within 10%
    with tarfile.open(tmp_path / "d-archived.tar.gz", "w:gz") as archive:
        _bundle(tmp_path / "d-archived", 4_000.0, 150.0, 20.0, failover="fail")
        archive.add(tmp_path / "d-archived", arcname="d-archived")
    html, table = tmp_path / "history.html", tmp_path / "history.csv"
    result = run_cli(
        "history", str(runs), str(tmp_path / "d-archived.tar.gz"), "--html", str(html), "--csv", str(table)
    )
    assert result.returncode == 0, result.stderr
    flagged = [line for line in result.stderr.splitlines() if line.startswith("flagged: ")]
    assert flagged == [
        "flagged: serving streaming p99_ttft_ms in c-newest: 105 → 150 (+43%)",
        "flagged: serving streaming request_throughput in c-newest: 39 → 30 (-23%)",
        "flagged: serving streaming request_throughput in d-archived.tar.gz: 30 → 20 (-33%)",
        "flagged: check overload.partial.failover in c-newest: pass → fail",
    ], result.stderr  # requests, completed fell 64 → 10 (counts: never flagged); fail → fail is no new change
    rows = list(csv.DictReader(io.StringIO(table.read_text())))
    assert [r["bundle"] for r in rows if r["name"] == "streaming p99_ttft_ms"] == [
        "a-oldest", "b-middle", "c-newest", "d-archived.tar.gz",
    ]  # fmt: skip
    verdict = next(r for r in rows if r["bundle"] == "c-newest" and r["kind"] == "verdict")
    assert verdict["verdict"] == "fail" and verdict["flag"] == "pass → fail" and verdict["time_utc"].endswith("Z")
    page = html.read_text()
    assert page.count("<svg") >= 3 and "<script" not in page and 'class="flag"' in page
    assert "streaming p99_ttft_ms" in result.stdout and "history: 4 bundles" in result.stdout
    strict = run_cli("history", str(runs), "--tolerance", "0.5", "--fail-on-change")
    assert strict.returncode == 1 and "1 change(s) beyond the tolerance" in strict.stderr  # only the verdict
    assert run_cli("history", str(runs / "a-oldest"), "--fail-on-change").returncode == 0


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "empty").mkdir()
    _bundle(tmp_path / "broken", 1_000.0, 100.0, 40.0)
    (tmp_path / "broken" / "results.json").write_text(json.dumps({"schema": "dd-accept/results/v3"}))
    _bundle(tmp_path / "ok", 1_000.0, 100.0, 40.0)
    (tmp_path / "plain.tar.gz").write_text("not an archive\n")
    for argv, needle in (
        ([str(tmp_path / "empty")], "no bundle found"),
        ([str(tmp_path / "nothing")], "nothing: no such file or directory"),
        ([str(tmp_path / "broken")], "does not follow dd-accept/results/v3"),
        ([str(tmp_path / "empty"), "--tolerance", "ten"], "expected a fraction"),
        ([str(tmp_path / "ok"), "--html", str(tmp_path / "no-such-dir" / "h.html")], "cannot write h.html"),
        ([str(tmp_path / "ok"), "--csv", str(tmp_path / "ok" / "results.json")], "inside a bundle it reads"),
        ([str(tmp_path / "ok"), "--csv", str(tmp_path / "h"), "--html", str(tmp_path / "h")], "name the same file"),
        ([str(tmp_path / "plain.tar.gz")], "is not a readable bundle directory or .tar.gz"),
    ):
        result = run_cli("history", *argv)
        assert result.returncode == 2 and result.stderr.count("\n") == 1 and needle in result.stderr, result.stderr
    assert json.loads((tmp_path / "ok" / "results.json").read_text())["verdict"] == "pass"  # the input is intact
    assert not list(tmp_path.glob("h*")) and not list(tmp_path.glob(".*.tmp"))  # nothing half-written


def _place(directory, started, ttft_p99, slurm):
    _bundle(directory, started, ttft_p99, 40.0)
    results = json.loads((directory / "results.json").read_text())
    results["cluster"] = {"kind": "docker", "slurm_release": slurm, "proctrack": "linuxproc"}
    (directory / "results.json").write_text(json.dumps(results))
    sealed(directory)


def test_an_improvement_is_never_flagged_and_a_creep_of_small_steps_is(tmp_path):
    runs = tmp_path / "evidence"
    for i, ttft in enumerate((100.0, 60.0, 64.0, 68.0, 72.0)):  # -40% (better), then +6% a run
        _bundle(runs / f"r{i}", 1_000.0 * (i + 1), ttft, 40.0 + 20 * i)  # throughput rises every run
    result = run_cli("history", str(runs))
    flagged = [line for line in result.stderr.splitlines() if line.startswith("flagged: ")]
    assert flagged == ["flagged: serving streaming p99_ttft_ms in r3: 60 → 68 (+13%) since the best"], flagged


def test_bundles_from_different_places_are_series_of_their_own(tmp_path):
    runs = tmp_path / "evidence"
    _place(runs / "a", 1_000.0, 100.0, "22.05")
    _place(runs / "b", 2_000.0, 300.0, "26.05")  # another release: not a change of the 22.05 series
    _place(runs / "c", 3_000.0, 104.0, "22.05")
    result = run_cli("history", str(runs), "--csv", str(tmp_path / "h.csv"))
    assert result.returncode == 0 and "flagged: " not in result.stderr, result.stderr
    names = {row["name"] for row in csv.DictReader(io.StringIO((tmp_path / "h.csv").read_text()))}
    assert {"streaming p99_ttft_ms @ Slurm 22.05, linuxproc", "streaming p99_ttft_ms @ Slurm 26.05, linuxproc"} <= names


def test_a_dot_directory_under_an_evidence_directory_is_scratch_and_not_a_bundle(tmp_path):
    """A run writes `.NAME.raw` beside its bundle while it runs: a history read in that
    moment (or after a killed run) must not refuse the directory for it."""
    runs = tmp_path / "evidence"
    _bundle(runs / "a-filed", 1_000.0, 100.0, 40.0)
    scratch = runs / ".b-running.raw"
    scratch.mkdir()
    (scratch / "results.json").write_text("{}")  # half-written: would not verify
    result = run_cli("history", str(runs), "--fail-on-change")
    assert result.returncode == 0, result.stderr
    assert "history: 1 bundles" in result.stdout and ".b-running" not in result.stdout
    named = run_cli("history", str(scratch))  # named on purpose: read, and refused as any bundle
    assert named.returncode == 2 and "does not verify" in named.stderr
