"""The capacity checks as pure functions: where the knee is, what a chunk costs, whose CPU it was."""

from dataclasses import replace

import pytest

from dd_accept.acceptance import capacity_checks as checks
from dd_accept.acceptance.capacity import CapacityOptions
from dd_accept.base.events import ClientRequest, UpstreamAttempt

SLO = checks.Slo(added_ttft_ms=150, chunk_delay_ms=25)


def level(
    index,
    load,
    *,
    delay_p95=2.0,
    failed=0,
    tokens=1000.0,
    proxy=1.0,
    harness=1.0,
    chunks=20_000,
    error="",
    client=None,
    busy=0.5,
    wait=0.0,
):
    client = harness / 2 if client is None else client
    return checks.LoadLevel(
        index=index, load=load, requests=100, failed=failed, chunks=chunks, window_s=3.0,
        output_throughput=tokens, added_ttft_p95_ms=10.0, chunk_delay_p50_ms=delay_p95 / 2,
        chunk_delay_p95_ms=delay_p95, proxy_cpu_s=proxy, replicas_cpu_s=harness - client, client_cpu_s=client,
        proxy_rss_kb=40_960, machine_busy=busy, client_error=error, proxy_wait_s=wait,
    )  # fmt: skip


def curve(*levels):
    return checks.Curve(tuple(levels), SLO, "streams in flight", 202)


def test_the_knee_is_the_last_level_before_two_broken_in_a_row():
    found = curve(
        level(0, 8, tokens=1200),
        level(1, 12, delay_p95=30, tokens=1800),  # one broken level between served ones: noise
        level(2, 18, tokens=2700),
        level(3, 27, delay_p95=40, tokens=4000),
        level(4, 40, failed=3, tokens=5000),
        level(5, 60, tokens=8000),  # after two broken levels: never reached by a real run, never the knee
    )
    assert found.knee.index == 2
    result = checks.knee(found, floor=2000)
    assert result.verdict == "pass" and result.metrics["knee_output_throughput"] == 2700
    assert "broke at level 4 (27 streams in flight): chunk delay p95 40.0 ms > 25 ms" in result.observed
    below = checks.knee(found, floor=3000)
    assert below.verdict == "fail" and "2700 output tokens/s" in below.observed


def test_a_failed_request_is_never_noise_the_knee_is_below_it():
    found = curve(level(0, 8, tokens=1200), level(1, 12, failed=1, tokens=1800), level(2, 18, tokens=2700))
    assert found.knee.index == 0, "a level with a failure ends the climb; the served level after it does not count"
    assert "broke at level 2 (12 streams in flight): 1 of 100 requests failed" in checks.knee(found, 1).observed
    crashed = curve(level(0, 8), level(1, 12, error="exit 1"))
    assert crashed.knee.index == 0 and SLO.broken_by(crashed.levels[1]) == "the load client failed: exit 1"


def test_no_level_meeting_the_slo_is_a_failed_knee_named_after_it():
    result = checks.knee(curve(level(0, 8, delay_p95=80), level(1, 12, delay_p95=90)), floor=1)
    assert result.verdict == "fail" and result.metrics["knee_output_throughput"] == 0
    assert result.observed.startswith("no load level met the SLO; level 1 (8 streams in flight): chunk delay p95 80.0")


def test_a_failed_request_breaks_the_slo_before_any_latency():
    assert SLO.broken_by(level(0, 8, failed=1, delay_p95=99)) == "1 of 100 requests failed"
    assert SLO.broken_by(level(0, 8)) == ""


def test_cpu_per_chunk_is_read_where_forwarding_is_cheapest():
    # Light load pays for idle wake-ups (rc1: 170 us at 8 streams): the cheapest levels are the
    # proxy's own cost, and the median of the three cheapest keeps one misread level from deciding.
    found = curve(
        level(0, 8, proxy=3.4, chunks=20_000), level(1, 60, proxy=1.0, chunks=25_000),
        level(2, 90, proxy=0.1, chunks=25_000), level(3, 135, proxy=1.1, chunks=25_000),
    )  # fmt: skip
    result = checks.proxy_cpu_per_chunk(found, limit_us=150)
    assert result.verdict == "pass" and result.metrics["proxy_cpu_us_per_chunk"] == 40.0
    assert "at level 2 (60 streams in flight) (median of its cheapest)" in result.observed
    costly = curve(level(0, 8, proxy=5.0, chunks=20_000), level(1, 60, proxy=6.0, chunks=25_000))
    assert checks.proxy_cpu_per_chunk(costly, limit_us=150).metrics["proxy_cpu_us_per_chunk"] == 240.0
    assert checks.proxy_cpu_per_chunk(costly, limit_us=150).verdict == "fail"
    assert checks.proxy_cpu_per_chunk(curve(), limit_us=150).verdict == "fail"


