"""overload.routing_restored against least-connections pools modelled on the brief's proxy:
one that releases every attempt it lets go of passes, whatever its tie-break; one that leaks
the attempts it retried elsewhere (after a status, or after a connection error) fails,
before the nudge where its miscounts are uneven and after it where they came out even."""

import itertools
import random

import pytest

from dd_accept.acceptance import overload_routing_checks as checks
from dd_accept.acceptance.overload_routing import NUDGE, PER_REPLICA, PINNED_S, ROUTING_HOLD_S, AtOnce, RoutingRound
from dd_accept.base.events import ClientRequest, UpstreamAttempt

REPLICAS = 8


class Pool:
    """Least connections over `replicas` backends, ties broken by `tie_break`; `leaks`, the
    attempts it lets go of without releasing them: "status" (a retried 429/5xx), "error" (a
    retried connection error)."""

    def __init__(self, replicas=REPLICAS, tie_break="ring", leaks=(), seed=0):
        self.active, self.cursor, self.tie_break, self.leaks = [0] * replicas, 0, tie_break, set(leaks)
        self.random = random.Random(seed)

    def acquire(self, excluded=frozenset()):
        size = len(self.active)
        available = [i for i in range(size) if i not in excluded]
        least = min(self.active[i] for i in available)
        candidates = [i for i in available if self.active[i] == least]
        if self.tie_break == "robin":  # no least connections at all: the next backend in turn
            candidates = available
        if self.tie_break in ("ring", "robin"):  # rc1's: the first candidate from the cursor on
            index = next(c for k in range(size) if (c := (self.cursor + k) % size) in candidates)
            self.cursor = (index + 1) % size
        elif self.tie_break == "lowest":
            index = candidates[0]
        else:
            index = self.random.choice(candidates)
        self.active[index] += 1
        return index

    def request(self, failing, attempts=3):
        """One request alone: `failing` maps a replica to how it fails ("status" or "error")."""
        tried = set()
        for attempt in range(attempts):
            index = self.acquire(frozenset(tried))
            tried.add(index)
            if index in failing and attempt + 1 < attempts:
                if failing[index] not in self.leaks:
                    self.active[index] -= 1
                continue
            self.active[index] -= 1
            return


def _attempt(replica, request_id, started, held_s=0.0, status=200, outcome="ok"):
    return UpstreamAttempt(t=1.0, replica=replica, path="/v1/chat/completions", outcome=outcome, status=status,
                           started=started, duration_s=held_s, request_id=request_id)  # fmt: skip


def _sent_at_once(pool, name, prefix, spread_s, held_s):
    """Two requests a replica at once, each held at its replica: (what was sent, who got each)."""
    picked = [pool.acquire() for _ in range(PER_REPLICA * len(pool.active))]
    upstream = tuple(_attempt(replica, f"{prefix}{i}", i * spread_s, held_s) for i, replica in enumerate(picked))
    client = tuple(
        ClientRequest(t=3.0, mode="raw", record=i, attempt=1, outcome="ok", request_id=f"{prefix}{i}", status=200)
        for i in range(len(picked))
    )
    return AtOnce(name, client, upstream), picked


def _routing(pool, spread_s=0.01):
    """The round on `pool`, as overload_routing runs it: `before` pinned (replica 0's two end
    first), the nudge one request at a time while the others hold theirs (replica 0 answers
    NUDGE 429s, then resets NUDGE), `after` once all are idle."""
    before, picked = _sent_at_once(pool, "before the nudge", "routing-a-", spread_s, PINNED_S)
    for replica in picked:
        if replica == 0:
            pool.active[0] -= 1
    nudge, failures = [], ["status"] * NUDGE + ["error"] * NUDGE
    for request in range(2 * NUDGE):
        tried = set()
        for attempt in range(3):
            index = pool.acquire(frozenset(tried))
            tried.add(index)
            started = 2.0 + request / 10 + attempt / 100
            if index == 0 and failures and attempt < 2:
                kind = failures.pop(0)
                status, outcome = (429, "ok") if kind == "status" else (None, "reset")
                nudge.append(_attempt(0, f"routing-n-{request}", started, status=status, outcome=outcome))
                if kind not in pool.leaks:
                    pool.active[0] -= 1
                continue
            nudge.append(_attempt(index, f"routing-n-{request}", started))
            pool.active[index] -= 1
            break
    for replica in picked:
        if replica != 0:
            pool.active[replica] -= 1
    after, picked = _sent_at_once(pool, "after it", "routing-b-", spread_s, ROUTING_HOLD_S)
    for replica in picked:
        pool.active[replica] -= 1
    return RoutingRound(len(pool.active), before, after, tuple(nudge))


