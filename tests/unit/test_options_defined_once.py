"""Each overload option is defined once (scenario_options.OverloadOptions); the CLI, the
pytest plugin and gate files are derived from it. This test fails when one of them grows an
option of its own, loses one, or disagrees on a default."""

import argparse
import dataclasses

from dd_accept.fixtures.plugin import SCENARIO_OPTIONS
from dd_accept.harness.cli import build_parser
from dd_accept.harness.gate_file import GateOptions
from dd_accept.scenario_options import OverloadOptions, user_options

OVERLOAD_FLAGS = {"replicas", "overloaded", "queue_depth", "threshold", "retry_after", "admission_limit", "records"}


def _run_parser() -> argparse.ArgumentParser:
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return commands.choices["run"]


def test_the_user_options_are_the_overload_fields_marked_as_options():
    assert {f.name for f in user_options()} == OVERLOAD_FLAGS
    assert all(getattr(OverloadOptions(), f.name) == f.default for f in user_options())


def test_cli_pytest_and_gate_files_agree_with_the_definition():
    wanted = {f.name: f.default for f in user_options()}
    run = _run_parser()
    cli = {a.dest: a.default for a in run._actions if a.dest in wanted}
    assert cli == wanted
    pytest_options = {name.removeprefix("--dd-").replace("-", "_"): default for name, default, _ in SCENARIO_OPTIONS}
    assert pytest_options == wanted
    gate = {f.name: f.default for f in dataclasses.fields(GateOptions) if f.name not in ("seed", "parallel")}
    assert gate == wanted
    assert GateOptions().scenario_options() == wanted


def test_the_help_text_comes_from_the_definition():
    run = _run_parser()
    depth = next(a for a in run._actions if a.dest == "queue_depth")
    assert depth.help.startswith(OverloadOptions.__dataclass_fields__["queue_depth"].metadata["help"])
    assert "(default: 7)" in depth.help
