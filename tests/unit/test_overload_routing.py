"""overload.routing_restored against least-connections pools modelled on the brief's proxy:
one that releases every attempt it lets go of passes, whatever its tie-break, and so does one
that sets a failing backend aside for a while; one that leaks the attempts it retried
elsewhere (after a status, or after a connection error), or the streams whose client left,
fails, before the nudge where its miscounts are uneven and after it where they came out even."""

import dataclasses
import itertools
import random

import pytest

from dd_accept.acceptance import overload_routing_checks as checks
from dd_accept.acceptance.overload_routing import (
    GIVEUP_PREFIX,
    HANGUP_PREFIX,
    ID_PREFIX,
    NUDGE_HANGUPS,
    NUDGE_RESETS,
    PER_REPLICA,
    AtOnce,
    RoutingRound,
)
from dd_accept.base.events import ClientRequest, UpstreamAttempt

REPLICAS = 8
RETRIED = (429, 500, 502, 503, 504)


class Pool:
    """Least connections over `replicas` backends, ties broken by `tie_break`; `leaks`, the
    attempts it lets go of without releasing them: "status" (a retried 429/5xx), "error" (a
    retried connection error), "hangup" (a stream whose client left mid-way), "giveup" (one
    whose client gave up before its first byte); `ejects`, whether it
    sets a backend that failed aside until the round's restore wait has passed."""

    def __init__(self, replicas=REPLICAS, tie_break="ring", leaks=(), seed=0, ejects=False):
        self.active, self.cursor, self.tie_break, self.leaks = [0] * replicas, 0, tie_break, set(leaks)
        self.random, self.ejects, self.ejected = random.Random(seed), ejects, set()

    def acquire(self, excluded=frozenset()):
        size = len(self.active)
        available = [i for i in range(size) if i not in excluded]
        if self.ejects and any(i not in self.ejected for i in available):
            available = [i for i in available if i not in self.ejected]
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

    def fail(self, index, kind):
        """An attempt answered `kind` ("status" or "error") and retried elsewhere."""
        if kind not in self.leaks:
            self.active[index] -= 1
        self.ejected.add(index)

    def request(self, failing, attempts=3):
        """One request alone: `failing` maps a replica to how it fails ("status" or "error")."""
        tried = set()
        for attempt in range(attempts):
            index = self.acquire(frozenset(tried))
            tried.add(index)
            if index in failing and attempt + 1 < attempts:
                self.fail(index, failing[index])
                continue
            self.active[index] -= 1
            return


def _attempt(replica, request_id, started, status=200, outcome="ok"):
    return UpstreamAttempt(t=1.0, replica=replica, path="/v1/chat/completions", outcome=outcome, status=status,
                           started=started, duration_s=0.5, request_id=request_id)  # fmt: skip


def _pinned(pool, name, prefix, sent_at=0.0):
    """Two requests a replica at once, every one pinned at its replica: (what was sent, who got each)."""
    picked = [pool.acquire() for _ in range(PER_REPLICA * len(pool.active))]
    upstream = tuple(_attempt(replica, f"{prefix}{i}", i * 0.001) for i, replica in enumerate(picked))
    client = tuple(
        ClientRequest(t=3.0, mode="raw", record=i, attempt=1, outcome="ok", request_id=f"{prefix}{i}", status=200)
        for i in range(len(picked))
    )
    return AtOnce(name, client, upstream, sent_at), picked


def _nudge(pool):
    """Replica 0 streams NUDGE_HANGUPS whose client leaves, as many whose client gives up
    before the first byte, then fails each retried status twice, then resets NUDGE_RESETS,
    one request at a time."""
    nudge = []
    for kind, prefix, start in (("hangup", HANGUP_PREFIX, 1.0), ("giveup", GIVEUP_PREFIX, 1.5)):
        for number in range(NUDGE_HANGUPS):
            index = pool.acquire()
            held = kind == "giveup" and index == 0  # its client left before the first byte: no status
            nudge.append(_attempt(index, f"{ID_PREFIX}{prefix}{number}", start + number / 10,
                                  **({"status": None, "outcome": "abandoned"} if held else {})))  # fmt: skip
            if index != 0 or kind not in pool.leaks:  # elsewhere the stream ended before its client left
                pool.active[index] -= 1
    failures = [("status", status) for status in RETRIED * 2] + [("error", None)] * NUDGE_RESETS
    for request in range(len(failures)):
        tried = set()
        for attempt in range(3):
            index = pool.acquire(frozenset(tried))
            tried.add(index)
            started = 2.0 + request / 10 + attempt / 100
            if index == 0 and failures and attempt < 2:
                kind, status = failures.pop(0)
                outcome = "ok" if kind == "status" else "reset"
                nudge.append(_attempt(0, f"routing-n-{request}", started, status=status, outcome=outcome))
                pool.fail(0, kind)
                continue
            nudge.append(_attempt(index, f"routing-n-{request}", started))
            pool.active[index] -= 1
            break
    return nudge


def _until_even(pool, name, prefix, nudge):
    """As overload_routing runs it: an uneven send is sent once more after the restore wait
    (a backend set aside is back then); the nudge on the last, replica 0 released first."""
    sent = []
    for attempt in range(2):
        if attempt:
            pool.ejected.clear()  # the restore wait
        at_once, picked = _pinned(pool, f"{name}{' again' if attempt else ''}", f"{prefix}{attempt}-", 12.0 * attempt)
        sent.append(at_once)
        even = at_once.even(len(pool.active))
        if nudge is not None and (even or attempt == 1):
            for replica in picked:
                if replica == 0:
                    pool.active[0] -= 1
            nudge.extend(_nudge(pool))
            picked = [replica for replica in picked if replica != 0]
        for replica in picked:
            pool.active[replica] -= 1
        if even:
            break
    return tuple(sent)


