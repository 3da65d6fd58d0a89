"""Reading a proxy's log records out of whatever shape its logging writes them in.

The seed asks for one record per request (`slurm_proxy_request {json}`); it does not say how
the release's logging lays the line out, and production logging rarely leaves it bare. A
correct release may write the record:

- plain: `slurm_proxy_request {"final_status": 200, ...}`, behind any prefix (a time, a level,
  srun's `0: ` label) and with anything after it;
- as a JSON line whose message holds it (python-json-logger, structlog, a container runtime's
  json-file driver): `{"level": "INFO", "message": "slurm_proxy_request {\\"final_status\\": 200}"}`,
  where the inner record is *escaped* inside the message string, or with the message the
  marker (alone or among words: structlog's `"event": "slurm_proxy_request completed"`) and
  the record's fields beside it (or under `extra`, `fields`, ...);
- as logfmt: `level=info msg="slurm_proxy_request {\\"final_status\\":200}"`, the record quoted
  inside a value, or `msg=slurm_proxy_request final_status=200 attempts=2`, its fields as pairs.

Each shape is decoded as the structure it is (a JSON line is parsed, a logfmt value
unquoted) before the record is looked for in it: searching the raw text for `{` finds an
escaped record no JSON parser can read, and a correct release would fail every record check
("no record written"). A line that names the marker and holds no record in any shape is
counted as malformed: a record no operator's tooling could read.
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

# Where a JSON line's logging puts the text it was asked to log (python's logging and
# python-json-logger: message; structlog: event; zap, logrus, pino: msg; docker: log).
MESSAGE_KEYS = ("message", "msg", "event", "log", "text")
# Where it puts a record's fields when they are not at the top level.
FIELD_KEYS = ("extra", "fields", "data", "record", "context", "attributes")
_LOGFMT_PAIR = re.compile(r'([A-Za-z_][\w.\-]*)=("(?:[^"\\]|\\.)*"|[^\s"]*)')
_DEPTH = 3  # a message inside a message inside a line: deep enough for any real pipeline
_DECODER = json.JSONDecoder()


def log_records(lines: list[str], marker: str) -> tuple[list[dict[str, Any]], int]:
    """The records carrying `marker` on the proxy's output, in any shape the module names,
    and how many marked lines held no record in any of them."""
    records, malformed = [], 0
    for line in lines:
        if marker not in line:
            continue
        record = record_in(line, marker)
        if record is None:
            malformed += 1
        else:
            records.append(record)
    return records, malformed


def record_in(text: str, marker: str, depth: int = _DEPTH) -> dict[str, Any] | None:
    """The one record `text` carries under `marker`, or None."""
    if depth <= 0 or marker not in text:
        return None
    at = text.find(marker)
    start = text.find("{")
    if 0 <= start < at:  # the marker inside an object: a JSON line
        document = _object_at(text, start)
        if document is not None:
            found = _record_in_document(document, marker, depth)
            if found is not None:
                return found
    if "=" in text[:at]:  # the marker inside a key=value pair: logfmt
        found = _record_in_logfmt(text, marker, depth)
        if found is not None:
            return found
    after = at + len(marker)
    return _record_after(text, after) or _pairs_after(text, after)


def _names_marker(value: str, marker: str) -> bool:
    """A value that is the marker (or, for a marker family such as `slurm_proxy_`, one word of
    it: `slurm_proxy_attempt`) and nothing more: the record's fields stand beside it."""
    word = value.strip()
    return marker in word and not any(space in word for space in " \t{")


def _pairs_after(text: str, position: int) -> dict[str, Any] | None:
    """`slurm_proxy_request final_status=200 attempts=2`: the record as pairs after the marker."""
    pairs = _LOGFMT_PAIR.findall(text[position:])
    return {key: _logfmt_value(_unquote(value)) for key, value in pairs} or None


def _object_at(text: str, start: int) -> dict[str, Any] | None:
    with contextlib.suppress(ValueError):
        value = _DECODER.raw_decode(text[start:])[0]
        return value if isinstance(value, dict) else None
    return None


def _record_after(text: str, position: int) -> dict[str, Any] | None:
    """The plain shape: the first object after the marker (anything after it is ignored)."""
    start = text.find("{", position)
    return _object_at(text, start) if start >= 0 else None


def _record_in_document(document: dict[str, Any], marker: str, depth: int) -> dict[str, Any] | None:
    for key in MESSAGE_KEYS:
        message = document.get(key)
        if isinstance(message, str) and marker in message:
            inner = record_in(message, marker, depth - 1)
            if inner is not None:
                return inner
            if "{" not in message:  # the message names the marker, among words or not: the fields are beside it
                return _fields_beside(document, key)
            return None  # the marker in a message with a broken record: nothing readable
    if isinstance(document.get(marker), dict):  # {"slurm_proxy_request": {...}}
        return document[marker]
    # the marker as some other value: the whole object is the record
    return document if any(value == marker for value in document.values()) else None


def _fields_beside(document: dict[str, Any], message_key: str) -> dict[str, Any]:
    fields = {key: value for key, value in document.items() if key != message_key}
    for key in FIELD_KEYS:
        nested = fields.get(key)
        if isinstance(nested, dict):
            fields = {**{k: v for k, v in fields.items() if k != key}, **nested}
    return fields


def _record_in_logfmt(text: str, marker: str, depth: int) -> dict[str, Any] | None:
    pairs = {key: _unquote(value) for key, value in _LOGFMT_PAIR.findall(text)}
    for key, value in pairs.items():
        if marker not in value:
            continue
        if _names_marker(value, marker):
            return {k: _logfmt_value(v) for k, v in pairs.items() if k != key}
        inner = record_in(value, marker, depth - 1)
        if inner is not None:
            return inner
    return None


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        with contextlib.suppress(ValueError):
            return json.loads(value)  # logfmt quotes as JSON strings do (\" and \\)
        return value[1:-1]
    return value


def _logfmt_value(value: str) -> Any:
    """A logfmt value as the type it was logged as: numbers, booleans and JSON lists or
    objects decoded, anything else left as its text."""
    with contextlib.suppress(ValueError):
        return json.loads(value)
    return value
