"""`dd-accept gate`: run what a gate file asks, judge the thresholds, compare two SUTs.

Each SUT gets its own complete, verifiable bundle (`<out>/candidate`, and `<out>/baseline`
when a baseline is given); the gate's own verdict, threshold checks and the comparison are
written beside them (`gate.json`, `gate.md`, `comparison.md`, `comparison.html`), never
into a bundle, so every bundle still verifies on its own. The exit status is the
candidate's: 0 the gate passes, 1 it does not, 2 the run could not be judged.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.table import Table

from dd_accept.base.errors import EXIT_CHECK_FAILED, EXIT_PASS, EXIT_USAGE, UsageError
from dd_accept.base.results import CheckResult, load_results
from dd_accept.harness.console import ConsoleListener
from dd_accept.harness.gate_file import GateFile
from dd_accept.harness.runner import RunRequest, prepare_out, run
from dd_accept.reports import compare
from dd_accept.sut.spec import SutSpec

SCHEMA = "dd-accept/gate/v1"


def _all_checks(results: dict[str, Any]) -> list[dict[str, Any]]:
    return [check for scenario in results.get("scenarios", []) for check in scenario.get("checks", [])]


def _metric_values(results: dict[str, Any], name: str) -> list[tuple[str, float]]:
    return [(c["id"], c["metrics"][name]) for c in _all_checks(results) if name in c.get("metrics", {})]


def _threshold(check_id: str, results: dict[str, Any], metric: str, limit: float, unit: str) -> CheckResult:
    values = _metric_values(results, metric)
    worst = max(values, key=lambda item: item[1]) if values else None
    expected = f"{metric} ≤ {limit:g}{unit}"
    if worst is None:
        return CheckResult.judge(check_id, False, expected, f"{metric} was not measured (did its scenario run?)")
    observed = f"{worst[1]:.4g}{unit} (worst, in {worst[0]})"
    return CheckResult.judge(check_id, worst[1] <= limit, expected, observed, metrics={metric: worst[1]})


def judge(gate: GateFile, results: dict[str, Any]) -> list[CheckResult]:
    """The gate's own checks on one bundle's results: verdicts, then each threshold."""
    allowed = set(gate.gate.allow_unsupported)
    broken = [
        c["id"]
        for c in _all_checks(results)
        if c["verdict"] != "pass" and not (c["verdict"] == "unsupported" and c["id"] in allowed)
    ]
    errors = [f"{s['name']}: {s['error']}" for s in results.get("scenarios", []) if s.get("error")]
    ran = {s["name"] for s in results.get("scenarios", [])}
    missing = [name for name in gate.scenarios() if name not in ran]
    expected = "every check passes" + (f" (may be unsupported: {', '.join(sorted(allowed))})" if allowed else "")
    problems = [f"not passing: {', '.join(broken)}"] if broken else []
    problems += [f"not judged: {'; '.join(errors)}"] if errors else []
    problems += [f"did not run: {', '.join(missing)}"] if missing else []
    count = len(_all_checks(results))
    checks = [CheckResult.judge("gate.checks", not problems, expected, "; ".join(problems) or f"{count} checks pass")]
    limits = gate.thresholds
    if limits.max_error_rate is not None:
        checks.append(_threshold("gate.max_error_rate", results, "client_error_rate", limits.max_error_rate, ""))
    if limits.max_ttft_p99_s is not None:
        checks.append(_threshold("gate.max_ttft_p99", results, "ttft_p99_s", limits.max_ttft_p99_s, " s"))
    return checks


def _request(gate: GateFile, sut: str, out: Path, sign_key: Path | None):

    return RunRequest(
        scenario=",".join(gate.scenarios()),
        sut=sut,
        profile=gate.gate.profile,
        out=out,
        overload=gate.overload(),
        drain=gate.drain(),
        cluster=gate.cluster_options(),
        backend=gate.backend_options(),
        # Bundles keep the strict verdict; the gate itself allows only the checks its file names.
        allow_unsupported=False,
        seed=gate.options.seed,
        sign_key=sign_key,
        parallel=gate.options.parallel,
    )


def _markdown(gate_name: str, verdict: str, checks: list[CheckResult], bundles: dict[str, str]) -> str:
    lines = [f"## dd-accept gate `{gate_name}`: **{verdict.upper()}**", ""]
    lines += [f"- {role}: `{name}/`" for role, name in bundles.items()]
    lines += ["", "| gate check | verdict | expected | observed |", "|---|---|---|---|"]
    for check in checks:
        lines.append(f"| `{check.id}` | {check.verdict} | {check.expected} | {check.observed.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def run_gate(gate: GateFile, suts: list[str], out: Path, console: ConsoleListener, sign_key: Path | None) -> int:

    roles = dict(zip(("baseline", "candidate") if len(suts) == 2 else ("candidate",), suts, strict=True))
    out = prepare_out(out)
    codes: dict[str, int] = {}
    try:
        for role, sut in roles.items():
            console.on_step(f"gate {gate.gate.name}: {role} {sut}")
            codes[role] = run(_request(gate, sut, out / role, sign_key), console)
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)  # a gate that did not finish leaves nothing half-written
        raise
    candidate = load_results(out / "candidate" / "results.json")
    checks = judge(gate, candidate)
    verdict = "pass" if all(c.verdict == "pass" for c in checks) else "fail"
    document: dict[str, Any] = {
        "schema": SCHEMA,
        "gate": gate.gate.name,
        "verdict": verdict,
        "time": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "bundles": {role: role for role in roles},
        "run_exit_status": codes,
        "checks": [asdict(check) for check in checks],
    }
    if "baseline" in roles:
        baseline = load_results(out / "baseline" / "results.json")
        comparison = compare.compare(baseline, candidate)
        (out / "comparison.md").write_text(compare.to_markdown(comparison))
        (out / "comparison.html").write_text(compare.to_html(comparison))
        document["comparison"] = {
            "headline": comparison.headline(),
            "regressed": [c.id for c in comparison.regressions],
        }
        console.table(compare.to_table(comparison))
    (out / "gate.json").write_text(json.dumps(document, indent=2) + "\n")
    (out / "gate.md").write_text(_markdown(gate.gate.name, verdict, checks, document["bundles"]))
    table = Table(title=f"dd-accept gate {gate.gate.name}: {verdict.upper()}")
    for column in ("gate check", "verdict", "expected", "observed"):
        table.add_column(column, overflow="fold")
    for check in checks:
        colour = "green" if check.verdict == "pass" else "red"
        table.add_row(check.id, f"[{colour}]{check.verdict}[/{colour}]", check.expected, check.observed)
    console.table(table)
    print(f"gate: {out.name}/gate.md, gate.json" + (", comparison.md, comparison.html" if "baseline" in roles else ""))
    if codes.get("candidate") == EXIT_USAGE:
        return EXIT_USAGE
    return EXIT_PASS if verdict == "pass" else EXIT_CHECK_FAILED


def resolve_suts(gate: GateFile, cli_suts: list[str]) -> list[str]:

    suts = cli_suts or list(gate.gate.suts)
    if len(suts) > 2:
        raise UsageError("gate takes one --sut (the candidate) or two (baseline, then candidate)")
    for sut in suts:
        SutSpec.parse(sut)  # a path that is not there, or not a wheel: said before anything starts
    return suts
