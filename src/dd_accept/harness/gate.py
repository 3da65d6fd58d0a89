"""`dd-accept gate`: run what a gate file asks, judge the thresholds, compare two SUTs.

Each SUT gets its own complete, verifiable bundle (`<out>/candidate`, and `<out>/baseline`
when a baseline is given); the gate's own verdict, threshold checks and the comparison are
written beside them (`gate.json`, `gate.md`, `gate.html`, `comparison.md`, `comparison.html`), never
into a bundle, so every bundle still verifies on its own. The exit status is the
candidate's: 0 the gate passes, 1 it does not, 2 the run could not be judged.

A gate over several Slurm releases (`[cluster] slurm = [...]`) runs everything once per
release, into `<out>/slurm-<release>/`, judges each, and adds the matrix (check by release:
verdict and key numbers) to `gate.json`, `gate.md` and `gate.html`; it passes only when every
release does.
A release this machine cannot run (its images cannot be built, its process tracking needs
what the host lacks) is marked *not run* with the reason, never *pass*: the others are still
run, judged and written, the gate fails, and it exits 2 (the machine's fault, not the SUT's).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.table import Table

from dd_accept.acceptance.request import RunRequest
from dd_accept.base.documents import checked
from dd_accept.base.errors import (
    EXIT_CHECK_FAILED,
    EXIT_PASS,
    EXIT_USAGE,
    DDAcceptError,
    EnvironmentProblem,
    UsageError,
)
from dd_accept.base.regressions import REGRESSION_METRICS
from dd_accept.base.results import CheckResult, all_checks, load_results
from dd_accept.harness.console import ConsoleListener
from dd_accept.harness.gate_file import GateFile
from dd_accept.harness.gate_metrics import judge_goodput, judge_metric
from dd_accept.harness.gate_rounds import ROLES, judge_round_regressions, later_rounds, round_name
from dd_accept.harness.runner import as_given, parse_sut, prepare_out, run
from dd_accept.reports import compare, compare_render, gate_page

SCHEMA = "dd-accept/gate/v1"


def _metric_values(results: dict[str, Any], name: str) -> list[tuple[str, float]]:
    return [(c["id"], c["metrics"][name]) for c in all_checks(results) if name in c.get("metrics", {})]


def _threshold(check_id: str, results: dict[str, Any], metric: str, limit: float, unit: str) -> CheckResult:
    values = _metric_values(results, metric)
    worst = max(values, key=lambda item: item[1]) if values else None
    expected = f"{metric} ≤ {limit:g}{unit}"
    if worst is None:
        return CheckResult.judge(check_id, False, expected, f"{metric} was not measured (did its scenario run?)")
    observed = f"{worst[1]:.4g}{unit} (worst, in {worst[0]})"
    return CheckResult.judge(check_id, worst[1] <= limit, expected, observed, metrics={metric: worst[1]})


def judge(
    gate: GateFile, results: dict[str, Any], bundle: Path | None = None, baseline: dict[str, Any] | None = None
) -> list[CheckResult]:
    """The gate's own checks on one bundle's results: verdicts, each threshold, each serving
    metric's demand (against the baseline's where it says so) and goodput under the SLOs
    (from the bundle's client events)."""
    allowed = set(gate.gate.allow_unsupported)
    broken = [
        c["id"]
        for c in all_checks(results)
        if c["verdict"] != "pass" and not (c["verdict"] == "unsupported" and c["id"] in allowed)
    ]
    errors = [f"{s['name']}: {s['error']}" for s in results.get("scenarios", []) if s.get("error")]
    ran = {s["name"] for s in results.get("scenarios", [])}
    missing = [name for name in gate.scenarios() if name not in ran]
    expected = "every check passes" + (f" (may be unsupported: {', '.join(sorted(allowed))})" if allowed else "")
    problems = [f"not passing: {', '.join(broken)}"] if broken else []
    problems += [f"not judged: {'; '.join(errors)}"] if errors else []
    problems += [f"did not run: {', '.join(missing)}"] if missing else []
    count = len(all_checks(results))
    checks = [CheckResult.judge("gate.checks", not problems, expected, "; ".join(problems) or f"{count} checks pass")]
    limits = gate.thresholds
    if limits.max_error_rate is not None:
        checks.append(_threshold("gate.max_error_rate", results, "client_error_rate", limits.max_error_rate, ""))
    checks += [judge_metric(demand, results, baseline) for demand in gate.metrics]
    if baseline is not None:
        checks += judge_regressions(baseline, results, limits.capacity_tolerance)
    if gate.goodput is not None and bundle is not None:
        checks.append(judge_goodput(gate.goodput, bundle, results))
    return checks


def judge_regressions(
    baseline: dict[str, Any], candidate: dict[str, Any], tolerance: float | None = None
) -> list[CheckResult]:
    """With a baseline: each declared number the baseline measured (base.regressions: the
    capacity knee, the proxy's CPU per chunk, a chunk's delay at light load) is a gate check of
    its own, `gate.regression.CHECK.METRIC`, failed when the candidate is worse beyond the
    tolerance measured noise allows, or did not measure it, even when each release passed
    its own run. Numbers the two runs measured on different ladders are not judged. A gate's
    `capacity_tolerance` replaces the metrics' own fractions."""
    before, after = compare.checks_by_id(baseline), compare.checks_by_id(candidate)
    worse, skipped = compare.metric_regressions(before, after, tolerance)
    flagged = {(r.declared.check, r.declared.metric): r for r in worse}
    found = []
    for declared in REGRESSION_METRICS:
        was = before.get(declared.check, {}).get("metrics", {}).get(declared.metric)
        if was is None or any(note.startswith(f"{declared.check} {declared.metric}:") for note in skipped):
            continue
        now = after.get(declared.check, {}).get("metrics", {}).get(declared.metric)
        regression = flagged.get((declared.check, declared.metric))
        bound = "at least" if declared.worse == "lower" else "at most"
        found.append(
            CheckResult.judge(
                f"gate.regression.{declared.check}.{declared.metric}",
                regression is None,
                f"{declared.metric} {bound} {declared.bound(was, tolerance):.4g} {declared.unit} (the baseline's "
                f"{was:.4g}, tolerance {declared.tolerance if tolerance is None else tolerance:.0%}"
                + (f" + {declared.margin:g}" if declared.margin else "")
                + ")",
                f"candidate {now:.4g} {declared.unit}" if now is not None else "not measured in the candidate",
                regression.describe() if regression is not None else "",
                {"baseline": was} | ({"candidate": now} if now is not None else {}),
            )
        )
    return found


def _request(gate: GateFile, sut: str, out: Path, sign_key: Path | None, release: str | None = None):

    return RunRequest(
        scenario=",".join(gate.scenarios()),
        sut=sut,
        profile=gate.gate.profile,
        out=out,
        options=gate.scenario_options(),
        drain=gate.drain(),
        cluster=gate.cluster_options(release),
        backend=gate.backend_options(),
        # Bundles keep the strict verdict (general options never allow unsupported checks from a
        # gate file); the gate itself allows only the checks its file names.
        general=gate.general(),
        sign_key=sign_key,
        parallel=gate.runner().parallel,
    )


def _markdown(gate_name: str, verdict: str, checks: list[CheckResult], bundles: dict[str, str]) -> str:
    lines = [f"## dd-accept gate `{gate_name}`: **{verdict.upper()}**", ""]
    lines += [f"- {role}: `{name}/`" for role, name in bundles.items()]
    lines += ["", "| gate check | verdict | expected | observed |", "|---|---|---|---|"]
    for check in checks:
        lines.append(f"| `{check.id}` | {check.verdict} | {check.expected} | {check.observed.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def _key_numbers(cell: dict[str, Any], most: int = 2) -> str:
    return ", ".join(f"{name} {value:g}" for name, value in list(cell.get("metrics", {}).items())[:most])


def matrix(candidates: dict[str, dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """check id -> release -> {verdict, metrics}: one row per check any release reported, in
    the order they are first reported; a check a release did not report is absent from it."""
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    for release, results in candidates.items():
        for check in all_checks(results):
            rows.setdefault(check["id"], {})[release] = {"verdict": check["verdict"], "metrics": check["metrics"]}
    return rows


def _matrix_markdown(
    releases: list[str], rows: dict[str, dict[str, dict[str, Any]]], not_run: dict[str, str] | None = None
) -> str:
    lines = ["", "### Checks by Slurm release", ""]
    if not_run:
        lines += [f"- Slurm {release}: **not run**: {reason}" for release, reason in not_run.items()] + [""]
    lines.append("| check | " + " | ".join(releases) + " |")
    lines.append("|---|" + "---|" * len(releases))
    for check_id, cells in rows.items():
        shown = []
        for release in releases:
            cell = cells.get(release)
            numbers = _key_numbers(cell) if cell else ""
            shown.append("not run" if cell is None else cell["verdict"] + (f" ({numbers})" if numbers else ""))
        lines.append(f"| `{check_id}` | " + " | ".join(shown) + " |")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class ReleaseVerdict:
    """One release's part of a gate: where its bundles are, how its runs ended, the gate's
    checks on its candidate, and (with a baseline) the comparison."""

    release: str | None
    prefix: str  # the release's directory under the gate's, "" outside a matrix
    codes: dict[str, int]
    candidate: dict[str, Any]
    checks: list[CheckResult]
    comparison: compare.Comparison | None

    @property
    def verdict(self) -> str:
        return "pass" if all(c.verdict == "pass" for c in self.checks) else "fail"

    def bundles(self) -> dict[str, str]:
        return {role: self.prefix + role for role in self.codes}

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "verdict": self.verdict,
            "bundles": self.bundles(),
            "run_exit_status": self.codes,
            "checks": [asdict(check) for check in self.checks],
        }
        if self.comparison is not None:
            regressed = [c.id for c in self.comparison.regressions]
            document["comparison"] = {"headline": self.comparison.headline(), "regressed": regressed}
        return document


def _judge_release(
    gate: GateFile, release: str | None, base: Path, prefix: str, codes: dict[str, int], console: ConsoleListener
) -> ReleaseVerdict:
    candidate = load_results(base / "candidate" / "results.json")
    comparison, baseline = None, None
    if "baseline" in codes:
        baseline = load_results(base / "baseline" / "results.json")
        comparison = compare.compare(baseline, candidate)
        (base / "comparison.md").write_text(compare_render.to_markdown(comparison))
        (base / "comparison.html").write_text(compare_render.to_html(comparison))
        console.table(compare_render.to_table(comparison))
    checks = judge(gate, candidate, base / "candidate", baseline)
    rounds = gate.gate.capacity_rounds
    if baseline is not None and rounds > 1:  # the rounds judge the declared numbers, not one run each
        checks = [c for c in checks if not c.id.startswith("gate.regression.")]
        runs = {
            role: [
                load_results(path)
                for n in range(1, rounds + 1)
                if (path := base / round_name(role, n) / "results.json").is_file()
            ]
            for role in ROLES
        }
        checks += judge_round_regressions(runs["baseline"], runs["candidate"], rounds)
    return ReleaseVerdict(release, prefix, codes, candidate, checks, comparison)


def run_gate(gate: GateFile, suts: list[str], out: Path, console: ConsoleListener, sign_key: Path | None) -> int:

    roles = dict(zip(("baseline", "candidate") if len(suts) == 2 else ("candidate",), suts, strict=True))
    releases = gate.releases()
    in_matrix = len(releases) > 1
    out = prepare_out(out)
    prefixes = {release: f"slurm-{release}/" if in_matrix else "" for release in releases}
    codes: dict[str | None, dict[str, int]] = {release: {} for release in releases}
    not_run: dict[str, str] = {}  # a release this machine could not run: why, in one line
    try:
        for release in releases:
            try:
                where = f" on Slurm {release}" if in_matrix else ""
                for role, sut in roles.items():
                    console.on_step(f"gate {gate.gate.name}: {role} {sut}{where}")
                    request = _request(gate, sut, out / prefixes[release] / role, sign_key, release)
                    codes[release][role] = run(request, console)
                for role, number in later_rounds(gate.gate.capacity_rounds) if len(roles) == 2 else []:
                    name = round_name(role, number)
                    console.on_step(f"gate {gate.gate.name}: capacity round {number} of {role} {roles[role]}{where}")
                    request = _request(gate, roles[role], out / prefixes[release] / name, sign_key, release)
                    codes[release][name] = run(replace(request, scenario="capacity"), console)
            except DDAcceptError as error:
                if not in_matrix or release is None:
                    raise
                not_run[release] = str(error)
                console.on_step(f"gate {gate.gate.name}: Slurm {release} not run: {error}")
                continue
            silent = [role for role in roles if not (out / prefixes[release] / role / "results.json").is_file()]
            if in_matrix and release is not None and silent:
                not_run[release] = f"the {silent[0]} run ended with exit {codes[release][silent[0]]} and no results"
        if not_run and len(not_run) == len(releases):
            raise EnvironmentProblem("no Slurm release of the gate could run here: " + "; ".join(not_run.values()))
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)  # a gate that did not finish leaves nothing half-written
        raise
    parts = [
        _judge_release(gate, release, out / prefixes[release], prefixes[release], codes[release], console)
        for release in releases
        if release not in not_run
    ]
    # A release that did not run is never a pass: the gate fails, and says where and why.
    verdict = "pass" if all(part.verdict == "pass" for part in parts) and not not_run else "fail"
    # A matrix's top level covers every release: each gate check and bundle is tagged with
    # its release, and the regressions are every release's; nothing reads as one release only.
    headline = [replace(c, id=f"{c.id}@{part.release}") if in_matrix else c for part in parts for c in part.checks]
    headline += [
        CheckResult.judge(f"gate.ran@{release}", False, "the release runs on this machine", f"not run: {reason}")
        for release, reason in not_run.items()
    ]
    bundles = {
        f"{role}@{part.release}" if in_matrix else role: name for part in parts for role, name in part.bundles().items()
    }
    document: dict[str, Any] = {
        "schema": SCHEMA,
        "gate": gate.gate.name,
        "verdict": verdict,
        "time": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "bundles": bundles,
        "run_exit_status": (
            {f"{role}@{part.release}": code for part in parts for role, code in part.codes.items()}
            if in_matrix
            else parts[0].codes
        ),
        "checks": [asdict(check) for check in headline],
    }
    comparisons = [(part, part.comparison) for part in parts if part.comparison is not None]
    if comparisons:
        document["comparison"] = {
            "headline": "; ".join(comparison.headline() for _, comparison in comparisons),
            "regressed": [
                f"{c.id}@{part.release}" if in_matrix else c.id
                for part, comparison in comparisons
                for c in comparison.regressions
            ],
        }
    markdown = _markdown(gate.gate.name, verdict, headline, bundles)
    if in_matrix:
        names = [str(release) for release in releases]
        by_release = {str(part.release): part.to_json() for part in parts}
        by_release |= {release: {"verdict": "not run", "reason": reason} for release, reason in not_run.items()}
        document["matrix"] = {
            "releases": names,
            "by_release": {name: by_release[name] for name in names},
            "checks": matrix({str(part.release): part.candidate for part in parts}),
        }
        markdown += _matrix_markdown(names, document["matrix"]["checks"], not_run)
    (out / "gate.json").write_text(json.dumps(checked(document), indent=2) + "\n")
    (out / "gate.md").write_text(markdown)
    (out / "gate.html").write_text(gate_page.to_html(document))
    table = Table(title=f"dd-accept gate {gate.gate.name}: {verdict.upper()}")
    for column in ("gate check", "verdict", "expected", "observed"):
        table.add_column(column, overflow="fold")
    for check in headline:
        colour = "green" if check.verdict == "pass" else "red"
        table.add_row(check.id, f"[{colour}]{check.verdict}[/{colour}]", check.expected, check.observed)
    console.table(table)
    written = "gate.md, gate.json, gate.html" + (", comparison.md, comparison.html" if "baseline" in roles else "")
    print(f"gate: {out.name}/{written}" + (" (one directory per Slurm release)" if in_matrix else ""))
    if not_run or any(_not_judged(part.codes) for part in parts):
        code = EXIT_USAGE  # the machine could not run all of it: judged as far as it ran, written
    else:
        code = EXIT_PASS if verdict == "pass" else EXIT_CHECK_FAILED
    console.emit({**document, "directory": str(as_given(out)), "exit_status": code})
    return code


def describe_gate(gate: GateFile, suts: list[str], source: str) -> str:
    """What a valid gate file would run, in the words `gate --check` prints."""
    roles = ("baseline", "candidate") if len(suts) == 2 else ("candidate",)
    releases = ", ".join(str(r) for r in gate.releases()) if gate.cluster.slurm else "the default Slurm release"
    lines = [f"gate file {source}: valid; gate {gate.gate.name!r} runs {', '.join(gate.scenarios())} on {releases}"]
    lines += [f"  {role}: {sut}" for role, sut in zip(roles, suts, strict=True)]
    if gate.gate.capacity_rounds > 1:
        lines.append(f"  capacity rounds: {gate.gate.capacity_rounds} of each SUT, in turn")
    demands = [f"metrics.{d.scenario}.{d.metric}" for d in gate.metrics]
    demands += [f"thresholds.{name}" for name in ("max_error_rate", "capacity_tolerance")
                if getattr(gate.thresholds, name) is not None]  # fmt: skip
    demands += ["goodput"] if gate.goodput is not None else []
    lines.append(f"  demands beyond every check passing: {', '.join(demands) or 'none'}")
    if gate.gate.allow_unsupported:
        lines.append(f"  may be unsupported: {', '.join(gate.gate.allow_unsupported)}")
    return "\n".join(lines)


def _not_judged(codes: dict[str, int]) -> bool:
    """A run of either SUT could not be judged (exit 2): the machine's. The baseline's counts
    as the candidate's does: what it did not measure, the candidate's demands against it and
    the comparison cannot be judged on, and a failure there would blame the candidate for
    the machine (rounds judge every run's numbers alike)."""
    return any(code == EXIT_USAGE for code in codes.values())


def resolve_suts(gate: GateFile, cli_suts: list[str]) -> list[str]:

    suts = cli_suts or list(gate.gate.suts)
    if len(suts) > 2:
        raise UsageError("gate takes one --sut (the candidate) or two (baseline, then candidate)")
    compared = [f"metrics.{d.scenario}.{d.metric}" for d in gate.metrics if d.vs_baseline is not None]
    if gate.thresholds.capacity_tolerance is not None:
        compared.append("thresholds.capacity_tolerance")
    if gate.gate.capacity_rounds > 1:
        compared.append("gate.capacity_rounds")
    if compared and len(suts) != 2:
        raise UsageError(f"{compared[0]} compares with a baseline: the gate needs two SUTs (baseline, candidate)")
    for sut in suts:
        parse_sut(sut, gate.gate.profile)  # a path that is not there, or not a wheel: said before anything starts
    return suts
