"""The check of the routing round (overload_routing): least connections after the faults."""

from __future__ import annotations

from collections import Counter

from dd_accept.acceptance import overload_routing
from dd_accept.acceptance.analysis import counts_text
from dd_accept.acceptance.ledger import attempt_end
from dd_accept.acceptance.overload_routing import PER_REPLICA, AtOnce, RoutingRound
from dd_accept.acceptance.registry import check
from dd_accept.base.results import CheckResult


def _described(sent: AtOnce, replicas: int) -> str:
    upstream = sent.upstream
    together = max((sum(b.started <= a.started < attempt_end(b) for b in upstream) for a in upstream), default=0)
    return (
        f"{sent.name}: {together} of {len(sent.client)} in flight together, per replica "
        f"{', '.join(map(str, sent.per_replica(replicas)))}, client statuses "
        f"{counts_text(Counter(r.status for r in sent.client))}"
    )


def _uneven(sent: AtOnce, replicas: int) -> str:
    """Why a send came out uneven, in words that blame no cause the evidence does not show."""
    shares = sent.per_replica(replicas)
    if not any(shares):
        return f"{sent.name}: no replica recorded any of the requests' ids (the proxy did not pass them on)"
    fewer = [str(index) for index, share in enumerate(shares) if share < PER_REPLICA]
    more = [str(index) for index, share in enumerate(shares) if share > PER_REPLICA]
    text = f"{sent.name}: replica(s) {', '.join(fewer) or 'none'} got fewer than {PER_REPLICA}"
    return text + f", replica(s) {', '.join(more) or 'none'} more, while every replica was idle"


@check("overload.routing_restored")
def routing_restored(round_: RoutingRound | None) -> CheckResult:
    """Once the overload and the lost backends are over, least connections gives each idle
    replica its share again (overload_routing): two requests a replica sent at once give
    each replica two, before the nudge and after it; in the nudge, with replica 0 the one
    replica with nothing in flight, its first request goes there. A proxy that still counts
    attempts it let go of (a status or a connection error it retried elsewhere, a stream
    whose client left or gave up) gives the replicas that failed them fewer. A send that
    comes out uneven is judged on a second one RESTORE_WAIT_S later: a backend set aside for
    a while is back by then, a miscount is not."""
    replicas = round_.replicas if round_ else 0
    wait_s = overload_routing.RESTORE_WAIT_S
    expected = (
        f"{PER_REPLICA * replicas} requests sent at once through the proxy: {PER_REPLICA} to each of the {replicas} "
        "replicas (least connections), before and after replica 0, then the only one with nothing in flight, "
        "streamed requests whose client left after the first line or gave up before the first byte, and failed "
        f"requests with each retried status and with resets (an uneven send is sent again {wait_s:g} s later, and "
        "judged on that)"
    )
    if round_ is None or not round_.before or not round_.after:
        return CheckResult.judge(routing_restored.check_id, False, expected, "no request was sent", "")
    parts, problems = [], []
    failed, hangups, giveups = round_.nudge_failures(), len(round_.nudge_hangups()), len(round_.nudge_giveups())
    for sends in (round_.before, round_.after):
        parts += [_described(sent, replicas) for sent in sends]
        last = sends[-1]
        if not last.even(replicas):
            again = f", {last.sent_at - sends[0].sent_at:.0f} s later too" if len(sends) > 1 else ""
            problems.append(_uneven(last, replicas) + again)
        if sends is round_.before:
            first = round_.nudge[0].replica if round_.nudge else None
            failures = Counter("reset" if a.status is None or a.outcome != "ok" else str(a.status) for a in failed)
            parts.append(
                f"the nudge: its first request to replica {first}; replica 0 streamed {hangups} its client left, "
                f"held {giveups} its client gave up on, failed {counts_text(failures)}"
            )
            if not problems and first != 0:
                problems.append(
                    f"the nudge: its first request went to replica {first}, not to replica 0, the only one with "
                    "nothing in flight"
                )
            elif not problems and hangups < overload_routing.HANGUPS_TO_REPLICA_0:
                problems.append(
                    f"the nudge: {hangups} of its streams whose client left went to replica 0, though it had fewer in "
                    f"flight than every other replica for the first {overload_routing.HANGUPS_TO_REPLICA_0}"
                )
    metrics = {
        "uneven_before": float(not round_.before[0].even(replicas)),
        "uneven_after": float(not round_.after[0].even(replicas)),
        "restored": float(any(len(sends) > 1 and sends[-1].even(replicas) for sends in (round_.before, round_.after))),
        "nudge_failures": float(len(failed)),
        "nudge_hangups": float(hangups),
        "nudge_giveups": float(giveups),
    }
    detail = "; ".join(problems)
    return CheckResult.judge(routing_restored.check_id, not problems, expected, "; ".join(parts), detail, metrics)
