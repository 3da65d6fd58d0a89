"""Check and scenario results, and the `results.json` schema a release gate reads.

A check says what was expected and what was observed, in words a person can compare,
plus a detail line. `unsupported` is reserved for capabilities the SUT's profile declares
it lacks; the run still fails on it unless the user allows unsupported checks.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from dd_accept.base import documents
from dd_accept.base.documents import SCHEMA_FILES
from dd_accept.base.errors import UsageError

SCHEMA = "dd-accept/results/v6"  # published as docs/schema/results-v6.json
# Every version dd-accept reads, by the `schema` a document names: bundles written before
# `cluster` existed (v1) stay verifiable; a v1 document never carries v2's fields.
READABLE_SCHEMAS = {
    version: SCHEMA_FILES[version] for version in (*(f"dd-accept/results/v{n}" for n in range(1, 6)), SCHEMA)
}
Verdict = Literal["pass", "fail", "unsupported"]


@dataclass(frozen=True, slots=True)
class CheckResult:
    id: str
    verdict: Verdict
    expected: str
    observed: str
    detail: str = ""
    # Key numbers (name → value) a release gate thresholds and a comparison puts side by side.
    metrics: dict[str, float] = field(default_factory=dict)

    @classmethod
    def judge(
        cls,
        check_id: str,
        ok: bool,
        expected: str,
        observed: str,
        detail: str = "",
        metrics: dict[str, float] | None = None,
    ) -> CheckResult:
        return cls(check_id, "pass" if ok else "fail", expected, observed, detail, dict(metrics or {}))

    @classmethod
    def unsupported(cls, check_id: str, expected: str, detail: str) -> CheckResult:
        return cls(check_id, "unsupported", expected, "capability not present in the SUT", detail)


@dataclass(slots=True)
class PhaseRecord:
    """When one phase of a scenario ran: the timeline a reader lines the checks up against."""

    kind: str
    title: str
    started: float
    ended: float | None = None
    outcome: str = "done"  # or "interrupted": it raised, and the stop phases ran next
    # The checks it judged, by id: a check's time (a JUnit testcase's) runs from the previous
    # phase that judged any to the end of this one, the phases that gathered its evidence.
    judged: list[str] = field(default_factory=list)


@dataclass(slots=True)
class ScenarioResult:
    name: str
    checks: list[CheckResult] = field(default_factory=list)
    started: float | None = None
    ended: float | None = None
    error: str | None = None  # the scenario could not be judged (environment), not a failed check
    phases: list[PhaseRecord] = field(default_factory=list)
    # What the load clients measured (acceptance.serving): {"metrics": {...}, "phases": [...]}
    serving: dict[str, Any] | None = None
    # The checks `--check` chose (base.check_selection); None: every check. Only these are
    # kept: a check judged on the way to them is not what the user asked about.
    selected: tuple[str, ...] | None = None

    def add(self, check: CheckResult) -> CheckResult:
        if self.selected is None or check.id in self.selected:
            self.checks.append(check)
        return check

    def verdict(self, allow_unsupported: bool = False) -> Verdict:
        if self.error is not None:
            return "fail"
        accepted = {"pass", "unsupported"} if allow_unsupported else {"pass"}
        return "pass" if self.checks and all(c.verdict in accepted for c in self.checks) else "fail"

    def failed(self, allow_unsupported: bool = False) -> list[CheckResult]:
        accepted = {"pass", "unsupported"} if allow_unsupported else {"pass"}
        return [c for c in self.checks if c.verdict not in accepted]

    def to_json(self, allow_unsupported: bool = False) -> dict[str, Any]:
        return {
            "name": self.name,
            "verdict": self.verdict(allow_unsupported),
            "started": self.started,
            "ended": self.ended,
            "error": self.error,
            "checks": [asdict(check) for check in self.checks],
            "phases": [asdict(phase) for phase in self.phases],
            **({"serving": self.serving} if self.serving is not None else {}),
            **({"selected": list(self.selected)} if self.selected is not None else {}),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ScenarioResult:
        return cls(
            name=data["name"],
            checks=[CheckResult(**check) for check in data["checks"]],
            started=data.get("started"),
            ended=data.get("ended"),
            error=data.get("error"),
            phases=[PhaseRecord(**phase) for phase in data.get("phases", [])],
            serving=data.get("serving"),
            selected=tuple(data["selected"]) if "selected" in data else None,
        )


def run_verdict(scenarios: list[ScenarioResult], allow_unsupported: bool) -> Verdict:
    if not scenarios:
        return "fail"
    return "pass" if all(s.verdict(allow_unsupported) == "pass" for s in scenarios) else "fail"


def write_results(
    path: Path,
    scenarios: list[ScenarioResult],
    sut: dict[str, Any],
    allow_unsupported: bool,
    cluster: dict[str, str] | None = None,
) -> dict[str, Any]:
    document: dict[str, Any] = {
        "schema": SCHEMA,
        "verdict": run_verdict(scenarios, allow_unsupported),
        "allow_unsupported": allow_unsupported,
        "sut": sut,
        **({"cluster": cluster} if cluster else {}),
        "scenarios": [s.to_json(allow_unsupported) for s in sorted(scenarios, key=lambda s: s.name)],
    }
    problem = schema_problem(document)
    if problem:  # the writer and the published schema disagree: a fault of dd-accept itself
        raise AssertionError(f"results.json would not follow {SCHEMA}: {problem}")
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(document, indent=2) + "\n")
    temporary.replace(path)
    return document


def schema_of(document: Any) -> str:
    """The results schema a document is held to: the one it names, if dd-accept reads it."""
    named = document.get("schema") if isinstance(document, dict) else None
    return named if isinstance(named, str) and named in READABLE_SCHEMAS else SCHEMA


def schema_problem(document: Any) -> str | None:
    """Where `document` departs from the results schema it names (the current one when it
    names none dd-accept reads): the first place, or None."""
    return documents.problem(document, schema_of(document))


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _finite(value: Any) -> bool:
    """Every number in a document is one a float holds (an integer like 10**400 is not)."""
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return math.isfinite(float(value))
        except OverflowError:
            return False
    return True


def parse_results(text: str, name: str = "results.json") -> dict[str, Any]:
    """A results document a reader can trust the shape of: every reader (verify, compare,
    report, gates) goes through here, so a hand-edited or truncated file is one clear usage
    error, never a KeyError deep in a report."""
    try:
        document = json.loads(text, parse_constant=_not_json)
    except (ValueError, RecursionError):
        raise UsageError(f"{name} is not JSON (NaN and Infinity are not JSON either)") from None
    if not _finite(document):
        raise UsageError(f"{name} holds a number too large to be a measurement")
    problem = schema_problem(document)
    if problem:
        raise UsageError(f"{name} does not follow {schema_of(document)} ({problem})")
    return document


def load_results(path: Path, name: str = "results.json") -> dict[str, Any]:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        raise UsageError(f"{name}: cannot read it") from None
    return parse_results(text, name)


def all_checks(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Every check of a results document, scenario by scenario."""
    return [check for scenario in results.get("scenarios", []) for check in scenario.get("checks", [])]


