"""Controls for the capacity checks, each asserting the numbers behind its verdict.

rc1 is the positive control, run as a user runs it (`dd-accept run capacity`). Two proxies
that serve every stream correctly, and so pass every behavioural check, are the negative
ones: one burns CPU on each event it forwards, one blocks its event loop on each. Each
fails the capacity check it breaks, with the knee measured before (rc1) and after (the
fault) side by side; and `compare --fail-on-regression` of rc1's bundle against the
fault's results exits 1 naming the number that got worse, its two values and the tolerance.
"""

import json
import re
from dataclasses import asdict

import pytest

from dd_accept.acceptance.capacity import CapacityOptions, run_capacity
from dd_accept.base.progress import ProgressWriter
from dd_accept.base.regressions import (
    KNEE_THROUGHPUT,
    LIGHT_CHUNK_DELAY,
    PROXY_CPU_PER_CHUNK,
    REGRESSION_METRICS,
    cheapest_median,
    per_level,
)
from dd_accept.deployment import RunDirectory
from dd_accept.harness.gate_rounds import judge_round_regressions
from tests.controls.controls import faulty_image, own_allocation, run_with_fault
from tests.helpers import assert_the_dry_run_planned_what_the_run_did, run_cli

# Capacity saturates both cores on purpose: no other cluster test runs beside it (tests/conftest.py).
pytestmark = [pytest.mark.cluster, pytest.mark.exclusive]

# Shorter levels than a release run's 3 s, from 18 streams: the controls judge what a fault
# does to the knee, not its third significant digit (and make test has a time budget).
LEVEL_SECONDS, START = 2.0, 18
SETTINGS = CapacityOptions(level_seconds=LEVEL_SECONDS, load_start=START)
# Only the two lightest levels: where a chunk's delay is the proxy's own.
NOT_JUDGED = "capacity not judged: the knee is bounded by the harness, not by the proxy"
# The candidate of each comparison is a control's results.json in its scratch directory (beside
# the variant's wheel), not a bundle: compared, marked NOT verified, instead of refused.
UNSEALED = ("--allow-unverified",)
QUIET = ProgressWriter(None, "round")
LIGHT = CapacityOptions(level_seconds=LEVEL_SECONDS, load_start=START, load_levels=2)


def _capacity(allocation, run, profile, progress, settings=SETTINGS):
    return run_capacity(allocation, run, profile, settings, progress)


def _with(settings):
    return lambda allocation, run, profile, progress: _capacity(allocation, run, profile, progress, settings)


def judged(before, check_id):
    """rc1's check, which the comparison needs: a run the machine starved is not judged, and a
    control compared with it says so rather than comparing with what the machine bounded."""
    assert check_id in before, f"rc1's baseline was not judged on this machine: {check_id} not reported"
    return before[check_id]


@pytest.fixture(scope="module")
def rc1(tmp_path_factory):
    """rc1's capacity run through the CLI: the "before" every fault is compared with."""
    out = tmp_path_factory.mktemp("capacity") / "rc1"
    ladder = ("--level-seconds", str(LEVEL_SECONDS), "--load-start", str(START))
    done = run_cli("--quiet", "run", "capacity", *ladder, "--out", str(out), timeout=900)
    results = json.loads((out / "results.json").read_text())
    (scenario,) = results["scenarios"]
    checks = {c["id"]: c for c in scenario["checks"]}
    # A machine that starved the proxy (the harness beside it, or its hypervisor) leaves the run
    # not judged, exit 2, its headroom numbers in the error; never a failed check of rc1's.
    failing = {c for c, check in checks.items() if check["verdict"] != "pass"}
    assert not failing, failing
    if scenario["error"] is not None:
        assert scenario["error"].startswith(NOT_JUDGED) and done.returncode == 2, (scenario["error"], done.stderr)
        assert "capacity.harness_headroom" not in checks and "capacity.proxy_cpu_per_chunk" in checks, checks
    else:
        assert done.returncode == 0, done.stderr
    # what `run capacity --dry-run` prints for this ladder is what the run submitted, both ways
    assert_the_dry_run_planned_what_the_run_did(out / "commands.jsonl", *ladder, scenario="capacity")
    return out, scenario, checks


