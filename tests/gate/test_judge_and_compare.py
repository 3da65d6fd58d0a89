"""The gate's own checks and the comparison, on hand-made results: each rule passes a good
result (positive control) and fails a bad one (negative control)."""

import json
import tarfile

from dd_accept.base.results import SCHEMA
from dd_accept.harness.gate import judge
from dd_accept.harness.gate_file import parse_gate
from dd_accept.reports import compare, compare_render
from tests.helpers import run_cli, sealed

GATE = """
[gate]
name = "g"
scenarios = ["overload", "streaming", "health"]
allow_unsupported = ["health.probe_isolation"]
[thresholds]
max_error_rate = 0.01
"""


SCENARIO = {"verdict": "pass", "started": 1.0, "ended": 2.0, "error": None}  # what every scenario record holds


def _results(spec="sut==1", *, error_rate=0.0, ttft=0.5, isolation="unsupported", failover="pass", extra=()):
    def check(check_id, verdict="pass", **metrics):
        return {"id": check_id, "verdict": verdict, "expected": "e", "observed": "o", "detail": "", "metrics": metrics}

    return {
        "schema": SCHEMA,
        "verdict": "pass",
        "allow_unsupported": False,
        "sut": {"spec": spec},
        "scenarios": [
            {
                **SCENARIO,
                "name": "overload",
                "checks": [
                    check("overload.partial.completes", client_error_rate=error_rate),
                    check("overload.partial.failover", failover, failovers=10),
                    *extra,
                ],
            },
            {**SCENARIO, "name": "streaming", "checks": [check("streaming.no_buffering", ttft_p99_s=ttft)]},
            {**SCENARIO, "name": "health", "checks": [check("health.probe_isolation", isolation)]},
        ],
    }


def _verdicts(checks):
    return {check.id: check.verdict for check in checks}


def test_gate_passes_a_good_result_and_allows_only_the_named_unsupported_check():
    gate = parse_gate(GATE, "g.toml")
    assert _verdicts(judge(gate, _results())) == {
        "gate.checks": "pass",
        "gate.max_error_rate": "pass",
    }


def test_gate_fails_each_broken_rule():
    gate = parse_gate(GATE, "g.toml")
    assert _verdicts(judge(gate, _results(error_rate=0.2)))["gate.max_error_rate"] == "fail"
    failed = judge(gate, _results(failover="fail"))[0]
    assert failed.verdict == "fail" and "overload.partial.failover" in failed.observed
    # `unsupported` is only accepted for the checks the gate file names
    strict = parse_gate(GATE.replace('["health.probe_isolation"]', "[]"), "g.toml")
    assert _verdicts(judge(strict, _results()))["gate.checks"] == "fail"


def test_gate_fails_a_threshold_whose_number_was_never_measured():
    gate = parse_gate(GATE, "g.toml")
    results = _results()
    results["scenarios"] = [s for s in results["scenarios"] if s["name"] != "streaming"]
    checks = {check.id: check for check in judge(gate, results)}
    assert checks["gate.max_error_rate"].verdict == "pass", "measured by overload, which ran"
    assert "did not run: streaming" in checks["gate.checks"].observed


def test_comparison_names_regressions_fixes_and_ratios():
    baseline = _results("sut==1.0", ttft=0.5, extra=[{"id": "overload.recovery", "verdict": "fail", "metrics": {}}])
    candidate = _results("sut==1.1", ttft=1.0, failover="fail", isolation="pass")
    comparison = compare.compare(baseline, candidate)
    changes = {check.id: check.change for check in comparison.checks}
    assert changes["overload.partial.failover"] == "regressed"
    assert changes["health.probe_isolation"] == "fixed"
    assert changes["overload.recovery"] == "removed"
    assert changes["overload.partial.completes"] == "same"
    ttft = next(c for c in comparison.checks if c.id == "streaming.no_buffering").metrics[0]
    assert ttft.ratio == 2.0 and ttft.show_ratio() == "x2.00"
    assert [c.id for c in comparison.regressions] == ["overload.partial.failover"]
    assert "sut==1.0" in comparison.headline() and "1 regressed" in comparison.headline()
    markdown = compare_render.to_markdown(comparison)
    assert "| `overload.partial.failover` | pass | fail | **regressed** |" in markdown
    assert "ttft_p99_s 0.5 → 1 (x2.00)" in markdown
    page = compare_render.to_html(comparison)
    assert '<tr class="regressed">' in page and "<script" not in page


def test_compare_cli_reads_directories_and_archives(tmp_path):
    for name, spec, failover in (("a", "sut==1.0", "pass"), ("b", "sut==1.1", "fail")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(_results(spec, failover=failover)))
        sealed(tmp_path / name)
    with tarfile.open(tmp_path / "b.tar.gz", "w:gz") as archive:
        archive.add(tmp_path / "b", arcname="b")
    same = run_cli("compare", str(tmp_path / "a"), str(tmp_path / "a"), "--fail-on-regression")
    assert same.returncode == 0, same.stderr
    regressed = run_cli("compare", str(tmp_path / "a"), str(tmp_path / "b.tar.gz"), "--format", "md")
    assert regressed.returncode == 0 and "**regressed**" in regressed.stdout
    failing = run_cli("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--fail-on-regression")
    assert failing.returncode == 1 and "1 check(s) regressed" in failing.stderr
    bad = run_cli("compare", str(tmp_path / "a"), str(tmp_path / "nothing"))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "nothing: no such file or directory" in bad.stderr


def test_a_comparison_across_slurm_releases_says_where_each_side_ran():
    from dd_accept.base.results import schema_problem

    baseline = {**_results("sut==1"), "cluster": {"kind": "docker", "slurm_release": "22.05", "proctrack": "linuxproc"}}
    candidate = {**_results("sut==1"), "cluster": {"kind": "docker", "slurm_release": "26.05", "proctrack": "cgroup"}}
    assert schema_problem(baseline) is None and schema_problem(candidate) is None
    headline = compare.compare(baseline, candidate).headline()
    assert headline.startswith(
        "baseline sut==1 on Slurm 22.05, linuxproc (pass) → candidate sut==1 on Slurm 26.05, cgroup"
    )
    # bundles from before the cluster was recorded compare as before
    assert " on " not in compare.compare(_results("sut==1"), _results("sut==2")).headline()
    assert schema_problem({**baseline, "cluster": {"kind": "docker", "proctrack": "cgroup-v3"}}) is not None
