"""Bad input gets one clear line on stderr and exit status 2, with no traceback."""

import pytest

from dd_accept.base.errors import UsageError
from tests.helpers import run_cli


def _assert_one_line_usage_error(result, needle):
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("dd-accept: error: ")
    assert needle in lines[0]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["cluster", "up", "--nodes", "0"], "--nodes must be a whole number from 1 to 64, got '0'"),
        (["cluster", "up", "--nodes=-1"], "--nodes must be a whole number from 1 to 64, got '-1'"),
        (["cluster", "up", "--nodes", "abc"], "--nodes must be a whole number"),
        (["cluster", "up", "--nodes", "100000"], "--nodes must be a whole number from 1 to 64, got '100000'"),
        (["cluster", "up", "--cpus-per-node", "2000"], "--cpus-per-node must be a whole number from 1 to 1024"),
        (["cluster", "up", "--subnet", "10.1.2.0/33"], "--subnet"),
        (["cluster", "up", "--subnet", "10.1.2.3/24"], "--subnet"),
        (["cluster", "up", "--name", "Bad Name"], "cluster name"),
        (["cluster", "up", "--ready-timeout", "-3"], "--ready-timeout"),
        (["cluster", "frobnicate"], "invalid choice"),
        (["nosuchcommand"], "invalid choice"),
        (["cluster", "exec", "--"], "needs a command"),
        (["run", "streaming", "--client-header", "Bearer ddcanary-secret"], "--client-header must be NAME: VALUE"),
        (["run", "overload", "--seed", "-1"], "--seed must be a whole number >= 0, got '-1'"),
        (["run", "capacity,overload"], "capacity measures the machine, so it runs alone"),
        (["run", "capacity", "--load-start", "2.5"], "--load-start must be a whole number of streams"),
        (["run", "capacity", "--load-factor", "1"], "--load-factor must be a number of times > 1"),
        (["run", "capacity", "--load-mode", "burst"], "--load-mode"),
        (["run", "capacity", "--slo-chunk-delay-ms", "0"], "--slo-chunk-delay-ms must be a number of milliseconds"),
        (["compare", "a", "b", "--tolerance", "-1"], "--tolerance"),
    ],
)
def test_bad_arguments(args, needle):
    _assert_one_line_usage_error(run_cli(*args), needle)


@pytest.mark.parametrize("args", [["cluster", "up", "--name", "ddnoengine"], ["cluster", "status"], ["doctor"]])
def test_missing_docker_engine_is_one_line_and_exit_2(args, tmp_path):
    env = {"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock", "DD_ACCEPT_STATE_DIR": str(tmp_path / "state")}
    result = run_cli(*args, env=env)
    assert result.returncode == 2
    if args != ["doctor"]:
        _assert_one_line_usage_error(result, "no Docker engine answers")
    else:
        assert "docker engine" in result.stdout and "problem" in result.stdout
    assert not (tmp_path / "state" / "clusters").exists()


def test_help_lists_commands_and_exit_statuses():
    result = run_cli("--help")
    assert result.returncode == 0
    assert "cluster" in result.stdout and "doctor" in result.stdout
    assert "2 usage or environment error" in " ".join(result.stdout.split())


def test_the_scenario_runner_never_passes_pytest_state_to_its_child(monkeypatch):
    """Inherited xdist ids would make a nested run reuse, and then remove, the outer cluster."""
    from dd_accept.harness.runner import child_environment

    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", "abc")
    monkeypatch.setenv("DD_ACCEPT_KEEP", "1")
    environment = child_environment()
    assert not any(key.startswith("PYTEST_") for key in environment)
    assert environment["DD_ACCEPT_KEEP"] == "1"


def test_overloaded_follows_replicas_unless_given():
    """`--overloaded` defaults to what fits `--replicas`; only the overload scenario needs
    a replica left over, so only it refuses one replica."""
    from dd_accept.acceptance.overload import OverloadOptions
    from dd_accept.acceptance.request import RunRequest

    assert [OverloadOptions(replicas=n).partial_overloaded for n in (1, 2, 3, 8)] == [0, 1, 2, 2]
    assert OverloadOptions(replicas=8, overloaded=5).partial_overloaded == 5
    assert RunRequest(
        scenario="streaming", sut="x==1", options={"overload": OverloadOptions(replicas=1)}
    ).scenarios() == ["streaming"]
    with pytest.raises(UsageError, match="the overload scenario needs --replicas 2 or more"):
        RunRequest(scenario="all", sut="x==1", options={"overload": OverloadOptions(replicas=1)}).scenarios()


def test_a_small_overload_run_plans_and_one_replica_is_refused():
    two = run_cli("run", "overload", "--replicas", "2", "--dry-run")
    assert two.returncode == 0, two.stderr
    assert "-n2" in two.stdout
    _assert_one_line_usage_error(
        run_cli("run", "overload", "--replicas", "1", "--dry-run"), "the overload scenario needs --replicas 2 or more"
    )
    _assert_one_line_usage_error(
        run_cli("run", "overload", "--replicas", "3", "--overloaded", "3", "--dry-run"),
        "--overloaded must be at least 1 and below --replicas",
    )


def test_an_option_is_never_taken_from_its_first_letters():
    """`--replica 8` is a typo, not `--replicas 8`: one line, exit 2, nothing run."""
    result = run_cli("run", "overload", "--replica", "8", "--dry-run")
    assert result.returncode == 2 and "unrecognized arguments: --replica 8" in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and not result.stdout
