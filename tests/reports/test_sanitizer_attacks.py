"""The sanitizer and the audit, attacked: every planted form, in every position, quoting and
file kind, must be gone; every benign look-alike must stay byte for byte; output JSON stays
valid; and a second, independent scanner (detect-secrets) finds nothing the audit misses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dd_accept.reports.audit import audit
from dd_accept.reports.sanitize import Sanitizer
from tests.reports.secret_corpus import BENIGN, HOST_PLANTED, PLANTED, RUN_DOMAIN, RUN_HOST, RUN_USER

ALL_PLANTED = PLANTED + HOST_PLANTED


def run_sanitizer() -> Sanitizer:
    """The sanitizer of a made-up run, independent of the machine the tests run on."""
    return Sanitizer(
        user_names=[RUN_USER],
        host_name=[RUN_HOST, f"{RUN_HOST}.{RUN_DOMAIN}", RUN_DOMAIN],
        home=f"/home/{RUN_USER}",
    )


@pytest.mark.parametrize(("form", "text", "secret"), ALL_PLANTED, ids=[p[0] for p in ALL_PLANTED])
def test_every_planted_form_is_removed_from_text(form, text, secret):
    assert secret in text
    assert secret not in run_sanitizer().text(text, "x.log")


@pytest.mark.parametrize(("form", "text", "secret"), ALL_PLANTED, ids=[p[0] for p in ALL_PLANTED])
def test_every_planted_form_is_removed_from_json_and_jsonl_and_they_stay_valid(form, text, secret):
    record = {"argv": ["bash", "-c", text], "stdout_tail": f"before\n{text}\nafter", "nested": {"line": text}}
    sanitizer = run_sanitizer()
    as_json = sanitizer.file_text(json.dumps(record), "commands.json")
    as_jsonl = sanitizer.file_text(json.dumps(record) + "\n" + json.dumps({"line": text}) + "\n", "commands.jsonl")
    for output in (as_json, as_jsonl):
        assert secret not in output and json.dumps(secret)[1:-1] not in output
    json.loads(as_json)
    for line in as_jsonl.splitlines():
        json.loads(line)


@pytest.mark.parametrize("text", BENIGN)
def test_benign_look_alikes_are_kept_byte_for_byte(text):
    sanitizer = run_sanitizer()
    assert sanitizer.text(text, "x.log") == text
    assert sanitizer.counts == {}


def test_the_issue_reproduction_a_quoted_password_in_a_command_record(tmp_path):
    """`export DB_PASSWORD="hunter2-prod"` in a JSONL command record used to leave the password
    and break the line; now the value goes and the line stays JSON."""
    line = json.dumps({"argv": ["bash", "-c", 'export DB_PASSWORD="hunter2-prod"; run']})
    out = run_sanitizer().file_text(line + "\n", "commands.jsonl")
    assert "hunter2" not in out
    assert json.loads(out.splitlines()[0])["argv"][2] == 'export DB_PASSWORD="[redacted:secret_name]"; run'


def test_a_key_named_like_a_secret_redacts_its_value_whatever_it_looks_like():
    document = {"env": {"DB_PASSWORD": "x", "PIN": 1234, "api_key": 77, "MAX_TOKENS": 4096, "token": ""}}
    out = run_sanitizer().value(document, "r.json")
    assert out["env"] == {
        "DB_PASSWORD": "[redacted:secret_name]",
        "PIN": 1234,
        "api_key": "[redacted:secret_name]",
        "MAX_TOKENS": 4096,
        "token": "",
    }


# ---- properties -----------------------------------------------------------------------------

SAFE_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60)
QUOTINGS = [
    "{name}={value}",
    '{name}="{value}"',
    "{name}='{value}'",
    "{name}: {value}",
    '"{name}": "{value}"',
    "'{name}': '{value}'",
    '\\"{name}\\": \\"{value}\\"',
    "--{flag} {value}",
    "--{flag}={value}",
    "?{name}={value}&x=1",
    "export {name}={value}",
]
NAMES = ["DB_PASSWORD", "password", "OPENAI_API_KEY", "api_key", "X-Auth-Token", "client_secret", "HF_TOKEN"]
VALUES = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._+/=-]{7,30}", fullmatch=True)
SEPARATORS = st.sampled_from([" ", "\n", "\t", "; ", ", ", " && ", " | "])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prefix=SAFE_TEXT,
    suffix=SAFE_TEXT,
    quoting=st.sampled_from(QUOTINGS),
    name=st.sampled_from(NAMES),
    value=VALUES,
    left=SEPARATORS,
    right=SEPARATORS,
)
@example(prefix="", suffix="", quoting="{name}={value}", name="password", value="hunter2-prod", left=" ", right=" ")
def test_a_named_secret_never_survives_in_any_position_or_quoting(prefix, suffix, quoting, name, value, left, right):
    planted = quoting.format(name=name, flag=name.lower().replace("_", "-"), value=value)
    text = f"{prefix}{left}{planted}{right}{suffix}"
    out = run_sanitizer().text(text, "x.log")
    assert value not in out.replace(prefix, "").replace(suffix, "") or value in f"{prefix}{suffix}"


@settings(max_examples=200, deadline=None)
@given(
    text=st.one_of(
        SAFE_TEXT, st.lists(st.sampled_from([p[1] for p in ALL_PLANTED] + BENIGN), max_size=5).map("\n".join)
    )
)
def test_sanitizing_is_idempotent(text):
    once = run_sanitizer().text(text, "x.log")
    assert run_sanitizer().text(once, "x.log") == once


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | SAFE_TEXT
    | st.sampled_from([p[1] for p in PLANTED]),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from([*NAMES, "argv", "kind", "t"]) | SAFE_TEXT, children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(document=JSON_VALUES)
def test_json_stays_valid_and_planted_secrets_go(document):
    out = run_sanitizer().file_text(json.dumps(document), "x.json")
    json.loads(out)
    for _, text, secret in PLANTED:
        if text in json.dumps(document, ensure_ascii=False) or json.dumps(text)[1:-1] in json.dumps(document):
            assert secret not in out


@settings(max_examples=200, deadline=None)
@given(benign=st.lists(st.sampled_from(BENIGN), min_size=1, max_size=4), glue=SEPARATORS)
def test_benign_strings_are_kept_in_any_company(benign, glue):
    text = glue.join(benign)
    assert run_sanitizer().text(text, "x.log") == text


# ---- the audit agrees, and a second opinion finds nothing it misses ---------------------------


def test_the_audit_finds_every_planted_form_without_printing_it(tmp_path):
    for index, (_, text, _) in enumerate(ALL_PLANTED):
        (tmp_path / f"planted-{index}.log").write_text(f"line one\n{text}\n")
    findings = audit([tmp_path], run_sanitizer())
    found_files = {f.location.split(":")[0].rsplit("/", 1)[-1] for f in findings}
    missed = [form for index, (form, _, _) in enumerate(ALL_PLANTED) if f"planted-{index}.log" not in found_files]
    assert missed == []
    shown = "\n".join(map(str, findings))
    assert not [secret for _, _, secret in ALL_PLANTED if secret in shown]


def _detect_secrets(path: Path) -> set[tuple[str, int]]:
    """detect-secrets (its pattern plugins; entropy and public-IP plugins off) over `path`."""
    result = subprocess.run(
        [str(Path(sys.executable).parent / "detect-secrets"), "scan", "--all-files",
         "--disable-plugin", "Base64HighEntropyString", "--disable-plugin", "HexHighEntropyString",
         "--disable-plugin", "IPPublicDetector", str(path)],
        capture_output=True, text=True, timeout=120, check=True, cwd=path,
    )  # fmt: skip
    found = json.loads(result.stdout)["results"]
    return {(Path(name).name, entry["line_number"]) for name, entries in found.items() for entry in entries}


def test_detect_secrets_finds_nothing_the_audit_misses(tmp_path):
    """A second, independent scanner over the planted corpus: every line it flags, the audit
    flags too. Over a sanitized copy it flags nothing at all."""
    raw, clean = tmp_path / "raw", tmp_path / "clean"
    raw.mkdir(), clean.mkdir()
    lines = [text.replace("\n", " ") for _, text, _ in ALL_PLANTED] + BENIGN
    (raw / "corpus.log").write_text("\n".join(lines) + "\n")
    theirs = _detect_secrets(raw)
    assert len(theirs) >= 10, "the second opinion must actually be looking"
    ours = {
        (f.location.split("/")[-1].split(":")[0], int(f.location.rsplit(":", 1)[1]))
        for f in audit([raw], run_sanitizer())
    }
    assert theirs - ours == set()
    (clean / "corpus.log").write_text(run_sanitizer().text((raw / "corpus.log").read_text(), "corpus.log"))
    assert _detect_secrets(clean) == set()


def test_detect_secrets_over_a_real_bundle_finds_nothing_the_audit_misses(tmp_path):
    """A bundle written from a run whose outputs carry planted canaries (the bundle tests'
    run): whatever the second opinion flags in the bundle, the audit flags too."""
    from tests.reports.test_bundle import _bundle

    bundle = _bundle(tmp_path, Sanitizer(path_roots={str(tmp_path): "<run>"}, user_names=["ddcanaryuser"]))
    theirs = _detect_secrets(bundle)
    ours = {
        (f.location.split("/")[-1].split(":")[0], int(f.location.rsplit(":", 1)[1]))
        for f in audit([bundle])
        if ":" in f.location
    }
    assert theirs - ours == set(), theirs
