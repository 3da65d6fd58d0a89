"""Reading a step's end from Slurm's own records (slurmd's step log, sacct)."""

from dd_accept.slurm_docker import step_exit

LOG = """\
[2026-11-30T05:36:18.055] [1.0] task 0 (35) exited with exit code 0.
[2026-11-30T05:36:18.082] [1.1] task 0 (45) exited with exit code 3.
[2026-11-30T05:36:50.121] [1.3] proctrack/linuxproc: _kill_proclist: Sending signal 9 to pid 68 (sleep)
[2026-11-30T05:36:50.121] [1.3] task 0 (68) exited. Killed by signal 9.
[2026-11-30T05:36:51.000] [1.4] task 0 (70) exited with exit code 0.
[2026-11-30T05:36:52.500] [1.4] task 1 (71) exited with exit code 2.
[2026-11-30T05:36:53.000] [11.0] task 0 (90) exited with exit code 9.
"""


def test_exit_codes_signals_and_the_worst_task_of_a_step():
    assert step_exit.from_slurmd_log(LOG, "1.0").exit_code == 0
    assert step_exit.from_slurmd_log(LOG, "1.1").exit_code == 3
    assert step_exit.from_slurmd_log(LOG, "1.3").exit_code == 137
    four = step_exit.from_slurmd_log(LOG, "1.4")
    assert four.exit_code == 2 and four.ended_at - step_exit._epoch("2026-11-30T05:36:51.000") == 1.5


def test_no_record_is_unknown_and_step_ids_match_exactly():
    assert step_exit.from_slurmd_log(LOG, "1.2") is None
    assert step_exit.from_slurmd_log(LOG, "1.") is None
    assert step_exit.from_slurmd_log(LOG, "11.0").exit_code == 9
    assert step_exit.from_slurmd_log("", "1.0") is None


def test_sacct_lines():
    assert step_exit.from_sacct("0:0|2026-11-30T05:36:18|COMPLETED\n").exit_code == 0
    assert step_exit.from_sacct("0:9|2026-11-30T05:36:18|CANCELLED\n").exit_code == 137
    assert step_exit.from_sacct("3:0|Unknown|FAILED\n").ended_at is None
    assert step_exit.from_sacct("") is None
    assert step_exit.from_sacct("garbage|x\n") is None


def test_the_moment_a_signal_reached_the_step():
    log = LOG + "[2026-11-30T05:37:00.250] [1.5] Sent signal 15 to StepId=1.5\n"
    log += "[2026-11-30T05:37:12.250] [1.5] Sent signal 9 to StepId=1.5\n"
    at = step_exit.signal_sent_at(log, "1.5", 15)
    assert at == step_exit._epoch("2026-11-30T05:37:00.250")
    assert step_exit.signal_sent_at(log, "1.5", 9) - at == 12.0
    assert step_exit.signal_sent_at(log, "1.3", 15) is None
    assert step_exit.signal_sent_at(log, "1.3", 9) is None, 'proctrack\'s "Sending signal" is not the delivery line'
    assert step_exit.signals_sent(log, "1.5", 15) == (at,) and step_exit.signals_sent(log, "1.3", 15) == ()


def test_every_delivery_of_a_signal_is_read_as_slurm_made_it():
    """One scancel, two deliveries 3 ms apart: what a loaded machine's Slurm did once."""
    log = "[2026-12-05T17:30:41.750] [1.1] Sent signal 15 to StepId=1.1\n"
    log += "[2026-12-05T17:30:41.753] [1.1] Sent signal 15 to StepId=1.1\n"
    log += "[2026-12-05T17:30:41.760] [1.11] Sent signal 15 to StepId=1.11\n"
    sent = step_exit.signals_sent(log, "1.1", 15)
    assert len(sent) == 2 and round(sent[1] - sent[0], 3) == 0.003, sent


def test_a_running_step_has_no_exit_yet_in_sacct():
    assert step_exit.from_sacct("0:0|Unknown|RUNNING\n") is None
    assert step_exit.from_sacct("0:15|2026-11-30T05:36:18|CANCELLED by 0\n").exit_code == 143


def test_scancels_verbose_lines_count_the_requests_it_sent_to_the_step():
    """22.05's `scancel --verbose --signal=TERM 1.3` with a job submitted after job 1 pending
    (measured on the docker cluster): two "Signal 15 to step" lines, two deliveries."""
    repeated = (
        "scancel: select/cons_tres: common_init: select/cons_tres loaded\n"
        "scancel: Signal 15 to step 1.3\nscancel: Signal 15 to step 1.3\n"
    )
    assert step_exit.signal_requests(repeated, "1.3", 15) == 2
    assert step_exit.signal_requests(repeated, "1.3", 9) == 0, "another signal"
    assert step_exit.signal_requests(repeated, "11.3", 15) == 0, "another step"
    assert step_exit.signal_requests("scancel: Signal 15 to step 1.3\n", "1.3", 15) == 1
    retried = (
        "scancel: Signal 15 to step 1.3\nscancel: Job is in transitional state, retrying\n"
        "scancel: Signal 15 to step 1.3\n"
    )
    assert step_exit.signal_requests(retried, "1.3", 15) == 1, "a request Slurm refused delivered nothing"
    assert step_exit.signal_requests("", "1.3", 15) == 0, "no verbose output: unknown"


def test_a_docker_nodes_log_that_could_not_be_read_is_unknown_not_none_delivered(monkeypatch):
    """grep answers 1 for no line (none delivered) and 2 for an error (unknown)."""
    from dd_accept.slurm_docker.cluster import SlurmCluster
    from dd_accept.slurm_docker.records import CommandRecord

    def grep(code: int, out: str):
        at = "2026-12-05T00:00:00Z"
        return lambda argv, **_: CommandRecord(tuple(argv), "node1", at, 0.01, code, out, "", stdout=out)

    cluster = object.__new__(SlurmCluster)  # no containers: only its reading of the log is asked
    line = "[2026-12-05T17:54:44.468] [1.3] Sent signal 15 to StepId=1.3\n"
    for code, out, expected in ((0, line, 1), (1, "", 0), (2, "", None)):
        monkeypatch.setattr(cluster, "exec", grep(code, out), raising=False)
        sent = cluster.signals_sent("1.3", "node1", 15)
        assert (None if sent is None else len(sent)) == expected, (code, sent)
