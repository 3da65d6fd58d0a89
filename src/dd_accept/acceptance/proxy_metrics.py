"""Reading the proxy's own metrics (its `/metrics` JSON): the seed counts retries by cause,
but does not say how a cause is spelled, so every reader keys them one way."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

# a status: three digits standing alone, not part of an address or port (`172.18.0.4:8000`)
_STATUS_IN_KEY = re.compile(r"(?<![\d.:])([1-5]\d\d)(?![\d.:])")


def retries_by_status(retries: Any) -> Any:
    """A proxy's retry causes keyed as `expected_counters` keys them: a key that names an HTTP
    status (rc1's `http_429`, or `429`, `status_429`) is `http_429`; a cause that names none
    (`timeout`, `connection_error`) keeps its name; where a key names more than one number
    (a backend's address beside the status), the last is the status. The seed counts retries
    by cause; it does not say how a cause is spelled."""
    if not isinstance(retries, dict):
        return retries
    keyed: Counter[str] = Counter()
    for key, count in retries.items():
        statuses = _STATUS_IN_KEY.findall(str(key))
        keyed[f"http_{statuses[-1]}" if statuses else str(key)] += count
    return dict(sorted(keyed.items()))


def metric_value(document: Any, dotted: str) -> float | None:
    """A number in the proxy's metrics JSON by its dotted path, the last key read as
    `retries_by_status` reads a retry cause (`retries.http_429` finds `{"retries": {"429": 4}}`).

    0 where the path's group is there but not its counter (rc1 adds a counter to `retries`
    when it first counts); None, not reported, where the profile names none or the document
    has no such group (a release that names it otherwise, or no metrics at all): failover is
    then judged from the replicas alone, not failed for a name."""
    if not dotted:
        return None
    *groups, counter = dotted.split(".")
    value: Any = document
    for key in groups:
        value = value.get(key) if isinstance(value, dict) else None
    if not isinstance(value, dict):
        return None
    if counter not in value and all(isinstance(count, int | float) for count in value.values()):
        value = retries_by_status(value)  # the counter spelled another way (`429`, `status_429`)
        counter = _status_key(counter)
    value = value.get(counter, 0)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _status_key(counter: str) -> str:
    """A counter's name as `retries_by_status` keys it (`429`, `status_429` → `http_429`)."""
    (key,) = retries_by_status({counter: 0})
    return key