def run_span(results: dict[str, Any]) -> tuple[float | None, float | None]:
    """(when the first scenario started, when the last ended), Unix time; None where no
    scenario recorded one. What `verify`, the report and `history` say of when a run ran."""
    scenarios = results.get("scenarios", [])
    starts = [s["started"] for s in scenarios if isinstance(s.get("started"), int | float)]
    ends = [s["ended"] for s in scenarios if isinstance(s.get("ended"), int | float)]
    return (min(starts) if starts else None, max(ends) if ends else None)


def where_judged(results: dict[str, Any]) -> str:
    """Where a run's checks ran, in words ("Slurm 24.11, cgroup"; "an existing cluster")."""
    cluster = results.get("cluster") or {}
    if cluster.get("kind") == "existing":
        return "an existing cluster"
    if cluster.get("kind") == "docker":
        return f"Slurm {cluster.get('slurm_release', '?')}, {cluster.get('proctrack', '?')}"
    return ""


def chosen_checks(results: dict[str, Any]) -> dict[str, list[str]]:
    """The scenarios a run judged only some checks of (`--check`), each with those it chose:
    empty for a whole run (and for every bundle older than results v6)."""
    return {s["name"]: list(s["selected"]) for s in results.get("scenarios", []) if s.get("selected")}


def partial_note(results: dict[str, Any]) -> str:
    """The line every page showing a partial run carries, so none is taken for a whole run
    ("" for a whole run)."""
    chosen = chosen_checks(results)
    if not chosen:
        return ""
    named = "; ".join(f"{scenario}: {', '.join(ids)}" for scenario, ids in chosen.items())
    return f"a partial run: only the checks chosen with --check were judged ({named})"


def not_chosen(results: dict[str, Any], check_ids: Iterable[str]) -> set[str]:
    """Of `check_ids`, those a partial run of their scenario did not choose (not judged: never
    "removed" or "not measured")."""
    chosen = chosen_checks(results)
    return {c for c in check_ids if c.split(".", 1)[0] in chosen and c not in chosen[c.split(".", 1)[0]]}
