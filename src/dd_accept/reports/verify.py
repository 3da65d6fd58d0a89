"""`dd-accept verify BUNDLE [--wheel W...]`: check a bundle without rerunning anything.

Recomputes every digest in the manifest, checks that no file was added or removed, that
the provenance agrees with the results and (when given) with the wheels themselves, and
re-runs the audit. Says exactly what does not match.
"""

from __future__ import annotations

import json
import tarfile
import tempfile
from pathlib import Path

from dd_accept.base.errors import UsageError
from dd_accept.base.results import SCHEMA, schema_problem
from dd_accept.reports.audit import audit
from dd_accept.reports.bundle import STATEMENT_TYPE, TEST_RESULT_PREDICATE
from dd_accept.reports.digests import sha256_file
from dd_accept.reports.signing import check_signature, load_public_key


def _load(path: Path, what: str) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise _Problem(f"missing: {what}") from None
    except ValueError:
        raise _Problem(f"not valid JSON: {what}") from None


class _Problem(Exception):
    pass


def verify_directory(bundle: Path, wheels: list[Path], public_key: object | None = None) -> list[str]:
    problems: list[str] = []
    try:
        manifest = _load(bundle / "manifest.json", "manifest.json")
    except _Problem as problem:
        return [str(problem)]
    listed = {entry["path"]: entry for entry in manifest.get("files", [])}
    present = {str(p.relative_to(bundle)) for p in bundle.rglob("*") if p.is_file()} - {"manifest.json"}
    for path in sorted(set(listed) - present):
        problems.append(f"missing: {path} (listed in the manifest)")
    for path in sorted(present - set(listed)):
        problems.append(f"unlisted: {path} (not in the manifest)")
    for path in sorted(set(listed) & present):
        entry, file = listed[path], bundle / path
        if file.stat().st_size != entry["size"] or sha256_file(file) != entry["sha256"]:
            problems.append(f"modified: {path} (sha256 differs from the manifest)")
    try:
        statement = _load(bundle / "provenance.json", "provenance.json")
        results = _load(bundle / "results.json", "results.json")
    except _Problem as problem:
        return [*problems, str(problem)]
    shape = schema_problem(results)
    if shape:
        return [*problems, f"results.json: does not follow {SCHEMA} ({shape})"]
    if statement.get("_type") != STATEMENT_TYPE or statement.get("predicateType") != TEST_RESULT_PREDICATE:
        problems.append("provenance.json: not an in-toto test-result statement")
    claimed = "PASSED" if results.get("verdict") == "pass" else "FAILED"
    if statement.get("predicate", {}).get("result") != claimed:
        problems.append(
            f"provenance.json: result {statement.get('predicate', {}).get('result')} but results.json says {claimed}"
        )
    subjects = {s["name"]: s["digest"]["sha256"] for s in statement.get("subject", [])}
    tested = {w["file"]: w["sha256"] for w in results.get("sut", {}).get("wheels", [])}
    if subjects != tested:
        problems.append("provenance.json: subjects differ from the wheels in results.json")
    for wheel in wheels:
        if wheel.name not in subjects:
            problems.append(f"wheel {wheel.name}: not a subject of this bundle")
        elif sha256_file(wheel) != subjects[wheel.name]:
            problems.append(f"wheel {wheel.name}: sha256 differs from the provenance subject")

    problems += check_signature(bundle, public_key)  # type: ignore[arg-type]
    problems += [f"audit: {finding}" for finding in audit([bundle])]
    return problems


def verify(bundle: Path, wheels: list[Path], pubkey: Path | None = None) -> list[str]:
    if not bundle.exists():
        raise UsageError(f"verify: {bundle.name}: no such bundle")
    for wheel in wheels:
        if not wheel.is_file():
            raise UsageError(f"verify: --wheel {wheel.name}: no such file")
    public_key = None
    if pubkey is not None:
        public_key = load_public_key(pubkey)
    if bundle.is_dir():
        return verify_directory(bundle, wheels, public_key)
    try:
        with tempfile.TemporaryDirectory(prefix="dd-verify-") as scratch, tarfile.open(bundle) as archive:
            archive.extractall(scratch, filter="data")
            roots = [p for p in Path(scratch).iterdir() if p.is_dir()]
            if len(roots) != 1:
                return ["the archive must hold exactly one bundle directory"]
            return verify_directory(roots[0], wheels, public_key)
    except tarfile.TarError as error:
        raise UsageError(f"verify: {bundle.name} is not a bundle directory or .tar.gz: {error}") from None