def _routing(pool):
    nudge = []
    before = _until_even(pool, "before the nudge", "routing-a", nudge)
    after = _until_even(pool, "after it", "routing-b", None)
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
LEAKS = [("status",), ("error",), ("hangup",), ("giveup",), ("status", "error")]


@pytest.mark.parametrize("tie_break", TIE_BREAKS)
def test_a_pool_that_releases_what_it_lets_go_of_passes_whatever_its_tie_break(tie_break):
    for cursor in range(REPLICAS):
        pool = _overloaded(Pool(tie_break=tie_break, seed=cursor))
        pool.cursor = cursor
        result = checks.routing_restored(_routing(pool))
        assert result.verdict == "pass", result
        assert result.metrics == {
            "uneven_before": 0.0, "uneven_after": 0.0, "restored": 0.0, "nudge_failures": 13.0, "nudge_hangups": 3.0,
            "nudge_giveups": 3.0,
        }  # fmt: skip
        assert result.observed.startswith(
            "before the nudge: 16 of 16 in flight together, per replica 2, 2, 2, 2, 2, 2, 2, 2, client statuses "
            "200: 16; the nudge: its first request to replica 0; replica 0 streamed 3 its client left, held 3 its "
            "client gave up on, failed 429: 2, 500: 2, 502: 2, 503: 2, "
            "504: 2, reset: 3; after it: 16 of 16"
        ), result


def test_a_pool_that_sets_a_failing_backend_aside_for_a_while_passes_once_it_is_back():
    """Replica 0, which failed the nudge's requests, is set aside when `after` is sent: judged
    on the send after the restore wait, when it is back."""
    result = checks.routing_restored(_routing(Pool(ejects=True)))
    assert result.verdict == "pass" and result.metrics == {
        "uneven_before": 0.0, "uneven_after": 1.0, "restored": 1.0, "nudge_failures": 1.0, "nudge_hangups": 3.0,
        "nudge_giveups": 3.0,
    }, result  # fmt: skip
    assert "after it again: 16 of 16 in flight together, per replica 2, 2, 2, 2, 2, 2, 2, 2" in result.observed


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
        assert "got fewer than 2" in result.detail and "later too" in result.detail, (state, result)


def test_a_pool_that_leaks_and_sets_aside_still_fails_once_the_backend_is_back():
    result = checks.routing_restored(_routing(Pool(leaks=("status",), ejects=True)))
    assert result.verdict == "fail" and result.detail.endswith(", 12 s later too"), result


@pytest.mark.parametrize("leaks", [("hangup",), ("giveup",)])
@pytest.mark.parametrize("tie_break", TIE_BREAKS)
def test_a_pool_that_leaks_hangups_and_sets_aside_fails_whatever_its_tie_break(leaks, tie_break):
    """The hang-ups come first in the nudge: a pool that sets replica 0 aside after its first
    failure has sent them there all the same."""
    result = checks.routing_restored(_routing(Pool(tie_break=tie_break, leaks=leaks, ejects=True)))
    assert result.verdict == "fail" and result.metrics["nudge_hangups"] >= 2, result
    assert result.detail.startswith("after it again: replica(s) 0 got fewer than 2"), result


def test_hangups_that_do_not_go_to_the_one_replica_below_the_others_fail():
    """Least connections sends replica 0 the first two streams whose client leaves, whether or
    not the proxy has met the hang-ups yet (it is below the others' two pinned streams); the
    third may find it tied with them."""
    round_ = _routing(Pool())

    def moved(*numbers):
        ids = {f"{ID_PREFIX}{HANGUP_PREFIX}{number}" for number in numbers}
        nudge = tuple(dataclasses.replace(a, replica=3) if a.request_id in ids else a for a in round_.nudge)
        return checks.routing_restored(dataclasses.replace(round_, nudge=nudge))

    assert moved(2).verdict == "pass" and moved(2).metrics["nudge_hangups"] == 2.0
    result = moved(1, 2)
    assert result.verdict == "fail" and result.detail.startswith(
        "the nudge: 1 of its streams whose client left went to replica 0, though it had fewer in flight than every "
        "other replica for the first 2"
    ), result


def test_miscounts_that_came_out_even_show_after_the_nudge():
    pool = Pool(tie_break="lowest", leaks=("status", "error"))
    pool.active = [3] * REPLICAS  # every replica miscounted alike: `before` is even
    result = checks.routing_restored(_routing(pool))
    assert result.verdict == "fail" and result.metrics["uneven_before"] == 0.0, result
    assert result.metrics["uneven_after"] == 1.0 and result.metrics["nudge_failures"] >= 2, result
    assert result.detail.startswith("after it again: replica(s) 0 got fewer than 2, replica(s) "), result


def test_a_proxy_that_routes_in_turn_is_caught_by_the_nudge_where_both_rounds_are_even():
    pool = Pool(tie_break="robin")
    pool.cursor = 3
    result = checks.routing_restored(_routing(pool))
    assert result.verdict == "fail" and result.metrics["uneven_before"] == 0.0 == result.metrics["uneven_after"]
    assert result.detail == (
        "the nudge: its first request went to replica 3, not to replica 0, the only one with nothing in flight"
    ), result


def test_ids_no_replica_saw_are_named_as_such():
    sent = AtOnce("before the nudge", (), (), 0.0)
    result = checks.routing_restored(RoutingRound(REPLICAS, (sent, sent), (sent,), ()))
    assert result.verdict == "fail" and result.detail.startswith(
        "before the nudge: no replica recorded any of the requests' ids"
    ), result


def test_no_round_is_no_pass():
    result = checks.routing_restored(None)
    assert result.verdict == "fail" and result.observed == "no request was sent"
