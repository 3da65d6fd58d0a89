#!/usr/bin/env bash
# The main job: the overload scenario against the SUT (default: data-designer-slurm rc1),
# 8 synthetic replicas, on a fresh dockerized Slurm cluster. Extra arguments pass through,
# e.g. `make accept ARGS="--sut ./my.whl"`. With GATE=FILE it runs that release gate file
# instead: `make accept GATE=docs/gate.example.toml`.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -n ${GATE:-} ]]; then
    exec .venv/bin/dd-accept gate --config "${GATE}" "$@"
fi
exec .venv/bin/dd-accept run overload --replicas 8 "$@"
