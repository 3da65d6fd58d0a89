"""The user documentation builds as a site (mkdocs-material) with --strict: a link to a page or
an anchor that is not there, or a page left out of the navigation, fails here, so splitting or
moving a page cannot silently break what the README's one screen links to."""

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

REPOSITORY = Path(__file__).parents[2]


def test_the_docs_build_strictly_and_every_page_is_in_the_navigation(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(tmp_path / "site")],
        cwd=REPOSITORY, capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    assert (tmp_path / "site" / "gates" / "index.html").is_file()
    config = yaml.safe_load((REPOSITORY / "mkdocs.yml").read_text())
    listed = {next(iter(entry.values())) for entry in config["nav"]}
    assert listed == {p.name for p in (REPOSITORY / "docs").glob("*.md")}


def test_the_readme_links_only_pages_that_exist_and_fits_one_screen():
    readme = (REPOSITORY / "README.md").read_text()
    for target in re.findall(r"\]\(([^)#]+)", readme):
        assert (REPOSITORY / target).exists(), target
    assert len(readme.split()) < 450 and max(len(line) for line in readme.splitlines()) <= 130


def test_the_user_docs_name_no_test_internals():
    """Test files and fault variants are the contributors' (docs/contributing.md, docs/benchmarks.md);
    a user's page says what is checked, not where the test is."""
    contributors = {"contributing.md", "benchmarks.md"}
    pages = [REPOSITORY / "README.md", *(p for p in (REPOSITORY / "docs").glob("*.md") if p.name not in contributors)]
    for page in pages:
        named = re.findall(r"tests/[\w/]+\.py|test_\w+\.py", page.read_text())
        assert not named, (page.name, named)
