"""`dd-accept verify`, `report`, `audit` and `sanitize`: what an auditor runs on a bundle."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from dd_accept.base.errors import EXIT_CHECK_FAILED, EXIT_PASS
from dd_accept.base.shown_paths import shown_path
from dd_accept.harness.arguments import (
    add_public_key,
    add_reading_options,
    reading_policy,
)
from dd_accept.harness.console import ConsoleListener
from dd_accept.harness.outputs import refuse_missing_directory
from dd_accept.reports import render
from dd_accept.reports.audit import Baseline, audit, read_baseline
from dd_accept.reports.html import render_bundle
from dd_accept.reports.reading import Shown, banner_html, banner_markdown, opened_verified
from dd_accept.reports.share import sanitize_paths
from dd_accept.reports.verify import Policy, facts_lines, verify


def _cmd_verify(args: argparse.Namespace, console: ConsoleListener) -> int:

    pubkey = Path(args.key) if args.key else None
    policy = Policy(args.require_pass, tuple(args.require_check), args.require_sut)
    bundle = Path(args.bundle)
    verification = verify(bundle, [Path(w) for w in args.wheel], pubkey, args.require_signature, policy)
    console.emit(verification.to_json(bundle.name))
    for problem in verification.problems + verification.unmet:
        print(problem)
    for line in facts_lines(verification):
        print(line)
    print(f"signature: {verification.signature}")
    if verification.problems:
        print(f"dd-accept verify: {len(verification.problems)} problem(s): the bundle does not verify", file=sys.stderr)
    elif verification.unmet:
        unmet = f"{len(verification.unmet)} problem(s): the bundle is whole but does not meet the policy"
        print(f"dd-accept verify: {unmet}", file=sys.stderr)
    else:
        proven = "made by the key holder" if verification.signature.startswith("verified") else "whole (integrity only)"
        print(
            "dd-accept verify: every digest matches, the provenance names this manifest and agrees with every "
            f"check in the results, the audit is clean: the bundle is {proven}"
        )
    return verification.exit_status


def _cmd_report(args: argparse.Namespace, console: ConsoleListener) -> int:
    with opened_verified(Path(args.bundle), "report", reading_policy(args)) as (directory, shown):
        results = shown.results
        if args.format == "html":
            sys.stdout.write(render_bundle(directory, banner_html(shown)))
        elif args.format == "json":  # results.json itself, as it verified against the schema it names
            print(json.dumps(results, indent=2))
        elif args.format == "md":
            sys.stdout.write(banner_markdown(shown) + "\n" + render.markdown(results))
        else:
            sys.stdout.write(render.junit(results))
    _report_standing(shown)
    return EXIT_PASS


def _report_standing(shown: Shown) -> None:
    """On stderr for every format: JUnit XML and results.json have no place for it that their
    schemas allow, and a person redirecting the HTML still sees it."""
    print(f"dd-accept report: {shown.name}: {shown.verification.standing}", file=sys.stderr)


def _cmd_audit(args: argparse.Namespace, console: ConsoleListener) -> int:

    baseline = read_baseline(Path(args.baseline)) if args.baseline else None
    everything = audit([Path(p) for p in args.paths], licences=args.licences)
    if args.write_baseline:
        target = Path(args.write_baseline)
        refuse_missing_directory(target, target, "audit")
        written = Baseline.of(everything)
        target.write_text(written.text())
        print(f"dd-accept audit: {len(written.accepted)} finding(s) written to {shown_path(target)}")
        return EXIT_PASS
    findings = [f for f in everything if baseline is None or not baseline.accepts(f)]
    accepted = len(everything) - len(findings)
    code = EXIT_CHECK_FAILED if findings else EXIT_PASS
    document = {"schema": "dd-accept/audit/v1", "clean": not findings, "exit_status": code, "paths": len(args.paths)}
    console.emit({**document, "accepted": accepted, "findings": [finding.to_json() for finding in findings]})
    for finding in findings:
        print(finding)  # location, rule and the line as sanitized: never the matched text
    also = f"; {accepted} accepted by the baseline" if accepted else ""
    if findings:
        print(f"dd-accept audit: {len(findings)} finding(s){also}", file=sys.stderr)
    else:
        print(f"dd-accept audit: clean ({len(args.paths)} path(s){also})")
    return code


def _cmd_sanitize(args: argparse.Namespace, console: ConsoleListener) -> int:
    shared = sanitize_paths([Path(p) for p in args.paths], Path(args.out))
    for location, why in shared.skipped:
        print(f"not copied: {location} ({why})", file=sys.stderr)
    report = shared.sanitizer.report()
    for entry in report["by_rule"]:  # type: ignore[union-attr]
        print(f"{entry['rule']}: {entry['count']}")
    total = sum(entry["count"] for entry in report["by_rule"])  # type: ignore[union-attr]
    print(f"dd-accept sanitize: {len(shared.written)} file(s) written to {Path(args.out).name}/, {total} redaction(s)")
    return EXIT_PASS


def add_evidence_commands(commands: Any) -> None:
    """`verify`, `report`, `audit` and `sanitize`."""
    verify = commands.add_parser("verify", help="check an evidence bundle's digests, provenance and audit")
    verify.add_argument("bundle", metavar="BUNDLE", help="bundle directory or .tar.gz")
    verify.add_argument(
        "--wheel",
        action="append",
        default=[],
        metavar="WHEEL.whl",
        help="a wheel to check against the provenance's subjects, repeatable (default: none)",
    )
    add_public_key(verify)
    verify.add_argument("--require-signature", action="store_true", help="fail unless a signature verifies with --key")
    policy = verify.add_argument_group("policy: exit 1 unless the evidence shows it")
    policy.add_argument("--require-pass", action="store_true", help="the run's verdict is pass")
    policy.add_argument(
        "--require-check",
        action="append",
        default=[],
        metavar="CHECK_ID",
        help="this check passed (repeatable; default: none)",
    )
    policy.add_argument(
        "--require-sut", metavar="NAME==VERSION", help="the judged wheels include this SUT (default: any)"
    )
    verify.set_defaults(handler=_cmd_verify)

    report = commands.add_parser(
        "report",
        help="re-render a bundle's report from the bundle alone, once it verified",
        description="Verify the bundle as `verify` does, then render it with a verified / NOT verified line "
        "at the top (md, html; on stderr for every format). A bundle that does not verify is refused (exit 2) "
        "unless --allow-unverified.",
    )
    report.add_argument("bundle", metavar="BUNDLE", help="bundle directory or .tar.gz")
    report.add_argument(
        "--format",
        choices=("html", "md", "junit", "json"),
        default="html",
        help="html (self-contained), md, junit (JUnit XML), or json: results.json, verified (default: %(default)s)",
    )
    add_reading_options(report)
    report.set_defaults(handler=_cmd_report)

    audit = commands.add_parser("audit", help="scan files, directories and archives for secrets and host details")
    audit.add_argument("paths", nargs="+", metavar="PATH", help="files, directories, .tar.gz, .whl or .zip")
    audit.add_argument("--licences", action="store_true", help="also require a declared licence in wheels")
    audit.add_argument(
        "--baseline",
        metavar="FILE",
        help="accepted findings (file, rule, salted sha256 of the line) not to report; a changed line is found "
        "again (default: none)",
    )
    audit.add_argument(
        "--write-baseline",
        metavar="FILE",
        help="write every finding as a baseline to review, and exit 0 (default: audit, write nothing)",
    )
    audit.set_defaults(handler=_cmd_audit)

    sanitize = commands.add_parser(
        "sanitize", help="remove secrets and host details from logs you want to share (files, dirs, archives)"
    )
    sanitize.add_argument("paths", nargs="+", metavar="PATH", help="files, directories or archives")
    sanitize.add_argument("--out", required=True, metavar="DIR", help="where the sanitized copies go (must be new)")
    sanitize.set_defaults(handler=_cmd_sanitize)
