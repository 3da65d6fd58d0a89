"""`dd-accept verify BUNDLE [--wheel W...] [--key PUBLIC.pem] [--require-signature]`: check a bundle
without rerunning anything.

What it proves. Unsigned, integrity only: every file matches the manifest, the manifest is
the one the provenance names, the provenance agrees with `results.json` (verdict, subjects,
and each check's passed/failed), the wheels given are the ones tested, and the audit finds
nothing. Anyone who can write the bundle can rewrite all of that consistently, so it shows
the bundle is whole, not who made it. Signed and checked with `--key`, the chain
signature → provenance → manifest digest → every file also shows the key holder made it.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from dd_accept.base.errors import EXIT_CHECK_FAILED, EXIT_PASS, UsageError
from dd_accept.base.hashing import sha256_file
from dd_accept.base.results import (
    all_checks,
    chosen_checks,
    partial_note,
    run_span,
    schema_of,
    schema_problem,
    where_judged,
)
from dd_accept.base.shown_paths import shown_path
from dd_accept.reports.archive import opened_bundle
from dd_accept.reports.audit import audit
from dd_accept.reports.bundle import (
    EVIDENCE_MANIFEST,
    OUTSIDE_MANIFEST,
    STATEMENT_TYPE,
    TEST_RESULT_PREDICATE,
    test_result,
    tests_by_verdict,
)
from dd_accept.reports.signing import check_signature, load_public_key

# How a reader states the signature of a bundle that verified (check_signature's words).
SIGNATURE_SHOWN = {
    "absent": "unsigned",
    "not checked (no --key given)": "signed, signature not checked (no --key given)",
}


@dataclass
class Verification:
    problems: list[str] = field(default_factory=list)  # the bundle is not whole, or not signed as required
    signature: str = "absent"
    unmet: list[str] = field(default_factory=list)  # a whole bundle that does not show what the policy asks
    files: int = 0  # the files the manifest lists, each held to its digest
    facts: dict[str, Any] = field(default_factory=dict)  # what it vouches for (verified_facts)

    @property
    def exit_status(self) -> int:
        return EXIT_CHECK_FAILED if self.problems or self.unmet else EXIT_PASS

    def to_json(self, bundle: str) -> dict[str, Any]:
        """The `dd-accept/verify/v2` document (`verify --json`)."""
        return {
            "schema": "dd-accept/verify/v2",
            "bundle": bundle,
            "verified": not self.problems,
            "policy_met": not self.unmet,
            "signature": self.signature,
            "signed_by_key": self.signature.startswith("verified"),
            "problems": list(self.problems),
            "unmet": list(self.unmet),
            "exit_status": self.exit_status,
            "facts": self.facts,
        }

    @property
    def standing(self) -> str:
        """The line a reader (`report`, `compare`, `history`) shows above a bundle: what was
        verified, or the first reason it was not, so the reader never has to guess."""
        if self.problems:
            more = len(self.problems) - 1
            return f"NOT verified: {self.problems[0]}" + (f" (and {more} more)" if more else "")
        signature = SIGNATURE_SHOWN.get(self.signature, f"signature {self.signature}")
        files = "1 file matches" if self.files == 1 else f"{self.files} files match"
        return f"verified: {files} the manifest, the provenance agrees, the audit is clean; {signature}"

    def standing_json(self) -> dict[str, Any]:
        """The same, in a reader's --json document."""
        return {
            "verified": not self.problems,
            "standing": self.standing,
            "files": self.files,
            "signature": self.signature,
            "problems": list(self.problems),
        }


@dataclass(frozen=True, slots=True)
class Policy:
    """What the evidence must show beyond being whole, as in-toto test-result policies ask:
    the run passed, named checks passed, the judged wheels are the SUT the release names.
    Judged on results whose every check the provenance has already vouched for."""

    require_pass: bool = False
    require_checks: tuple[str, ...] = ()
    require_sut: str | None = None

    def __post_init__(self) -> None:
        if self.require_sut is not None:
            try:
                Requirement(self.require_sut)
            except InvalidRequirement:
                raise UsageError(f"verify: --require-sut {self.require_sut!r} is not NAME==VERSION") from None


