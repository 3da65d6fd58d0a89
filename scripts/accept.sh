#!/usr/bin/env bash
# The main job. Until `dd-accept run` exists: a 2-node cluster, `srun -N2 hostname`, down.
set -euo pipefail
cd "$(dirname "$0")/.."
name=dd-accept-smoke
trap '.venv/bin/dd-accept --quiet cluster down --name "${name}" >/dev/null 2>&1 || true' EXIT
.venv/bin/dd-accept cluster up --name "${name}" --nodes 2
.venv/bin/dd-accept cluster exec --name "${name}" -- srun -N2 hostname
