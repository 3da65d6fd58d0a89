"""The wire checks: what a stream that met a fault between the proxy and a replica must look
like at the client, as pure functions of the client's records, the fault point's record of
what it forwarded (`RelayedResponse`) and the replicas' attempts.

The contract is the one every streaming proxy owes an SSE client:
- a frame that arrives in two TCP segments is forwarded whole: the client reads the events and
  their data as forwarded (a proxy's framing, its line ends and heartbeat comments, is its own);
- a stream the proxy cannot finish ends in an error the client can see (a broken body), never
  in a clean end a client takes for the whole answer (silent truncation);
- an in-stream error event (vLLM's way to end a failed generation) reaches the client;
- failover happens only before the first byte: once a response has started, a retry would
  generate the answer twice and splice two streams into one;
- a stream that goes silent for less than the proxy's declared streaming timeout goes on;
- a stream that is slow as a whole (a slow, jittery link) but alive goes on to its end;
- a stream its client hangs up on stops at the replica: no generation runs on for nobody;
- a client that reads slower than the replica writes is paced by TCP's flow control, end to end:
  the proxy holds back what it has not sent instead of gathering it (its memory is bounded).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from dd_accept.acceptance.analysis import attempts_by_request, requests
from dd_accept.acceptance.registry import check
from dd_accept.base.events import ClientRequest, Event, RelayedResponse, UpstreamAttempt
from dd_accept.base.results import CheckResult


def faulted(relayed: Sequence[RelayedResponse], ended: str | None) -> dict[str, RelayedResponse]:
    """The streams the fault point ended as `ended` (whole, reset, error_event; None: however
    they ended, a side's hang-up included), by request id."""
    return {r.request_id: r for r in relayed if r.request_id and r.status == 200 and ended in (None, r.ended)}


def _none_forwarded(check_id: str, expected: str, client: Sequence[Event]) -> CheckResult | None:
    """The check's failure when the proxy forwarded none of the phase's requests (a SUT
    behaviour that never happened), else None."""
    sent = requests(client)
    return CheckResult.judge(
        check_id, False, expected,
        f"the proxy forwarded none of {len(sent)} request(s) to a replica: "
        + _shown(Counter(s.outcome for s in sent)),
        "no stream reached the fault point: nothing the proxy does with one could be seen",
    )  # fmt: skip


def _untested(what: str) -> RuntimeError:
    return RuntimeError(f"the fault point {what}: the phase tested nothing (the harness's fault)")


def _judged(
    check_id: str,
    expected: str,
    client: Sequence[Event],
    relayed: Sequence[RelayedResponse],
    ended: str | None,
    what: str,
) -> CheckResult | tuple[dict[str, RelayedResponse], dict[str, ClientRequest]]:
    """The streams the fault point ended as `ended`, and what the client saw of each; or the
    check's failure where the proxy forwarded none of the phase's requests (a SUT behaviour
    that never happened). Where it forwarded some but none was faulted, the harness failed
    (`what` the fault point did not do)."""
    found = faulted(relayed, ended)
    if not found:
        if not [r for r in relayed if r.request_id]:
            return _none_forwarded(check_id, expected, client)
        raise _untested(what)
    return found, _streams(client, set(found))


def _streams(client: Sequence[Event], ids: set[str]) -> dict[str, ClientRequest]:
    return {s.request_id: s for s in requests(client) if s.request_id in ids}


def _as_forwarded(stream: ClientRequest, sent: RelayedResponse) -> bool:
    """The client read the events forwarded and the bytes of their data (`sse_payload_bytes`):
    line ends and comments are the proxy's to choose (the SSE format allows CRLF, and a proxy
    may send heartbeats through a silence), an event's data is not."""
    return (stream.chunks, stream.payload_bytes or 0) == (sent.data_events, sent.payload_bytes)


def _before_error_kept(stream: ClientRequest | None, sent: RelayedResponse) -> bool:
    """Every event the replica sent before its error event reached the client, however the
    proxy told the failure (forwarded, worded its own way, or a broken body): no fewer. A
    proxy may add events of its own (a diagnostic, an error in a shape not recognised as one)."""
    return stream is not None and _kept(stream) >= sent.data_events - 1


def _first(ids: Sequence[str]) -> str:
    return f"first: {ids[0]}" if ids else ""


@check("wire.split_frames")
def split_frames(client: Sequence[Event], relayed: Sequence[RelayedResponse]) -> CheckResult:
    """Every frame split across two TCP segments reaches the client whole: each stream ends
    with [DONE] and carries exactly the events, and the bytes of their data, the fault point
    forwarded."""
    expected = (
        "every stream whose frames arrived in two TCP segments reaches the client whole: [DONE], and the events "
        "and the bytes of their data forwarded to the proxy"
    )
    judged = _judged(split_frames.check_id, expected, client, relayed, None, "relayed no stream")
    if isinstance(judged, CheckResult):
        return judged
    sent, seen = judged
    splits = sum(r.split for r in sent.values())
    if not splits:
        raise _untested("split no frame")
    missing = sorted(set(sent) - set(seen))
    unfinished = sorted(k for k, s in seen.items() if s.outcome != "ok" or not s.done)
    differ = sorted(k for k, s in seen.items() if not _as_forwarded(s, sent[k]))
    ok = not missing and not unfinished and not differ
    return CheckResult.judge(
        split_frames.check_id,
        ok,
        expected,
        f"{len(sent)} streams, {splits} frames split; {len(unfinished)} not finished; "
        f"{len(differ)} differ from what was forwarded; {len(missing)} never recorded by the client",
        "the proxy treats a TCP read as a frame" if differ else _first(unfinished or missing),
        {"streams": len(sent), "frames_split": splits, "streams_differing": len(differ),
         "streams_unfinished": len(unfinished)},
    )  # fmt: skip


def _ending(stream: ClientRequest | None) -> str:
    """How a stream that failed upstream ended at the client: "error" (its body broke) and
    "error event" (the proxy told it in the stream, vLLM's way, with or without [DONE] after)
    are visible to a client; "hung", "completed" (a [DONE] and no error: an end made up after
    the failure) and "clean end" (no error, no [DONE]) are not."""
    if stream is None:
        return "unrecorded"
    if stream.error_events:
        return "error event"
    if stream.outcome == "error" and not stream.done:
        return "error"
    if stream.outcome == "deadline":
        return "hung"
    return "completed" if stream.done else "clean end"


VISIBLE = ("error", "error event")


def _endings(
    faulted_streams: dict[str, RelayedResponse], seen: dict[str, ClientRequest]
) -> tuple[Counter[str], list[str]]:
    """How each faulted stream ended at the client, counted, and the ids of those that ended
    without a failure the client can see."""
    ending = {key: _ending(seen.get(key)) for key in faulted_streams}
    return Counter(ending.values()), sorted(key for key, how in ending.items() if how not in VISIBLE)


def _shown(endings: Counter[str]) -> str:
    """A count of endings (or outcomes) as "N name", by name."""
    return ", ".join(f"{n} {ending}" for ending, n in sorted(endings.items()))


@check("wire.cut_visible")
def cut_visible(client: Sequence[Event], relayed: Sequence[RelayedResponse]) -> CheckResult:
    """Every stream whose replica connection was reset mid-way ends at the client in an error
    it can see: a broken body or an error event, not a clean end (which a client takes for the
    whole answer), not a hang until its own deadline."""
    expected = "every stream cut mid-way (its replica connection reset) ends at the client in a visible error"
    judged = _judged(cut_visible.check_id, expected, client, relayed, "reset", "reset no stream")
    if isinstance(judged, CheckResult):
        return judged
    cut, seen = judged
    endings, bad = _endings(cut, seen)
    ok = not bad
    detail = ""
    if endings.get("clean end"):
        detail = "a cut stream ended as if whole (no error, no [DONE]): silent truncation"
    elif endings.get("hung"):
        detail = "a cut stream stayed open until the client gave up"
    elif endings.get("completed"):
        detail = "a cut stream reached [DONE]: something generated its end after the cut"
    return CheckResult.judge(
        cut_visible.check_id,
        ok,
        expected,
        f"{len(cut)} streams cut after {min(r.data_events for r in cut.values())} event(s): "
        + _shown(endings),
        detail or _first(bad),
        {"streams_cut": len(cut), "silently_truncated": endings.get("clean end", 0), "hung": endings.get("hung", 0),
         "completed": endings.get("completed", 0)},
    )  # fmt: skip


@check("wire.error_event")
def error_event(client: Sequence[Event], relayed: Sequence[RelayedResponse]) -> CheckResult:
    """Every stream ended by an in-stream error event ends at the client with the failure
    visible: the error event itself, or (a proxy that turns it into its own kind of failure)
    a broken body; never a clean end with the error dropped. The events before the error reach
    the client, every one. Streams that reached the client other than as forwarded are counted
    (a proxy may word the error its own way)."""
    expected = (
        "every stream a replica ended with an in-stream error event ends at the client with the failure visible "
        "(the error event, or a broken body), after every event the replica sent before it"
    )
    judged = _judged(error_event.check_id, expected, client, relayed, "error_event", "ended no stream by an error")
    if isinstance(judged, CheckResult):
        return judged
    ended, seen = judged
    endings, without = _endings(ended, seen)
    differ = sorted(k for k, s in seen.items() if not _as_forwarded(s, ended[k]))
    short = sorted(k for k, r in ended.items() if not _before_error_kept(seen.get(k), r))
    detail = "the proxy drops the error: the client reads a shorter answer as a whole one" if without else ""
    if short and not detail:
        first = ended[short[0]]
        detail = (
            f"events before the error lost: {short[0]} reached the client with "
            f"{_kept(seen.get(short[0]))} of the {first.data_events - 1} the replica sent before its error"
        )
    return CheckResult.judge(
        error_event.check_id,
        not without and not short,
        expected,
        f"{len(ended)} streams ended by an error event: "
        + _shown(endings)
        + f"; {len(differ)} reached the client other than as forwarded; {len(short)} with events lost before "
        "the error",
        detail,
        {"streams": len(ended), "errors_lost": len(without), "streams_differing": len(differ),
         "events_lost_before_error": len(short)},
    )  # fmt: skip


def _kept(stream: ClientRequest | None) -> int:
    """The events a stream's client read that were not an error."""
    return 0 if stream is None else (stream.chunks or 0) - (stream.error_events or 0)


@check("wire.no_retry_after_first_byte")
def no_retry_after_first_byte(
    client: Sequence[Event], relayed: Sequence[RelayedResponse], upstream: Sequence[UpstreamAttempt]
) -> CheckResult:
    """A request whose response had started reaches the replicas once: failover only before
    the first byte (a retry after it generates the answer twice and splices two streams)."""
    expected = (
        "a request whose response had started (then was cut or ended by an error event) reaches the replicas once"
    )
    started = {**faulted(relayed, "reset"), **faulted(relayed, "error_event")}
    if not started:
        if not [r for r in relayed if r.request_id]:
            return _none_forwarded(no_retry_after_first_byte.check_id, expected, client)
        raise _untested("faulted no stream after its first byte")
    attempts = attempts_by_request(upstream)
    again = sorted(k for k in started if len(attempts.get(k, [])) > 1)
    counts = Counter(min(len(attempts.get(k, [])), 3) for k in started)
    seen = ", ".join(f"{n} {'once' if k == 1 else f'{k}+ times'}" for k, n in sorted(counts.items()))
    return CheckResult.judge(
        no_retry_after_first_byte.check_id,
        not again,
        expected,
        f"{len(started)} requests faulted mid-stream; the replicas saw {seen}",
        "the proxy retried after the first byte: the answer was generated again" if again else "",
        {"requests": len(started), "retried_mid_stream": len(again)},
    )  # fmt: skip


def _declared(timeout_s: float | None) -> str:
    return "its declared streaming timeout" if timeout_s is None else f"its declared {timeout_s:g}s timeout"


def _whole(stream: ClientRequest | None, sent: RelayedResponse) -> bool:
    """The stream reached the client whole: its [DONE], and the events and bytes forwarded."""
    return stream is not None and stream.outcome == "ok" and bool(stream.done) and _as_forwarded(stream, sent)


def _arrived(faulted_streams: dict[str, RelayedResponse], seen: dict[str, ClientRequest]) -> Counter[str]:
    """How each stream a fault slowed down reached the client: "whole", else how it ended
    (`_ending`), counted."""
    return Counter("whole" if _whole(seen.get(k), r) else _ending(seen.get(k)) for k, r in faulted_streams.items())


def _slowed(
    check_id: str,
    expected: str,
    client: Sequence[Event],
    relayed: Sequence[RelayedResponse],
    by: Callable[[RelayedResponse], float],
    did: str,
) -> CheckResult | tuple[dict[str, RelayedResponse], dict[str, ClientRequest]]:
    """The streams the fault point slowed down (`by`: how long it held one), however they
    ended (the proxy may give up on them), and what the client saw of each; or the check's
    failure where the proxy forwarded none (`_judged`)."""
    judged = _judged(check_id, expected, client, relayed, None, "relayed no stream")
    if isinstance(judged, CheckResult):
        return judged
    sent, seen = judged
    slowed = {k: r for k, r in sent.items() if by(r)}
    if not slowed:
        raise _untested(f"{did} no stream")
    return slowed, seen


@check("wire.stall_survived")
def stall_survived(client: Sequence[Event], relayed: Sequence[RelayedResponse], timeout_s: float | None) -> CheckResult:
    """Every stream that went silent mid-way for less than the proxy's declared streaming
    timeout (`timeout_s`, the SUT profile's) reaches the client whole, as forwarded: a model
    that pauses mid-generation is not a dead backend."""
    declared = _declared(timeout_s)
    expected = f"every stream silent mid-way for less than {declared} reaches the client whole, as forwarded"
    judged = _slowed(stall_survived.check_id, expected, client, relayed, lambda r: r.stalled_s, "stalled")
    if isinstance(judged, CheckResult):
        return judged
    stalled, seen = judged
    stall = max(r.stalled_s for r in stalled.values())
    endings = _arrived(stalled, seen)
    broken = len(stalled) - endings.get("whole", 0)
    return CheckResult.judge(
        stall_survived.check_id,
        not broken,
        expected,
        f"{len(stalled)} streams silent {stall:g}s mid-way: "
        + _shown(endings),
        f"the proxy gave up on a stream silent for {stall:g}s, less than {declared}" if broken else "",
        {"streams": len(stalled), "stall_s": stall, "streams_broken": broken},
    )  # fmt: skip


@check("wire.slow_link_survived")
def slow_link_survived(
    client: Sequence[Event], relayed: Sequence[RelayedResponse], timeout_s: float | None
) -> CheckResult:
    """Every stream that crossed a slow, jittery link (each chunk held a drawn latency, the
    connection's rate low), taking seconds whole but less than the proxy's declared streaming
    timeout, reaches the client whole, as forwarded: a slow network or replica is not a dead
    one. A proxy that bounds a whole response's time, where it declares a bound on silence,
    cuts every long generation this way; one whose bound is longer than the streams took is
    not caught, and the observation says up to what length it was tested."""
    declared = _declared(timeout_s)
    expected = (
        f"every stream that took seconds to cross a slow, jittery link (less than {declared}) reaches the client "
        "whole, as forwarded"
    )
    judged = _slowed(slow_link_survived.check_id, expected, client, relayed, lambda r: r.slowed_s, "slowed")
    if isinstance(judged, CheckResult):
        return judged
    slowed, seen = judged
    endings = _arrived(slowed, seen)
    broken = sorted(k for k, r in slowed.items() if not _whole(seen.get(k), r))
    took = sorted(r.slowed_s for r in slowed.values())
    cut = min((slowed[k].slowed_s for k in broken), default=0.0)
    return CheckResult.judge(
        slow_link_survived.check_id,
        not broken,
        expected,
        f"{len(slowed)} streams took {took[0]:.1f}-{took[-1]:.1f}s over the link: " + _shown(endings)
        + ("" if broken else f"; a bound on a whole response longer than {took[-1]:.1f}s is not tested"),
        f"the proxy gave up on a stream that was slow but alive, {cut:.1f}s in (less than {declared})"
        if broken else "",
        {"streams": len(slowed), "stream_s_max": took[-1], "streams_broken": len(broken), "cut_after_s": cut},
    )  # fmt: skip


# How a stream the client left ended at the replicas (`cancel_stops_generation`).
STOPPED, STOPPED_LATE, TO_THE_END, UNRECORDED = "stopped", "stopped late", "generated to the end", "no replica record"


def _after_hang_up(attempts: Sequence[UpstreamAttempt], tokens: int, read: int) -> str:
    """What the replicas did with a stream after its client left, `read` events in (one read
    may carry several, so each stream is judged from what its client had): stopped within
    the first half of what remained of its `tokens`, later, never (served whole), or never
    ended at a replica when judged (held open unread, or its request id not forwarded)."""
    if not attempts:
        return UNRECORDED
    if any(a.outcome == "ok" for a in attempts):
        return TO_THE_END
    generated = max(a.data_events for a in attempts)
    return STOPPED if generated - read <= (tokens - read) / 2 else STOPPED_LATE


@check("wire.cancel_stops_generation")
def cancel_stops_generation(
    client: Sequence[Event], upstream: Sequence[UpstreamAttempt], tokens: int, after: int
) -> CheckResult:
    """A stream whose client hangs up stops at the replica, within half of what remained of
    it: the proxy closes the upstream when its client goes (an inference server aborts the
    generation when its connection closes), so no GPU time is spent on an answer nobody
    reads. Judged on the replicas' own records of each stream the client left."""
    expected = (
        f"every stream the client hangs up on after {after} events stops at the replica within half of what "
        f"remained of its {tokens} tokens; none is generated to the end for nobody"
    )
    sent = requests(client)
    left = [s for s in sent if s.outcome == "hung_up" and s.request_id]
    if not left:
        return CheckResult.judge(
            cancel_stops_generation.check_id, False, expected,
            f"no stream reached the {after} events its client hangs up after: "
            + _shown(Counter(s.outcome for s in sent)),
            "the proxy streamed none of the part's requests: what it does when a client leaves could not be seen",
        )  # fmt: skip
    attempts = attempts_by_request(upstream)
    endings = {s.request_id: _after_hang_up(attempts.get(s.request_id, []), tokens, s.chunks or after) for s in left}
    counts = Counter(endings.values())
    wrong = sorted(k for k, ending in endings.items() if ending != STOPPED)
    generated = [max(a.data_events for a in attempts[k]) for k in endings if attempts.get(k)]
    detail = f"the generation ran on after its client left ({_first(wrong)})" if wrong else ""
    return CheckResult.judge(
        cancel_stops_generation.check_id,
        not wrong,
        expected,
        f"{len(left)} streams left after {after} events: " + _shown(counts),
        detail,
        {"streams": len(left), "stopped": counts.get(STOPPED, 0), "stopped_late": counts.get(STOPPED_LATE, 0),
         "generated_to_the_end": counts.get(TO_THE_END, 0), "unrecorded": counts.get(UNRECORDED, 0),
         "events_generated_max": max(generated, default=0)},
    )  # fmt: skip


# What a proxy may hold beyond its size before a slow reader's streams: aiohttp's and
# asyncio's per-stream buffers are 64-128 KiB a side, a few MiB for the part's streams
# together; a proxy that gathers what its reader has not taken holds what the replicas
# offered, hundreds of MiB (`wire.WireOptions`: 6 streams of 64 MiB).
SLOW_READER_BOUND_MIB = 32


@check("wire.slow_reader_bounded")
def slow_reader_bounded(
    client: Sequence[Event],
    upstream: Sequence[UpstreamAttempt],
    rss_before_kb: int,
    peak_kb: int | None,
    offered_mib: float,
    read_kib_s: float,
) -> CheckResult:
    """A proxy relaying to a client that reads slower than the replica writes stops reading the
    replica until its client has taken what it sent (TCP's flow control carries the reader's
    pace back upstream), so its memory does not grow with the response. Judged on the
    kernel's count of the proxy step's resident memory: its peak during the part (VmHWM)
    against its size before the streams, beside what the client read and the replicas wrote."""
    expected = (
        f"the proxy's resident memory grows by at most {SLOW_READER_BOUND_MIB} MiB while a client reads streams "
        f"of {offered_mib:g} MiB each at {read_kib_s:g} KiB/s"
    )
    sent = requests(client)
    read = [s for s in sent if s.status == 200 and (s.bytes or 0) > 0]
    if not read:
        return CheckResult.judge(
            slow_reader_bounded.check_id, False, expected,
            "no stream reached the slow reader: " + _shown(Counter(s.outcome for s in sent)),
            "the proxy streamed none of the part's requests: what it holds for a slow reader could not be seen",
        )  # fmt: skip
    client_mib = sum(s.bytes or 0 for s in read) / 2**20
    written_mib = sum(a.bytes for a in upstream if a.request_id in {s.request_id for s in read}) / 2**20
    if peak_kb is None:
        return CheckResult.judge(
            slow_reader_bounded.check_id, False, expected,
            f"the proxy's step ended while the client read {client_mib:.1f} MiB of {len(read)} streams "
            f"(the replicas wrote {written_mib:.1f} MiB); its memory could not be read after them",
            "the proxy did not survive a slow reader",
            {"streams": len(read), "client_read_mib": round(client_mib, 2),
             "replicas_wrote_mib": round(written_mib, 2)},
        )  # fmt: skip
    grown = max(0, peak_kb - rss_before_kb) / 1024
    broken = grown > SLOW_READER_BOUND_MIB
    return CheckResult.judge(
        slow_reader_bounded.check_id,
        not broken,
        expected,
        f"the proxy's peak RSS grew {grown:.1f} MiB (from {rss_before_kb / 1024:.0f} to {peak_kb / 1024:.0f} MiB) "
        f"while the client read {client_mib:.1f} MiB of {len(read)} streams and the replicas wrote "
        f"{written_mib:.1f} MiB",
        f"the proxy gathered what its slow reader had not taken ({grown:.0f} MiB)" if broken else "",
        {"streams": len(read), "proxy_rss_before_mib": round(rss_before_kb / 1024, 1),
         "proxy_peak_rss_mib": round(peak_kb / 1024, 1), "proxy_grew_mib": round(grown, 1),
         "client_read_mib": round(client_mib, 2), "replicas_wrote_mib": round(written_mib, 2)},
    )  # fmt: skip
