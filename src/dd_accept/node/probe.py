"""`python -m dd_accept.node.probe [--timeout S] [--repeat N --every S] [--admission|--stream [--hangup]]
[--id PREFIX] [--at-once] URL...`: GET each URL, one JSON line each (N rounds, S seconds apart, each row with its
offset `at_s`); with --admission, POST the queue-admission probe instead (base.events.ADMISSION_PROBE_BODY),
with --stream the smallest streamed generation (base.events.STREAM_PROBE_BODY); with --hangup, a stream
answered 200 is left after its first line (the connection closed, the row `hung_up`), as a user who
stops reading does, and one that gives nothing within --timeout is given up on (`hung_up` too).
With --id, each request carries its own request id, PREFIX and its number from 0 (else the
admission probe's own), and its row the id and the wall time it was sent: a request the
replicas' records can be set beside. With --at-once, a round's requests are all sent
together, each on a thread of its own (its rows in the order of the URLs): requests that are
in flight at the same time, as a proxy's routing must be judged by.

Runs on a cluster node (stdlib only), so the harness can reach services that listen on a
node's loopback, like the SUT's proxy, through a recorded `docker exec`.
"""

from __future__ import annotations

import http.client
import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from dd_accept.base.errors import EXIT_PASS
from dd_accept.base.events import ADMISSION_PROBE_BODY, ADMISSION_PROBE_ID, REQUEST_ID_HEADER, STREAM_PROBE_BODY


def probe(
    url: str,
    timeout: float = 5.0,
    admission: bool = False,
    request_id: str | None = None,
    stream: bool = False,
    hangup: bool = False,
) -> dict[str, object]:
    started = time.monotonic()
    named = {"request_id": request_id, "sent": round(time.time(), 6)} if request_id else {}  # for the replicas' records
    request = urllib.request.Request(url, headers={REQUEST_ID_HEADER: request_id} if request_id else {})
    if admission or stream:
        headers = {"content-type": "application/json", REQUEST_ID_HEADER: request_id or ADMISSION_PROBE_ID}
        data = STREAM_PROBE_BODY if stream else ADMISSION_PROBE_BODY
        request = urllib.request.Request(url, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, retry_after = response.status, response.headers.get("Retry-After")
            if hangup and stream and status == 200:  # leaving closes the connection: the proxy's client is gone
                body = response.readline()
                if body:  # left on purpose; a stream that broke before its first line is an error, as it is
                    named |= {"hung_up": True}
            else:
                body = response.read()
    except urllib.error.HTTPError as error:
        status, body, retry_after = error.code, error.read(), error.headers.get("Retry-After")
    except (OSError, http.client.HTTPException) as error:  # no answer, or one that is not HTTP
        failed = {"url": url, "status": None, "error": type(error).__name__, "elapsed_s": time.monotonic() - started}
        left = hangup and stream and isinstance(error, TimeoutError)  # the client's own deadline: it left
        return failed | named | ({"hung_up": True} if left else {})
    try:
        parsed: object = json.loads(body)
    except ValueError:
        parsed = None
    row = {"url": url, "status": status, "json": parsed, "elapsed_s": round(time.monotonic() - started, 6)}
    row |= named
    return row | ({"retry_after": retry_after} if retry_after is not None else {})


def main() -> int:
    args = sys.argv[1:]
    timeout, repeat, every, prefix = 5.0, 1, 0.0, None
    switched = dict.fromkeys(("--admission", "--stream", "--at-once", "--hangup"), False)
    while args[:1] and args[0] in ("--timeout", "--repeat", "--every", "--id", *switched):
        if args[0] in switched:
            switched[args[0]], args = True, args[1:]
            continue
        flag, value, args = args[0], args[1], args[2:]
        if flag == "--timeout":
            timeout = float(value)
        elif flag == "--id":
            prefix = value
        elif flag == "--repeat":
            repeat = int(value)
        else:
            every = float(value)
    admission, stream, at_once, hangup = switched.values()

    def ask(url: str, request_id: str | None) -> dict[str, object]:
        return probe(url, timeout, admission, request_id, stream, hangup)

    # Timed on the node itself: a burst measures the service, not the exec round trip.
    started, sent = time.monotonic(), 0
    for round_ in range(repeat):
        ids = [None if prefix is None else f"{prefix}{sent + index}" for index in range(len(args))]
        sent += len(args)
        rows: Iterable[dict[str, object]]
        if at_once:
            with ThreadPoolExecutor(max_workers=len(args)) as pool:
                rows = list(pool.map(ask, args, ids))
        else:
            rows = map(ask, args, ids)
        for row in rows:  # one at a time: each printed as it is answered
            print(json.dumps(row | ({"at_s": round(time.monotonic() - started, 4)} if repeat > 1 else {})), flush=True)
        if round_ + 1 < repeat:
            time.sleep(max(0.0, started + (round_ + 1) * every - time.monotonic()))
    return EXIT_PASS


if __name__ == "__main__":
    sys.exit(main())