def test_a_cpu_reading_too_small_to_measure_is_never_a_cost_of_zero():
    unmeasured = curve(level(0, 8, proxy=0.0), level(1, 12, proxy=0.01))
    result = checks.proxy_cpu_per_chunk(unmeasured, limit_us=150)
    assert result.verdict == "fail" and result.observed.startswith("no level measured the proxy's CPU")
    assert "8: not measured" in result.detail


def test_the_knee_is_the_proxys_when_it_did_not_wait_for_a_cpu_whatever_the_harness_spent():
    # the harness spent 67% of the CPU beside the proxy, but the proxy waited 3% of the time
    fine = checks.harness_headroom(curve(level(0, 8, proxy=1.0, harness=2.0, wait=0.09)))
    assert fine.verdict == "pass" and fine.metrics["proxy_wait_share"] == 0.03, fine
    assert "the proxy waited for a CPU 3.0% of the time and ran 33% of a core" in fine.observed
    assert "harness 67% of the run's CPU" in fine.observed
    # less spent, and the proxy ready to run but without a CPU 30% of the time
    bound = checks.harness_headroom(curve(level(0, 8, proxy=1.0, harness=0.5, wait=0.9)))
    assert bound.verdict == "fail" and bound.detail.startswith("not judged: the knee is bounded by the harness")
    assert "the proxy waited for a CPU 30% of the time at level 1 (8 streams in flight)" in bound.detail
    at_the_bound = checks.harness_headroom(curve(level(0, 8, wait=0.75)))
    assert at_the_bound.verdict == "pass", "25% is allowed"


def test_a_knee_under_the_floor_on_a_starved_machine_is_not_judged_never_the_suts():
    """make test found rc1's knee at 5944 tok/s under a 6000 floor while the proxy waited for
    a CPU 41-44% of the time: the machine's knee, said so in the knee's own detail."""
    starved = curve(
        level(0, 8, tokens=5944, wait=1.25), level(1, 12, delay_p95=30, wait=1.3), level(2, 18, delay_p95=40)
    )
    below = checks.knee(starved, floor=6000)
    assert below.verdict == "fail" and below.detail.startswith("not judged: the knee is bounded by the harness")
    assert "the proxy waited for a CPU 42% of the time at level 1 (8 streams in flight)" in below.detail
    assert checks.knee(starved, floor=5000).detail.startswith("8: 5944 tok/s"), "met: nothing to excuse"
    own = curve(level(0, 8, tokens=5944, wait=0.3), level(1, 12, delay_p95=30, wait=0.3), level(2, 18, delay_p95=40))
    assert not checks.knee(own, floor=6000).detail.startswith("not judged"), "the proxy's own knee is judged"


def test_the_level_where_the_slo_first_broke_is_watched_as_well_as_the_knee():
    found = curve(
        level(0, 8, wait=0.06),
        level(1, 12, delay_p95=30, wait=1.2),
        level(2, 18, delay_p95=40),
    )
    result = checks.harness_headroom(found)
    assert result.verdict == "fail" and "at level 2 (12 streams in flight)" in result.detail
    assert result.metrics["proxy_wait_share"] == 0.4
    assert checks.harness_headroom(curve()).verdict == "fail"
    # no knee: the first level is both the judged and the first broken one, shown once
    none_met = checks.harness_headroom(curve(level(0, 8, delay_p95=90), level(1, 12, delay_p95=90)))
    assert none_met.observed.count("level 1 (8 streams in flight)") == 1


def test_a_load_client_near_a_full_core_is_harness_bound_whatever_its_share():
    # a proxy with many workers makes the harness's share small while one client loop is saturated
    saturated = checks.harness_headroom(curve(level(0, 8, proxy=20.0, harness=3.0, client=2.7)))
    assert saturated.verdict == "fail" and saturated.metrics["client_core_share"] == 0.9
    assert "load client at 90% of a core" in saturated.observed
    assert "the load client used 90% of a core at level 1" in saturated.detail


