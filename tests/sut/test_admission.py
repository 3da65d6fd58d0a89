"""The SUT's client admission under total overload through the real proxy, then recovery."""

import pytest

from dd_accept import deployment
from dd_accept.acceptance.analysis import admission
from dd_accept.acceptance.analysis import requests as requests_of
from dd_accept.base.waiting import wait_until

pytestmark = pytest.mark.cluster


def _decreases(events):
    return [e.limit for e in admission(events, "request_limit_decreased")]


def test_limit_falls_8_6_4_over_two_rounds_then_recovers_after_successes(sut_allocation, run_dir, sut_profile):
    replicas = deployment.start_replicas(
        sut_allocation,
        8,
        run=run_dir,
        profile=sut_profile,
        threshold=0,
        retry_after=3,
        options=("--ttft-ms", "5", "--itl-ms", "1"),
    )
    proxy = deployment.start_proxy(sut_allocation, replicas, profile=sut_profile, retry_after=3)
    try:
        replicas.overload(None, depth=1)
        client = deployment.run_client(
            sut_allocation,
            proxy,
            run_dir,
            mode="sut",
            profile=sut_profile,
            records=40,
            concurrency=8,
            max_tokens=2,
            stream=False,
            admission_limit=8,
            deadline_s=90,
        )
        events = wait_until(
            lambda: deployment.read_events(run_dir),
            lambda evs: len(_decreases(evs)) >= 2,
            timeout=30,
            what="two admission decreases",
        )
        replicas.relieve()
        assert _decreases(events)[:2] == [6, 4], "8 -> 6 -> 4 with the default factor 0.75"
        record = client.wait(timeout=120)
        assert record.ok, record.describe()
        events = deployment.read_events(run_dir)
        requests = requests_of(events)
        limited = [e for e in requests if e.outcome == "rate_limited"]
        assert limited and all(e.status == 429 and e.retry_after == 3.0 for e in limited)
        assert sorted(e.record for e in requests if e.outcome == "ok") == list(range(40))
        increases = admission(events, "request_limit_increased")
        assert increases, "the limit must rise again after 25 successes"
        assert increases[-1].limit > min(_decreases(events))
        metrics = proxy.get("/metrics")["json"]
        assert metrics["final_statuses"]["429"] == len(limited)
        assert metrics["retries"]["http_429"] == 2 * len(limited), "each 429 came after 3 upstream attempts"
    finally:
        proxy.stop()
        replicas.stop()
