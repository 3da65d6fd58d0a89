"""Client of a replica's control plane (stdlib only: it also runs inside the cluster).

    python -m dd_accept.node.control URL[,URL...] ACTION [key=value ...]

The token is read from DD_ACCEPT_CONTROL_TOKEN, never from argv.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

from dd_accept.base.errors import EXIT_CHECK_FAILED, EXIT_PASS, EXIT_USAGE
from dd_accept.node.environment import TOKEN_ENV

ACTIONS = (
    "state",
    "hold",
    "release",
    "health",
    "hang",
    "stall",
    "pace",
    "respond",
    "keepalive",
    "cut",
    "delay",
    "pin",
    "unpin",
    "close_idle",
    "health_delay",
    "reset",
    "refuse",
    "exit",
    "kill",
)


class ControlError(RuntimeError):
    pass


def control(
    base_url: str,
    action: str,
    body: Mapping[str, Any] | None = None,
    *,
    token: str | None = None,
    timeout: float = 10.0,
) -> dict[str, Any]:
    if action not in ACTIONS:
        raise ControlError(f"unknown control action {action!r}; valid: {', '.join(ACTIONS)}")
    token = token if token is not None else os.environ.get(TOKEN_ENV, "")
    request = urllib.request.Request(
        f"{base_url.rstrip('/')}/_dd/{action}",
        data=json.dumps(dict(body or {})).encode(),
        headers={"content-type": "application/json", "x-dd-control-token": token},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        detail = error.read()[:200].decode(errors="replace")
        raise ControlError(f"control {action} answered {error.code}: {detail}") from None


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2:
        print(f"usage: control URL ACTION [key=value ...]; actions: {', '.join(ACTIONS)}", file=sys.stderr)
        return EXIT_USAGE
    urls, action, pairs = args[0].split(","), args[1], args[2:]
    body = {key: _value(value) for key, _, value in (pair.partition("=") for pair in pairs)}
    status = EXIT_PASS
    for url in urls:  # one exec can steer every replica: a comma-separated list of URLs
        try:
            print(json.dumps(control(url, action, body)))
        except (ControlError, OSError) as error:
            print(json.dumps({"url": url, "error": str(error)}))
            status = EXIT_CHECK_FAILED  # a replica did not take the action: the caller judges it
    return status


if __name__ == "__main__":
    sys.exit(main())
