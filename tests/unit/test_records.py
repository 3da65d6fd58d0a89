import json

from dd_accept.slurm_docker.records import CommandLog, CommandRecord, tail


def _record(**overrides):
    fields = dict(
        argv=("srun", "true"),
        node="ctl",
        start="2026-01-01T00:00:00.000Z",
        duration_s=0.1,
        exit_code=0,
        stdout_tail="",
        stderr_tail="",
    )
    fields.update(overrides)
    return CommandRecord(**fields)


def test_tail_keeps_the_end():
    assert tail("x" * 10 + "END", limit=5).endswith("END")
    assert len(tail("x" * 10000, limit=100)) == 100


def test_record_is_frozen_and_serialisable():
    record = _record()
    data = json.loads(json.dumps(record.to_json()))
    assert set(data) == {
        "argv",
        "node",
        "start",
        "duration_s",
        "exit_code",
        "stdout_tail",
        "stderr_tail",
        "timed_out",
        "background",
    }
    try:
        record.exit_code = 1  # type: ignore[misc]
    except AttributeError:
        pass
    else:
        raise AssertionError("records must be immutable evidence")


def test_ok_requires_zero_exit_and_no_timeout():
    assert _record().ok
    assert not _record(exit_code=1).ok
    assert not _record(timed_out=True).ok


def test_describe_names_command_node_status_and_last_error_line():
    text = _record(exit_code=1, stderr_tail="srun: error: first\nsrun: error: last\n").describe()
    assert "`srun true` on ctl (exit 1" in text and text.endswith("srun: error: last")


def test_log_to_jsonl_has_one_line_per_record():
    log = CommandLog()
    log.add(_record())
    log.add(_record(argv=("sinfo",)))
    lines = log.to_jsonl().splitlines()
    assert [json.loads(line)["argv"] for line in lines] == [["srun", "true"], ["sinfo"]]
    assert len(log.since(1)) == 1
