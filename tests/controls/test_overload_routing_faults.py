"""Negative controls of overload.routing_restored: proxies that miscount what they let go of
(rc1 wheel variants). A file of its own so that `make test`'s workers, handed whole files,
share the overload controls (together they were one worker's longest file).

Each control asserts that the check fails for the fault's reason (its observed numbers show
the fault) and that checks the fault does not touch still pass.
"""

import pytest

from dd_accept.acceptance import overload, overload_routing
from tests.controls.controls import overload_phases, run_with_fault

pytestmark = pytest.mark.cluster


# Partial overload's failovers, the round with backends lost, then routing (each leak drives
# its miscount in one of them, or in the routing round's own nudge): total overload and
# recovery, between them in the scenario, judge nothing these controls assert.
_LEAKS = overload_phases(
    "deploying replicas", "deploying the SUT's proxy", "partial overload", overload.PARTIAL_CLIENT,
    "partial overload: completion and failover", "partial overload lifted", "overload with backends lost",
    "overload with backends lost: what the proxy answers",
    "routing once the faults are over: requests at once to idle replicas",
    "stopping the proxy", "stopping the replicas",
)  # fmt: skip


@pytest.mark.parametrize("fault", ["retried-status-leaks", "connection-error-leaks", "hangup-leaks", "cancel-leaks"])
def test_a_proxy_that_never_releases_what_it_let_go_of_is_caught_by_routing_restored(
    fault, sut_wheelhouse, sut_image, sut_profile, tmp_path, monkeypatch
):
    """Every request still completes (on the others), so only the routing round sees it: the
    replicas that failed requests (a 429, or a connection error) or whose client left
    mid-stream get less than their share once all are idle again, before the nudge or after it."""
    monkeypatch.setattr(overload_routing, "RESTORE_WAIT_S", 2.0)
    checks = run_with_fault(_LEAKS, fault, sut_wheelhouse, sut_image, sut_profile, tmp_path)
    routing = checks["overload.routing_restored"]
    print(f"{fault}:", routing.observed)
    assert routing.verdict == "fail", routing
    # a miscount never decays: each uneven send was uneven again after the restore wait (shortened here: the
    # wait is for a backend set aside, which these variants do not do)
    assert "got fewer than 2" in routing.detail and routing.detail.endswith(" s later too"), routing
    assert routing.metrics["restored"] == 0.0, routing
    if fault in ("hangup-leaks", "cancel-leaks"):  # nothing leaked before the nudge's own: replica 0 short after it
        left = routing.metrics["nudge_hangups" if fault == "hangup-leaks" else "nudge_giveups"]
        assert not routing.metrics["uneven_before"] and left >= 2, routing
        assert routing.detail.startswith("after it again: replica(s) 0 got fewer than 2"), routing
    else:  # the nudge drives two miscounts at least where its pin held (the sends before it even)
        assert routing.metrics["uneven_before"] or routing.metrics["nudge_failures"] >= 2, routing
    assert checks["overload.partial.completes"].verdict == "pass"
    assert checks["overload.total.unreachable"].verdict == "pass"
