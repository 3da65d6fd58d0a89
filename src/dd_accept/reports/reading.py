"""Reading a bundle to show it: verified first, by every command that shows one (`report`,
`compare`, `history`).

A report rendered from an edited `results.json` looks exactly like one rendered from the
run, and a comparison against it is as convincing as a real one. So a reader runs `verify`'s
own checks (every digest, the provenance against the results, the signature when a public
key is given, the audit) before it shows anything, and says the outcome above what it shows.
A bundle that does not verify is not the evidence that was asked for: it is refused in one
line naming the first problem (exit 2, bad input). `--allow-unverified` shows it anyway,
marked NOT verified with that reason, for whoever knows why (results written by hand, a
bundle under repair); nothing it shows then reads as evidence.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from dd_accept.base.errors import UsageError
from dd_accept.base.results import load_results
from dd_accept.reports.archive import opened_bundle
from dd_accept.reports.render import md_code, md_text
from dd_accept.reports.verify import Verification, verify_for_reading


@dataclass(frozen=True, slots=True)
class ReadingPolicy:
    """What the user said about verification: show what does not verify (marked), and the
    public key a signature must verify with (None: a signature is not checked)."""

    allow_unverified: bool = False
    public_key: Any = None


@dataclass(frozen=True, slots=True)
class Shown:
    """A bundle as a reader shows it: its name as given, its results, how it verified."""

    name: str
    results: dict[str, Any]
    verification: Verification

    @property
    def verified(self) -> bool:
        return not self.verification.problems


@contextmanager
def opened_verified(path: Path, what: str, policy: ReadingPolicy) -> Iterator[tuple[Path, Shown]]:
    """The bundle as a directory (an archive unpacked, as `archive.opened_bundle` reads it),
    verified, with its results; refused (UsageError) when it does not verify and the policy
    does not allow that."""
    with opened_bundle(path, what) as directory:
        verification = verify_for_reading(directory, path.name, what, policy.public_key)
        if verification.problems and not policy.allow_unverified:
            raise UsageError(refusal(what, path.name, verification))
        yield directory, Shown(path.name, results_in(directory, path.name, what), verification)


def read_verified(path: Path, what: str, policy: ReadingPolicy) -> Shown:
    with opened_verified(path, what, policy) as (_, shown):
        return shown


def refusal(what: str, name: str, verification: Verification) -> str:
    """One line: which bundle, the first file or link that differs, and the way out."""
    more = len(verification.problems) - 1
    others = f" (and {more} more problem(s): `dd-accept verify {name}` lists them)" if more else ""
    return (
        f"{what}: {name} does not verify: {verification.problems[0]}{others}; "
        "--allow-unverified shows it marked NOT verified"
    )


def results_in(directory: Path, name: str, what: str) -> dict[str, Any]:
    """`results.json` of a bundle already opened, held to its schema."""
    path = directory / "results.json"
    if not path.is_file():
        raise UsageError(f"{what}: {name} holds no results.json")
    return load_results(path, f"{what}: {name}/results.json")


def banner_markdown(shown: Shown, role: str = "") -> str:
    """A quoted first line in Markdown; NOT verified in bold, so a summary never hides it."""
    label = f"{role} {md_code(shown.name)}" if role else md_code(shown.name)
    standing = md_text(shown.verification.standing)
    return f"> {label}: {standing}\n" if shown.verified else f"> **{label}: {standing}**\n"


BANNER_STYLE = {
    True: "border:1px solid #2e7d32;background:#e8f5e9;color:#1b5e20;padding:6px 10px;margin:0 0 1em",
    False: "border:3px solid #c62828;background:#ffebee;color:#b71c1c;font-weight:bold;padding:10px;margin:0 0 1em",
}


def banner_html(shown: Shown, role: str = "") -> str:
    """A block at the top of a page (inline style: every page stays self-contained)."""
    label = f"{role} {shown.name}" if role else shown.name
    kind = "verified" if shown.verified else "not-verified"
    return (
        f'<p class="verification {kind}" style="{BANNER_STYLE[shown.verified]}">'
        f"<code>{escape(label)}</code>: {escape(shown.verification.standing)}</p>"
    )
