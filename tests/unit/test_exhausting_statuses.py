"""What the telemetry scenario's exhausted phase makes each replica answer, against a model of
a proxy that sets a failing backend aside for a while (passive ejection, nginx's
`max_fails=1`): telemetry.status_failover needs every retried status met at the replicas, and
a correct proxy of that kind must not be able to avoid one."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dd_accept.acceptance.telemetry_forcing import exhausting_statuses
from dd_accept.sut.profile import profile_for

RC1 = profile_for("data-designer-slurm", "1.0.0rc1")
RETRIED_5XX = [status for status in RC1.proxy.retried_statuses if status >= 500]


def _met_by_ejecting_proxy(answers: tuple[tuple[int, ...], ...], requests: int, attempts: int = 3) -> list[int]:
    """The statuses an ejecting least-connections proxy meets, requests sent one at a time: a
    backend that failed is set aside for the rest of the phase (longer than it lasts), and
    only where every backend is set aside are they all tried again (a panic threshold)."""
    queues = [list(a) for a in answers]
    aside: set[int] = set()
    met = []
    cursor = 0
    for _ in range(requests):
        tried: set[int] = set()
        for _ in range(attempts):
            fresh = [r for r in range(len(queues)) if r not in tried and r not in aside]
            pool = fresh or [r for r in range(len(queues)) if r not in tried]
            replica = min(pool, key=lambda r: (r - cursor) % len(queues))
            cursor = replica + 1
            tried.add(replica)
            status = queues[replica].pop(0) if queues[replica] else 200
            met.append(status)
            if status == 200:
                break
            aside.add(replica)
    return met


def test_each_replica_answers_its_own_status_and_every_status_is_a_first_answer() -> None:
    answers = exhausting_statuses(RC1, replicas=4, count=4)
    assert answers == ((500,) * 4, (502,) * 4, (503,) * 4, (504,) * 4)
    assert sorted(a[0] for a in answers) == sorted(RETRIED_5XX)


@pytest.mark.parametrize("replicas", [2, 3, 4, 5, 8])
def test_an_ejecting_proxy_meets_every_retried_5xx_and_every_request_is_exhausted(replicas: int) -> None:
    requests = 4
    answers = exhausting_statuses(RC1, replicas=replicas, count=requests)
    met = _met_by_ejecting_proxy(answers, requests, attempts=min(3, replicas))
    assert set(met) == set(RETRIED_5XX), met
    assert 200 not in met  # every attempt of every request was answered a 5xx: the phase exhausts them


def test_the_old_forcing_left_an_ejecting_proxy_statuses_it_never_met() -> None:
    """Negative control of the model: replica 1 answering 500, 502, 503, 504 in a row (the
    failover phase's forcing) shows an ejecting proxy only the 500; the rest is never met."""
    answers = ((), (500, 502, 503, 504), (), ())
    met = _met_by_ejecting_proxy(answers, requests=24)
    assert [s for s in met if s != 200] == [500]


def test_a_profile_that_retries_only_503_gets_503_everywhere() -> None:
    profile = replace(RC1, proxy=replace(RC1.proxy, retried_statuses=(429, 503)))
    assert exhausting_statuses(profile, replicas=3, count=2) == ((503, 503),) * 3
