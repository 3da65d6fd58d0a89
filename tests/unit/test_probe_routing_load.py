"""The probe-routing phase's requests last as long as the proxy's probe may take to arrive
and is then held: a SUT that declares a health monitor may probe on the monitor's schedule,
not when `/health` is asked, and its late probe still has requests one at a time around it."""

from dataclasses import replace

from dd_accept.acceptance import telemetry
from dd_accept.sut.profile import profile_for


def test_requests_span_the_probes_wait_and_hold_on_demand_and_on_a_monitors_schedule():
    rc1 = profile_for("data-designer-slurm", "1.0.0rc1")
    options = telemetry.TelemetryOptions()
    assert telemetry.probe_wait_s(rc1) == telemetry.PROBE_WAIT_S == 5.0
    on_demand = telemetry._probe_routing_load(options, "canary", rc1)
    assert on_demand["records"] / on_demand["rate"] >= telemetry.PROBE_WAIT_S + telemetry.PROBE_HOLD_S
    monitored = replace(rc1, capabilities=replace(rc1.capabilities, health_monitor=True, monitor_detect_seconds=20.0))
    assert telemetry.probe_wait_s(monitored) == 20.0
    scheduled = telemetry._probe_routing_load(options, "canary", monitored)
    assert scheduled["records"] / scheduled["rate"] >= 20.0 + telemetry.PROBE_HOLD_S
    assert (scheduled["concurrency"], scheduled["arrival"]) == (1, "constant")
