"""A node-side probe whose output docker's exec API lost (exit 0, nothing at all) is run once
more; any other outcome is read as it came (docker/docker-py#2042: seen once in CI)."""

from dd_accept.deployment.run_directory import exec_rows
from dd_accept.slurm_docker.records import CommandRecord


class _Cluster:
    """Answers each exec with the next of `outputs` (exit code, stdout), recording the calls."""

    def __init__(self, *outputs):
        self.outputs, self.calls = list(outputs), []

    def exec(self, argv, **options):
        code, out = self.outputs.pop(0)
        self.calls.append((tuple(argv), options))
        return CommandRecord(tuple(argv), "node1", "t", 0.1, code, out[-50:], "", stdout=out)


def test_an_exit_0_with_no_output_at_all_is_asked_once_more():
    cluster = _Cluster((0, ""), (0, '{"status": 200}\n'))
    record, rows = exec_rows(cluster, ["probe", "url"], node="node1", timeout=5)
    assert rows == [{"status": 200}] and record.ok
    assert cluster.calls == [(("probe", "url"), {"node": "node1", "timeout": 5})] * 2


def test_output_or_a_failure_is_read_as_it_came_and_asked_once():
    for code, out in ((0, '{"status": 429}\n'), (1, ""), (0, "not a row\n")):
        cluster = _Cluster((code, out), (0, '{"status": 200}\n'))
        _, rows = exec_rows(cluster, ["probe"])
        assert len(cluster.calls) == 1 and rows == ([{"status": 429}] if "429" in out else [])
    twice_lost = _Cluster((0, ""), (0, ""))
    assert exec_rows(twice_lost, ["probe"])[1] == [] and len(twice_lost.calls) == 2
