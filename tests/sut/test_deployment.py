"""The SUT deployed for real: 8 synthetic replicas and the rc1 proxy as Slurm steps."""

import pytest

from dd_accept import deployment
from dd_accept.acceptance.analysis import admission
from dd_accept.acceptance.analysis import requests as requests_of

pytestmark = pytest.mark.cluster

FAST = ("--ttft-ms", "20", "--itl-ms", "5")


@pytest.fixture
def deployed(sut_allocation, run_dir, sut_profile):
    replicas = deployment.start_replicas(
        sut_allocation, 8, run=run_dir, profile=sut_profile, threshold=0, retry_after=3, options=FAST
    )
    proxy = deployment.start_proxy(sut_allocation, replicas, profile=sut_profile, retry_after=3)
    yield replicas, proxy
    proxy.stop()
    replicas.stop()


def test_eight_replicas_and_the_proxy_run_as_steps_and_a_request_streams_end_to_end(
    deployed, sut_allocation, run_dir, sut_profile
):
    replicas, proxy = deployed
    steps = sut_allocation.steps_by_name()
    assert len(steps["replicas"]) == 1 and len(steps["proxy"]) == 1
    assert len({(host, port) for host, port in replicas.backends}) == 8
    health = proxy.get("/health")
    assert health["status"] == 200 and health["json"]["backends_ready"] == 8

    client = deployment.run_client(
        sut_allocation,
        proxy,
        run_dir,
        mode="raw",
        profile=sut_profile,
        records=8,
        concurrency=4,
        max_tokens=12,
    )
    assert client.wait(timeout=60).ok
    requests = requests_of(deployment.read_events(run_dir))
    assert len(requests) == 8
    for event in requests:
        # 12 token events and the final finish_reason event; [DONE] is not counted
        assert (event.status, event.outcome, event.done, event.chunks) == (200, "ok", True, 13)
        assert event.ttft_s > 0.01
    metrics = proxy.get("/metrics")["json"]
    assert metrics["final_statuses"] == {"200": 8}
    assert sum(b["requests"] for b in metrics["backends"]) == 8


def test_the_real_client_path_completes_records_through_the_proxy(deployed, sut_allocation, run_dir, sut_profile):
    _, proxy = deployed
    client = deployment.run_client(
        sut_allocation,
        proxy,
        run_dir,
        mode="sut",
        profile=sut_profile,
        records=12,
        concurrency=8,
        max_tokens=4,
        stream=False,
    )
    record = client.wait(timeout=90)
    assert record.ok, record.describe()
    events = deployment.read_events(run_dir)
    requests = requests_of(events)
    assert sorted(e.record for e in requests if e.outcome == "ok") == list(range(12))
    assert all(e.tokens == 4 for e in requests)
    leases = admission(events, "request_lease_acquired")
    assert len(leases) == 12
    assert {e.limit for e in leases} == {8}, [(e.limit, e.in_flight) for e in leases]
