"""The layer order in pyproject.toml holds, and breaking it fails `make test` with a message
that names the offending import (a control: the contract must be able to fail)."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import dd_accept

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(dd_accept.__file__).parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint_imports(config: Path, package_parent: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(package_parent)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(config), "--no-cache"],
        cwd=package_parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_layer_contracts_are_kept() -> None:
    result = _lint_imports(ROOT / "pyproject.toml", PACKAGE.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 2 kept, 0 broken." in result.stdout


def _lint_a_copy_with(tmp_path: Path, module: str, addition: str) -> subprocess.CompletedProcess[str]:
    """lint-imports over a copy of the package in which `module` (a path inside it) gains
    `addition`: the contracts must be able to fail."""
    copy = tmp_path / "src"
    shutil.copytree(PACKAGE, copy / "dd_accept", ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / "dd_accept" / module
    target.write_text(target.read_text() + addition)
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return _lint_imports(tmp_path / "pyproject.toml", copy)


def test_an_upward_import_inside_a_function_breaks_the_build(tmp_path: Path) -> None:
    upward = "\n\ndef _upward():\n    from dd_accept.harness import runner  # noqa\n"
    result = _lint_a_copy_with(tmp_path, "slurm_docker/layout.py", upward)
    assert result.returncode == 1, result.stdout
    assert "Layers only point down BROKEN" in result.stdout
    assert "dd_accept.slurm_docker is not allowed to import dd_accept.harness" in result.stdout
    assert "dd_accept.slurm_docker.layout -> dd_accept.harness.runner" in result.stdout


def test_node_programs_cannot_import_host_only_packages(tmp_path: Path) -> None:
    result = _lint_a_copy_with(tmp_path, "node/probe.py", "\n\ndef _heavy():\n    import docker  # noqa\n")
    assert result.returncode == 1, result.stdout
    assert "dd_accept.node.probe -> docker" in result.stdout


def _function_level_imports() -> list[tuple[str, str]]:
    """(where, statement) of every import of dd_accept inside a function."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
                if any(name.split(".")[0] == "dd_accept" for name in names):
                    found.append((f"{path.relative_to(PACKAGE.parent)}:{node.lineno}", ast.unparse(node)))
    return found


def test_no_import_of_dd_accept_hides_inside_a_function() -> None:
    """With the layers kept there is no cycle to dodge, so every import of dd_accept sits at
    the top of its module, where a reader (and import-linter's report) sees it. What must not
    load at start (below) is kept out where the third-party package is used, not by hiding
    dd_accept's own modules."""
    assert _function_level_imports() == []


# Loaded by every pytest session in the environment (the plugin) or by every CLI start
# (--help, usage errors, `verify`), where no cluster is made and no version is shown: none
# of these may load at import (together 250 ms of CPU per start).
HEAVY = ("docker", "jinja2", "requests", "importlib.metadata")


@pytest.mark.parametrize(
    ("module", "its_host"),
    [("dd_accept.plugin", "pytest"), ("dd_accept.harness.cli", "sys")],  # what pytest loads itself is not the plugin's
)
def test_starting_the_cli_or_the_plugin_loads_no_heavy_package(module: str, its_host: str) -> None:
    probe = (
        f"import sys, {its_host}; before = set(sys.modules); import {module}; "
        f"print(sorted(set({HEAVY!r}) & (set(sys.modules) - before)))"
    )
    shown = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert shown.strip() == "[]", f"importing {module} loads {shown.strip()}"


def test_the_sdk_is_imported_on_first_use() -> None:
    """The control of the test above: the lazy SDK does load docker once it is used."""
    probe = (
        "import sys; from dd_accept.slurm_docker.sdk import docker; before = 'docker' in sys.modules; "
        "error = docker.errors.APIError; print(before, 'docker.errors' in sys.modules, error.__module__)"
    )
    shown = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert shown.split() == ["False", "True", "docker.errors"]


def test_the_layer_order_is_the_one_the_readme_draws() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c for c in config["contracts"] if c["id"] == "layers")["layers"]
    readme = (ROOT / "docs" / "contributing.md").read_text()
    drawn = readme[readme.index("<!-- layers -->") : readme.index("<!-- /layers -->")]
    picture = drawn.split("```")[1]
    rows = [re.split(r"\s{2,}", line)[0] for line in picture.splitlines() if line and not line.startswith(" ")]
    assert rows == layers, "docs/contributing.md draws other layers, or another order, than pyproject.toml"
