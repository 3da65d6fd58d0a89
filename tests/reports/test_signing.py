"""DSSE signatures over the provenance: a good one verifies; any change or wrong key fails."""

import json

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from dd_accept.base.errors import UsageError
from dd_accept.reports.bundle import write_bundle
from dd_accept.reports.sanitize import Sanitizer
from dd_accept.reports.signing import pae
from dd_accept.reports.verify import verify
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


def test_a_signed_bundle_verifies_with_its_key_and_the_envelope_is_in_the_manifest(tmp_path):
    out, public = _signed(tmp_path)
    assert verify(out, [], public) == []
    listed = [f["path"] for f in json.loads((out / "manifest.json").read_text())["files"]]
    assert "provenance.dsse.json" in listed


def test_the_wrong_key_fails(tmp_path):
    out, _ = _signed(tmp_path)
    _, _, other = _keys(tmp_path, "other")
    assert "provenance.dsse.json: no signature verifies with the given public key" in verify(out, [], other)


def test_a_re_signed_statement_with_another_payload_fails(tmp_path):
    out, public = _signed(tmp_path)
    envelope = json.loads((out / "provenance.dsse.json").read_text())
    envelope["payload"] = envelope["payload"][:-4] + "AAA="
    (out / "provenance.dsse.json").write_text(json.dumps(envelope))
    problems = verify(out, [], public)
    assert "provenance.dsse.json: its payload is not this bundle's provenance.json" in problems
    assert "modified: provenance.dsse.json (sha256 differs from the manifest)" in problems


def test_a_key_given_for_an_unsigned_bundle_is_a_problem(tmp_path):
    _, _, public = _keys(tmp_path, "k")
    out = tmp_path / "bundle"
    out.mkdir()
    write_bundle(_raw(tmp_path), out, _context(), Sanitizer(path_roots={str(tmp_path): "<run>"}))
    assert verify(out, [], public) == ["missing: provenance.dsse.json (a public key was given)"]


def test_a_key_that_is_not_a_key_is_a_usage_error(tmp_path):
    out, _ = _signed(tmp_path)
    bogus = tmp_path / "bogus.pub"
    bogus.write_text("not a key")
    with pytest.raises(UsageError, match="not a readable PEM public key"):
        verify(out, [], bogus)
