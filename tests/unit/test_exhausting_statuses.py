"""The telemetry scenario's exhausted phase against models of correct proxies that route
otherwise than rc1: telemetry.status_failover needs every retried status met at the
replicas, and no correct proxy may be able to route around one (a status never met fails
the check: "the rule was not exercised").

The proxies modelled: least-connections with rc1's tie-break in turn, at the lowest index or
at random; each with or without setting a failing backend aside (passive ejection: 10 s,
30 s, or capped at one backend aside at a time, as Envoy's max_ejection_percent does), with
backends still set aside from the failover phase before it; 2 or 3 attempts. Where every
backend is set aside, all are tried again (a panic threshold)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import pytest

from dd_accept.acceptance.telemetry_forcing import exhausting_statuses
from dd_accept.sut.profile import profile_for

RC1 = profile_for("data-designer-slurm", "1.0.0rc1")
RETRIED_5XX = [status for status in RC1.proxy.retried_statuses if status >= 500]
REPLICAS = 4  # the telemetry scenario's (fixed)


@dataclass
class Proxy:
    tie: str  # "ring" (rc1), "lowest", "random"
    attempts: int
    aside_s: float | None  # None: never sets a backend aside
    cap: int | None = None  # at most this many backends aside at once
    aside_until: dict[int, float] = field(default_factory=dict)
    cursor: int = 0
    rng: random.Random = field(default_factory=lambda: random.Random(7))

    def _pick(self, pool: list[int]) -> int:
        if self.tie == "lowest":
            return min(pool)
        if self.tie == "random":
            return self.rng.choice(pool)
        chosen = min(pool, key=lambda r: (r - self.cursor) % REPLICAS)
        self.cursor = chosen + 1
        return chosen

    def request(self, answer: Callable[[int], int], now: float) -> list[tuple[int, int]]:
        """One request, one at a time (no connection in flight): (replica, status) per attempt."""
        chain: list[tuple[int, int]] = []
        for _ in range(self.attempts):
            tried = {r for r, _ in chain}
            untried = [r for r in range(REPLICAS) if r not in tried]
            fresh = [r for r in untried if self.aside_until.get(r, 0.0) <= now]
            replica = self._pick(fresh or untried)
            status = answer(replica)
            chain.append((replica, status))
            if status == 200:
                break
            if len(chain) < self.attempts:  # set aside only what it retried elsewhere, as the variants do
                self._set_aside(replica, now)
        return chain

    def _set_aside(self, replica: int, now: float) -> None:
        if self.aside_s is None:
            return
        aside = [r for r, until in self.aside_until.items() if until > now and r != replica]
        if self.cap is not None and len(aside) >= self.cap:
            return
        self.aside_until[replica] = now + self.aside_s


PROXIES = [
    Proxy(tie, attempts, aside_s, cap)
    for tie, attempts, (aside_s, cap) in itertools.product(
        ("ring", "lowest", "random"), (2, 3), ((None, None), (10.0, None), (30.0, None), (30.0, 1))
    )
]


def _exhausted_phase(proxy: Proxy, carried_over: bool) -> list[list[tuple[int, int]]]:
    """The phase as the scenario runs it: before each request every replica is told to answer
    the request's status once; replicas 1 and 2 may still be set aside from the failover phase."""
    if carried_over and proxy.aside_s is not None:
        proxy.aside_until.update({1: 5.0, 2: 5.0} if proxy.cap is None else {1: 5.0})
    chains = []
    for index, (_, status) in enumerate(exhausting_statuses(RC1, 4)):
        forced = dict.fromkeys(range(REPLICAS), status)
        chains.append(proxy.request(lambda r, forced=forced: forced.pop(r, 200), now=1.0 + index))
    return chains


def test_rc1s_plan_is_one_request_per_retried_5xx() -> None:
    plan = exhausting_statuses(RC1, 4)
    assert plan == (("exhausted-500", 500), ("exhausted-502", 502), ("exhausted-503", 503), ("exhausted-504", 504))


def test_more_requests_than_statuses_cycle_under_names_of_their_own_and_more_statuses_add_requests() -> None:
    only_503 = replace(RC1, proxy=replace(RC1.proxy, retried_statuses=(429, 503)))
    assert [name for name, _ in exhausting_statuses(only_503, 3)] == [
        "exhausted-503",
        "exhausted-503-2",
        "exhausted-503-3",
    ]
    six = replace(RC1, proxy=replace(RC1.proxy, retried_statuses=(429, 500, 502, 503, 504, 507, 529)))
    assert [status for _, status in exhausting_statuses(six, 4)] == [500, 502, 503, 504, 507, 529]


@pytest.mark.parametrize("carried_over", [False, True])
@pytest.mark.parametrize("proxy", PROXIES, ids=lambda p: f"{p.tie}-{p.attempts}-aside{p.aside_s}-cap{p.cap}")
def test_every_correct_proxy_meets_every_retried_5xx_at_every_attempt(proxy: Proxy, carried_over: bool) -> None:
    chains = _exhausted_phase(proxy, carried_over)
    met = {(status, position) for chain in chains for position, (_, status) in enumerate(chain)}
    assert met == {(s, p) for s in RETRIED_5XX for p in range(proxy.attempts)}, chains
    assert all(len({r for r, _ in chain}) == len(chain) == proxy.attempts for chain in chains), chains


def test_each_replica_answering_its_own_status_left_a_capped_ejecting_proxy_a_status_it_never_met() -> None:
    """Why every replica answers the same status: with each replica its own (the forcing
    before this one), a proxy keeping one backend aside (Envoy's cap), still set aside from
    the failover phase, never tries it, and its status is never met."""
    proxy = Proxy("ring", 3, 30.0, cap=1, aside_until={1: 40.0})
    own = {r: [RETRIED_5XX[r]] * 4 for r in range(REPLICAS)}
    chains = [proxy.request(lambda r: own[r].pop(0), now=1.0 + i) for i in range(4)]
    met = {status for chain in chains for _, status in chain}
    assert 502 not in met and met == {500, 503, 504}, chains
