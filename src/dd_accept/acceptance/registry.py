"""Checks register themselves where they are written; the catalog is read from here.

A check is a pure function returning a `CheckResult`. `@check("scenario.name")` records its
id (or ids, for one function that judges several modes) with its scenario, so the catalog
that gate files are validated against, the check table of docs/checks.md and `dd-accept run`'s list
of scenarios are all derived from the functions themselves, not from a hand-kept list. The
wrapper also refuses a result whose id is not one it registered: a check that reports
under a name nobody can select in a gate is a harness fault, found the first time it runs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from dd_accept.base.results import CheckResult


@dataclass(frozen=True, slots=True)
class RegisteredCheck:
    id: str
    function: str  # module.qualname: where the rule is written
    summary: str = ""  # the first sentence of the rule's docstring: what `dd-accept checks` lists

    @property
    def scenario(self) -> str:
        return self.id.split(".", 1)[0]


REGISTRY: dict[str, RegisteredCheck] = {}

F = TypeVar("F", bound=Callable[..., CheckResult])


def first_sentence(docstring: str) -> str:
    """The rule in one line: the docstring's first paragraph up to its first full stop outside
    parentheses (a "(the seed. ...)" aside is part of the sentence)."""
    paragraph = " ".join(docstring.strip().split("\n\n", 1)[0].split())
    depth = 0
    for index, char in enumerate(paragraph):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth <= 0 and char == "." and (index + 1 == len(paragraph) or paragraph[index + 1] == " "):
            return paragraph[:index] + "."
    return paragraph.rstrip(":;, ") + "." if paragraph else ""  # a paragraph that leads into a list


def check(*ids: str) -> Callable[[F], F]:
    if not ids or any(id_.count(".") < 1 for id_ in ids):
        raise ValueError(f"a check id is scenario.name, got {ids!r}")

    def register(function: F) -> F:
        where = f"{function.__module__}.{function.__qualname__}"
        for id_ in ids:
            if id_ in REGISTRY and REGISTRY[id_].function != where:
                raise ValueError(f"check {id_} is registered twice: {REGISTRY[id_].function} and {where}")
            REGISTRY[id_] = RegisteredCheck(id_, where, first_sentence(function.__doc__ or ""))

        @functools.wraps(function)
        def judged(*args: Any, **kwargs: Any) -> CheckResult:
            result = function(*args, **kwargs)
            if result.id not in ids:
                raise AssertionError(f"{where} reported {result.id!r}; it is registered as {', '.join(ids)}")
            return result

        judged.check_id = ids[0]  # type: ignore[attr-defined]
        judged.check_ids = ids  # type: ignore[attr-defined]
        return judged  # type: ignore[return-value]

    return register
