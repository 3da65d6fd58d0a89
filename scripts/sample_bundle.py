"""Make docs/sample/: a real, signed evidence bundle of `dd-accept run overload` against rc1,
with the public key that verifies it, so a newcomer or an auditor can try `verify`, `report`
and `compare` in a minute, with no root and no Docker.

The signing key is made for this run and thrown away: only its public half is kept, so the
sample proves what a signed bundle proves (the key holder made it) and nobody can sign
another bundle with it. tests/reports/test_sample_bundle.py keeps the sample verifying.

    scripts/with-engine.sh .venv/bin/python scripts/sample_bundle.py   # or: make sample-bundle
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

SAMPLE = Path(__file__).resolve().parent.parent / "docs" / "sample"
BUNDLE, PUBLIC = "rc1-overload", "rc1-overload.pub"


def main() -> int:
    key = Ed25519PrivateKey.generate()
    with tempfile.TemporaryDirectory(prefix="dd-sample-") as scratch:
        private = Path(scratch) / "signer.pem"
        private.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        out = Path(scratch) / BUNDLE
        argv = [sys.executable, "-m", "dd_accept.harness.cli", "run", "overload", "--key", str(private)]
        done = subprocess.run([*argv, "--out", str(out)], check=False)
        if done.returncode != 0:
            print(
                f"sample_bundle: the run ended with exit {done.returncode}; docs/sample is unchanged", file=sys.stderr
            )
            return done.returncode
        shutil.rmtree(SAMPLE, ignore_errors=True)
        SAMPLE.mkdir(parents=True)
        shutil.copytree(out, SAMPLE / BUNDLE)
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    (SAMPLE / PUBLIC).write_bytes(public)
    print(f"sample_bundle: docs/sample/{BUNDLE}/ and docs/sample/{PUBLIC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
