"""`audit` on a source tree: each finding shows its rule and why it matched, never what (the
few characters before the placeholder of the line as sanitized), and a reviewed baseline
accepts findings by file, rule and a salted digest of the line, so a changed or a new line is
found again. The leak cases are a red-team read of the excerpt (session 17)."""

import json
import re
import tarfile

import pytest

from tests.helpers import run_cli

SECRET = "sk-live-" + "9f3a7c1e5b2d4f6a8c0e"


def _tree(tmp_path, extra=""):
    tree = tmp_path / "src"
    tree.mkdir(exist_ok=True)
    (tree / "sorting.py").write_text("def order(attempts):\n    return sorted(attempts, key=lambda a: a.started)\n")
    (tree / "settings.py").write_text(f'API_TOKEN = "{SECRET}"\n{extra}')
    return tree


def test_each_finding_names_its_rule_and_shows_why_it_matched_never_the_secret(tmp_path):
    tree = _tree(tmp_path)
    result = run_cli("audit", str(tree))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert "src/sorting.py:2: secret_name  | return sorted(attempts, key=[redacted:secret_name]" in lines, lines
    assert any(line.startswith("src/settings.py:1: ") and "[redacted" in line for line in lines), lines
    assert SECRET not in result.stdout + result.stderr
    document = json.loads(run_cli("--json", "audit", str(tree)).stdout)
    assert all(SECRET not in f.get("excerpt", "") and "fingerprint" not in f for f in document["findings"])


LEAKS = {
    # JSON lines are judged value by value: a line of them read as text would not be redacted alike
    "escaped.jsonl": '{"pass\\u0077ord": "CANARYhunter22"}\n',
    "punct.jsonl": '{"Password (prod)": "CANARYhunter23"}\n',
    "pretty.json": '{\n  "pass\\u0077ord": "CANARYhunter24",\n  "x": "a\\nb\\nsk-proj-' + "a" * 40 + '"\n}\n',
    # a value that opens a bracket is redacted whole, not to its bracket
    "bracket.txt": 'password: ["CANARYlist25"]\napi_token = {"v": "CANARYdict25"}\n',
    # what the sanitizer did not catch, beside what it did: words holding a digit are masked
    "two.txt": f"login with {SECRET} then PIN CANARY826 and db:CANARYpass27\n",
    # a file cannot write to the reader's terminal
    "ansi.txt": f"\x1b[8mCANARYhidden\x1b[2K\rfake: clean token={SECRET}\n",
    # a name can hold a secret too
    "password=CANARYname28.txt": f"x {SECRET}\n",
}


@pytest.mark.parametrize("name", sorted(LEAKS))
def test_no_excerpt_prints_a_secret_or_a_control_character(tmp_path, name):
    (tmp_path / name).write_text(LEAKS[name])
    for argv in (("audit", str(tmp_path / name)), ("--json", "audit", str(tmp_path / name))):
        result = run_cli(*argv)
        shown = result.stdout + result.stderr
        assert result.returncode == 1, shown
        assert not re.search(r"CANARY\w{2,}|hunter2|sk-live-9f", shown), shown
        assert "\x1b" not in shown and "\r" not in shown.replace("\r\n", "\n")


def test_an_archived_bundle_is_audited_for_the_names_it_recorded(tmp_path):
    """A bundle's user and host names are redacted by digest (redactions.json): its archive
    must be audited for them as its directory is, or a line naming them would be shown."""
    from dd_accept.reports.sanitize import Sanitizer

    recorder = Sanitizer(user_names=["alice42"], host_name=["gpuhost7"])
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "redactions.json").write_text(json.dumps({"host_identity": recorder.identity_record()}))
    (bundle / "log.txt").write_text(f"ssh alice42@gpuhost7 {SECRET}\n")
    with tarfile.open(tmp_path / "b.tar.gz", "w:gz") as archive:
        archive.add(bundle, arcname="b")
    for path in (bundle, tmp_path / "b.tar.gz"):
        result = run_cli("audit", str(path))
        assert result.returncode == 1 and "host_identity" in result.stdout, result.stdout
        assert "alice42" not in result.stdout and "gpuhost7" not in result.stdout, result.stdout


def test_a_reviewed_baseline_accepts_what_it_names_and_a_changed_line_is_found_again(tmp_path):
    tree = _tree(tmp_path)
    baseline = tmp_path / "audit-baseline.tsv"
    written = run_cli("audit", str(tree), "--write-baseline", str(baseline))
    text = baseline.read_text()
    assert written.returncode == 0 and text.startswith("# dd-accept audit baseline") and "# salt: " in text
    assert f"written to …/{tmp_path.name}/audit-baseline.tsv" in written.stdout and str(tmp_path) not in written.stdout
    nowhere = run_cli("audit", str(tree), "--write-baseline", str(tmp_path / "absent" / "b.tsv"))
    assert nowhere.returncode == 2 and nowhere.stderr.count("\n") == 1, nowhere.stderr
    assert "audit: cannot write …/absent/b.tsv: its directory does not exist" in nowhere.stderr, nowhere.stderr
    assert SECRET not in text and "lambda" not in text, "the baseline holds digests, never the lines"
    accepted = run_cli("audit", str(tree), "--baseline", str(baseline))
    assert accepted.returncode == 0 and "accepted by the baseline" in accepted.stdout, accepted.stdout
    # the same secret on a new line, and the old line changed: both found again
    _tree(tmp_path, extra=f'BACKUP_TOKEN = "{SECRET}"\n')
    (tree / "sorting.py").write_text("def order(attempts):\n    return sorted(attempts, key=lambda a: a.ended)\n")
    again = run_cli("--json", "audit", str(tree), "--baseline", str(baseline))
    found = {(f["location"], f["rule"]) for f in json.loads(again.stdout)["findings"]}
    assert again.returncode == 1 and ("src/sorting.py:2", "secret_name") in found, found
    assert any(location == "src/settings.py:2" for location, _ in found), found
    assert json.loads(again.stdout)["accepted"] >= 1


def test_a_baseline_that_is_not_one_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "b.tsv"
    bad.write_text("src/x.py secret_name\n")
    result = run_cli("audit", str(_tree(tmp_path)), "--baseline", str(bad))
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "b.tsv:1: not FILE<TAB>RULE<TAB>DIGEST" in result.stderr
    bad.write_text("# dd-accept audit baseline\n")
    saltless = run_cli("audit", str(_tree(tmp_path)), "--baseline", str(bad))
    assert saltless.returncode == 2 and "no `# salt: HEX` line" in saltless.stderr
