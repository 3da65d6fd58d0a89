"""The pytest plugin as a user's test suite sees it, run in a child pytest (pytester)."""

import json

import pytest

from tests.helpers import labelled_objects

pytestmark = pytest.mark.cluster

LEAKY = """
def test_leaves_a_step_running(allocation):
    allocation.start_step(["sleep", "300"], options=["-N1", "-n1"])
    from dd_accept.base.waiting import wait_until
    wait_until(allocation.steps, bool, timeout=30, what="step to start")
"""

TIDY = """
def test_stops_its_step(allocation):
    from dd_accept.base.waiting import wait_until
    step = allocation.start_step(["sleep", "300"], options=["-N1", "-n1"])
    (running,) = wait_until(allocation.steps, bool, timeout=30, what="step to start")
    allocation.scancel_step(running, "KILL")
    step.wait(timeout=30)
"""


def test_allocation_fixture_fails_a_test_that_leaks_steps(pytester, slurm_cluster):
    pytester.makepyfile(test_leaky=LEAKY)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--dd-cluster={slurm_cluster.name}")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*test leaked Slurm steps in job*"])
    assert slurm_cluster.exec(["squeue", "-h", "-s", "-o", "%i"]).stdout_tail.split() == []


def test_allocation_fixture_passes_a_test_that_cleans_up(pytester, slurm_cluster):
    pytester.makepyfile(test_tidy=TIDY)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--dd-cluster={slurm_cluster.name}")
    result.assert_outcomes(passed=1)


SHARED = """
import json, os
import pytest

@pytest.mark.parametrize("index", range(4))
def test_records_which_cluster(slurm_cluster, index):
    controller = slurm_cluster.container("ctl")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.environ["DD_SEEN_FILE"], "a") as handle:
        handle.write(json.dumps([worker, slurm_cluster.name, controller.id]) + "\\n")
    assert slurm_cluster.exec(["srun", "-N1", "true"]).ok
"""


def test_xdist_workers_share_one_cluster_and_the_last_removes_it(pytester, monkeypatch):
    seen_file = pytester.path / "seen.jsonl"
    monkeypatch.setenv("DD_SEEN_FILE", str(seen_file))
    pytester.makepyfile(test_shared=SHARED)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "--dd-nodes=1")
    result.assert_outcomes(passed=4)
    rows = [json.loads(line) for line in seen_file.read_text().splitlines()]
    assert {row[0] for row in rows} == {"gw0", "gw1"}, "both workers must have run tests"
    assert len({row[2] for row in rows}) == 1, "workers must share one controller container"
    (name,) = {row[1] for row in rows}
    assert labelled_objects(name) == []


def test_bad_plugin_options_are_usage_errors(pytester):
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("--dd-nodes=0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--dd-nodes must be a whole number from 1 to 64*"])