def test_chunk_delays_line_up_the_replica_write_and_the_client_read_on_one_clock():
    stream = ClientRequest(
        mode="raw", record=0, attempt=0, outcome="ok", request_id="a", started=100.0, ttft_s=0.030,
        chunk_offsets_s=[0.0, 0.005, 0.012], chunks=3,
    )  # fmt: skip
    sent = UpstreamAttempt(
        replica=0, path="/v1/chat/completions", outcome="ok", started=100.002, duration_s=0.1, request_id="a",
        status=200, first_byte_s=0.025, chunk_offsets_s=[0.0, 0.005, 0.010], data_events=3,
    )  # fmt: skip
    assert [round(d * 1000, 3) for d in checks.chunk_delays(stream, sent)] == [3.0, 3.0, 5.0]
    measured = checks.measure_level(
        0, 8, [stream], [sent], window_s=1.0, proxy_cpu_s=0.1, replicas_cpu_s=0.1, client_cpu_s=0.1,
        proxy_rss_kb=1, machine_busy=0.2,
    )  # fmt: skip
    assert measured.chunks == 3 and measured.chunk_delay_p95_ms == 4.8 and measured.added_ttft_p95_ms == 5.0
    # an event the proxy dropped would shift every later pair: that stream is left out, counted
    dropped = replace(stream, chunks=2, chunk_offsets_s=[0.0, 0.012])
    unpaired = checks.measure_level(
        0, 8, [dropped], [sent], window_s=1.0, proxy_cpu_s=0.1, replicas_cpu_s=0.1, client_cpu_s=0.1,
        proxy_rss_kb=1, machine_busy=0.2,
    )  # fmt: skip
    assert unpaired.unpaired == 1 and unpaired.chunk_delay_p95_ms is None
    # a replica attempt that failed is not the one that served the stream
    failed = replace(sent, outcome="disconnected")
    assert checks.measure_level(
        0, 8, [stream], [failed, sent], window_s=1.0, proxy_cpu_s=0.1, replicas_cpu_s=0.1, client_cpu_s=0.1,
        proxy_rss_kb=1, machine_busy=0.2,
    ).chunk_delay_p95_ms == measured.chunk_delay_p95_ms  # fmt: skip


def test_the_ladder_climbs_by_its_factor_in_whole_streams_or_rates():
    assert CapacityOptions().levels() == [8, 12, 18, 27, 40, 60, 90, 135, 202, 303, 454, 681]
    assert CapacityOptions(load_mode="poisson", load_levels=3).levels() == [40, 60, 90]
    assert CapacityOptions(load_start=1, load_factor=1.1, load_levels=3).levels() == [1, 2, 3], "always climbs"
    with pytest.raises(ValueError, match="whole number of streams"):
        CapacityOptions(load_start=2.5)
    assert CapacityOptions(load_mode="constant", load_start=5, load_factor=1.01, load_levels=3).levels() == [
        5,
        5.1,
        5.2,
    ], "a rate ladder climbs too"
    with pytest.raises(ValueError, match=r"at least 0\.1"):
        CapacityOptions(load_mode="poisson", load_start=0.04)
    with pytest.raises(ValueError, match="would climb to"):
        CapacityOptions(load_factor=100.0, load_levels=30)


def test_the_ladder_the_knee_carries_is_the_one_regressions_compare():
    from dd_accept.base.regressions import LADDER

    options = tuple(name for name, _ in CapacityOptions().ladder())
    assert options == LADDER[: len(options)], "the user's ladder, then what the run adds: workload and machine"
    assert set(LADDER[len(options) :]) == {"replicas", "tokens_per_stream", "itl_ms", "machine_cpus"}
    ladder = CapacityOptions().ladder() + tuple((name, 1.0) for name in LADDER[len(options) :])
    knee = checks.knee(checks.Curve((level(0, 8),), SLO, "x", 8, ladder), floor=1)
    assert all(name in knee.metrics for name in LADDER) and knee.metrics["light_chunk_delay_p50_ms"] == 1.0


def test_a_proxy_that_ended_under_load_is_the_suts_failure_any_other_reading_error_the_harness(monkeypatch):
    from types import SimpleNamespace

    from dd_accept.acceptance import capacity
    from dd_accept.base.errors import ClusterError
    from dd_accept.deployment import step_usage

    def unreadable(allocation, names):
        raise ClusterError("reading step usage: no running step named proxy")

    # the reading is step_usage.sample_while_running's, which the wire scenario's slow reader shares
    monkeypatch.setattr(step_usage, "sample_usage", unreadable)
    ended = SimpleNamespace(allocation=None, deployed=(None, SimpleNamespace(step=SimpleNamespace(finished=True))))
    assert capacity._usage(ended) is None
    running = SimpleNamespace(allocation=None, deployed=(None, SimpleNamespace(step=SimpleNamespace(finished=False))))
    with pytest.raises(ClusterError):
        capacity._usage(running)


