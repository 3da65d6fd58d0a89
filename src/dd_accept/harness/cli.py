"""The `dd-accept` command line.

Exit statuses are a contract with release gates: 0 pass, 1 a check failed, 2 usage or
environment error (always one clear line, never a traceback), 130 interrupted (after
cleaning up what this invocation started).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
from collections.abc import Sequence
from typing import Any

import dd_accept
from dd_accept.base.documents import checked
from dd_accept.base.errors import EXIT_INTERRUPTED, EXIT_USAGE, DDAcceptError
from dd_accept.harness.arguments import CommandParser
from dd_accept.harness.checks_command import add_checks_command
from dd_accept.harness.comparison_commands import add_comparison_commands
from dd_accept.harness.console import ConsoleListener, fail_line
from dd_accept.harness.evidence_commands import add_evidence_commands
from dd_accept.harness.machine_commands import add_machine_commands
from dd_accept.harness.run_commands import add_run_commands


def _interrupt_on_term() -> None:
    """Treat SIGTERM like Ctrl-C so the same cleanup paths run when CI cancels a job."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


class _VersionAction(argparse.Action):
    """argparse's own version action wants the text when the parser is built; reading it from
    the installed metadata costs 50 ms of CPU, which every other start would pay."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="show the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: object, values: object, option: Any = None) -> None:
        print(f"dd-accept {dd_accept.__version__}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="dd-accept",
        description="Acceptance harness for Slurm-hosted LLM runtimes, on a real Slurm cluster in Docker.",
        epilog="Exit status: 0 pass, 1 a check failed, 2 usage or environment error, 130 interrupted.",
    )
    parser.add_argument("--version", action=_VersionAction)
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress display")
    parser.add_argument("--no-color", action="store_true", help=_NO_COLOR_HELP)
    parser.add_argument("--json", action="store_true", help=_JSON_HELP)
    commands = parser.add_subparsers(dest="subcommand", metavar="COMMAND", parser_class=CommandParser)
    add_machine_commands(commands)
    add_run_commands(commands)
    add_evidence_commands(commands)
    add_comparison_commands(commands)
    add_checks_command(commands)
    _global_options_everywhere(parser)
    return parser


# Commands with a machine-readable result: `--json` prints it (its schema under docs/schema/).
JSON_COMMANDS = ("run", "verify", "audit", "compare", "gate", "doctor", "cluster status", "checks")
_NO_COLOR_HELP = "no colour, even on a terminal (as the NO_COLOR environment variable)"
_JSON_HELP = "print one JSON document on stdout (schema in docs/schema/); the human output goes to stderr"


def _global_options_everywhere(parser: argparse.ArgumentParser) -> None:
    """`-q`, `--json` and `--no-color` mean the same on every command, so they are accepted after it too
    (`dd-accept run overload -q`). SUPPRESS keeps a command's parser from resetting what
    was given before the command."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in dict.fromkeys(action.choices.values()):
                command.add_argument(
                    "-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="no progress display"
                )
                command.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=_JSON_HELP)
                command.add_argument("--no-color", action="store_true", default=argparse.SUPPRESS, help=_NO_COLOR_HELP)
                _global_options_everywhere(command)


def _command_name(args: argparse.Namespace) -> str:
    action = getattr(args, "action", None)
    return f"{args.subcommand} {action}" if action else str(args.subcommand)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help(sys.stderr if args.json else sys.stdout)  # --json: stdout is for documents only
        return EXIT_USAGE
    command = _command_name(args)
    if args.json and (
        command not in JSON_COMMANDS or getattr(args, "dry_run", False) or getattr(args, "check_only", False)
    ):
        where = {"run": "--dry-run", "gate": "gate --check"}.get(command, f"`{command}`")
        parser.error(f"--json is not available for {where}; it is for: {', '.join(JSON_COMMANDS)}")
    _interrupt_on_term()
    console = ConsoleListener(quiet=args.quiet, no_color=args.no_color)
    stdout = sys.stdout
    try:
        # With --json, stdout carries the one document: everything a person reads goes to stderr.
        with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
            code = int(args.handler(args, console))
    except DDAcceptError as error:
        fail_line(str(error))
        code, console.document = error.exit_status, _error_document(command, error.exit_status, str(error))
    except KeyboardInterrupt:
        message = "interrupted; everything this command started has been removed"
        fail_line(message)
        code, console.document = EXIT_INTERRUPTED, _error_document(command, EXIT_INTERRUPTED, message)
    if args.json:
        if console.document is None or console.document.get("exit_status", code) != code:
            raise AssertionError(f"dd-accept {command} --json: no document, or one that disagrees with exit {code}")
        stdout.write(json.dumps(console.document, indent=2) + "\n")
        stdout.flush()
    return code


def _error_document(command: str, code: int, message: str) -> dict[str, Any]:
    return checked({"schema": "dd-accept/error/v1", "command": command, "exit_status": code, "error": message})


if __name__ == "__main__":
    raise SystemExit(main())
