"""audit, verify and report through the CLI: exit statuses and one-line errors."""

from tests.helpers import run_cli


def test_audit_exit_statuses_and_output_never_show_the_secret(tmp_path):
    clean = tmp_path / "clean.txt"
    clean.write_text("nothing to see\n")
    assert run_cli("audit", str(clean)).returncode == 0
    dirty = tmp_path / "dirty.txt"
    dirty.write_text("a\nkey nvapi-ddcanary0123456789abcdefgh\n")
    result = run_cli("audit", str(dirty))
    assert result.returncode == 1
    assert result.stdout.strip() == "dirty.txt:2: ngc_key  | key [redacted:ngc_key]"  # why, never what
    assert "nvapi-ddcanary" not in result.stdout + result.stderr


def test_audit_and_verify_of_missing_paths_are_usage_errors(tmp_path):
    for args in (["audit", str(tmp_path / "nope")], ["verify", str(tmp_path / "nope")], ["report", str(tmp_path)]):
        result = run_cli(*args)
        assert result.returncode == 2 and result.stderr.startswith("dd-accept: error: "), result.stderr
        assert "Traceback" not in result.stderr


def test_verify_of_a_directory_without_manifest_is_bad_input_in_one_line(tmp_path):
    result = run_cli("verify", str(tmp_path))
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "is not a readable dd-accept bundle: missing: manifest.json" in result.stderr
