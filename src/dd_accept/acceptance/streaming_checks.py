"""The streaming checks, as pure functions of client and replica events and counters."""

from __future__ import annotations

from dataclasses import dataclass

from dd_accept.acceptance.analysis import Event, attempts_by_request, of_kind, percentile
from dd_accept.acceptance.results import CheckResult


def integrity(client: list[Event], upstream: list[Event]) -> CheckResult:
    """Each stream arrives whole: the client got every event and byte its replica sent."""
    attempts = attempts_by_request(upstream)
    streams = of_kind(client, "request")
    mismatched, truncated = [], 0
    for stream in streams:
        sent = [a for a in attempts.get(stream["request_id"], []) if a.get("status") == 200]
        if not stream.get("done"):
            truncated += 1
        if len(sent) != 1 or (sent[0]["data_events"], sent[0]["bytes"]) != (stream["chunks"], stream["bytes"]):
            mismatched.append(stream["request_id"])
    ok = bool(streams) and not mismatched and truncated == 0
    return CheckResult.judge(
        "streaming.integrity",
        ok,
        "every stream ends with [DONE]; client events and bytes equal the replica's, per request",
        f"{len(streams)} streams; {truncated} truncated; {len(mismatched)} differ from what the replica sent",
        f"first differing: {mismatched[0]}" if mismatched else "",
    )


def no_buffering(client: list[Event], upstream: list[Event], limit_s: float = 0.1) -> CheckResult:
    """Time to first token through the proxy stays within `limit_s` of the replica's own."""
    attempts = attempts_by_request(upstream)
    deltas = []
    for stream in of_kind(client, "request"):
        sent = [a for a in attempts.get(stream["request_id"], []) if a.get("status") == 200]
        if stream.get("ttft_s") is not None and len(sent) == 1 and sent[0].get("first_byte_s") is not None:
            deltas.append(stream["ttft_s"] - sent[0]["first_byte_s"])
    p95 = percentile(deltas, 0.95)
    ok = p95 is not None and p95 <= limit_s
    ttfts = [stream["ttft_s"] for stream in of_kind(client, "request") if stream.get("ttft_s") is not None]
    metrics = {"ttft_p99_s": percentile(ttfts, 0.99)} if ttfts else {}
    if p95 is not None:
        metrics["added_ttft_p95_s"] = p95
    observed = (
        "no stream measured"
        if p95 is None
        else (
            f"added TTFT p50 {percentile(deltas, 0.5) * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, "
            f"max {max(deltas) * 1000:.0f} ms over {len(deltas)} streams"
        )
    )
    return CheckResult.judge(
        "streaming.no_buffering",
        ok,
        f"the proxy adds at most {limit_s * 1000:.0f} ms to TTFT (p95)",
        observed,
        metrics=metrics,
    )


@dataclass(frozen=True, slots=True)
class ConnectionPhase:
    """One phase's connection counts: the proxy's (from its metrics) and the replicas'."""

    proxy_opened: int
    proxy_reused: int
    proxy_idle_before: int
    replicas_accepted: int
    upstream_requests: int
    client_errors: int

    def show(self) -> str:
        return (
            f"proxy opened {self.proxy_opened}, reused {self.proxy_reused} (idle before {self.proxy_idle_before}); "
            f"replicas accepted {self.replicas_accepted}; {self.upstream_requests} requests; "
            f"{self.client_errors} client errors"
        )


def connection_accounting(kept: ConnectionPhase, closing: ConnectionPhase) -> CheckResult:
    """The proxy's connection counts agree with what the replicas accepted; and when replicas
    close every keep-alive connection, no closed connection is reused and no client sees an error.

    In the closing phase, only connections already idle in the pool when it began may be
    reused (once each): every response after that closes its connection.
    """

    def agrees(phase: ConnectionPhase) -> bool:
        return (
            phase.proxy_opened == phase.replicas_accepted
            and phase.proxy_opened + phase.proxy_reused == phase.upstream_requests
        )

    recovers = closing.client_errors == 0 and closing.proxy_reused <= closing.proxy_idle_before
    ok = kept.upstream_requests > 0 and agrees(kept) and agrees(closing) and recovers and kept.client_errors == 0
    return CheckResult.judge(
        "streaming.connection_accounting",
        ok,
        "proxy opened = replicas accepted, opened + reused = requests; with replicas closing keep-alive, "
        "no closed connection reused and no client-visible error",
        f"keep-alive: {kept.show()}; closing: {closing.show()}",
    )
