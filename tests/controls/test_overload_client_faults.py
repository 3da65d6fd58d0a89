"""Overload controls: faults in the client's admission controller, and the positive control.

The positive control runs as a release engineer hands a candidate over: `--sut DIR`, a
directory holding the released runtime's wheel beside the released engine rebuilt under a
new version. The profile follows the runtime wheel; every wheel of the directory is installed
and attested by its sha256 (issue #32). The client faults run the scenario in-process on
rc1's node image with the engine variant laid over it (what `--sut DIR` would install, without
building the wheelhouse and the bundle again for each), only as far as the checks they touch.
Two runs through the CLI show a SUT behaviour that fails or never happens is exit 1."""

import json
import re
import shutil
from xml.etree import ElementTree

import pytest

from dd_accept.base.hashing import sha256_file
from dd_accept.base.results import SCHEMA
from tests.controls.controls import run_against_fault
from tests.helpers import run_cli
from tests.variants import FAULTS, make_variant, rebuild_wheel

pytestmark = pytest.mark.cluster

RUNTIME = "data_designer_slurm-1.0.0rc1-py3-none-any.whl"


def _directory(sut_wheelhouse, tmp_path):
    """The released runtime's wheel beside the released engine rebuilt under a new version."""
    released = {w.name: sut_wheelhouse.path / w.file for w in sut_wheelhouse.wheels}
    directory = tmp_path / "wheels"
    directory.mkdir()
    shutil.copy2(released["data-designer-slurm"], directory)
    rebuild_wheel(released["data-designer-engine"], directory, "rebuilt")
    assert len(list(directory.iterdir())) == 2
    return directory


def _run(directory, tmp_path):
    """`dd-accept run overload --sut DIR`; (results, stdout) after checking the evidence names
    every wheel of DIR with its sha256 and installed the directory's engine."""
    out = tmp_path / "evidence"
    result = run_cli(
        "--quiet", "run", "overload", "--replicas", "8", "--sut", str(directory), "--out", str(out), timeout=900
    )
    assert result.returncode == 0, result.stdout + result.stderr
    results = json.loads((out / "results.json").read_text())
    wheels = {wheel.name: sha256_file(wheel) for wheel in directory.iterdir()}
    assert results["sut"]["spec"] == "wheel_dir:wheels" and results["sut"]["profile"] == "data-designer-slurm-1.0"
    assert {w["file"]: w["sha256"] for w in results["sut"]["wheels"]} == wheels
    statement = json.loads((out / "provenance.json").read_text())
    assert {s["name"]: s["digest"]["sha256"] for s in statement["subject"]} == wheels
    assert all(f"{digest}  {file}" in result.stdout for file, digest in wheels.items())
    configuration = {c["name"]: c for c in statement["predicate"]["configuration"]}
    runtime = configuration["sut-runtime-source"]["annotations"]
    assert runtime["wheel"] == RUNTIME and "data_designer/slurm/runtime/proxy.py" in runtime["files"]
    (engine,) = [f for f in wheels if f.startswith("data_designer_engine-")]
    installed = configuration["dependency-lock:node-sut"]["annotations"]["lock"].splitlines()
    assert f"data-designer-engine=={engine.split('-')[1]}" in installed, "the directory's engine is what ran"
    return results, result.stdout


# What a client fault touches: the total overload and the recovery after it, judged together.
# The phases before that judge run as in a whole run (the partial overload leaves the client's
# limit where total overload finds it); the backend-loss round and the default threshold's
# cold start after it, which no client fault reaches, do not.
TOTAL = (
    "overload.total.attempts",
    "overload.total.retry_after",
    "overload.total.admission_decrease",
    "overload.total.cooldown",
    "overload.recovery",
)


def _client_fault(fault, sut_wheelhouse, sut_image, sut_profile, tmp_path):
    """The overload scenario on rc1's runtime beside its engine with `fault`, up to the total
    overload's judge: {check id: CheckResult}."""
    assert FAULTS[fault].distribution == "data-designer-engine"
    return run_against_fault(fault, sut_wheelhouse, sut_image, sut_profile, tmp_path, checks=TOTAL)