def policy_outcomes(results: dict[str, Any], policy: Policy) -> list[tuple[str, str]]:
    """Each policy asked, as `--require-... VALUE`, with why it is unmet ("" when it is met)."""
    verdicts = {c["id"]: c["verdict"] for c in all_checks(results)}
    outcomes = []
    if policy.require_pass:
        why = ""
        if chosen_checks(results):  # it passed what it judged, not the release
            why = partial_note(results) + ": --require-check names the checks such a run vouches for"
        elif results["verdict"] != "pass":
            failing = [check for check, verdict in verdicts.items() if verdict != "pass"]
            errors = [s["name"] for s in results["scenarios"] if s.get("error")]
            shown = (
                f"not passing: {', '.join(failing)}" if failing else f"not judged: {', '.join(errors) or 'nothing ran'}"
            )
            why = f"the run's verdict is {results['verdict']} ({shown})"
        outcomes.append(("--require-pass", why))
    for check_id in policy.require_checks:
        verdict = verdicts.get(check_id)
        outcomes.append((f"--require-check {check_id}", "" if verdict == "pass" else verdict or "not in the results"))
    if policy.require_sut is not None:
        wanted = Requirement(policy.require_sut)
        wheels = [_name_and_version(w["file"]) for w in results["sut"].get("wheels", [])]
        named = [w[1] for w in wheels if w is not None and w[0] == canonicalize_name(wanted.name)]
        why = ""
        if not any(wanted.specifier.contains(version, prereleases=True) for version in named):
            found = ", ".join(f"{wanted.name} {v}" for v in named) or f"no {wanted.name} wheel"
            why = f"the judged wheels have {found}"
        outcomes.append((f"--require-sut {policy.require_sut}", why))
    return outcomes


def policy_problems(results: dict[str, Any], policy: Policy) -> list[str]:
    return [f"policy {asked}: {why}" for asked, why in policy_outcomes(results, policy) if why]


