"""Optional signature: a DSSE envelope over the provenance statement, with an Ed25519 key.

The envelope (`provenance.dsse.json`) carries the exact bytes of `provenance.json` as its
payload, so `verify --key` checks both that the signature is good and that it signs the
statement in the bundle. Keys are PEM files; the private key is read, used and dropped.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from dd_accept.base.errors import UsageError
from dd_accept.base.shown_paths import shown_path
from dd_accept.base.user_files import read_user_file

PAYLOAD_TYPE = "application/vnd.in-toto+json"
ENVELOPE = "provenance.dsse.json"


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what is actually signed."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def _key_id(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def load_private_key(path: Path) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(read_user_file(path, "--key"), password=None)
    except (ValueError, TypeError):
        raise UsageError(f"--key {shown_path(path)}: not an unencrypted PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise UsageError(f"--key {shown_path(path)}: not an Ed25519 key")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(read_user_file(path, "--key"))
    except ValueError:
        raise UsageError(f"--key {shown_path(path)}: not a PEM public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise UsageError(f"--key {shown_path(path)}: not an Ed25519 key")
    return key


def sign_bundle(bundle: Path, key: Ed25519PrivateKey) -> None:
    payload = (bundle / "provenance.json").read_bytes()
    signature = key.sign(pae(PAYLOAD_TYPE, payload))
    envelope = {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(payload).decode(),
        "signatures": [{"keyid": _key_id(key.public_key()), "sig": base64.b64encode(signature).decode()}],
    }
    (bundle / ENVELOPE).write_text(json.dumps(envelope, indent=2) + "\n")


def check_signature(bundle: Path, public: Ed25519PublicKey | None) -> tuple[str, list[str]]:
    """(what `verify` says about the signature, problems). The status is `verified (key id
    …)`, `absent`, or `not checked` (an envelope is there but no key was given: it proves
    nothing until someone checks it with the signer's public key)."""
    path = bundle / ENVELOPE
    if not path.is_file():
        return "absent", [f"missing: {ENVELOPE} (a public key was given)"] if public is not None else []
    try:
        envelope = json.loads(path.read_text())
        payload = base64.b64decode(envelope["payload"], validate=True)
        signatures = [base64.b64decode(s["sig"], validate=True) for s in envelope["signatures"]]
        payload_type = str(envelope.get("payloadType", ""))
    except (ValueError, KeyError, TypeError, AttributeError):
        return "invalid", [f"{ENVELOPE}: not a DSSE envelope"]
    problems = []
    if payload != (bundle / "provenance.json").read_bytes():
        problems.append(f"{ENVELOPE}: its payload is not this bundle's provenance.json")
    if public is None:
        return "not checked (no --key given)", problems
    message = pae(payload_type, payload)
    for signature in signatures:
        try:
            public.verify(signature, message)
        except InvalidSignature:
            continue
        return f"verified (key id {_key_id(public)})", problems
    return "invalid", [*problems, f"{ENVELOPE}: no signature verifies with the given public key"]
