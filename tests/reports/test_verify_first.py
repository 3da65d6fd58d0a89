"""`report`, `compare` and `history` verify a bundle before they show it (issue #28, item 8):
an untouched bundle is shown `verified` with what was checked (positive control); one edited
byte of results.json is refused naming the file, or with --allow-unverified shown marked NOT
verified (negative controls)."""

from __future__ import annotations

import csv
import io
import json
import tarfile

from dd_accept.reports.sanitize import Sanitizer
from tests.helpers import run_cli
from tests.reports.test_bundle import _bundle
from tests.reports.test_signing import _keys, _signed

EDITED = "modified: results.json (sha256 differs from the manifest)"


def _run_bundle(tmp_path):
    """A bundle as a run writes it (sanitized, manifest, provenance, report) and its files."""
    bundle = _bundle(tmp_path, Sanitizer(path_roots={str(tmp_path): "<run>"}, user_names=[], host_name="x"))
    return bundle, len(json.loads((bundle / "manifest.json").read_text())["files"])


def _edit_one_byte(bundle, old=b'"attempts": 3', new=b'"attempts": 4'):
    """One byte of results.json changed; still valid JSON on its schema: only the digest tells."""
    path = bundle / "results.json"
    data = path.read_bytes()
    assert data.count(old) == 1 and len(old) == len(new)
    path.write_bytes(data.replace(old, new))


def _json(result):
    assert result.stdout.strip(), result.stderr
    return json.loads(result.stdout)


def test_an_untouched_bundle_is_shown_verified_with_what_was_checked(tmp_path):
    bundle, files = _run_bundle(tmp_path)
    said = f"verified: {files} files match the manifest, the provenance agrees, the audit is clean; unsigned"
    for form in ("md", "html", "junit", "json"):
        shown = run_cli("report", str(bundle), "--format", form)
        assert shown.returncode == 0, shown.stderr
        assert shown.stderr == f"dd-accept report: bundle: {said}\n", shown.stderr
    markdown = run_cli("report", str(bundle), "--format", "md").stdout
    assert markdown.startswith(f"> `bundle`: {said}\n\n## dd-accept: PASS"), markdown[:300]
    page = run_cli("report", str(bundle)).stdout
    assert page.index('class="verification verified"') < page.index("<h1>") and said in page
    assert "NOT verified" not in page + markdown
    # the archive beside it verifies the same way
    archived = run_cli("compare", str(bundle), str(bundle.with_name("bundle.tar.gz")), "--format", "json")
    document = _json(archived)
    for role in ("baseline", "candidate"):
        standing = document["verification"][role]
        assert standing["verified"] and standing["files"] == files and standing["signature"] == "absent"
        assert standing["problems"] == [] and standing["standing"] == said
    table = run_cli("compare", str(bundle), str(bundle))
    assert table.returncode == 0 and table.stdout.startswith(f"baseline bundle: {said}\ncandidate bundle: {said}\n")
    trail = run_cli("history", str(bundle))
    assert trail.returncode == 0 and f"bundle | 1970-01-01T00:00:01Z | x==1 | {said}" in trail.stdout, trail.stdout


def test_one_edited_byte_of_results_json_is_refused_by_every_reader_naming_the_file(tmp_path):
    bundle, _ = _run_bundle(tmp_path)
    (tmp_path / "bundle.tar.gz").rename(tmp_path / "intact.tar.gz")
    _edit_one_byte(bundle)
    with tarfile.open(tmp_path / "edited.tar.gz", "w:gz") as archive:
        archive.add(bundle, arcname="edited")
    commands = [
        *(["report", str(bundle), "--format", form] for form in ("html", "md", "junit", "json")),
        ["report", str(tmp_path / "edited.tar.gz")],
        ["compare", str(tmp_path / "intact.tar.gz"), str(bundle)],
        ["compare", str(bundle), str(tmp_path / "intact.tar.gz")],
        ["compare", str(tmp_path / "intact.tar.gz"), str(bundle), "--format", "json", "--fail-on-regression"],
        ["history", str(tmp_path / "intact.tar.gz"), str(bundle)],
        ["history", str(tmp_path)],  # found under a directory
    ]
    for command in commands:
        result = run_cli(*command)
        assert result.returncode == 2, (command, result.stderr)
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
        assert f"{command[0]}: " in result.stderr and f"does not verify: {EDITED}" in result.stderr, result.stderr
        assert "--allow-unverified" in result.stderr and result.stdout == "", (command, result.stdout[:200])
    # --json: the error document, with the same line
    refused = run_cli("--json", "compare", str(tmp_path / "intact.tar.gz"), str(bundle))
    error = _json(refused)
    assert error["schema"] == "dd-accept/error/v1" and error["exit_status"] == 2 and EDITED in error["error"]


