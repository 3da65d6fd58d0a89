"""The runtime manifest a SUT's own launch path reads: one endpoint step, for the drain drill.

data-designer-slurm's allocation runtime starts its steps from a JSON manifest its planner
writes (runtime/manifest.py, RuntimeStepSpec): entrypoint.sh's `dd_start_endpoints` reads it
with plan_reader.sh and launches each endpoint through step_runner.sh's `dd_start_step`. The
drain drill writes one here, so the endpoint starts the way the SUT starts it in production
(its srun options, its output redirection, whatever its launch path records of the step)
and the SUT's cleanup finds what that path left for it. Only the fields plan_reader.sh reads,
with a CPU step's values; nothing of the planner's own (plan digest, secrets) is needed there.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

ENDPOINT_STEP_ID = "drill-endpoint"


def endpoint_manifest(argv: Sequence[str], node: str, stdout_path: str, stderr_path: str) -> str:
    """The manifest of one native endpoint step running `argv` on `node`, one CPU, no GPU,
    its output in the two paths (separate files: the launch path truncates each)."""
    step = {
        "step_id": ENDPOINT_STEP_ID,
        "role": "endpoint",
        "execution": "native",
        "command": list(argv),
        "cpus": 1,
        "gpu_indices": [],
        "node_hosts": [node],
        "kill_on_bad_exit": False,
        "literal_environment": {},
        "secret_environment": {},
        "environment_prefixes": {},
        "container_environment": [],
        "stdout_path": stdout_path,
        "stderr_path": stderr_path,
        "launch_delay_seconds": 0,
        "readiness": [],
    }
    return json.dumps({"schema_version": 1, "all_secret_environment_names": [], "steps": [step]}, indent=1) + "\n"
