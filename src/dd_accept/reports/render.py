"""Reports rendered from `results.json` alone: Markdown (CI step summaries, PR comments) and
JUnit XML (one testcase per check, the schema CI systems read)."""

from __future__ import annotations

from typing import Any
from xml.etree import ElementTree


def markdown(results: dict[str, Any]) -> str:
    verdict = results["verdict"].upper()
    sut = results.get("sut", {})
    lines = [f"## dd-accept: {verdict}", "", f"SUT `{sut.get('spec', '?')}` (profile `{sut.get('profile', '?')}`)", ""]
    for wheel in sut.get("wheels", []):
        lines.append(f"- `{wheel['file']}` sha256 `{wheel['sha256']}`")
    lines += ["", "| check | verdict | expected | observed |", "|---|---|---|---|"]
    for scenario in results["scenarios"]:
        if scenario.get("error"):
            lines.append(f"| {scenario['name']} | **error** | judged | {_cell(scenario['error'])} |")
        for check in scenario["checks"]:
            mark = {"pass": "pass", "fail": "**fail**"}.get(check["verdict"], f"*{check['verdict']}*")
            lines.append(f"| `{check['id']}` | {mark} | {_cell(check['expected'])} | {_cell(check['observed'])} |")
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def junit(results: dict[str, Any]) -> str:
    checks = [(s, c) for s in results["scenarios"] for c in s["checks"]]
    errors = [s for s in results["scenarios"] if s.get("error")]
    root = ElementTree.Element("testsuites", name="dd-accept", tests=str(len(checks) + len(errors)))
    for scenario in results["scenarios"]:
        cases = scenario["checks"]
        failed = sum(1 for c in cases if c["verdict"] == "fail")
        skipped = sum(1 for c in cases if c["verdict"] == "unsupported")
        suite = ElementTree.SubElement(
            root,
            "testsuite",
            name=scenario["name"],
            tests=str(len(cases) + (1 if scenario.get("error") else 0)),
            failures=str(failed),
            errors="1" if scenario.get("error") else "0",
            skipped=str(skipped),
        )
        if scenario.get("error"):
            case = ElementTree.SubElement(suite, "testcase", classname=scenario["name"], name="scenario")
            ElementTree.SubElement(case, "error", message=scenario["error"][:500])
        for check in cases:
            case = ElementTree.SubElement(suite, "testcase", classname=scenario["name"], name=check["id"])
            message = f"expected {check['expected']}; observed {check['observed']}"
            if check["verdict"] == "fail":
                ElementTree.SubElement(case, "failure", message=message[:1000]).text = check.get("detail", "")
            elif check["verdict"] == "unsupported":
                ElementTree.SubElement(case, "skipped", message=check.get("detail", "")[:1000])
            ElementTree.SubElement(case, "system-out").text = message
    ElementTree.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ElementTree.tostring(root, encoding="unicode") + "\n"
