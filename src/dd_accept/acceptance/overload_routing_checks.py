"""The check of the routing round (overload_routing): least connections after the faults."""

from __future__ import annotations

from collections import Counter

from dd_accept.acceptance.analysis import counts_text
from dd_accept.acceptance.ledger import attempt_end
from dd_accept.acceptance.overload_routing import PER_REPLICA, RoutingRound
from dd_accept.acceptance.registry import check
from dd_accept.base.results import CheckResult


@check("overload.routing_restored")
def routing_restored(round_: RoutingRound | None) -> CheckResult:
    """Once the overload and the lost backends are over, least connections gives each idle
    replica its share again (overload_routing): two requests a replica sent at once, all in
    flight together, give each replica two, before and after the nudge; and in the nudge,
    with replica 0 the one replica with nothing in flight, its first request goes there. A
    proxy that still counts attempts it let go of (a 429 or a connection error it retried
    elsewhere) gives the replicas that failed them fewer. Requests the replicas did not
    have in flight all together are a proxy that did not pass them on together: no pass."""
    replicas = round_.replicas if round_ else 0
    expected = (
        f"{PER_REPLICA * replicas} requests sent at once through the proxy, all in flight together at the "
        f"replicas: {PER_REPLICA} to each of the {replicas} replicas (least connections), before and after replica "
        "0, then the only one with nothing in flight, answered requests 429 and reset them"
    )
    if round_ is None:
        return CheckResult.judge(routing_restored.check_id, False, expected, "no request was sent", "")
    parts, problems = [], []
    for sent in (round_.before, round_.after):
        upstream, count = sent.upstream, len(sent.client)
        together = max((sum(b.started <= a.started < attempt_end(b) for b in upstream) for a in upstream), default=0)
        shares = sent.per_replica(replicas)
        parts.append(
            f"{sent.name}: {together} of {count} in flight together, per replica {', '.join(map(str, shares))}, "
            f"client statuses {counts_text(Counter(r.status for r in sent.client))}"
        )
        if set(shares) != {PER_REPLICA}:  # a replica's third is not held: then fewer are in flight together too
            fewer = [str(index) for index, share in enumerate(shares) if share < PER_REPLICA]
            problems.append(
                f"{sent.name}: replica(s) {', '.join(fewer)} got fewer than {PER_REPLICA} while every replica was "
                "idle: the proxy still counts connections to them that it let go of"
            )
        elif together < count:
            problems.append(f"{sent.name}: at most {together} of the {count} requests sent at once were in flight "
                            "together at the replicas")  # fmt: skip
        if sent is round_.before:
            first = round_.nudge[0].replica if round_.nudge else None
            parts.append(f"the nudge: its first request to replica {first}, {len(round_.nudge_failures())} "
                         "failed by replica 0 as told")  # fmt: skip
            if not problems and first != 0:
                problems.append(
                    f"the nudge: its first request went to replica {first}, not to replica 0, the only one with "
                    "nothing in flight"
                )
    metrics = {
        "uneven_before": float(set(round_.before.per_replica(replicas)) != {PER_REPLICA}),
        "uneven_after": float(set(round_.after.per_replica(replicas)) != {PER_REPLICA}),
        "nudge_failures": float(len(round_.nudge_failures())),
    }
    detail = "; ".join(problems)
    return CheckResult.judge(routing_restored.check_id, not problems, expected, "; ".join(parts), detail, metrics)