def test_rc1_meets_the_knee_floor_and_the_cost_bound(rc1, sut_profile):
    _, scenario, checks = rc1
    cost = checks["capacity.proxy_cpu_per_chunk"]
    knee = checks.get("capacity.knee")
    if scenario["error"] is None:
        assert knee["verdict"] == "pass", knee
    if knee is not None:  # judged, or met its floor even on a starved machine
        assert knee["metrics"][KNEE_THROUGHPUT] >= sut_profile.capacity.knee_floor, knee
        assert knee["metrics"]["knee_chunk_delay_p95_ms"] <= SETTINGS.slo_chunk_delay_ms
    assert cost["verdict"] == "pass" and 10 < cost["metrics"][PROXY_CPU_PER_CHUNK] <= 100, cost
    # The proxy ran out: most of a core at the knee. Whether it waited for a CPU the harness
    # (or the test beside this one in make test) held decides whether the run is judged, on
    # the numbers headroom reports; the harness's share is reported beside them.
    headroom = checks.get("capacity.harness_headroom")
    if headroom is None:  # starved: said so with the numbers that made it so
        assert scenario["error"].startswith(NOT_JUDGED) and "harness " in scenario["error"], scenario["error"]
    else:
        numbers = headroom["metrics"]
        assert 0.15 < numbers["harness_share"] < 0.7 and 0 < numbers["proxy_wait_share"] <= 0.25, headroom
        assert numbers["client_core_share"] < 0.85 and numbers["machine_stolen"] <= 0.25, headroom
        assert numbers["proxy_core_share"] >= 0.6, "not starved: the proxy ran out on its own, most of a core"
    # Each level is a phase with vLLM's serving metrics, so a capacity bundle trends like any other.
    levels = [p for p in scenario["serving"]["phases"] if p["title"].startswith("load level ")]
    assert len(levels) == knee["metrics"]["levels_run"] >= 3
    throughputs = [p["metrics"]["output_throughput"] for p in levels]
    assert throughputs[1] > throughputs[0], "more streams in flight carry more tokens below the knee"
    report = (rc1[0] / "report.html").read_text()
    assert report.count('aria-label="capacity curve"') == 1 and report.count("<rect ") >= len(levels)


def test_a_proxy_starved_of_cpu_is_not_judged_by_harness_headroom(sut_allocation, sut_profile, sut_cluster):
    """Negative control of the headroom check: two busy loops beside the proxy on its node
    hold the CPU it is ready to use. The knee is then not the proxy's, and the check says so
    with the run-queue wait it read; the cost per chunk, the proxy's own, still passes."""
    python = sut_allocation.cluster.layout.python
    node = sut_allocation.first_node
    hogs = sut_allocation.start_step(
        [python, "-c", "while True: pass"], options=["-J", "hog", "-N1", "-n4", f"--nodelist={node}"]
    )
    try:
        result = run_capacity(
            sut_allocation, RunDirectory.create(sut_cluster), sut_profile, LIGHT, ProgressWriter(None, "hog")
        )
    finally:
        sut_allocation.stop_step(hogs, "hog", "KILL")
    checks = {c.id: c for c in result.checks}
    print("starved:", result.error)
    # not judged (exit 2 for a run), with the run-queue wait it read; no check of the SUT fails
    assert result.error is not None and result.error.startswith(NOT_JUDGED), result.error
    waited = re.search(r"the proxy waited for a CPU (\d+(?:\.\d+)?)% of the time at ", result.error)
    assert waited and float(waited[1]) > 25, result.error
    assert "capacity.harness_headroom" not in checks and all(c.verdict == "pass" for c in checks.values()), checks
    assert checks["capacity.proxy_cpu_per_chunk"].verdict == "pass", checks["capacity.proxy_cpu_per_chunk"]


