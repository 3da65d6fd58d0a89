"""`python -m dd_accept.node.probe [--timeout S] [--repeat N --every S] URL [URL...]`: GET each
URL, one JSON line each (N rounds, S seconds apart, each row with its offset `at_s`).

Runs on a cluster node (stdlib only), so the harness can reach services that listen on a
node's loopback, like the SUT's proxy, through a recorded `docker exec`.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request

from dd_accept.base.errors import EXIT_PASS


def probe(url: str, timeout: float = 5.0) -> dict[str, object]:
    started = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            status, body, retry_after = response.status, response.read(), response.headers.get("Retry-After")
    except urllib.error.HTTPError as error:
        status, body, retry_after = error.code, error.read(), error.headers.get("Retry-After")
    except OSError as error:
        return {"url": url, "status": None, "error": type(error).__name__, "elapsed_s": time.monotonic() - started}
    try:
        parsed: object = json.loads(body)
    except ValueError:
        parsed = None
    row = {"url": url, "status": status, "json": parsed, "elapsed_s": round(time.monotonic() - started, 6)}
    return row | ({"retry_after": retry_after} if retry_after is not None else {})


def main() -> int:
    args = sys.argv[1:]
    timeout, repeat, every = 5.0, 1, 0.0
    while args[:1] and args[0] in ("--timeout", "--repeat", "--every"):
        flag, value, args = args[0], args[1], args[2:]
        if flag == "--timeout":
            timeout = float(value)
        elif flag == "--repeat":
            repeat = int(value)
        else:
            every = float(value)
    # Timed on the node itself: a burst measures the service, not the exec round trip.
    started = time.monotonic()
    for round_ in range(repeat):
        for url in args:
            row = probe(url, timeout)
            print(json.dumps(row | ({"at_s": round(time.monotonic() - started, 4)} if repeat > 1 else {})), flush=True)
        if round_ + 1 < repeat:
            time.sleep(max(0.0, started + (round_ + 1) * every - time.monotonic()))
    return EXIT_PASS


if __name__ == "__main__":
    sys.exit(main())
