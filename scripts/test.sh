#!/usr/bin/env bash
# Lint, format check, images (built only when missing), then every test, cluster ones included.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check src tests benchmarks
.venv/bin/ruff format --check src tests benchmarks
.venv/bin/lint-imports --no-cache  # the layer order written in pyproject.toml
.venv/bin/dd-accept cluster build
.venv/bin/pytest -n 2 --dist loadfile "$@"
