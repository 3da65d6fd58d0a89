"""Requests the harness itself sends through the SUT's proxy, each under an id of its own.

The rounds that judge one path of the proxy (a lost backend on the last attempt, its routing
once the faults are over) need requests whose every attempt the replicas' records name, sent
the way the round needs them: one at a time, or all at once. `node.probe` sends them on the
proxy's node (it listens on that node's loopback only), and each of its rows becomes a client
event, so the request ledger reconciles these requests as it does the client's.
"""

from __future__ import annotations

import time

from dd_accept.base.errors import ClusterError
from dd_accept.base.events import ADMISSION_PROBE_PATH, ClientRequest, UpstreamAttempt
from dd_accept.deployment import Proxy, ReplicaSet, json_lines
from dd_accept.slurm_docker.interface import Cluster


def send_named(
    cluster: Cluster,
    proxy: Proxy,
    prefix: str,
    count: int,
    *,
    stream: bool = False,
    at_once: bool = False,
    hangup: bool = False,
    every_s: float | None = None,
    timeout_s: float = 10.0,
) -> list[ClientRequest]:
    """`count` requests through the proxy, ids PREFIX0, PREFIX1, …: the queue-admission probe
    (the app answers it 400 at once), or with `stream` the smallest streamed generation (with
    `hangup`, the client leaves a 200 after its first line, or gives up at `timeout_s`); one
    after another, or with `at_once` all together, or with `every_s` one that often. A run
    of node.probe that did not answer for every request is the harness's failure (exit 2),
    not the SUT's."""
    argv = [cluster.layout.python, "-m", "dd_accept.node.probe", "--stream" if stream else "--admission"]
    argv += ["--hangup"] if hangup else []
    argv += ["--timeout", f"{timeout_s:g}", "--id", prefix, *(["--at-once"] if at_once else [])]
    url = f"{proxy.url}{ADMISSION_PROBE_PATH}"
    argv += ["--repeat", str(count), "--every", f"{every_s:g}", url] if every_s else [url] * count
    took = timeout_s if at_once else count * (timeout_s + 2 + (every_s or 0))
    record = cluster.exec(argv, node=proxy.node, timeout=took + 30)
    rows = json_lines(record)
    if not record.ok or len(rows) != count:
        raise ClusterError(f"the requests through the proxy could not be sent: {record.describe()}")
    return [client_request(index, row) for index, row in enumerate(rows)]


def client_request(index: int, row: dict[str, object]) -> ClientRequest:
    """A node.probe row (a named request) as the client event the ledger reads."""
    status = row.get("status")
    status = status if isinstance(status, int) else None
    outcome = {429: "rate_limited", 200: "ok", None: "error"}.get(status, "http_error")
    outcome = "hung_up" if row.get("hung_up") else outcome
    sent = float(row.get("sent") or 0.0)  # type: ignore[arg-type]
    retry_after = row.get("retry_after")
    return ClientRequest(
        t=sent + float(row.get("elapsed_s") or 0.0),  # type: ignore[arg-type]
        mode="raw",
        record=index,
        attempt=1,
        outcome=outcome,
        request_id=str(row.get("request_id") or ""),
        started=sent,
        status=status,
        retry_after=retry_after if isinstance(retry_after, str) else None,
        error=str(row["error"]) if row.get("error") else None,
    )


def settled_attempts(replicas: ReplicaSet, requests: list[ClientRequest]) -> list[UpstreamAttempt]:
    """The replicas' records of the named `requests`, once they stop growing: a replica writes
    its record as it ends the attempt, around when the client gets its answer."""
    ids = {request.request_id for request in requests if request.request_id}
    seen: list[UpstreamAttempt] = []
    for _ in range(10):
        found = [a for a in replicas.events() if a.request_id in ids]
        if found and len(found) == len(seen):
            break
        seen = found
        time.sleep(0.2)
    return seen