def _overloaded(pool):
    """What the scenario puts the proxy through first: partial overload, total overload,
    then the lost-backend round (every third replica resets, the others answer 429)."""
    for _ in range(32):
        pool.request({0: "status", 1: "status"})
    for _ in range(20):
        pool.request(dict.fromkeys(range(REPLICAS), "status"))
    for _ in range(12):
        pool.request({i: "error" if (i + 1) % 3 == 0 else "status" for i in range(REPLICAS)})
    return pool


TIE_BREAKS = ["ring", "lowest", "random"]
LEAKS = [("status",), ("error",), ("status", "error")]


@pytest.mark.parametrize("tie_break", TIE_BREAKS)
def test_a_pool_that_releases_what_it_lets_go_of_passes_whatever_its_tie_break(tie_break):
    for cursor in range(REPLICAS):
        pool = _overloaded(Pool(tie_break=tie_break, seed=cursor))
        pool.cursor = cursor
        result = checks.routing_restored(_routing(pool))
        assert result.verdict == "pass", result
        assert result.metrics == {"uneven_before": 0.0, "uneven_after": 0.0, "nudge_failures": 6.0}
        assert result.observed.startswith(
            "before the nudge: 16 of 16 in flight together, per replica 2, 2, 2, 2, 2, 2, 2, 2, client statuses "
            "200: 16; the nudge: its first request to replica 0, 6 failed by replica 0 as told; after it: 16 of 16"
        ), result


@pytest.mark.parametrize("leaks", LEAKS)
@pytest.mark.parametrize("tie_break", TIE_BREAKS)
def test_a_pool_that_leaks_what_it_retried_elsewhere_fails_from_any_state(leaks, tie_break):
    """From what the scenario leaves, and from every state whose miscounts differ by one at
    most (the ones `before` cannot show): the nudge makes them differ by two."""
    states = [_overloaded(Pool(tie_break=tie_break, leaks=leaks)).active]
    states += [list(state) for state in itertools.product([0, 1], repeat=REPLICAS)]
    for state in states:
        pool = Pool(tie_break=tie_break, leaks=leaks, seed=sum(state))
        pool.active = list(state)
        result = checks.routing_restored(_routing(pool))
        assert result.verdict == "fail", (state, result)
        assert "the proxy still counts connections to them that it let go of" in result.detail, (state, result)


def test_miscounts_that_came_out_even_show_after_the_nudge():
    pool = Pool(tie_break="lowest", leaks=("status", "error"))
    pool.active = [3] * REPLICAS  # every replica miscounted alike: `before` is even
    result = checks.routing_restored(_routing(pool))
    assert result.verdict == "fail" and result.metrics["uneven_before"] == 0.0, result
    assert result.metrics["uneven_after"] == 1.0 and result.metrics["nudge_failures"] >= 2, result
    assert result.detail.startswith("after it: replica(s) 0 got fewer than 2 while every replica was idle"), result


def test_a_proxy_that_routes_in_turn_is_caught_by_the_nudge_where_both_rounds_are_even():
    pool = Pool(tie_break="robin")
    pool.cursor = 3
    result = checks.routing_restored(_routing(pool))
    assert result.verdict == "fail" and result.metrics["uneven_before"] == 0.0 == result.metrics["uneven_after"]
    assert result.detail == (
        "the nudge: its first request went to replica 3, not to replica 0, the only one with nothing in flight"
    ), result


def test_requests_not_in_flight_together_are_no_pass_whatever_their_spread():
    result = checks.routing_restored(_routing(Pool(), spread_s=PINNED_S + 0.1))
    assert result.verdict == "fail", result
    assert result.detail.startswith("before the nudge: at most 1 of the 16 requests sent at once were in flight")


def test_no_round_is_no_pass():
    result = checks.routing_restored(None)
    assert result.verdict == "fail" and result.observed == "no request was sent"
