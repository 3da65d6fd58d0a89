"""Argument types and options several commands share, each defined once.

A usage error is one line and exit 2 (`CommandParser`), as for every other bad input; the
readers (`report`, `compare`, `history`) take the same options to verify a bundle first.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, NoReturn

from dd_accept.base.errors import EXIT_USAGE, UsageError
from dd_accept.base.options import add_arguments, build, parse_argv_values
from dd_accept.harness.console import ConsoleListener, fail_line
from dd_accept.reports.reading import ReadingPolicy
from dd_accept.reports.signing import load_public_key
from dd_accept.sut.spec import SutChoice


class CommandParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit 2, as for every other bad input, and
    no option is taken from its first letters (`--replica` is not `--replicas`: a typo in a CI
    job must not become another option the day one is added that shares its start)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        fail_line(f"{message} (see `{self.prog} --help`)")
        raise SystemExit(EXIT_USAGE)


def built_from_args(model: type, args: argparse.Namespace) -> Any:
    """`model` from the flags `add_arguments` declared for it; a bad value is a usage error."""
    try:
        return build(model, parse_argv_values(args, model))
    except ValueError as error:
        raise UsageError(str(error)) from None


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction such as 0.10, got {text!r}") from None
    if not 0 <= value < 10:
        raise argparse.ArgumentTypeError(f"expected a fraction from 0 to below 10 (such as 0.10 for 10%), got {text!r}")
    return value


def below_one(text: str) -> float:
    """A tolerance for a number where lower is worse: 1 or more would accept a knee of 0."""
    value = fraction(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction above 0 and below 1 (such as 0.4), got {text!r}")
    return value


def add_sut_options(parser: argparse.ArgumentParser) -> None:
    """`--sut` and `--profile`, read back with `built_from_args(SutChoice, args)`."""
    add_arguments(parser.add_argument, SutChoice)


def add_public_key(parser: argparse.ArgumentParser) -> None:
    """`verify`'s and the readers' `--key`: one option, so a key checks a signature the same way in each."""
    parser.add_argument(
        "--key",
        "--pubkey",
        metavar="PUBLIC.pem",
        help="Ed25519 public key the provenance's signature must verify with, the pair of `run --key` "
        "(default: the signature is not checked)",
    )


def add_reading_options(parser: argparse.ArgumentParser) -> None:
    """What `report`, `compare` and `history` take to read a bundle: each verifies it first,
    as `verify` does, and refuses one that does not verify unless told to show it."""
    parser.add_argument(
        "--allow-unverified",
        action="store_true",
        help="show a bundle that does not verify (an edited file, no manifest), marked NOT verified with the "
        "reason (default: refuse it, exit 2, naming what differs)",
    )
    add_public_key(parser)


def reading_policy(args: argparse.Namespace) -> ReadingPolicy:
    """The one verification `report`, `compare` and `history` run before they show a bundle."""
    public_key = load_public_key(Path(args.key)) if args.key else None
    return ReadingPolicy(allow_unverified=args.allow_unverified, public_key=public_key)


def show_standing(console: ConsoleListener, verified: bool, line: str) -> None:
    """A bundle's verification above what is shown of it; NOT verified in bold red on a terminal."""
    console.out.print(line, style=None if verified else "bold red", markup=False, soft_wrap=True)
