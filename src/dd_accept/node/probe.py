"""`python -m dd_accept.node.probe [--timeout S] URL [URL...]`: GET each URL, one JSON line each.

Runs on a cluster node (stdlib only), so the harness can reach services that listen on a
node's loopback, like the SUT's proxy, through a recorded `docker exec`.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request


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
    timeout = 5.0
    if args[:1] == ["--timeout"]:
        timeout, args = float(args[1]), args[2:]
    for url in args:
        print(json.dumps(probe(url, timeout)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