def verified_facts(results: dict[str, Any], subjects: dict[str, str], files: int, policy: Policy | None) -> dict:
    """What a verification vouches for, in the words an auditor records: the verdict, the SUT
    and the digest of each wheel tested, the scenarios, when, for how long and where they ran,
    how many files the manifest holds, and each policy asked. Read from results the provenance
    agrees with, so only for a bundle that verified."""
    scenarios = results.get("scenarios", [])
    began, ended = run_span(results)
    started = None
    if began is not None:
        started = datetime.fromtimestamp(began, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    return {
        "verdict": results.get("verdict"),
        "sut": results.get("sut", {}).get("spec"),
        "wheels": {name: digest for name, digest in sorted(subjects.items()) if name.endswith(".whl")},
        "scenarios": {s["name"]: s.get("verdict") for s in scenarios},
        "started": started,
        "duration_s": round(ended - began, 1) if began is not None and ended is not None else None,
        "where": where_judged(results) or None,
        "files": files,
        "selected": chosen_checks(results),
        "policies": [{"policy": asked, "met": not why} for asked, why in policy_outcomes(results, policy)]
        if policy is not None
        else [],
    }


def _name_and_version(file: str) -> tuple[str, Version] | None:
    try:
        name, version, *_ = parse_wheel_filename(file)
    except InvalidWheelFilename:
        return None
    return name, version


class _Problem(Exception):
    pass


def _load(path: Path, what: str) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise _Problem(f"missing: {what}") from None
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise _Problem(f"not valid JSON: {what}") from None
    if not isinstance(document, dict):
        raise _Problem(f"{what}: not a JSON object")
    return document


def _manifest_problems(bundle: Path, manifest: dict[str, Any]) -> list[str]:
    files = manifest.get("files")
    if not isinstance(files, list) or not all(
        isinstance(e, dict) and isinstance(e.get("path"), str) and isinstance(e.get("sha256"), str) for e in files
    ):
        return ["manifest.json: not a dd-accept manifest"]
    problems = []
    names = Counter(entry["path"] for entry in files)
    problems += [f"manifest.json: lists {path} twice" for path, count in names.items() if count > 1]
    listed = {entry["path"]: entry for entry in files}
    present = {str(p.relative_to(bundle)) for p in bundle.rglob("*") if p.is_file()} - OUTSIDE_MANIFEST
    problems += [f"missing: {path} (listed in the manifest)" for path in sorted(set(listed) - present)]
    problems += [f"unlisted: {path} (not in the manifest)" for path in sorted(present - set(listed))]
    for path in sorted(set(listed) & present):
        entry, file = listed[path], bundle / path
        if file.stat().st_size != entry.get("size") or sha256_file(file) != entry["sha256"]:
            problems.append(f"modified: {path} (sha256 differs from the manifest)")
    return problems


def _statement_problems(bundle: Path, statement: dict[str, Any], results: dict[str, Any]) -> list[str]:
    problems = []
    predicate = statement.get("predicate")
    if (
        statement.get("_type") != STATEMENT_TYPE
        or statement.get("predicateType") != TEST_RESULT_PREDICATE
        or not isinstance(predicate, dict)
    ):
        return ["provenance.json: not an in-toto test-result statement"]
    configuration = predicate.get("configuration") if isinstance(predicate.get("configuration"), list) else []
    named = {c.get("name"): c for c in configuration if isinstance(c, dict)}
    bound = named.get(EVIDENCE_MANIFEST, {}).get("digest", {})
    if not isinstance(bound, dict) or bound.get("sha256") != sha256_file(bundle / "manifest.json"):
        problems.append("provenance.json: does not carry this manifest's digest (the evidence is not the one attested)")
    claimed = test_result(results)
    if predicate.get("result") != claimed:
        problems.append(f"provenance.json: result {predicate.get('result')} but results.json says {claimed}")
    for key, wanted in tests_by_verdict(results).items():
        stated = predicate.get(key)
        if not isinstance(stated, list) or sorted(map(str, stated)) != sorted(wanted):
            problems.append(f"provenance.json: {key} differ from the check verdicts in results.json")
    subjects = _subjects(statement)
    if subjects is None:
        return [*problems, "provenance.json: a subject without a name or sha256 digest"]
    tested = {w["file"]: w["sha256"] for w in results["sut"].get("wheels", [])}
    if subjects != tested:
        problems.append("provenance.json: subjects differ from the wheels in results.json")
    return problems


def _guarded(what: str, check: Callable[[], list[str]]) -> list[str]:
    """A document of the right JSON type but the wrong shape deep inside (a list where a
    name should be) is a problem with that file, named once, not an exception."""
    try:
        return check()
    except (KeyError, TypeError, AttributeError, ValueError) as error:
        return [f"{what}: malformed ({type(error).__name__}: {str(error)[:80]})"]


def _subjects(statement: dict[str, Any]) -> dict[str, str] | None:
    subject = statement.get("subject") if isinstance(statement.get("subject"), list) else []
    try:
        return {s["name"]: s["digest"]["sha256"] for s in subject}
    except (KeyError, TypeError):
        return None


def verify_directory(
    bundle: Path,
    wheels: list[Path],
    public_key: Any = None,
    require_signature: bool = False,
    policy: Policy | None = None,
) -> Verification:
    try:
        return _verified(bundle, bundle.name, "verify", wheels, public_key, require_signature, policy)
    except _Problem as problem:  # not a bundle at all: bad input, exit 2 in one line
        raise UsageError(f"verify: {shown_path(bundle)} is not a readable dd-accept bundle: {problem}") from None


def verify_for_reading(bundle: Path, name: str, what: str, public_key: Any = None) -> Verification:
    """`verify`'s checks, for a command that shows the bundle (`report`, `compare`,
    `history`). A directory that is no bundle at all (no manifest) is one that does not
    verify, with that as its reason, so `--allow-unverified` can still show it; a results.json
    off its schema stays an error: nothing could show it."""
    try:
        return _verified(bundle, name, what, [], public_key)
    except _Problem as problem:
        return Verification(problems=[str(problem)])


def _verified(
    bundle: Path,
    name: str,
    what: str,
    wheels: list[Path],
    public_key: Any = None,
    require_signature: bool = False,
    policy: Policy | None = None,
) -> Verification:
    verification = Verification()
    problems = verification.problems
    manifest = _load(bundle / "manifest.json", "manifest.json")
    problems += _guarded("manifest.json", lambda: _manifest_problems(bundle, manifest))
    files = manifest.get("files")
    verification.files = len(files) if isinstance(files, list) else 0
    statement = _load(bundle / "provenance.json", "provenance.json")
    results = _load(bundle / "results.json", "results.json")
    shape = schema_problem(results)
    if shape:
        raise UsageError(f"{what}: {name}/results.json does not follow {schema_of(results)} ({shape})")
    problems += _guarded("provenance.json", lambda: _statement_problems(bundle, statement, results))
    subjects = _subjects(statement) or {}
    for wheel in wheels:
        if wheel.name not in subjects:
            problems.append(f"wheel {wheel.name}: not a subject of this bundle")
        elif sha256_file(wheel) != subjects[wheel.name]:
            problems.append(f"wheel {wheel.name}: sha256 differs from the provenance subject")
    verification.signature, signature_problems = check_signature(bundle, public_key)
    problems += signature_problems
    if require_signature and not verification.signature.startswith("verified"):
        problems.append(f"signature {verification.signature}: --require-signature needs one verified with --key")
    problems += [f"audit: {finding}" for finding in audit([bundle])]
    if policy is not None:
        verification.unmet = policy_problems(results, policy)
    if not problems:  # a bundle that does not verify vouches for nothing: its claims are not shown as facts
        verification.facts = verified_facts(results, subjects, verification.files, policy)
    return verification


def verify(
    bundle: Path,
    wheels: list[Path],
    pubkey: Path | None = None,
    require_signature: bool = False,
    policy: Policy | None = None,
) -> Verification:
    for wheel in wheels:
        if not wheel.is_file():
            raise UsageError(f"verify: --wheel {shown_path(wheel)}: no such file")
    if require_signature and pubkey is None:
        raise UsageError("verify: --require-signature needs --key PUBLIC.pem (the signer's public key)")
    public_key = load_public_key(pubkey) if pubkey is not None else None
    with opened_bundle(bundle, "verify") as directory:
        return verify_directory(directory, wheels, public_key, require_signature, policy)


def facts_lines(verification: Verification) -> list[str]:
    """`verify`'s account of what it checked, a line per fact (the --json `facts` in words)."""
    facts = verification.facts
    if not facts:
        return []
    lines = [f"verdict: {facts['verdict']} ({', '.join(f'{n} {v}' for n, v in facts['scenarios'].items())})"]
    lines.append(f"sut: {facts['sut']}")
    lines += [f"wheel: {name} sha256:{digest}" for name, digest in facts["wheels"].items()]
    if facts["started"]:
        took = f" for {facts['duration_s']:.0f} s" if facts["duration_s"] is not None else ""
        lines.append(f"ran: {facts['started']}{took}" + (f" on {facts['where']}" if facts["where"] else ""))
    if facts.get("selected"):
        chosen = "; ".join(f"{scenario}: {', '.join(ids)}" for scenario, ids in facts["selected"].items())
        lines.append(f"partial: only the checks chosen with --check were judged ({chosen})")
    lines.append(f"files: {facts['files']} listed in the manifest, each held to its sha256")
    lines += [f"policy {p['policy']}: {'met' if p['met'] else 'NOT met'}" for p in facts["policies"]]
    return lines