def test_the_load_clients_summary_is_its_last_line_and_a_bad_end_breaks_the_level():
    from dd_accept.acceptance.capacity import _summary
    from dd_accept.slurm_docker.records import CommandRecord

    def record(stdout, code=0, timed_out=False):
        return CommandRecord(("x",), "ctl", "2026-12-01T00:00:00Z", 1.0, code, stdout, "", timed_out)

    line = '{"records": 5, "cpu_s": 0.5, "window_s": 3.0}'
    assert _summary(record("srun: noise\n" + line + "\n")) == ({"records": 5, "cpu_s": 0.5, "window_s": 3.0}, "")
    assert _summary(record(line, code=1))[1] == "exit 1"
    assert _summary(record(line, code=None, timed_out=True))[1] == "exit None (timed out)"
    assert _summary(record("Traceback ..."))[1].startswith("no summary (")


def test_a_machine_its_hypervisor_took_is_harness_bound_and_the_knee_not_judged():
    """This machine on 2026-12-02: steal 39-52% of its CPU time at rc1's knee, which fell to
    2,749 tokens/s while the proxy waited for a CPU only 13-16%: the machine's, never rc1's."""
    stolen = curve(replace(level(0, 8, tokens=2749.0, delay_p95=20), machine_stolen=0.39), level(1, 12, delay_p95=48))
    headroom = checks.harness_headroom(stolen)
    assert headroom.verdict == "fail" and headroom.metrics["machine_stolen"] == 0.39, headroom
    assert "the machine's hypervisor took 39% of its CPU time at level 1" in headroom.detail
    assert "(stolen by its hypervisor 39%)" in headroom.observed
    knee = checks.knee(stolen, floor=6000)
    assert knee.verdict == "fail" and knee.detail.startswith("not judged: the knee is bounded by the harness"), knee
    calm = curve(replace(level(0, 8, tokens=2749.0, delay_p95=20), machine_stolen=0.05), level(1, 12, delay_p95=48))
    assert "not judged" not in checks.knee(calm, floor=6000).detail, "a slow proxy on a calm machine is judged"


def test_a_machine_short_of_cpu_leaves_the_run_not_judged_with_no_failed_check_of_the_suts():
    """Machine trouble is exit 2 (the scenario's error), never a failed SUT check: headroom's
    numbers are in the error; the cost per chunk, which the machine cannot make wrong, stays,
    and so does a knee that met its floor all the same."""
    stolen = curve(replace(level(0, 8, tokens=2749.0, delay_p95=20), machine_stolen=0.39), level(1, 12, delay_p95=48))
    cost = checks.proxy_cpu_per_chunk(stolen, limit_us=150)
    reported, error = checks.verdicts(checks.knee(stolen, floor=6000), cost, checks.harness_headroom(stolen))
    assert [c.id for c in reported] == ["capacity.proxy_cpu_per_chunk"], reported
    assert error.startswith("capacity not judged: the knee is bounded by the harness, not by the proxy"), error
    assert "the machine's hypervisor took 39% of its CPU time at level 1" in error
    assert "(stolen by its hypervisor 39%)" in error, "headroom's observed numbers travel with the error"
    met, error = checks.verdicts(checks.knee(stolen, floor=2000), cost, checks.harness_headroom(stolen))
    assert [c.id for c in met] == ["capacity.proxy_cpu_per_chunk", "capacity.knee"] and error is not None
    assert all(c.verdict == "pass" for c in met)
    calm = curve(replace(level(0, 8, tokens=2749.0, delay_p95=20), machine_stolen=0.05), level(1, 12, delay_p95=48))
    judged, error = checks.verdicts(checks.knee(calm, floor=6000), cost, checks.harness_headroom(calm))
    assert error is None and [c.verdict for c in judged] == ["fail", "pass", "pass"], "a calm machine's knee is judged"
    _, error = checks.verdicts(checks.knee(curve(), floor=6000), cost, checks.harness_headroom(curve()))
    assert error.startswith("capacity not judged: the cost is unknown"), error
