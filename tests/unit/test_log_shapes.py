"""A proxy's records read in every common shape its logging may write them: the lines are made
by real `logging` formatters (plain, JSON lines, logfmt), not written out by hand, so a shape is
tested as a release's logging really lays it out."""

import io
import json
import logging
from dataclasses import replace

import pytest

from dd_accept.acceptance import telemetry_checks as checks
from dd_accept.acceptance.log_shapes import log_records, record_in
from tests.unit.test_telemetry_checks import CLAIMED, ORIGINS, SERVED, retry_phase

MARKER = "slurm_proxy_request"
RECORD = {"attempts": 2, "failover": True, "final_status": 200, "upstream_outcomes": ["429", "200"]}


class JsonLines(logging.Formatter):
    """What python-json-logger and most JSON handlers write: the message as a string value."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps({"time": self.formatTime(record), "level": record.levelname, "logger": record.name,
                           "message": record.getMessage()})  # fmt: skip


class JsonFields(logging.Formatter):
    """structlog's and python-json-logger's `extra=` shape: the marker as the event, the fields beside."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps({"level": record.levelname, "event": record.getMessage(), **record.__dict__["fields"]})


class Logfmt(logging.Formatter):
    """logfmt with the message quoted: `"` and `\\` escaped inside it."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage().replace("\\", "\\\\").replace('"', '\\"')
        return f'time={self.formatTime(record).replace(" ", "T")} level={record.levelname.lower()} msg="{message}"'


def logged(formatter: logging.Formatter, *messages: tuple[str, tuple, dict]) -> list[str]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    logger = logging.Logger("data_designer.slurm.runtime.proxy")
    logger.addHandler(handler)
    for text, args, extra in messages:
        logger.info(text, *args, extra=extra)
    return stream.getvalue().splitlines()


def request(record=RECORD):
    return ("slurm_proxy_request %s", (json.dumps(record, separators=(",", ":"), sort_keys=True),), {})


@pytest.mark.parametrize(
    "formatter",
    [logging.Formatter("%(message)s"), logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"),
     JsonLines(), Logfmt()],
    ids=["bare", "plain-prefixed", "json-lines", "logfmt"],
)  # fmt: skip
def test_the_record_is_read_whole_in_each_shape_a_logging_setup_writes(formatter):
    lines = logged(formatter, request(), ("slurm_proxy started on %s", ("port 1",), {}))
    records, malformed = log_records(lines, MARKER)
    assert records == [RECORD] and malformed == 0, lines


def test_the_reason_json_lines_needed_decoding_the_record_is_escaped_in_the_raw_line():
    """The negative side: read as raw text, the JSON line's record is `{\\"attempts\\"...`, which no
    JSON parser reads; only the decoded message holds the object."""
    (line,) = logged(JsonLines(), request())
    inner = line[line.index(MARKER) + len(MARKER) :].lstrip()
    assert inner.startswith('{\\"attempts\\"'), line
    with pytest.raises(json.JSONDecodeError):
        json.JSONDecoder().raw_decode(inner)
    assert record_in(line, MARKER) == RECORD


def test_fields_beside_the_marker_are_the_record_in_json_and_in_logfmt():
    fields = {"final_status": 200, "attempts": 2, "upstream_outcomes": ["429", "200"]}
    (line,) = logged(JsonFields(), ("slurm_proxy_request", (), {"fields": fields}))
    assert {k: record_in(line, MARKER)[k] for k in fields} == fields
    logfmt = "ts=2026-12-03T09:00:00Z level=info msg=slurm_proxy_request final_status=200 attempts=2 failover=true"
    assert record_in(logfmt, MARKER) == {"ts": "2026-12-03T09:00:00Z", "level": "info", "final_status": 200,
                                         "attempts": 2, "failover": True}  # fmt: skip
    assert record_in("slurm_proxy_request final_status=200 attempts=2", MARKER) == {"final_status": 200, "attempts": 2}
    nested = json.dumps({"msg": "slurm_proxy_request", "extra": {"final_status": 503}})
    assert record_in(nested, MARKER) == {"final_status": 503}


def test_a_structlog_event_naming_the_marker_among_words_has_its_fields_beside_it():
    """structlog writes `log.info("slurm_proxy_request completed", final_status=200)` as the
    event text with the fields beside it: the same record as the plain shape."""
    fields = {"final_status": 200, "attempts": 2, "upstream_outcomes": ["429", "200"]}
    line = json.dumps({"event": "slurm_proxy_request completed", "level": "info", **fields})
    assert log_records([line], MARKER) == ([{"level": "info", **fields}], 0)
    broken = json.dumps({"event": "slurm_proxy_request completed {oops", "level": "info", **fields})
    assert log_records([broken], MARKER) == ([], 1)


def test_a_container_runtime_wrapping_a_json_line_is_read_through_both_layers():
    (line,) = logged(JsonLines(), request())
    wrapped = json.dumps({"log": line + "\n", "stream": "stderr", "time": "2026-12-03T09:00:00Z"})
    assert record_in(wrapped, MARKER) == RECORD


@pytest.mark.parametrize(
    "line",
    [
        "slurm_proxy_request {oops",
        json.dumps({"message": "slurm_proxy_request {oops"}),
        'level=info msg="slurm_proxy_request {oops"',
        "slurm_proxy_request",
    ],
)
def test_a_marked_line_with_no_record_in_any_shape_is_malformed(line):
    assert log_records([line], MARKER) == ([], 1)


@pytest.mark.parametrize("formatter", [JsonLines(), Logfmt()], ids=["json-lines", "logfmt"])
def test_a_correct_release_logging_structured_lines_passes_request_and_attempt_log(formatter):
    """The false alarm this module exists for: the same records as the plain control, written
    by a structured handler, pass request_log and attempt_log with the same numbers."""
    phase = retry_phase()
    records = [json.loads(line.split(" ", 1)[1]) for line in phase.log_lines if line.startswith(MARKER)]
    attempts = [{"backend": b, "status": s} for b, s in SERVED]
    lines = logged(formatter, *[request(r) for r in records], *[request(a) for a in attempts])
    plain = [*phase.log_lines, *[f"{MARKER} {json.dumps(a)}" for a in attempts]]
    for shaped in (plain, lines):
        shaped_phase = replace(phase, log_lines=shaped, origins=ORIGINS)
        log = checks.request_log([shaped_phase], CLAIMED)
        assert log.verdict == "pass" and log.metrics["records"] == 3, log
        attempt_log = checks.attempt_log([shaped_phase], CLAIMED)
        assert attempt_log.verdict == "pass" and attempt_log.metrics["attempts_logged"] == 6, attempt_log


@pytest.mark.parametrize("formatter", [JsonLines(), Logfmt()], ids=["json-lines", "logfmt"])
def test_wrong_records_in_a_structured_shape_still_fail_for_their_reason(formatter):
    """Reading the shape must not make a wrong record right: last-attempt-only records, logged
    as JSON lines or logfmt, fail request_log naming the request they leave out."""
    last_only = [{"attempts": 1, "final_status": 200, "upstream_outcomes": [o]} for o in ("200", "200", "200")]
    lines = logged(formatter, *[request(r) for r in last_only])
    result = checks.request_log([replace(retry_phase(), log_lines=lines)], CLAIMED)
    assert result.verdict == "fail" and "not logged: 1x attempts 2 [429,200] -> 200" in result.detail, result