def test_a_proxy_that_burns_cpu_per_event_is_caught_by_proxy_cpu_per_chunk(
    rc1, sut_wheelhouse, sut_image, sut_profile, tmp_path
):
    bundle, _, before = rc1
    checks = run_with_fault(_capacity, "cpu-per-chunk", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    cost = checks["capacity.proxy_cpu_per_chunk"]
    was = before["capacity.proxy_cpu_per_chunk"]["metrics"][PROXY_CPU_PER_CHUNK]
    print("rc1:", judged(before, "capacity.knee")["observed"], "|", was, "us/chunk")  # the numbers, in -rA
    print("cpu-per-chunk:", checks["capacity.knee"].observed, "|", cost.observed)
    assert cost.verdict == "fail", cost
    assert cost.metrics[PROXY_CPU_PER_CHUNK] >= was + 150, (was, cost)  # 200 us per event on top of rc1's
    knee_before = before["capacity.knee"]["metrics"][KNEE_THROUGHPUT]
    assert checks["capacity.knee"].metrics[KNEE_THROUGHPUT] < knee_before, (knee_before, checks["capacity.knee"])
    # rc1 -> this release: the comparison says which number got worse, by how much, against what.
    compared = run_cli("compare", str(bundle), str(tmp_path), "--fail-on-regression", "--format", "json", *UNSEALED)
    assert compared.returncode == 1, compared.stderr
    document = json.loads(compared.stdout)
    worse = {r["metric"]: r for r in document["metric_regressions"]}
    # read on the levels both reached: the fault's knee came early, so not on rc1's cheapest
    mine = per_level(cost.metrics, PROXY_CPU_PER_CHUNK)
    theirs = per_level(before["capacity.proxy_cpu_per_chunk"]["metrics"], PROXY_CPU_PER_CHUNK)
    shared = set(mine) & set(theirs)
    assert worse[PROXY_CPU_PER_CHUNK]["baseline"] == cheapest_median({k: theirs[k] for k in shared})[1]
    assert worse[PROXY_CPU_PER_CHUNK]["candidate"] == cheapest_median({k: mine[k] for k in shared})[1]
    rules = {rule.metric: rule for rule in REGRESSION_METRICS}
    assert worse[PROXY_CPU_PER_CHUNK]["tolerance"] == rules[PROXY_CPU_PER_CHUNK].tolerance
    assert f"worse than the baseline: capacity.proxy_cpu_per_chunk {PROXY_CPU_PER_CHUNK}: baseline" in compared.stderr
    # The knee fell (asserted above); whether by more than its tolerance depends on where rc1's
    # own knee landed on this machine, and the comparison must say exactly what the rule says.
    knee_after = checks["capacity.knee"].metrics[KNEE_THROUGHPUT]
    assert (KNEE_THROUGHPUT in worse) == rules[KNEE_THROUGHPUT].regressed(knee_before, knee_after), worse
    assert not document["not_compared"]


def test_a_proxy_that_blocks_per_event_is_caught_by_knee(rc1, sut_wheelhouse, sut_image, sut_profile, tmp_path):
    """It costs no CPU: only the knee shows it. Run on the README's rate ladder (requests
    arriving as a seeded Poisson process, 40, 60, 90 ... per second): the knees of two
    ladders are not compared, and the comparison says so; the verdict that flipped is."""
    bundle, _, before = rc1
    poisson = CapacityOptions(load_mode="poisson", load_start=40, level_seconds=LEVEL_SECONDS)
    checks = run_with_fault(_with(poisson), "blocking-per-chunk", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    knee = checks["capacity.knee"]
    knee_before = before.get("capacity.knee", {}).get("metrics", {}).get(KNEE_THROUGHPUT)
    print("blocking-per-chunk:", knee.observed, "|", checks["capacity.proxy_cpu_per_chunk"].observed)
    assert knee.verdict == "fail", knee
    assert knee.metrics[KNEE_THROUGHPUT] < sut_profile.capacity.knee_floor, knee
    assert "chunk delay p95" in knee.observed, "broken for its delay, not for a failed request"
    assert knee_before is None or knee.metrics[KNEE_THROUGHPUT] < knee_before / 2, (knee_before, knee)
    assert checks["capacity.proxy_cpu_per_chunk"].verdict == "pass", checks["capacity.proxy_cpu_per_chunk"]
    compared = run_cli("compare", str(bundle), str(tmp_path), "--fail-on-regression", "--format", "json", *UNSEALED)
    document = json.loads(compared.stdout)
    if "capacity.knee" in before:
        assert compared.returncode == 1 and "capacity.knee" in document["regressed"], compared.stderr
    else:  # rc1's own knee was the machine's (its hypervisor or the harness took the CPU): not judged,
        # so no verdict of rc1's to flip: the candidate's failed knee is one the baseline never judged
        changes = {check["id"]: check["change"] for check in document["checks"]}
        assert changes["capacity.knee"] == "added" and "capacity.knee" not in document["regressed"], document
    assert (
        f"capacity.knee {KNEE_THROUGHPUT}: the runs' ladders differ (ladder_mode, ladder_start)"
        in (document["not_compared"])
    )
    # each level a phase; the first one's requests sent at its rate
    (scenario,) = json.loads((tmp_path / "results.json").read_text())["scenarios"]
    levels = [p for p in scenario["serving"]["phases"] if p["title"].startswith("load level")]
    assert levels[0]["title"] == "load level 1: 40 requests/s", levels
    assert 0.6 * 40 * LEVEL_SECONDS <= levels[0]["metrics"]["requests"] <= 1.5 * 40 * LEVEL_SECONDS + 1, levels


def test_a_proxy_that_holds_every_chunk_is_caught_by_the_comparison_with_rc1(
    rc1, sut_wheelhouse, sut_image, sut_profile, tmp_path
):
    """2 ms more per token, no CPU, no blocking: every single-run bound still holds (the SLO
    allows 25 ms), so only the release before it shows the change."""
    bundle, _, before = rc1
    checks = run_with_fault(_with(LIGHT), "latency-per-chunk", sut_wheelhouse, sut_image, sut_profile, tmp_path)
    was = judged(before, "capacity.knee")["metrics"][LIGHT_CHUNK_DELAY]
    now = checks["capacity.knee"].metrics[LIGHT_CHUNK_DELAY]
    print("latency-per-chunk:", checks["capacity.knee"].observed, "| light chunk delay p50", was, "->", now)
    assert now >= was + 1.5, (was, now)
    assert checks["capacity.proxy_cpu_per_chunk"].verdict == "pass"
    compared = run_cli("compare", str(bundle), str(tmp_path), "--fail-on-regression", "--format", "json", *UNSEALED)
    assert compared.returncode == 1, compared.stderr
    worse = {r["metric"]: r for r in json.loads(compared.stdout)["metric_regressions"]}
    assert worse[LIGHT_CHUNK_DELAY]["baseline"] == was and worse[LIGHT_CHUNK_DELAY]["candidate"] == now
    # Two levels only: the knee and the cost at the cheapest levels are not compared with rc1's ladder.
    notes = json.loads(compared.stdout)["not_compared"]
    assert PROXY_CPU_PER_CHUNK not in worse and any(n.startswith("capacity.proxy_cpu_per_chunk") for n in notes)


# Two 1.5 s levels from 18 streams (nine runs: make test has a time budget): the cost is read
# at the cheaper of the two in each run, and neither saturates a proxy paying 60 us more per
# event (from 60 streams up on 2 cores its one event loop ran out, and a cost per chunk read
# there is the core's, not the proxy's: 57 against 73 us, x1.27, for the 60 us fault).
ROUND = CapacityOptions(level_seconds=1.5, load_start=START, load_levels=2)


def _as_results(result) -> dict:
    checks = {c.id: c for c in result.checks}
    print(f"round: {checks['capacity.proxy_cpu_per_chunk'].observed} | not judged: {result.error}")
    return {"scenarios": [{"name": result.name, "checks": [asdict(check) for check in result.checks]}]}


# A round the machine refused to judge (its hypervisor or the harness bounded the knee: the
# refusal has its own control above) is measured again at once, in its place in the order, as
# an operator re-runs a gate that exited 2; CI's hypervisor once took 26-36% of two rounds.
ROUND_ATTEMPTS = 3


def _judged_round(measure) -> dict:
    for _ in range(ROUND_ATTEMPTS):
        result = measure()
        if result.error is None:
            return _as_results(result)
        assert result.error.startswith(NOT_JUDGED), result.error  # anything else: the control's own fault
        _as_results(result)  # printed: what the machine did to it
    pytest.fail(f"the machine refused {ROUND_ATTEMPTS} capacity rounds in a row: {result.error}")


def test_a_proxy_costlier_per_chunk_is_caught_by_interleaved_rounds_and_rc1_against_itself_is_not(
    sut_allocation, sut_cluster, sut_wheelhouse, sut_image, sut_profile, tmp_path
):
    """Negative and positive control of a gate's capacity rounds, judged by the gate's own
    code (harness.gate_rounds): 60 us of CPU on every event, within the single-run bound of
    150 us where rc1 forwards a chunk for 30-46 us; rc1 and the variant measured in turn, three
    runs each, separate with the rank test's smallest p and an interval of the ratio above
    x1.25 (at these light levels rc1 pays 80-100 us a chunk, its idle loop's wake-ups). rc1
    measured in turn against itself (three runs beside those) is not a regression."""
    rc1 = {"a": [], "b": []}
    variant = []
    with faulty_image("cpu-per-chunk-60us", sut_wheelhouse, sut_image, sut_profile, tmp_path) as built:
        image, profile, installed = built
        with own_allocation(image, sut_wheelhouse, "ctl-rounds", installed) as (allocation, cluster):

            def of_rc1(side):
                rc1[side].append(_judged_round(lambda: run_capacity(
                    sut_allocation, RunDirectory.create(sut_cluster), sut_profile, ROUND, QUIET
                )))  # fmt: skip

            def of_variant():
                variant.append(_judged_round(lambda: run_capacity(
                    allocation, RunDirectory.create(cluster), profile, ROUND, QUIET
                )))  # fmt: skip

            for number in range(3):  # a b v | v b a | a b v ... : neither side always first or last
                steps = [lambda: of_rc1("a"), lambda: of_rc1("b"), of_variant]
                for step in steps if number % 2 == 0 else steps[::-1]:
                    step()
    cost = "gate.regression.capacity.proxy_cpu_per_chunk.proxy_cpu_us_per_chunk"
    caught = {c.id: c for c in judge_round_regressions(rc1["a"], variant, 3)}[cost]
    itself = {c.id: c for c in judge_round_regressions(rc1["a"], rc1["b"], 3)}[cost]
    print("cpu-per-chunk-60us:", caught.observed, "| rc1 against itself:", itself.observed)
    assert caught.verdict == "fail" and caught.metrics.get("p") == 0.05, caught  # not judged: its reason shown
    assert caught.metrics["ratio_low"] > 1.25 and 1.3 < caught.metrics["ratio"] < 4, caught  # 60 us on top of rc1's
    assert itself.verdict == "pass" and itself.metrics["ratio_low"] < 1.25, itself
    # what the fault does not touch: its own run still passes every behavioural bound of the scenario
    single = {c["id"]: c for c in variant[0]["scenarios"][0]["checks"]}
    print("single run of the variant:", single["capacity.proxy_cpu_per_chunk"]["observed"])
