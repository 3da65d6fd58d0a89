"""Check and scenario results, and the `results.json` schema a release gate reads.

A check says what was expected and what was observed, in words a person can compare,
plus a detail line. `unsupported` is reserved for capabilities the SUT's profile declares
it lacks; the run still fails on it unless the user allows unsupported checks.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

SCHEMA = "dd-accept/results/v1"
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
class ScenarioResult:
    name: str
    checks: list[CheckResult] = field(default_factory=list)
    started: float | None = None
    ended: float | None = None
    error: str | None = None  # the scenario could not be judged (environment), not a failed check

    def add(self, check: CheckResult) -> CheckResult:
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
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ScenarioResult:
        return cls(
            name=data["name"],
            checks=[CheckResult(**check) for check in data["checks"]],
            started=data.get("started"),
            ended=data.get("ended"),
            error=data.get("error"),
        )


def run_verdict(scenarios: list[ScenarioResult], allow_unsupported: bool) -> Verdict:
    if not scenarios:
        return "fail"
    return "pass" if all(s.verdict(allow_unsupported) == "pass" for s in scenarios) else "fail"


def write_results(
    path: Path, scenarios: list[ScenarioResult], sut: dict[str, Any], allow_unsupported: bool
) -> dict[str, Any]:
    document = {
        "schema": SCHEMA,
        "verdict": run_verdict(scenarios, allow_unsupported),
        "allow_unsupported": allow_unsupported,
        "sut": sut,
        "scenarios": [s.to_json(allow_unsupported) for s in sorted(scenarios, key=lambda s: s.name)],
    }
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(document, indent=2) + "\n")
    temporary.replace(path)
    return document
