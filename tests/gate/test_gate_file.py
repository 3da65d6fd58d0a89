"""Gate files: the shipped example is valid; every kind of mistake is exit 2 with the key named."""

from pathlib import Path

import pytest

from dd_accept.acceptance.catalog import ALL_CHECKS, CHECKS
from dd_accept.errors import UsageError
from dd_accept.fixtures.deployment import ENDPOINT_STARTS
from dd_accept.harness.gate_file import load_gate, parse_gate
from dd_accept.harness.runner import SCENARIOS
from tests.helpers import run_cli

EXAMPLE = Path(__file__).parents[2] / "docs" / "gate.example.toml"
ACCEPTANCE = Path(__file__).parents[2] / "src" / "dd_accept" / "acceptance"


def test_the_shipped_example_gate_file_is_valid():
    gate = load_gate(EXAMPLE)
    assert gate.scenarios() == ["overload"]
    assert gate.thresholds.max_error_rate == 0.0
    assert gate.cluster.mode == "docker"


def test_the_catalog_names_every_check_the_scenarios_report():
    """Gate files are validated against the catalog, so it must match the checks' own ids."""
    assert set(CHECKS) == set(SCENARIOS)
    source = "".join(p.read_text() for p in ACCEPTANCE.glob("*_checks.py"))
    for scenario in SCENARIOS:  # a proxy that never serves fails this one (deployment.start_proxy)
        assert f"{scenario}.{ENDPOINT_STARTS}" in CHECKS[scenario]
    for check in ALL_CHECKS - {f"{scenario}.{ENDPOINT_STARTS}" for scenario in SCENARIOS}:
        literal = check if not check.startswith("drain.sut_cleanup.") else "drain.sut_cleanup.{mode}"
        assert f'"{literal}"' in source, check


MINIMAL = '[gate]\nname = "g"\nscenarios = ["overload"]\n'


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (MINIMAL + "colour = 1\n", "unknown key gate.colour"),
        (MINIMAL.replace('"overload"', '"overlaod"'), "unknown scenario 'overlaod'"),
        (MINIMAL + '[thresholds]\nmax_error_rate = "low"\n', "thresholds.max_error_rate must be a number, got str"),
        (MINIMAL + "[thresholds]\nmax_error_rate = 1.5\n", "fraction from 0 to 1"),
        (MINIMAL + "[thresholds]\nmax_ttft_p99_s = 2.0\n", "measured by scenario streaming"),
        (MINIMAL + "[thresholds]\nmax_errors = 0\n", "unknown key thresholds.max_errors"),
        (MINIMAL + "allow_unsupported = ['health.probe_isolaton']\n", "unknown check 'health.probe_isolaton'"),
        (MINIMAL + "allow_unsupported = ['health.probe_isolation']\n", "a check of health, which the gate does not"),
        (MINIMAL + "[options]\nreplicas = 2.5\n", "options.replicas must be a whole number"),
        (MINIMAL + "[options]\nreplicas = 2\noverloaded = 2\n", "options.overloaded must be at least 1"),
        (MINIMAL + "[cluster]\nmode = 'kubernetes'\n", "cluster.mode must be one of docker, existing"),
        (MINIMAL + "[cluster]\nmode = 'existing'\n", "needs cluster.run_dir"),
        (MINIMAL + 'suts = ["a", "b", "c"]\n', "one SUT, or two"),
        ('[gate]\nscenarios = ["overload"]\n', "missing key gate.name"),
        (MINIMAL + "[thresholds\n", "not valid TOML"),
        (MINIMAL + "[backend]\nkind = 'vllm'\n", "needs backend.model"),
        (MINIMAL + "[backend]\nkind = 'tgi'\n", "backend.kind must be synthetic or vllm"),
        (
            MINIMAL.replace('"overload"', '"overload", "drain"') + "[backend]\nkind = 'vllm'\nmodel = 'm'\n",
            "overload scenario only",
        ),
        (
            '[gate]\nname = "g"\nscenarios = ["drain"]\n[thresholds]\ndrain_window_s = 10\ndrain_allowance_s = 5\n',
            "drain_allowance_s must be at least drain_window_s",
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
