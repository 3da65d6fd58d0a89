"""`dd-accept checks`: every check id once, with the first sentence of its own rule."""

import json

from dd_accept.acceptance.catalog import ALL_CHECKS, CHECKS
from dd_accept.acceptance.registry import first_sentence
from tests.helpers import run_cli


def test_every_check_is_listed_once_with_what_it_judges():
    result = run_cli("--json", "checks")
    assert result.returncode == 0, result.stderr
    listed = json.loads(result.stdout)["checks"]
    assert sorted(c["id"] for c in listed) == sorted(ALL_CHECKS)
    assert all(len(c["summary"]) > 20 and c["summary"].endswith(".") for c in listed), listed
    said = {c["id"]: c["summary"] for c in listed}
    assert "scancel" in said["drain.scancel_step"] and "/health" in said["health.probe_isolation"]


def test_one_scenario_is_listed_alone_and_an_unknown_one_is_one_line_and_exit_2():
    result = run_cli("checks", "health")
    rows = [line.split(" | ")[0] for line in result.stdout.splitlines() if " | " in line][1:]
    assert result.returncode == 0 and rows == list(CHECKS["health"]), result.stdout
    wrong = run_cli("checks", "helth")
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1 and "unknown scenario 'helth'" in wrong.stderr


def test_the_first_sentence_keeps_an_aside_in_parentheses_whole():
    doc = """Health probes do not change choices (the seed. "no distortion"): judged per phase.

    Why: the rest."""
    assert first_sentence(doc) == 'Health probes do not change choices (the seed. "no distortion"): judged per phase.'
    assert first_sentence("") == "" and first_sentence("One line") == "One line."
    assert first_sentence("Judged in three ways:\n\n- one") == "Judged in three ways."
