"""DSSE signatures over the provenance: a good one verifies; any change or wrong key fails."""

import json

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from dd_accept.base.errors import UsageError
from dd_accept.base.hashing import sha256_file
from dd_accept.reports.bundle import write_bundle, write_manifest
from dd_accept.reports.sanitize import Sanitizer
from dd_accept.reports.signing import pae
from dd_accept.reports.verify import verify
from tests.helpers import run_cli
from tests.reports.test_bundle import _context, _raw


def _keys(tmp_path, name):
    key = Ed25519PrivateKey.generate()
    private, public = tmp_path / f"{name}.pem", tmp_path / f"{name}.pub"
    private.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    public.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return key, private, public


def _signed(tmp_path):
    key, _, public = _keys(tmp_path, "signer")
    out = tmp_path / "bundle"
    out.mkdir()
    write_bundle(_raw(tmp_path), out, _context(), Sanitizer(path_roots={str(tmp_path): "<run>"}), key)
    return out, public


def test_pae_matches_the_dsse_specification():
    assert pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_a_signed_bundle_verifies_with_its_key_and_the_chain_reaches_every_file(tmp_path):
    """signature → provenance.json → manifest digest → every other file."""
    out, public = _signed(tmp_path)
    assert verify(out, [], public).problems == []
    listed = {f["path"] for f in json.loads((out / "manifest.json").read_text())["files"]}
    files = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert listed == files - {"manifest.json", "provenance.json", "provenance.dsse.json"}
    statement = json.loads((out / "provenance.json").read_text())
    bound = next(c for c in statement["predicate"]["configuration"] if c["name"] == "evidence-manifest")
    assert bound["digest"]["sha256"] == sha256_file(out / "manifest.json")


def test_the_wrong_key_fails(tmp_path):
    out, _ = _signed(tmp_path)
    _, _, other = _keys(tmp_path, "other")
    assert "provenance.dsse.json: no signature verifies with the given public key" in verify(out, [], other).problems


def test_a_re_signed_statement_with_another_payload_fails(tmp_path):
    out, public = _signed(tmp_path)
    envelope = json.loads((out / "provenance.dsse.json").read_text())
    envelope["payload"] = envelope["payload"][:-4] + "AAA="
    (out / "provenance.dsse.json").write_text(json.dumps(envelope))
    problems = verify(out, [], public).problems
    assert "provenance.dsse.json: its payload is not this bundle's provenance.json" in problems


def test_a_key_given_for_an_unsigned_bundle_is_a_problem(tmp_path):
    _, _, public = _keys(tmp_path, "k")
    out = tmp_path / "bundle"
    out.mkdir()
    write_bundle(_raw(tmp_path), out, _context(), Sanitizer(path_roots={str(tmp_path): "<run>"}))
    assert verify(out, [], public).problems == ["missing: provenance.dsse.json (a public key was given)"]


def test_a_key_that_is_not_a_key_is_a_usage_error(tmp_path):
    out, _ = _signed(tmp_path)
    bogus = tmp_path / "bogus.pub"
    bogus.write_text("not a key")
    with pytest.raises(UsageError, match=rf"--key …/{tmp_path.name}/bogus\.pub: not a PEM public key"):
        verify(out, [], bogus)


def _rewrite_consistently(out, *, provenance_too: bool) -> None:
    """The attack: change an observed value, then rewrite the manifest (and, for an unsigned
    bundle, the provenance's manifest digest) so every digest matches again."""
    results = json.loads((out / "results.json").read_text())
    results["scenarios"][0]["checks"][0]["observed"] = "3 (edited)"
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    write_manifest(out)
    if provenance_too:
        statement = json.loads((out / "provenance.json").read_text())
        for entry in statement["predicate"]["configuration"]:
            if entry["name"] == "evidence-manifest":
                entry["digest"]["sha256"] = sha256_file(out / "manifest.json")
        (out / "provenance.json").write_text(json.dumps(statement, indent=2) + "\n")


def test_the_signature_covers_every_evidence_file(tmp_path):
    """Edited results with a rewritten manifest: the signed statement still names the old
    manifest, so `verify --pubkey` fails; rewriting the statement breaks the signature."""
    out, public = _signed(tmp_path)
    assert verify(out, [], public).signature.startswith("verified (key id ")
    _rewrite_consistently(out, provenance_too=False)
    problems = verify(out, [], public).problems
    assert any("does not carry this manifest's digest" in p for p in problems), problems
    _rewrite_consistently(out, provenance_too=True)
    problems = verify(out, [], public).problems
    assert "provenance.dsse.json: its payload is not this bundle's provenance.json" in problems


def test_unsigned_verification_proves_integrity_only_and_says_so(tmp_path):
    out = tmp_path / "bundle"
    out.mkdir()
    write_bundle(_raw(tmp_path), out, _context(), Sanitizer(path_roots={str(tmp_path): "<run>"}))
    assert verify(out, []).signature == "absent"
    _rewrite_consistently(out, provenance_too=True)  # anyone can do this to an unsigned bundle
    assert verify(out, []).problems == []
    with pytest.raises(UsageError, match="--require-signature needs --key"):
        verify(out, [], require_signature=True)
    _, _, public = _keys(tmp_path, "k")
    problems = verify(out, [], public, require_signature=True).problems
    assert "signature absent: --require-signature needs one verified with --key" in problems


def test_a_signed_bundle_checked_without_a_key_is_not_called_verified(tmp_path):
    out, _ = _signed(tmp_path)
    verification = verify(out, [])
    assert verification.problems == [] and verification.signature == "not checked (no --key given)"


def test_the_provenance_must_list_the_same_passed_and_failed_checks(tmp_path):
    out = tmp_path / "bundle"
    out.mkdir()
    write_bundle(_raw(tmp_path), out, _context(), Sanitizer(path_roots={str(tmp_path): "<run>"}))
    statement = json.loads((out / "provenance.json").read_text())
    statement["predicate"]["passedTests"], statement["predicate"]["failedTests"] = [], ["overload.total.attempts"]
    (out / "provenance.json").write_text(json.dumps(statement))
    problems = verify(out, []).problems
    assert "provenance.json: passedTests differ from the check verdicts in results.json" in problems
    assert "provenance.json: failedTests differ from the check verdicts in results.json" in problems


def test_verify_says_what_it_verified_and_a_bundle_that_does_not_verify_vouches_for_nothing(tmp_path):
    out, public = _signed(tmp_path)
    done = run_cli("verify", str(out), "--key", str(public), "--require-pass")
    assert done.returncode == 0, done.stdout + done.stderr
    said = dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line)
    files = len(json.loads((out / "manifest.json").read_text())["files"])
    assert said["files"] == f"{files} listed in the manifest, each held to its sha256"
    assert said["policy --require-pass"] == "met" and said["signature"].startswith("verified (key id ")
    assert said["verdict"].startswith("pass (") and said["sut"], said
    (out / "results.json").write_text((out / "results.json").read_text().replace('"pass"', '"fail"', 1))
    broken = run_cli("verify", str(out), "--key", str(public), "--json")
    document = json.loads(broken.stdout)
    assert broken.returncode == 1 and document["facts"] == {} and document["problems"], document
