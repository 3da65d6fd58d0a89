"""Which checks a run judges: `--check PATTERN` (or `-k`), as pytest's `-k` chooses tests.

A pattern is a check id (`drain.allowance`), a glob over ids (`overload.total.*`,
`*.integrity`) or an id's dotted prefix (`overload.total`, `health.node_loss`). A run
judges the chosen checks only: a scenario none of whose checks is chosen does not run, and
a scenario runs only the phases its chosen checks need (`acceptance.phases.chosen_phases`).
Results name the checks that were chosen, so no reader takes a partial run for a whole one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fnmatch import fnmatchcase


def matches(pattern: str, check_id: str) -> bool:
    return fnmatchcase(check_id, pattern) or check_id.startswith(f"{pattern}.")


def chosen(patterns: Iterable[str], ids: Sequence[str]) -> tuple[str, ...]:
    """The ids any pattern matches, in the order of `ids`."""
    patterns = tuple(patterns)
    return tuple(check_id for check_id in ids if any(matches(p, check_id) for p in patterns))


def unmatched(patterns: Iterable[str], ids: Sequence[str]) -> list[str]:
    """The patterns that match none of `ids`: a typo is a usage error, never an empty run."""
    return [pattern for pattern in patterns if not chosen([pattern], ids)]


def may_choose(patterns: Iterable[str], scenario: str) -> bool:
    """Whether a pattern can match a check of `scenario` (an id is `scenario.name`): what a
    front end that knows no catalog (the pytest plugin) deselects a scenario's test by."""
    return any(fnmatchcase(scenario, p.split(".", 1)[0]) for p in patterns)