def test_missing_cooldown_is_caught_by_total_cooldown(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    checks = _client_fault("no-cooldown", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    assert set(checks) == set(TOTAL), "only the chosen checks are judged"
    cooldown = checks["overload.total.cooldown"]
    assert cooldown.verdict == "fail" and cooldown.metrics["cooldown_breaches"] > 0, cooldown
    assert cooldown.metrics["cooldown_windows_judged"] > 0 and "admitted" in cooldown.detail
    assert checks["overload.total.retry_after"].verdict == "pass"


def test_a_cooldown_twice_the_retry_after_is_caught_by_total_cooldown(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    """No request comes inside a window, so only the upper bound sees it: the replicas meet the
    client's next request about 3 s after its 3 s cooldown has run out."""
    checks = _client_fault("long-cooldown", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    cooldown = checks["overload.total.cooldown"]
    assert cooldown.verdict == "fail" and cooldown.metrics["cooldown_overruns"] >= 1, cooldown
    assert cooldown.metrics["cooldown_breaches"] == 0, cooldown
    late = float(re.search(r"next request (\d+\.\d+)s after", cooldown.detail)[1])
    assert 2.0 < late < 4.5, cooldown
    untouched = ("overload.total.retry_after", "overload.total.admission_decrease", "overload.total.attempts")
    assert all(checks[name].verdict == "pass" for name in untouched), {n: checks[n] for n in untouched}


def test_a_decrease_on_every_429_is_caught_by_admission_decrease(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    """Its first two values are AIMD's (8 → 6 → 4), so a check of the sequence alone passes it;
    the replicas show no new request between its decreases: one round lowered it again and
    again. What it let through stayed within the limits it reported."""
    checks = _client_fault("decrease-every-429", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    decrease = checks["overload.total.admission_decrease"]
    assert decrease.verdict == "fail" and decrease.metrics["decreases_without_new_round"] >= 1, decrease
    assert decrease.observed.startswith("8 → 6 → 4 → 3"), decrease.observed
    assert "before any new request reached a replica (first to 4)" in decrease.observed, decrease.observed
    assert decrease.metrics["limit_breaches"] == 0, decrease
    untouched = ("overload.total.attempts", "overload.total.retry_after", "overload.total.cooldown")
    assert all(checks[name].verdict == "pass" for name in untouched), {n: checks[n] for n in untouched}


def test_missing_increase_is_caught_by_recovery(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    checks = _client_fault("no-increase", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    recovery = checks["overload.recovery"]
    assert recovery.verdict == "fail" and "low point 4, highest after recovery None;" in recovery.observed, recovery
    assert recovery.metrics["limit_breaches"] == 0
    assert checks["overload.total.admission_decrease"].verdict == "pass"


def test_a_limit_raised_after_5_successes_is_caught_by_recovery(sut_wheelhouse, sut_image, sut_profile, tmp_path):
    """It recovers (the limit rises above its low point, every record completes), but each
    rise comes after 5 successes, not the controller's 25: counted from its own releases."""
    checks = _client_fault("hasty-increase", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    recovery = checks["overload.recovery"]
    assert recovery.verdict == "fail" and recovery.metrics["increases_off_rule"] >= 1, recovery
    counted = [int(n) for n in re.findall(r"rose \d+ → \d+ after (\d+) successes, not 25", recovery.detail)]
    assert counted and max(counted) < 12, recovery  # about 5 each (those in a cooldown count here, not for it)
    assert recovery.metrics["limit_breaches"] == 0
    assert checks["overload.total.admission_decrease"].verdict == "pass"


def test_a_client_that_raises_other_than_its_provider_error_on_429_is_judged_not_an_error(
    sut_wheelhouse, sut_image, sut_profile, tmp_path
):
    """The executor lowers its limit and cools down on each 429, then raises a RuntimeError:
    the caller never sees the 429 or its Retry-After. That is the SUT's behaviour (judged by
    retry_after), not the harness's fault (the client used to crash: exit 2)."""
    checks = _client_fault("rate-limit-raises", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    retry_after = checks["overload.total.retry_after"]
    assert retry_after.verdict == "fail" and retry_after.observed.startswith("0 client 429(s)"), retry_after
    assert checks["overload.total.admission_decrease"].verdict == "pass", "the controller was told"


def test_positive_control_rc1_passes_every_overload_check_through_the_cli(sut_wheelhouse, tmp_path):
    """rc1's runtime beside its engine rebuilt under a new version: the directory the issue's
    release engineer passed (`run overload --sut DIR --replicas 8`), judged as rc1 is."""
    directory = _directory(sut_wheelhouse, tmp_path)
    out = tmp_path / "evidence"
    results, stdout = _run(directory, tmp_path)
    assert results["schema"] == SCHEMA and results["verdict"] == "pass"
    (scenario,) = results["scenarios"]
    assert [c["id"] for c in scenario["checks"]] == [
        "overload.partial.completes",
        "overload.partial.failover",
        "overload.admission.exempt",
        "overload.total.attempts",
        "overload.total.retry_after",
        "overload.total.admission_decrease",
        "overload.total.cooldown",
        "overload.recovery",
        "overload.total.unreachable",
        "overload.routing_restored",
        "overload.admission.rejects",
        "overload.ledger.answered_once",
        "overload.ledger.delivered",
    ]
    assert all(c["verdict"] == "pass" for c in scenario["checks"])
    admission = next(c for c in scenario["checks"] if c["id"] == "overload.admission.rejects")
    once = next(c for c in scenario["checks"] if c["id"] == "overload.ledger.answered_once")
    assert once["metrics"]["requests"] >= 72 and once["metrics"]["answered_twice"] == 0, once  # 32 + 40 records
    assert "threshold 0, depth 0: 400: 2; threshold 0, depth 7: 429: 2 (Retry-After 3: 2)" in admission["observed"]
    assert "threshold 128, depth 128: 400: 1; threshold 128, depth 129: 429: 1" in admission["observed"]
    # rc1's sampler starts on the first request through the middleware: that one is admitted
    # (fail-open, no reading yet), the next ones are rejected, well inside its 1 s bound
    assert "cold start at depth 129 (threshold 128): " in admission["observed"]
    assert 1 <= admission["metrics"]["cold_start_admitted"] <= 5, admission["observed"]  # 1 on an idle machine
    assert admission["metrics"]["cold_start_first_reject_s"] < 0.5
    # the middleware lets every exempt path through on all 8 replicas held too deep: the app
    # answers 200 (/health, /metrics, /version, /v1/models) or 404 (/ready, /ping: it has none)
    exempt = next(c for c in scenario["checks"] if c["id"] == "overload.admission.exempt")
    judged = (
        int(exempt["metrics"]["exempt_asked"]) // 6
    )  # the replicas rejecting before and after (8 on an idle machine)
    assert exempt["metrics"]["exempt_refused"] == 0 and judged >= 1, exempt
    assert exempt["observed"] == (
        f"{6 * judged} GET(s) on the {judged} of 8 replica(s) at depth 7 (threshold 0) rejecting the admission probe "
        f"before and after: 200: {4 * judged}, 404: {2 * judged}"
    ), exempt
    # replicas 2 and 5 resetting each request, the rest answering 429: every request met overload,
    # and those whose last attempt was a reset (2 of every 8 round rc1's ring) still got 429 with
    # the replicas' Retry-After
    unreachable = next(c for c in scenario["checks"] if c["id"] == "overload.total.unreachable")
    assert unreachable["metrics"]["met_overload"] == 12 and unreachable["metrics"]["ended_on_reset"] >= 2
    assert unreachable["observed"].endswith("their client statuses 429: 12, Retry-After 3: 12"), unreachable
    # least connections after the faults: two each at once, before and after replica 0 streamed 3 whose client
    # left, failed each retried status twice and reset 3 (each retried elsewhere)
    routing = next(c for c in scenario["checks"] if c["id"] == "overload.routing_restored")
    assert routing["observed"].startswith(
        "before the nudge: 16 of 16 in flight together, per replica 2, 2, 2, 2, 2, 2, 2, 2, client statuses 200: 16; "
        "the nudge: its first request to replica 0; replica 0 streamed 3 its client left, held 3 its client gave up "
        "on, failed 429: 2, 500: 2, 502: 2, 503: 2, 504: 2, reset: 3; after it: 16 of 16 in flight together, per "
        "replica 2, 2, 2, 2, 2, 2, 2, 2"
    ), routing
    assert [phase["kind"] for phase in scenario["phases"]][:3] == ["deploy", "deploy", "hold"]
    cooldown = next(c for c in scenario["checks"] if c["id"] == "overload.total.cooldown")
    assert cooldown["metrics"]["cooldown_windows_judged"] > 0 and cooldown["metrics"]["cooldown_breaches"] == 0
    assert "5410c6bca7c035c4cb215cc0319071e00acab3f124a8ebb9a44d24daaa4d4520  " + RUNTIME in stdout
    # the run left a complete bundle that verifies, as a directory and as a .tar.gz
    for name in ("manifest.json", "provenance.json", "redactions.json", "commands.jsonl", "summary.md", "junit.xml"):
        assert (out / name).is_file(), name
    assert list((out / "events").rglob("events-*.jsonl")) and list((out / "logs").rglob("proxy.log"))
    # each check is named by the judge phase that judged it, and its testcase takes the time
    # of the phases that gathered its evidence (the partial checks: deploying and driving)
    judged = {check: p["title"] for p in scenario["phases"] for check in p["judged"]}
    assert judged["overload.partial.completes"] == "partial overload: completion and failover", judged
    assert set(judged) == {c["id"] for c in scenario["checks"]}
    testcases = ElementTree.parse(out / "junit.xml").iter("testcase")
    cases = {case.get("name"): float(case.get("time")) for case in testcases}
    assert set(cases) == set(judged) and all(seconds > 0 for seconds in cases.values()), cases
    assert not list(tmp_path.glob(".*.raw")), "raw run outputs are removed"
    for bundle in (out, tmp_path / "evidence.tar.gz"):
        verified = run_cli("verify", str(bundle))
        assert verified.returncode == 0, verified.stdout + verified.stderr
    (out / "summary.md").write_text("edited")
    tampered = run_cli("verify", str(out))
    assert tampered.returncode == 1 and "modified: summary.md" in tampered.stdout


def test_run_reports_a_failed_check_with_exit_1(tmp_path, sut_wheelhouse):
    """A faulty SUT given through --sut fails the run with exit status 1 (not 2), for its
    reason only, on Slurm 24.11 (Debian trixie, Python 3.13) as on the default release."""
    (wheel,) = [w for w in sut_wheelhouse.wheels if w.name == "data-designer-slurm"]
    variant = make_variant(sut_wheelhouse.path / wheel.file, FAULTS["five-attempts"], tmp_path / "wheels")
    out = tmp_path / "evidence"
    result = run_cli(
        "--quiet", "run", "overload", "--slurm", "24.11", "--sut", str(variant), "--out", str(out), timeout=900
    )
    assert result.returncode == 1, result.stdout + result.stderr
    results = json.loads((out / "results.json").read_text())
    failed = [c for s in results["scenarios"] for c in s["checks"] if c["verdict"] == "fail"]
    assert [c["id"] for c in failed] == ["overload.total.attempts"]
    assert results["cluster"]["slurm_release"] == "24.11"
    assert "attempts per 429: 5:" in failed[0]["observed"], failed[0]["observed"]
    versions = json.loads((out / "provenance.json").read_text())["predicate"]["invocation"]["versions"]
    assert versions["slurm"].startswith("slurm-wlm 24.11.") and versions["node_python"].startswith("Python 3.13.")


def test_a_proxy_that_never_serves_is_a_failed_check_not_an_environment_error(tmp_path, sut_wheelhouse):
    """A SUT behaviour the scenario waits on that never happens is judged: exit 1, a failed
    check named after the behaviour, never exit 2 ("could not be judged")."""
    (wheel,) = [w for w in sut_wheelhouse.wheels if w.name == "data-designer-slurm"]
    variant = make_variant(sut_wheelhouse.path / wheel.file, FAULTS["endpoint-exits-at-start"], tmp_path / "wheels")
    out = tmp_path / "evidence"
    result = run_cli("--quiet", "run", "streaming", "--sut", str(variant), "--out", str(out), timeout=900)
    assert result.returncode == 1, result.stdout + result.stderr
    (scenario,) = json.loads((out / "results.json").read_text())["scenarios"]
    assert scenario["error"] is None
    (check,) = scenario["checks"]
    assert check["id"] == "streaming.endpoint_starts" and check["verdict"] == "fail"
    assert "the proxy step ended" in check["observed"], check
