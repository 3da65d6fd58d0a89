"""The evidence bundle: sanitized while it is written, then digested file by file.

A run leaves its raw outputs in a scratch directory; this module copies what is evidence
into the bundle through the sanitizer (never a raw file), writes `redactions.json`,
the reports, then `manifest.json` with the sha256 and size of every one of them, and last
`provenance.json` (an in-toto Statement v1 with the test-result predicate) carrying the
manifest's digest, so a signature over the statement covers every byte of the evidence. A
`.tar.gz` of the bundle is written beside it.
"""

from __future__ import annotations

import json
import tarfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dd_accept
from dd_accept.base.hashing import sha256_file
from dd_accept.base.results import all_checks, load_results
from dd_accept.reports import render
from dd_accept.reports.digests import lock_digest
from dd_accept.reports.html import render_bundle
from dd_accept.reports.sanitize import Sanitizer
from dd_accept.reports.signing import sign_bundle

MANIFEST_SCHEMA = "dd-accept/manifest/v1"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
TEST_RESULT_PREDICATE = "https://in-toto.io/attestation/test-result/v0.1"
EVIDENCE_MANIFEST = "evidence-manifest"
# Not in the manifest: the manifest itself, and what is bound to it by digest and signature.
OUTSIDE_MANIFEST = frozenset({"manifest.json", "provenance.json", "provenance.dsse.json"})
SKIPPED_DIRECTORIES = {"commands", "identities"}  # launcher scratch: already in commands.jsonl


@dataclass
class RunContext:
    """What the provenance says about the run, gathered by the runner."""

    command_line: list[str]
    started: float
    ended: float
    harness_source_digest: str
    runtime_source_digest: str
    runtime_files: list[str]
    host_lock: list[str]
    node_lock: list[str]
    images: dict[str, str] = field(default_factory=dict)  # tag → image id
    versions: dict[str, str] = field(default_factory=dict)  # slurm, kernel, docker engine
    runtime_wheel: str = ""  # the SUT wheel runtime_files are read from (the one its profile follows)


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _write(out: Path, relative: str, text: str, sanitizer: Sanitizer) -> None:
    target = out / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(sanitizer.file_text(text, relative))


def _evidence_files(raw: Path) -> list[tuple[Path, str]]:
    """(raw file, bundle path) for every run output that is evidence."""
    chosen: list[tuple[Path, str]] = []
    runs = raw / "runs"
    if runs.is_dir():
        for path in sorted(runs.rglob("*")):
            relative = path.relative_to(runs)
            if not path.is_file() or set(relative.parts) & SKIPPED_DIRECTORIES:
                continue
            if path.suffix == ".jsonl":
                chosen.append((path, f"events/{relative}"))
            elif path.suffix == ".log":
                chosen.append((path, f"logs/{relative}"))
    for name in ("commands.jsonl", "progress.jsonl"):
        if (raw / name).is_file():
            chosen.append((raw / name, name))
    logs = raw / "logs"
    if logs.is_dir():
        chosen += [(path, f"logs/cluster/{path.name}") for path in sorted(logs.glob("*.log"))]
    return chosen


def test_result(results: dict[str, Any]) -> str:
    """The test-result predicate's `result` for these results."""
    return "PASSED" if results["verdict"] == "pass" else "FAILED"


def tests_by_verdict(results: dict[str, Any]) -> dict[str, list[str]]:
    """The predicate's passed, failed and warned tests: check ids by verdict, and a scenario
    that could not be judged as failed. `verify` compares a bundle's statement with these."""
    checks = all_checks(results)
    failed = [c["id"] for c in checks if c["verdict"] == "fail"]
    failed += [f"{s['name']} (not judged)" for s in results["scenarios"] if s.get("error")]
    return {
        "passedTests": [c["id"] for c in checks if c["verdict"] == "pass"],
        "failedTests": failed,
        "warnedTests": [c["id"] for c in checks if c["verdict"] == "unsupported"],
    }