def test_with_allow_unverified_an_edited_bundle_is_shown_marked_not_verified(tmp_path):
    bundle, files = _run_bundle(tmp_path)
    pristine = tmp_path / "bundle.tar.gz"
    before = _json(run_cli("compare", str(pristine), str(pristine), "--format", "json"))
    _edit_one_byte(bundle)
    anyway = "--allow-unverified"
    report = run_cli("report", str(bundle), "--format", "md", anyway)
    assert report.returncode == 0, report.stderr
    first = report.stdout.splitlines()[0]
    assert first.startswith("> **`bundle`: NOT verified: modified: results.json") and first.endswith("**"), first
    assert "NOT verified: modified: results.json" in report.stderr
    page = run_cli("report", str(bundle), anyway).stdout
    banner = page.index('class="verification not-verified"')
    assert banner < page.index("<h1>") and f"NOT verified: {EDITED}" in page
    compared = run_cli("compare", str(pristine), str(bundle), "--format", "json", anyway)
    document = _json(compared)
    assert compared.returncode == 0, compared.stderr
    assert document["verification"]["baseline"]["verified"]
    candidate = document["verification"]["candidate"]
    assert not candidate["verified"] and candidate["problems"] == [EDITED] and candidate["files"] == files
    assert candidate["standing"] == f"NOT verified: {EDITED}"
    # The checks the edit did not touch compare as they did; the one number it changed shows.
    assert document["checks"][0]["change"] == before["checks"][0]["change"] == "same"
    assert [(m["baseline"], m["candidate"]) for m in document["checks"][0]["metrics"]] == [(3, 4)]
    assert before["checks"][0]["metrics"][0]["candidate"] == 3
    table = run_cli("compare", str(pristine), str(bundle), anyway)
    assert f"candidate bundle: NOT verified: {EDITED}" in table.stdout.splitlines()[1], table.stdout
    html = run_cli("compare", str(pristine), str(bundle), "--format", "html", anyway).stdout
    assert html.index('class="verification not-verified"') < html.index("<h1>")


def test_history_says_per_bundle_how_it_verified_and_refuses_or_marks_the_one_that_does_not(tmp_path):
    from tests.reports.test_history import _bundle as history_bundle

    runs = tmp_path / "evidence"
    history_bundle(runs / "a", 1_000.0, 100.0, 40.0)
    history_bundle(runs / "b", 2_000.0, 100.0, 40.0)
    history_bundle(runs / "c", 3_000.0, 100.0, 40.0)
    assert run_cli("history", str(runs), "--fail-on-change").returncode == 0
    _edit_one_byte(runs / "b", b'"p99_ttft_ms": 100.0', b'"p99_ttft_ms": 900.0')
    refused = run_cli("history", str(runs), "--csv", str(tmp_path / "h.csv"))
    assert refused.returncode == 2 and f"history: b does not verify: {EDITED}" in refused.stderr, refused.stderr
    assert not (tmp_path / "h.csv").exists()  # nothing half-written
    marked = run_cli("history", str(runs), "--allow-unverified", "--csv", str(tmp_path / "h.csv"),
                     "--html", str(tmp_path / "h.html"))  # fmt: skip
    assert marked.returncode == 0, marked.stderr
    rows = {line.split(" | ")[0]: line for line in marked.stdout.splitlines() if line[:4] in ("a | ", "b | ", "c | ")}
    assert "| verified: 1 file matches the manifest" in rows["a"] and "| verified: " in rows["c"], rows
    assert f"| NOT verified: {EDITED}" in rows["b"], rows
    assert "flagged: serving streaming p99_ttft_ms in b: 100 → 900 (+800%)" in marked.stderr  # shown, marked
    verified = {(r["bundle"], r["verified"]) for r in csv.DictReader(io.StringIO((tmp_path / "h.csv").read_text()))}
    assert verified == {("a", "verified"), ("b", "NOT verified"), ("c", "verified")}
    page = (tmp_path / "h.html").read_text()
    assert page.index("NOT verified: 1 of 3 bundles") < page.index("<h1>") and EDITED in page


def test_a_directory_without_a_manifest_is_no_evidence(tmp_path):
    from tests.gate.test_judge_and_compare import _results

    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "results.json").write_text(json.dumps(_results()))
    refused = run_cli("report", str(tmp_path / "bare"), "--format", "md")
    assert refused.returncode == 2 and "report: bare does not verify: missing: manifest.json" in refused.stderr
    shown = run_cli("report", str(tmp_path / "bare"), "--format", "md", "--allow-unverified")
    assert shown.returncode == 0 and shown.stdout.startswith("> **`bare`: NOT verified: missing: manifest.json**")


def test_a_signed_bundle_names_its_key_and_a_wrong_or_absent_signature_is_refused(tmp_path):
    bundle, public = _signed(tmp_path)
    unchecked = run_cli("report", str(bundle), "--format", "md")
    assert "; signed, signature not checked (no --key given)" in unchecked.stderr, unchecked.stderr
    checked = run_cli("report", str(bundle), "--format", "md", "--key", str(public))
    assert checked.returncode == 0 and "; signature verified (key id " in checked.stderr, checked.stderr
    assert "signature verified" in checked.stdout.splitlines()[0]
    _, _, other = _keys(tmp_path, "other")
    wrong = run_cli("compare", str(bundle), str(bundle), "--key", str(other))
    assert wrong.returncode == 2 and "no signature verifies with the given public key" in wrong.stderr
    (bundle / "provenance.dsse.json").unlink()
    absent = run_cli("history", str(bundle), "--key", str(public))
    assert absent.returncode == 2 and "missing: provenance.dsse.json" in absent.stderr, absent.stderr
    assert "unsigned" in run_cli("report", str(bundle), "--format", "md").stderr
