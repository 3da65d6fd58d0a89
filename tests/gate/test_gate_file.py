"""Gate files: the shipped example is valid; every kind of mistake is exit 2 with the key named."""

from pathlib import Path

import pytest

from dd_accept.acceptance.catalog import ALL_CHECKS, CHECKS
from dd_accept.acceptance.registry import REGISTRY, check
from dd_accept.acceptance.scenarios import SCENARIO_NAMES as SCENARIOS
from dd_accept.base.errors import UsageError
from dd_accept.base.results import CheckResult
from dd_accept.base.slurm_releases import RELEASES
from dd_accept.deployment import ENDPOINT_STARTS
from dd_accept.harness.gate_file import load_gate, parse_gate
from tests.helpers import run_cli

EXAMPLE = Path(__file__).parents[2] / "docs" / "gate.example.toml"


def test_the_shipped_example_gate_file_is_valid():
    gate = load_gate(EXAMPLE)
    assert gate.scenarios() == ["overload"]
    assert gate.thresholds.max_error_rate == 0.0
    assert gate.cluster.mode == "docker"


def test_the_shipped_matrix_gate_file_runs_every_scenario_on_every_release():
    gate = load_gate(EXAMPLE.with_name("gate.matrix.toml"))
    assert gate.scenarios() == [name for name in SCENARIOS if name != "capacity"], "all: capacity runs alone"
    assert gate.releases() == list(RELEASES)


def test_the_catalog_is_read_from_the_registered_checks():
    """Gate files are validated against the catalog; it is derived from the scenario
    declaration and the checks' own registrations, so it cannot lag behind them."""
    assert set(CHECKS) == set(SCENARIOS)
    for scenario in SCENARIOS:  # a proxy that never serves fails this one (deployment.start_proxy)
        assert CHECKS[scenario][0] == f"{scenario}.{ENDPOINT_STARTS}"
    for check_id, registered in REGISTRY.items():
        assert check_id in CHECKS[registered.scenario]
        module = registered.function.rsplit(".", 1)[0]  # the scenario's checks module, or one of its own beside it
        prefix = f"dd_accept.acceptance.{registered.scenario}_"
        every = "dd_accept.acceptance.ledger_checks"  # the request ledger's, judged in every scenario
        assert (module.startswith(prefix) and module.endswith("checks")) or module == every, registered
    assert len(ALL_CHECKS) == len(REGISTRY) + len(SCENARIOS) == 73  # 2 ledger checks in each scenario


def test_a_check_that_reports_an_unregistered_id_is_a_harness_fault():
    @check("overload.example")
    def example(ok: bool) -> CheckResult:
        return CheckResult.judge("overload.exampel" if not ok else example.check_id, ok, "x", "y")

    try:
        assert example(True).id == "overload.example"
        wrong = r"reported 'overload\.exampel'; it is registered as overload\.example"
        with pytest.raises(AssertionError, match=wrong):
            example(False)
    finally:
        REGISTRY.pop("overload.example")


MINIMAL = '[gate]\nname = "g"\nscenarios = ["overload"]\n'


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (MINIMAL + "colour = 1\n", "unknown key gate.colour"),
        (MINIMAL.replace('"overload"', '"overlaod"'), "unknown scenario 'overlaod'"),
        (MINIMAL + '[thresholds]\nmax_error_rate = "low"\n', "thresholds.max_error_rate must be a number, got str"),
        (MINIMAL + "[thresholds]\nmax_error_rate = 1.5\n", "fraction from 0 to 1"),
        (
            MINIMAL + "[thresholds]\nmax_ttft_p99_s = 2.0\n",
            "replaced by [metrics.streaming] p99_ttft_ms = { max = MS }",
        ),
        (MINIMAL + "[thresholds]\nmax_errors = 0\n", "unknown key thresholds.max_errors"),
        (MINIMAL + "allow_unsupported = ['health.probe_isolaton']\n", "unknown check 'health.probe_isolaton'"),
        (MINIMAL + "allow_unsupported = ['health.probe_isolation']\n", "a check of health, which the gate does not"),
        (MINIMAL + "[options]\nreplicas = 2.5\n", "options.replicas must be a whole number"),
        (MINIMAL + "[options]\nreplicas = 2\noverloaded = 2\n", "options.overloaded must be at least 1"),
        (MINIMAL + "[options]\nseed = -1\n", "options.seed must be a whole number >= 0, got -1"),
        (MINIMAL + "[options]\nparallel = 0\n", "options.parallel must be a whole number >= 1, got 0"),
        # a client header may carry a secret, which a gate file kept in a repository must not
        (MINIMAL + "[options]\nclient_headers = ['X: y']\n", "unknown key options.client_headers"),
        (MINIMAL + "[cluster]\nmode = 'kubernetes'\n", "cluster.mode must be one of docker, existing"),
        (MINIMAL + "[cluster]\nmode = 'existing'\n", "needs cluster.run_dir"),
        (MINIMAL + 'suts = ["a", "b", "c"]\n', "one SUT, or two"),
        ('[gate]\nscenarios = ["overload"]\n', "missing key gate.name"),
        (MINIMAL + "[thresholds\n", "not valid TOML"),
        (MINIMAL + "[backend]\nkind = 'vllm'\n", "needs backend.model"),
        (MINIMAL + "[backend]\nkind = 'tgi'\n", "backend.kind must be one of synthetic, vllm"),
        (
            MINIMAL.replace('"overload"', '"overload", "drain"') + "[backend]\nkind = 'vllm'\nmodel = 'm'\n",
            "overload scenario only",
        ),
        (
            '[gate]\nname = "g"\nscenarios = ["drain"]\n[thresholds]\ndrain_window_s = 10\ndrain_allowance_s = 5\n',
            "thresholds.drain_allowance_s must be at least thresholds.drain_window_s",
        ),
    ],
)
def test_bad_gate_files_name_the_key(text, needle):
    with pytest.raises(UsageError, match=needle.replace("(", r"\(").replace("[", r"\[")):
        parse_gate(text, "gate.toml")


def test_gate_cli_rejects_a_bad_file_with_one_line_and_starts_nothing(tmp_path):
    bad = tmp_path / "gate.toml"
    bad.write_text(MINIMAL + "[thresholds]\nmax_error_rate = true\n")
    out = tmp_path / "out"
    result = run_cli("gate", "--config", str(bad), "--out", str(out))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "thresholds.max_error_rate must be a number" in result.stderr
    assert not out.exists()
    assert run_cli("gate", "--config", str(tmp_path / "missing.toml")).returncode == 2
    three = run_cli("gate", "--config", str(EXAMPLE), "--sut", "a", "--sut", "b", "--sut", "c", "--out", str(out))
    assert three.returncode == 2 and "one --sut" in three.stderr and not out.exists()
    not_a_wheel = tmp_path / "notes.whl"
    not_a_wheel.write_text("hello")
    bad = run_cli("gate", "--config", str(EXAMPLE), "--sut", str(not_a_wheel), "--out", str(out))
    assert bad.returncode == 2 and "is not a wheel" in bad.stderr and not out.exists()