def provenance(
    results: dict[str, Any], context: RunContext, sanitizer: Sanitizer, manifest_sha256: str = ""
) -> dict[str, Any]:
    sut = results.get("sut", {})
    host_lock = "\n".join(context.host_lock)
    node_lock = "\n".join(context.node_lock)

    configuration = [
        {
            # Every other file of the bundle, by digest: signing this statement signs them all.
            "name": EVIDENCE_MANIFEST,
            "digest": {"sha256": manifest_sha256},
            "annotations": {"what": "manifest.json: sha256 and size of every evidence file"},
        },
        {
            "name": "dd-accept",
            "digest": {"sha256": context.harness_source_digest},
            "annotations": {"version": dd_accept.__version__, "what": "digest over the harness's package files"},
        },
        {
            "name": "sut-runtime-source",
            "digest": {"sha256": context.runtime_source_digest},
            "annotations": {"files": context.runtime_files, "wheel": context.runtime_wheel},
        },
        {
            "name": "dependency-lock:harness",
            "digest": {"sha256": lock_digest(context.host_lock)},
            "annotations": {"lock": host_lock},
        },
        {
            "name": "dependency-lock:node-sut",
            "digest": {"sha256": lock_digest(context.node_lock)},
            "annotations": {"lock": node_lock},
        },
        {
            "name": "wheelhouse",
            "digest": {"sha256": sut.get("wheelhouse_digest", "")},
            "annotations": {"wheels": str(sut.get("wheel_count", ""))},
        },
    ]
    for tag, image_id in sorted(context.images.items()):
        configuration.append({"name": f"image:{tag}", "digest": {"sha256": image_id.removeprefix("sha256:")}})
    statement = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": w["file"], "digest": {"sha256": w["sha256"]}} for w in sut.get("wheels", [])],
        "predicateType": TEST_RESULT_PREDICATE,
        "predicate": {
            "result": test_result(results),
            "configuration": configuration,
            **tests_by_verdict(results),
            "invocation": {
                "command": sanitizer.text(" ".join(context.command_line), "provenance.json"),
                "started": _iso(context.started),
                "ended": _iso(context.ended),
                "versions": context.versions,
            },
        },
    }
    return statement


def write_bundle(
    raw: Path, out: Path, context: RunContext, sanitizer: Sanitizer, sign_key: Any | None = None
) -> dict[str, Any]:
    """Write the sanitized bundle into `out` (which holds no other files) and its .tar.gz."""
    results = load_results(raw / "results.json")
    results = sanitizer.value(results, "results.json")
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    for source, relative in _evidence_files(raw):
        _write(out, relative, source.read_text(errors="replace"), sanitizer)
    (out / "summary.md").write_text(render.markdown(results))
    (out / "junit.xml").write_text(render.junit(results))
    (out / "redactions.json").write_text(json.dumps(sanitizer.report(), indent=2) + "\n")
    (out / "report.html").write_text(render_bundle(out))
    # The manifest covers every file so far; the statement carries the manifest's digest;
    # the signature (if any) covers the statement. One byte changed anywhere breaks a link.
    write_manifest(out)
    statement = provenance(results, context, sanitizer, sha256_file(out / "manifest.json"))
    (out / "provenance.json").write_text(json.dumps(statement, indent=2) + "\n")
    if sign_key is not None:
        sign_bundle(out, sign_key)
    archive = out.with_name(out.name + ".tar.gz")
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(out, arcname=out.name)
    return results


def write_manifest(out: Path) -> dict[str, Any]:
    files = sorted(p for p in out.rglob("*") if p.is_file() and str(p.relative_to(out)) not in OUTSIDE_MANIFEST)
    manifest = {
        "schema": MANIFEST_SCHEMA,
        "files": [{"path": str(p.relative_to(out)), "sha256": sha256_file(p), "size": p.stat().st_size} for p in files],
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest
