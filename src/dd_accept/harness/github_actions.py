"""In a GitHub Actions job, a run speaks the job's own language: each check that did not pass
is an `::error` annotation (on the run's summary page, not only in the log), and the run's
table is appended to the job's step summary. Outside Actions (no `GITHUB_ACTIONS=true`) this
does nothing. Annotations go to stderr, which the runner reads as it reads stdout, so
`--json` keeps stdout for its document alone.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from dd_accept.reports import render


def _data(text: str) -> str:
    """A workflow command's message, escaped as the runner unescapes it."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def annotate(results: dict[str, Any], bundle: str) -> None:
    """`::error` for each check that did not pass and each scenario not judged; the results
    as markdown in `$GITHUB_STEP_SUMMARY`. Called once a run's bundle is written."""
    if os.environ.get("GITHUB_ACTIONS") != "true":
        return
    for scenario in results.get("scenarios", []):
        if scenario.get("error"):
            title = _property(f"dd-accept: {scenario['name']} not judged")
            print(f"::error title={title}::{_data(scenario['error'])}", file=sys.stderr)
        for check in scenario.get("checks", []):
            if check.get("verdict") != "pass":
                title = _property(f"dd-accept {check['verdict']}: {check['id']}")
                message = f"expected {check['expected']}; observed {check['observed']}"
                print(f"::error title={title}::{_data(message)}", file=sys.stderr)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary and Path(summary).parent.is_dir():
        with open(summary, "a", encoding="utf-8") as handle:
            handle.write(f"### dd-accept `{bundle}`\n\n" + render.markdown(results) + "\n")
