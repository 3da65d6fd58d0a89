"""Reports rendered from `results.json` alone: Markdown (CI step summaries, PR comments) and
JUnit XML (one testcase per check, the schema CI systems read)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any
from xml.etree import ElementTree

from dd_accept.base.results import all_checks, partial_note
from dd_accept.base.serving_names import SUMMARY_COLUMNS, serving_rows, shown

# Characters XML 1.0 does not allow at all (most C0 controls, lone surrogates, U+FFFE/F):
# ElementTree writes them as they are, and the file is then not well-formed.
NOT_XML = re.compile("[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!<>|~])")


def xml_text(value: Any) -> str:
    return NOT_XML.sub("\ufffd", str(value))


def _one_line(value: Any) -> str:
    """One line without control characters: every line break Unicode has becomes a space."""
    return CONTROL.sub(" ", " ".join(str(value).splitlines()))


def md_text(value: Any) -> str:
    """Text from results in a Markdown table cell: markup escaped, controls gone, one line."""
    return MARKDOWN_SPECIAL.sub(r"\\\1", _one_line(value))


def md_code(value: Any) -> str:
    """Text shown as `code`: a backtick inside would end the span, so it cannot be there."""
    return "`" + _one_line(value).replace("`", "'") + "`"


def markdown(results: dict[str, Any]) -> str:
    verdict = results["verdict"].upper()
    sut = results.get("sut", {})
    spec, profile = md_code(sut.get("spec", "?")), md_code(sut.get("profile", "?"))
    lines = [f"## dd-accept: {md_text(verdict)}", "", f"SUT {spec} (profile {profile})", ""]
    if partial_note(results):
        lines += [f"**{md_text(partial_note(results))}**", ""]
    for wheel in sut.get("wheels", []):
        lines.append(f"- {md_code(wheel['file'])} sha256 {md_code(wheel['sha256'])}")
    lines += ["", "| check | verdict | expected | observed |", "|---|---|---|---|"]
    for scenario in results["scenarios"]:
        if scenario.get("error"):
            lines.append(f"| {md_text(scenario['name'])} | **error** | judged | {md_text(scenario['error'])} |")
        for check in scenario["checks"]:
            mark = {"pass": "pass", "fail": "**fail**"}.get(check["verdict"], f"*{md_text(check['verdict'])}*")
            cells = f"{md_text(check['expected'])} | {md_text(check['observed'])}"
            lines.append(f"| {md_code(check['id'])} | {mark} | {cells} |")
    return "\n".join(lines + serving_markdown(results)) + "\n"


def serving_markdown(results: dict[str, Any]) -> list[str]:
    """The serving metrics of each scenario and phase (vLLM bench serve's names, units in the
    headers; every metric is in results.json)."""
    rows = serving_rows(results)
    if not rows:
        return []
    lines = ["", "### Serving metrics", "", "| scenario / phase | " + " | ".join(h for _, h in SUMMARY_COLUMNS) + " |"]
    lines.append("|---|" + "---:|" * len(SUMMARY_COLUMNS))
    for label, metrics in rows:
        cells = " | ".join(shown(name, metrics.get(name)) for name, _ in SUMMARY_COLUMNS)
        lines.append(f"| {md_text(label)} | {cells} |")
    return lines


def junit_properties(results: dict[str, Any]) -> list[tuple[str, str]]:
    """What a CI system shows beside the cases: which SUT (its spec and every wheel's
    digest) was judged where (cluster kind, Slurm release, process tracking)."""
    sut, cluster = results.get("sut", {}), results.get("cluster", {})
    properties = [("dd-accept.sut", sut["spec"])] if sut.get("spec") else []
    if sut.get("wheelhouse_digest"):
        properties.append(("dd-accept.wheelhouse_sha256", sut["wheelhouse_digest"]))
    properties += [(f"dd-accept.wheel.{w['file']}", f"sha256:{w['sha256']}") for w in sut.get("wheels", [])]
    properties += [(f"dd-accept.cluster.{key}", str(value)) for key, value in cluster.items()]
    return properties


def _timing(scenario: dict[str, Any]) -> dict[str, str]:
    started, ended = scenario.get("started"), scenario.get("ended")
    if not isinstance(started, int | float):
        return {}
    try:
        stamp = datetime.fromtimestamp(started, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    except (OverflowError, OSError, ValueError):  # a time no calendar holds: said by omission
        return {}
    timing = {"timestamp": stamp}
    if isinstance(ended, int | float) and ended >= started:
        timing["time"] = f"{ended - started:.3f}"
    return timing


def check_seconds(scenario: dict[str, Any]) -> dict[str, float]:
    """Check id -> the seconds its evidence took: from the end of the previous phase that
    judged a check (the scenario's start for the first) to the end of the phase that judged
    it. Checks judged together share their span; a check no phase names (a v4 bundle) has none."""
    seconds: dict[str, float] = {}
    since = scenario.get("started")
    for phase in scenario.get("phases", []):
        judged, ended = phase.get("judged") or [], phase.get("ended")
        if not judged or not isinstance(ended, int | float):
            continue
        start = since if isinstance(since, int | float) and since <= ended else phase.get("started", ended)
        for check_id in judged:
            seconds.setdefault(check_id, max(0.0, ended - start))
        since = ended
    return seconds


def junit(results: dict[str, Any]) -> str:
    errors = [s for s in results["scenarios"] if s.get("error")]
    root = ElementTree.Element("testsuites", name="dd-accept", tests=str(len(all_checks(results)) + len(errors)))
    properties = junit_properties(results)
    for scenario in results["scenarios"]:
        cases = scenario["checks"]
        failed = sum(1 for c in cases if c["verdict"] == "fail")
        skipped = sum(1 for c in cases if c["verdict"] == "unsupported")
        suite = ElementTree.SubElement(
            root,
            "testsuite",
            name=xml_text(scenario["name"]),
            tests=str(len(cases) + (1 if scenario.get("error") else 0)),
            failures=str(failed),
            errors="1" if scenario.get("error") else "0",
            skipped=str(skipped),
            **_timing(scenario),
        )
        if properties:
            listed = ElementTree.SubElement(suite, "properties")
            for name, value in properties:
                ElementTree.SubElement(listed, "property", name=xml_text(name), value=xml_text(value))
        if scenario.get("error"):
            case = ElementTree.SubElement(suite, "testcase", classname=xml_text(scenario["name"]), name="scenario")
            ElementTree.SubElement(case, "error", message=xml_text(scenario["error"][:500]))
        seconds = check_seconds(scenario)
        for check in cases:
            name, took = xml_text(check["id"]), seconds.get(check["id"])
            timing = {} if took is None else {"time": f"{took:.3f}"}
            case = ElementTree.SubElement(suite, "testcase", classname=xml_text(scenario["name"]), name=name, **timing)
            message = xml_text(f"expected {check['expected']}; observed {check['observed']}")
            if check["verdict"] == "fail":
                ElementTree.SubElement(case, "failure", message=message[:1000]).text = xml_text(check.get("detail", ""))
            elif check["verdict"] == "unsupported":
                ElementTree.SubElement(case, "skipped", message=xml_text(check.get("detail", ""))[:1000])
            ElementTree.SubElement(case, "system-out").text = message
    ElementTree.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ElementTree.tostring(root, encoding="unicode") + "\n"
