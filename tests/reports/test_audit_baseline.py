"""`audit` on a source tree: each finding shows its rule and the line as the sanitizer leaves
it (never what matched), and a reviewed baseline accepts findings by file, rule and the
line's digest, so a changed or a new line is found again."""

import json

from tests.helpers import run_cli

SECRET = "sk-live-" + "9f3a7c1e5b2d4f6a8c0e"


def _tree(tmp_path, extra=""):
    tree = tmp_path / "src"
    tree.mkdir(exist_ok=True)
    (tree / "sorting.py").write_text("def order(attempts):\n    return sorted(attempts, key=lambda a: a.started)\n")
    (tree / "settings.py").write_text(f'API_TOKEN = "{SECRET}"\n{extra}')
    return tree


def test_each_finding_names_its_rule_and_shows_the_line_sanitized_never_the_secret(tmp_path):
    tree = _tree(tmp_path)
    result = run_cli("audit", str(tree))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert any(
        line.startswith("src/sorting.py:2: secret_name  | return sorted(attempts, key=[redacted") for line in lines
    )
    assert any(line.startswith("src/settings.py:1: ") and "[redacted" in line for line in lines), lines
    assert SECRET not in result.stdout + result.stderr
    document = json.loads(run_cli("--json", "audit", str(tree)).stdout)
    assert all(len(f["fingerprint"]) == 16 and SECRET not in f["excerpt"] for f in document["findings"])


def test_a_reviewed_baseline_accepts_what_it_names_and_a_changed_line_is_found_again(tmp_path):
    tree = _tree(tmp_path)
    baseline = tmp_path / "audit-baseline.tsv"
    written = run_cli("audit", str(tree), "--write-baseline", str(baseline))
    assert written.returncode == 0 and baseline.read_text().startswith("# dd-accept audit baseline")
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
    assert "b.tsv:1: not FILE<TAB>RULE<TAB>FINGERPRINT" in result.stderr
