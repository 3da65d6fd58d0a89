"""What a CI log and a person each see: global options after the command, and tables whose
check ids are never folded."""

import json
import re
from io import StringIO

import pytest
from rich.console import Console
from rich.table import Table

from dd_accept.harness.cli import build_parser
from dd_accept.harness.console import ConsoleListener
from tests.gate.test_judge_and_compare import _results
from tests.helpers import run_cli, sealed

LONG_ID = "overload.total.admission_decrease"


@pytest.mark.parametrize(
    "argv",
    [["-q", "run", "overload"], ["run", "overload", "-q"], ["cluster", "status", "--quiet"], ["verify", "b", "-q"]],
)
def test_quiet_is_accepted_before_or_after_the_command(argv):
    assert build_parser().parse_args(argv).quiet is True


def test_quiet_after_the_command_does_not_reset_it_before():
    assert build_parser().parse_args(["run", "overload"]).quiet is False


def _table() -> Table:
    table = Table(title="dd-accept [red]FAIL[/red] — sut==1")
    for column in ("check", "verdict", "expected", "observed"):
        table.add_column(column, overflow="fold")
    table.add_row(LONG_ID, "[red]fail[/red]", "8 → 6 → 4", "limit stayed at 8\nno 429 reached the client")
    table.add_row("overload.recovery", "[green]pass[/green]", "every record", "40/40")
    return table


def test_a_log_gets_one_plain_line_per_row_at_any_width():
    out = StringIO()
    ConsoleListener(out=Console(file=out, width=40)).table(_table())
    assert out.getvalue().splitlines() == [
        "dd-accept FAIL — sut==1",
        "check | verdict | expected | observed",
        f"{LONG_ID} | fail | 8 → 6 → 4 | limit stayed at 8; no 429 reached the client",
        "overload.recovery | pass | every record | 40/40",
    ]


def test_a_terminal_80_columns_wide_never_folds_a_check_id():
    out = StringIO()
    ConsoleListener(out=Console(file=out, width=80, force_terminal=True, no_color=True)).table(_table())
    assert LONG_ID in out.getvalue(), out.getvalue()


def test_a_piped_compare_prints_whole_check_ids(tmp_path):
    """`compare` as a CI job runs it: stdout is a pipe, the ids are whole, one row a line."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(_results(failover="fail" if name == "b" else "pass")))
        sealed(tmp_path / name)
    result = run_cli("compare", str(tmp_path / "a"), str(tmp_path / "b"), env={"COLUMNS": "60"})
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if line.startswith("overload.partial.failover | "))
    assert "| pass | fail | regressed |" in row, row


def test_no_color_before_or_after_the_command_removes_colour_even_where_it_is_forced(tmp_path):
    """FORCE_COLOR makes rich draw colour into a pipe: what a terminal would get. `--no-color`
    (or NO_COLOR) takes it away, wherever it is given; the drawn table stays."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(_results(failover="fail" if name == "b" else "pass")))
        sealed(tmp_path / name)
    argv = ["compare", str(tmp_path / "a"), str(tmp_path / "b")]
    colour = re.compile(r"\x1b\[(?:[0-9;]*;)?(?:3[0-8]|9[0-7]|4[0-8])(?:;[0-9;]*)?m")  # bold stays: not a colour
    coloured = run_cli(*argv, env={"FORCE_COLOR": "1", "TERM": "xterm-256color"})
    assert coloured.returncode == 0 and colour.search(coloured.stdout), coloured.stdout[:300]
    for flags in (["--no-color", *argv], [*argv, "--no-color"]):
        plain = run_cli(*flags, env={"FORCE_COLOR": "1", "TERM": "xterm-256color"})
        assert plain.returncode == 0 and not colour.search(plain.stdout) and "regressed" in plain.stdout, plain.stdout
    assert not colour.search(run_cli(*argv, env={"FORCE_COLOR": "1", "NO_COLOR": "1"}).stdout)
