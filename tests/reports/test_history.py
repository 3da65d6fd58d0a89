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
        ([str(tmp_path / "ok"), "--html", str(tmp_path / "no-such-dir" / "h.html")], "write …/no-such-dir/h.html"),
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


def _capacity_bundle(directory, started, knee, cost, light_delay, ladder_start=18.0):
    directory.mkdir(parents=True)
    ladder = {"ladder_mode": 0.0, "ladder_start": ladder_start, "ladder_factor": 1.5, "level_seconds": 3.0}
    checks = [
        CheckResult.judge("capacity.knee", True, "x", "y", metrics={
            "knee_output_throughput": knee, "light_chunk_delay_p50_ms": light_delay, **ladder}),
        CheckResult.judge("capacity.proxy_cpu_per_chunk", True, "x", "y", metrics={"proxy_cpu_us_per_chunk": cost}),
    ]  # fmt: skip
    scenario = ScenarioResult("capacity", checks=checks, started=started, ended=started + 10)
    write_results(directory / "results.json", [scenario], {"spec": "sut==1"}, False)
    sealed(directory)


def test_declared_check_numbers_are_flagged_under_their_own_rule_and_only_on_one_ladder(tmp_path):
    """The knee, the CPU per chunk and a light chunk's delay have a worse direction and a
    measured noise (base.regressions): history flags them under that rule (tolerance and
    margin), never under its own --tolerance, and a run on another ladder starts a series of
    its own instead of reading as a fall."""
    runs = tmp_path / "evidence"
    _capacity_bundle(runs / "a", 1_000.0, 20_000.0, 30.0, 0.30)
    _capacity_bundle(runs / "b", 2_000.0, 12_000.0, 45.0, 0.40)  # knee -40%, cost +50%: within 60% / 75%
    _capacity_bundle(runs / "c", 3_000.0, 7_000.0, 80.0, 0.70)  # knee -42% (-65% since a), cost +78%
    _capacity_bundle(runs / "d", 4_000.0, 2_000.0, 80.0, 0.70, ladder_start=40.0)  # another ladder
    table = tmp_path / "history.csv"
    result = run_cli("history", str(runs), "--tolerance", "0.1", "--csv", str(table))
    assert result.returncode == 0, result.stderr
    flagged = sorted(line for line in result.stderr.splitlines() if line.startswith("flagged: "))
    assert len(flagged) == 2, flagged
    assert flagged[0].startswith("flagged: check capacity.knee knee_output_throughput [ladder ")
    assert flagged[0].endswith("in c: 2e+04 → 7000 (-65%) since the best"), flagged
    assert flagged[1].startswith("flagged: check capacity.proxy_cpu_per_chunk proxy_cpu_us_per_chunk [ladder ")
    assert flagged[1].endswith("in c: 45 → 80 (+78%)"), flagged
    # 0.3 → 0.7 ms is +133%, inside the delay's margin of half a millisecond on top of its 50%
    assert not any("light_chunk_delay" in line for line in flagged)
    # history's own --tolerance (10%) would have flagged b's knee; d's ladder is a series of its own
    rows = list(csv.DictReader(io.StringIO(table.read_text())))
    knees = {r["name"] for r in rows if "knee_output_throughput" in r["name"] and r["value"]}
    assert len(knees) == 2, knees
    assert [r["bundle"] for r in rows if r["name"] in knees and float(r["value"]) == 2000] == ["d"]
