"""Every help text says what an option takes and what it is when not given: no generic
metavar (`--out OUT`), no default a user has to find in the code."""

from __future__ import annotations

import argparse

from dd_accept.harness.cli import build_parser


def _parsers(parser: argparse.ArgumentParser, path: str = "dd-accept"):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, command in action.choices.items():
                yield from _parsers(command, f"{path} {name}")


def _problems():
    for path, parser in _parsers(build_parser()):
        for action in parser._actions:
            if not action.option_strings or action.help == argparse.SUPPRESS:
                continue
            flag = f"{path} {action.option_strings[-1]}"
            if not action.help:
                yield f"{flag}: no help"
                continue
            takes_value = action.nargs != 0
            if takes_value and action.choices is None and action.metavar is None:
                yield f"{flag}: generic metavar {action.dest.upper()}"
            if takes_value and not action.required and "default" not in action.help:
                yield f"{flag}: help does not say the default"


def test_every_option_names_what_it_takes_and_its_default():
    assert list(_problems()) == []
