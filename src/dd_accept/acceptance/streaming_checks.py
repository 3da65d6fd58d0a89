"""The streaming checks, as pure functions of client and replica events and counters."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from dd_accept.acceptance.analysis import attempts_by_request, chunk_delays, lined_up, requests
from dd_accept.acceptance.registry import check
from dd_accept.base.events import ClientRequest, Event, UpstreamAttempt
from dd_accept.base.percentiles import percentile
from dd_accept.base.results import CheckResult


@check("streaming.integrity")
def integrity(client: list[Event], upstream: list[UpstreamAttempt]) -> CheckResult:
    """Each stream arrives whole: the client got every event its replica sent, with every
    byte of each event's data. Framing is the proxy's to choose (the SSE format lets lines
    end in LF, CRLF or CR, and a comment line, a proxy's heartbeat, carries nothing), so
    the data's bytes are compared (base.events.sse_payload_bytes), not the body's; where
    either side did not count them, the body's bytes."""
    attempts = attempts_by_request(upstream)
    streams = requests(client)
    mismatched, truncated = [], 0
    for stream in streams:
        sent = [a for a in attempts.get(stream.request_id, []) if a.status == 200]
        if not stream.done:
            truncated += 1
        if len(sent) != 1 or not _carried_alike(sent[0], stream):
            mismatched.append(stream.request_id)
    ok = bool(streams) and not mismatched and truncated == 0
    return CheckResult.judge(
        integrity.check_id,
        ok,
        "every stream ends with [DONE]; client events and the bytes of their data equal the replica's, per request",
        f"{len(streams)} streams; {truncated} truncated; {len(mismatched)} differ from what the replica sent",
        f"first differing: {mismatched[0]}" if mismatched else "",
    )


def _carried_alike(sent: UpstreamAttempt, stream: ClientRequest) -> bool:
    """The client read the events the replica wrote, with their data's bytes (the bodies'
    bytes, framing and all, where either side did not count the data's)."""
    if sent.data_events != stream.chunks:
        return False
    if sent.payload_bytes is not None and stream.payload_bytes is not None:
        return sent.payload_bytes == stream.payload_bytes
    return sent.bytes == stream.bytes


def chunk_lateness(stream: ClientRequest, sent: UpstreamAttempt) -> list[float]:
    """How much later than the replica's own pacing each event reached the client: for event
    i, (client arrival i - client arrival 0) - (replica send i - replica send 0). A proxy that
    forwards the first event and holds the rest shows it here, not in the TTFT."""
    received, paced = stream.chunk_offsets_s or [], sent.chunk_offsets_s or []
    return [got - want for got, want in zip(received, paced, strict=False)][1:]


# A delay this far below zero means the client's and the replica's clocks disagree.
CLOCK_SLACK_S = 0.01


def clocks_agree(pairs: list[tuple[ClientRequest, UpstreamAttempt]]) -> bool:
    """Whether the client and the replicas read one wall clock closely enough to line up each
    event's write and read: no event read before it was written."""
    return all(min(chunk_delays(stream, sent), default=0.0) >= -CLOCK_SLACK_S for stream, sent in pairs)


def event_delays(stream: ClientRequest, sent: UpstreamAttempt, wall: bool = True) -> list[float]:
    """Each event's delay, from the replica's write to the client's read: on the wall clock
    both share (chunk_delays: the events' way back only), or, where the clocks disagree, the
    first event's from the request (the TTFT the proxy added, which also counts the request's
    way to the replica) and every later one's against the stream's own first (chunk_lateness)."""
    if wall:
        return chunk_delays(stream, sent)
    if stream.ttft_s is None or sent.first_byte_s is None:
        return []
    return [stream.ttft_s - sent.first_byte_s, *chunk_lateness(stream, sent)]


def held_share(delays: list[float], sent: UpstreamAttempt) -> float | None:
    """The largest delay of any event of the stream, as a share of the replica's stream (its
    response from its first byte on). A proxy that holds the body, or every event after the
    first, delivers events only once the replica has sent (nearly) all of them: a share near 1
    however busy the machine is. A proxy that forwards each event as it arrives shows only
    its scheduling noise, which does not grow with the stream."""
    streamed = sent.duration_s - (sent.first_byte_s or 0.0)
    if streamed <= 0 or not delays:
        return None
    return max(0.0, *delays) / streamed


def gapped(delays: list[float], sent: UpstreamAttempt) -> list[tuple[float, float]]:
    """(delay, the replica's gap to its next event) for each event followed by one of the
    stream's paced gaps (at least a quarter of its largest): the last token, sent a moment
    before the final event and [DONE], has none to be judged by (the position medians judge
    it)."""
    paced = sent.chunk_offsets_s or []
    gaps = [later - earlier for earlier, later in itertools.pairwise(paced)]
    if not gaps or max(gaps) <= 0:
        return []
    return [(delay, gap) for delay, gap in zip(delays, gaps, strict=False) if gap >= max(gaps) / 4]


@dataclass(frozen=True, slots=True)
class SparseReading:
    """The sparse streams' events, as no_buffering judges them."""

    streams: int  # lined up and with paced gaps
    held: int  # streams with an event not delivered within the gap share of its next gap
    largest_share: float  # the largest delay as a share of its event's gap
    gap_s: float  # the replica's paced gap (median)
    position_medians: tuple[float, ...]  # each event position's median delay over the streams
    first_position: int  # the position of position_medians[0]: 1 where the first event's is unknown
    late_share: float  # the share of events delayed at least `late_gap_share` of the gap
    delay_max_s: float
    # the gap the typical and late bounds are shares of: the paced one, but never less than
    # the scenario's default (a gap shortened for a proxy's declared streaming timeout is
    # judged no stricter in seconds, as a busy machine's noise does not shrink with it)
    bound_gap_s: float = 0.0


def read_sparse(
    pairs: list[tuple[ClientRequest, UpstreamAttempt]],
    wall: bool,
    gap_share_limit: float,
    late_gap_share: float,
    least_gap_s: float = 0.0,
) -> SparseReading | None:
    """The sparse streams' delays: per stream against each event's gap (a held event), per
    event position over the streams (a hold at the head or the tail of every stream, or a
    linger), and over every event (a flush on a timer delays most events a little)."""
    delays = [event_delays(stream, sent, wall) for stream, sent in pairs]
    judged = [found for stream, (_, sent) in zip(delays, pairs, strict=True) if (found := gapped(stream, sent))]
    if not judged:
        return None
    ratios = [max(delay / gap for delay, gap in stream) for stream in judged]
    gap = percentile([gap for stream in judged for _, gap in stream], 0.5) or 0.0
    bound_gap = max(gap, least_gap_s)
    # Without a shared clock a first event's delay holds the request's way to the replica too:
    # the medians and the late share then start at the second event.
    first = 0 if wall else 1
    every = [delay for stream in delays for delay in stream[first:]]
    positions = max(len(stream) for stream in delays)
    columns = [[stream[i] for stream in delays if len(stream) > i] for i in range(first, positions)]
    medians = tuple(percentile(column, 0.5) or 0.0 for column in columns if 2 * len(column) >= len(delays))
    return SparseReading(
        streams=len(judged),
        held=sum(1 for ratio in ratios if ratio >= gap_share_limit),
        largest_share=max(ratios),
        gap_s=gap,
        position_medians=medians,
        first_position=first,
        late_share=sum(1 for delay in every if delay >= late_gap_share * bound_gap) / len(every),
        bound_gap_s=bound_gap,
        delay_max_s=max(every),
    )


def served_once(
    client: Sequence[Event], upstream: Sequence[UpstreamAttempt]
) -> list[tuple[ClientRequest, UpstreamAttempt]]:
    """Each client stream with the one replica attempt that served it (streams retried or
    served by none are not lined up: their timing is not one replica's pacing)."""
    attempts = attempts_by_request(upstream)
    pairs = []
    for stream in requests(client):
        sent = [a for a in attempts.get(stream.request_id, []) if a.status == 200]
        if len(sent) == 1:
            pairs.append((stream, sent[0]))
    return pairs


@check("streaming.no_buffering")
def no_buffering(
    client: Sequence[Event],
    upstream: Sequence[UpstreamAttempt],
    sparse_client: Sequence[Event] = (),
    sparse_upstream: Sequence[UpstreamAttempt] = (),
    held_share_limit: float = 0.5,
    held_streams_limit: float = 0.1,
    gap_share_limit: float = 0.9,
    typical_share_limit: float = 1 / 3,
    late_gap_share: float = 1 / 15,
    late_events_limit: float = 1 / 3,
    least_gap_s: float = 0.0,
) -> CheckResult:
    """The proxy forwards each event as it comes, judged against the stream's own pacing so
    that no machine's speed decides:

    - *sparse streams* (events 1.5 s apart, or half the proxy's declared streaming timeout where
      that is shorter: streaming.sparse_gap_ms; started over one gap):
      - each event reaches the client within `gap_share_limit` of the replica's gap to its
        next one: a proxy that holds events for a buffer, a batch or the stream's end
        delivers one only with a later one;
      - at every event position (the first, the last token, the final event alike), the
        typical (median) event within `typical_share_limit` of the gap: a proxy that holds
        the head or the tail of each stream, or lingers for more before it flushes, delays
        the typical event of a position by its hold;
      - at most `late_events_limit` of all events delayed `late_gap_share` of the gap or more
        (0.1 s): a flush on a timer of period T delays a share 1 - 0.1/T of them that much
        (a 0.3 s timer two in three, one of 0.2 s half; one of 0.15 s a third, at the bound:
        caught about half the time).
      The typical and late bounds are shares of the gap, but never of less than `least_gap_s`.
      A proxy that forwards each event as it comes delivers the typical one in milliseconds
      (27 ms at the most in five runs on a busy machine, 2 ms typically); a stall of the
      machine delays the events it meets, few of a position's (the streams start over one
      gap) and few of all: 1.2 s stalls pass (two in one sparse phase delay under 30 %), the
      most measured in CI was 0.48 s per event.
    - *dense streams* (64 at 32 at once, 128 events 20 ms apart): no event later than
      `held_share_limit` of its replica's stream (the held share). A proxy that holds the
      body, or every event after the first, holds each stream for (nearly) all of its length.

    In each, at most `held_streams_limit` of the streams (one in ten) may be held, so one
    noisy stream does not decide; a buffering proxy holds every one. Delays are measured on
    the wall clock the client and replicas share, from the replica's write of each event to
    the client's read of it at the blank line that ends it (`event_delays`). Streams whose
    events do not line up (one added or lost on the way) are left out (integrity judges
    them). The delay added in milliseconds (TTFT and per event, p95) is measured noise on a
    busy machine, not a verdict: reported, for a gate file to bound where the machine is known."""
    dense_pairs = served_once(client, upstream)
    sparse_pairs = served_once(sparse_client, sparse_upstream)
    dense = [(stream, sent) for stream, sent in dense_pairs if lined_up(stream, sent)]
    sparse = [(stream, sent) for stream, sent in sparse_pairs if lined_up(stream, sent)]
    left_out = len(dense_pairs) - len(dense) + len(sparse_pairs) - len(sparse)
    wall = clocks_agree(dense + sparse)
    shares = [
        share for stream, sent in dense if (share := held_share(event_delays(stream, sent, wall), sent)) is not None
    ]
    held = sum(1 for share in shares if share > held_share_limit)
    reading = read_sparse(sparse, wall, gap_share_limit, late_gap_share, least_gap_s)
    notes = []
    sparse_ok = False
    if reading is not None:
        bound = typical_share_limit * reading.bound_gap_s
        lingers = [i for i, median in enumerate(reading.position_medians, reading.first_position) if median >= bound]
        often_late = reading.late_share > late_events_limit
        sparse_ok = reading.held <= held_streams_limit * reading.streams and not lingers and not often_late
        if lingers:
            worst = max(reading.position_medians)
            notes.append(
                f"the typical sparse event at position {', '.join(str(i) for i in lingers)} waited up to "
                f"{worst * 1000:.0f} ms, {typical_share_limit:.0%} of the gap or more: the proxy holds it back"
            )
        if often_late:
            late_ms = late_gap_share * reading.bound_gap_s * 1000
            notes.append(
                f"{reading.late_share:.0%} of sparse events waited {late_ms:.0f} ms or more: "
                "the proxy forwards on a timer"
            )
    ok = bool(shares) and held <= held_streams_limit * len(shares) and sparse_ok
    deltas = [s.ttft_s - a.first_byte_s for s, a in dense if s.ttft_s is not None and a.first_byte_s is not None]
    lateness = [late for stream, sent in dense for late in chunk_lateness(stream, sent)]
    p95, chunk_p95, chunk_max = percentile(deltas, 0.95), percentile(lateness, 0.95), max(lateness, default=None)
    metrics: dict[str, float] = {}  # TTFT itself is the serving metrics' (p99_ttft_ms), defined once
    if p95 is not None:
        metrics["added_ttft_p95_s"] = p95
    if chunk_p95 is not None and chunk_max is not None:
        metrics |= {"added_chunk_delay_p95_s": chunk_p95, "added_chunk_delay_max_s": chunk_max}
    if shares:
        metrics |= {"held_share_max": max(shares), "streams_held": held}
    if reading is not None:
        metrics |= {
            "sparse_streams_held": reading.held,
            "sparse_delay_max_s": reading.delay_max_s,
            "sparse_delay_p50_s": max(reading.position_medians),
            "sparse_delay_of_gap_max": reading.largest_share,
            "sparse_late_event_share": reading.late_share,
        }
    metrics["streams_left_out"] = left_out
    parts = []
    if reading is not None:
        parts.append(
            f"sparse: {reading.held} of {reading.streams} streams held (an event not delivered within "
            f"{gap_share_limit:.0%} of the replica's gap to the next, {reading.gap_s:.1f} s; largest share of a "
            f"gap {reading.largest_share:.0%}); median delay per event position "
            f"{'/'.join(f'{m * 1000:.0f}' for m in reading.position_medians)} ms, max "
            f"{reading.delay_max_s * 1000:.0f} ms; {reading.late_share:.0%} of events {late_gap_share:.2f} of "
            "the gap late or more"
        )
    else:
        what = f" ({left_out} streams' events do not line up with the replica's)" if left_out else ""
        parts.append(f"sparse: no stream measured{what}")
    if shares:
        parts.append(
            f"dense: {held} of {len(shares)} streams held past {held_share_limit:.0%} of their length "
            f"(largest share {max(shares):.0%})"
        )
    else:
        parts.append("dense: no stream measured")
    if p95 is not None:
        parts.append(
            f"added TTFT p50 {percentile(deltas, 0.5) * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, "
            f"max {max(deltas) * 1000:.0f} ms over {len(deltas)} streams"
        )
    if chunk_p95 is not None and chunk_max is not None:
        parts.append(
            f"added delay per event p95 {chunk_p95 * 1000:.0f} ms, max {chunk_max * 1000:.0f} ms "
            f"over {len(lateness)} events"
        )
    if not wall:
        notes.append("the client's and the replicas' clocks disagree: each stream read against its own first event")
    if left_out:
        notes.append(f"{left_out} streams left out: their events do not line up with the replica's")
    return CheckResult.judge(
        no_buffering.check_id,
        ok,
        f"each event forwarded as it comes: in sparse streams, within {gap_share_limit:.0%} of the replica's gap "
        f"to its next event, the typical one at every position within {typical_share_limit:.0%} of it, at most "
        f"{late_events_limit:.0%} of events {late_gap_share:.2f} of it late; in dense streams, none later than "
        f"{held_share_limit:.0%} of its replica's stream; at most {held_streams_limit:.0%} of the streams of "
        "each held",
        "; ".join(parts),
        "; ".join(notes),
        metrics=metrics,
    )


@dataclass(frozen=True, slots=True)
class ConnectionPhase:
    """One phase's connection counts: the proxy's (from its metrics) and the replicas'."""

    proxy_opened: int | None  # None: a count the proxy's metrics do not hold (`unreported`)
    proxy_reused: int | None
    proxy_idle_before: int | None
    replicas_accepted: int
    upstream_requests: int
    client_errors: int
    # Of the accepted connections, those that carried a request other than a health probe
    # (None: all of them), and the health-probe requests the replicas answered meanwhile.
    replicas_with_requests: int | None = None
    probe_requests: int = 0
    unreported: tuple[str, ...] = ()  # the profile's metric paths the proxy's metrics lack
    # Connections the replicas held open from the proxy when the phase began: what the proxy
    # could have pooled. The bound on reuse where its metrics hold no idle gauge (the brief's
    # /metrics documents counters only; rc1 adds the gauge).
    replicas_open_before: int | None = None

    @property
    def idle_before(self) -> int | None:
        """How many pooled connections the phase could reuse: the proxy's gauge, or else
        what the replicas held open."""
        return self.proxy_idle_before if self.proxy_idle_before is not None else self.replicas_open_before

    @property
    def opened_as_counted(self) -> set[int]:
        """What `opened` may be: every connection, or only those that carried requests (a
        proxy that keeps its health probes apart may leave their connections out)."""
        with_requests = self.replicas_accepted if self.replicas_with_requests is None else self.replicas_with_requests
        return {self.replicas_accepted, with_requests}

    @property
    def uses_as_counted(self) -> set[int]:
        """What `opened + reused` may be: the requests, with or without the health probes."""
        return {self.upstream_requests, self.upstream_requests + self.probe_requests}

    def show(self) -> str:
        probes = ""
        if self.probe_requests or self.replicas_with_requests not in (None, self.replicas_accepted):
            probes = f" ({self.replicas_with_requests} with requests; {self.probe_requests} health probes)"
        idle = f"idle before {self.proxy_idle_before}"
        if self.proxy_idle_before is None:
            idle = f"no idle gauge; replicas held {self.replicas_open_before} open before"
        proxy = f"proxy opened {self.proxy_opened}, reused {self.proxy_reused} ({idle})"
        if self.unreported:
            proxy = f"the proxy's metrics have no {', '.join(self.unreported)}"
        return (
            f"{proxy}; replicas accepted {self.replicas_accepted}{probes}; {self.upstream_requests} requests; "
            f"{self.client_errors} client errors"
        )


@check("streaming.connection_accounting")
def connection_accounting(phases: dict[str, ConnectionPhase], closing: str = "closing") -> CheckResult:
    """The proxy's connection counts agree with what the replicas accepted in every phase;
    when replicas close every keep-alive connection (`closing`), no closed connection is
    reused and no client sees an error. Health probes the proxy sends meanwhile (a monitor
    in the background) may be in its counters or not, consistently: opened is all accepted
    connections or those that carried requests, opened + reused the requests with or
    without the probes.

    In the closing phase, only connections already idle in the pool when it began may be
    reused (once each): every response after that closes its connection. The pool's size is
    the proxy's idle gauge where its metrics have one, else the connections the replicas held
    open from it (an upper bound: a probe's connection counts too). At least one phase
    must have opened a different number of connections than it reused (as the replicas saw
    it), or a proxy that swaps the two counters could not be told apart.
    """

    def agrees(phase: ConnectionPhase) -> bool:
        if phase.proxy_opened is None or phase.proxy_reused is None or phase.unreported:
            return False
        return (
            phase.proxy_opened in phase.opened_as_counted
            and phase.proxy_opened + phase.proxy_reused in phase.uses_as_counted
        )

    def distinguishes(phase: ConnectionPhase) -> bool:
        return phase.replicas_accepted != phase.upstream_requests - phase.replicas_accepted

    last = phases.get(closing)
    recovers = last is None or (
        last.client_errors == 0
        and None not in (last.proxy_reused, last.idle_before)
        and last.proxy_reused <= last.idle_before
    )
    ok = (
        bool(phases)
        and all(phase.upstream_requests > 0 and agrees(phase) for phase in phases.values())
        and all(phase.client_errors == 0 for name, phase in phases.items() if name != closing)
        and recovers
        and any(distinguishes(phase) for phase in phases.values())
    )
    wrong = [name for name, phase in phases.items() if not agrees(phase)]
    detail = f"counts disagree with the replicas in: {', '.join(wrong)}" if wrong else ""
    if not any(distinguishes(phase) for phase in phases.values()):
        detail = "no phase opened a different number of connections than it reused: a swap would not show"
    unreported = sorted({path for phase in phases.values() for path in phase.unreported})
    if unreported:
        detail = f"the proxy's metrics have no {', '.join(unreported)}: its pool's accounting cannot be read"
    return CheckResult.judge(
        connection_accounting.check_id,
        ok,
        "proxy opened = replicas accepted, opened + reused = requests, in every phase; with replicas closing "
        "keep-alive, no closed connection reused and no client-visible error",
        "; ".join(f"{name}: {phase.show()}" for name, phase in phases.items()),
        detail,
    )


@dataclass(frozen=True, slots=True)
class RoutingViolation:
    request_id: str | None
    replica: int
    in_flight: int  # already on the chosen replica when the request arrived
    least: int  # on the least-loaded replica at that moment


def in_flight_at(upstream: list[UpstreamAttempt], t: float, replica: int, exclude: UpstreamAttempt) -> int:
    return sum(
        1 for e in upstream if e is not exclude and e.replica == replica and e.started <= t < e.started + e.duration_s
    )


def routing_violations(upstream: list[UpstreamAttempt], replicas: int, slack: int = 1) -> list[RoutingViolation]:
    """Requests sent to a replica that already had more than `slack` requests more in flight
    than the least-loaded one, as the replicas saw it (the proxy's own count runs a little
    behind theirs at each stream's end, hence the slack)."""
    found = []
    for event in upstream:
        t = event.started
        counts = [in_flight_at(upstream, t, index, event) for index in range(replicas)]
        chosen = counts[event.replica]
        if chosen > min(counts) + slack:
            found.append(RoutingViolation(event.request_id, event.replica, chosen, min(counts)))
    return found


@check("streaming.least_connections")
def least_connections(upstream: list[UpstreamAttempt], replicas: int, slowed: int, records: int) -> CheckResult:
    """With one replica slowed (its streams stall after their first token, so a proxy has
    their headers: streams in flight), new requests go to the least-loaded replicas: no
    request is sent to a replica busier than the least-loaded one (beyond the slack), and
    the slowed replica gets less than an even share."""
    violations = routing_violations(upstream, replicas)
    to_slowed = sum(1 for e in upstream if e.replica == slowed)
    even = len(upstream) / replicas if replicas else 0
    ok = len(upstream) >= records and not violations and to_slowed < even
    detail = ""
    if violations:
        first = violations[0]
        detail = f"first: sent to replica {first.replica} with {first.in_flight} in flight while one had {first.least}"
    return CheckResult.judge(
        least_connections.check_id,
        ok,
        f"with replica {slowed} stalled, no request goes to a replica with more than one request more in flight "
        f"than the least-loaded; replica {slowed} gets less than an even share",
        f"{len(upstream)} upstream requests; {to_slowed} to the stalled replica (even share {even:.1f}); "
        f"{len(violations)} sent to a busier replica",
        detail,
        {"routing_violations": len(violations), "requests_to_slowed": to_slowed},
    )
