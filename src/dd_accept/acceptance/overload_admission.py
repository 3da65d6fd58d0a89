"""Queue admission measured at the replicas, beyond the scenario's own: one replica left at
the SUT's default threshold from a cold start, and the admission evidence file
(`admission.jsonl`) that overload.admission.rejects is judged from."""

from __future__ import annotations

import json

from dd_accept import deployment
from dd_accept.slurm_docker.allocation import Allocation
from dd_accept.sut.profile import SutProfile

DEFAULT_THRESHOLD_PORT_BASE = deployment.REPLICA_PORT_BASE + 100  # beside the scenario's replicas
DEFAULT_THRESHOLD_RUN = "admission-default"  # its own run directory's label


def at_default_threshold(
    allocation: Allocation,
    profile: SutProfile,
    retry_after: int,
    seed: int,
    fast: tuple[str, ...],
) -> tuple[deployment.ColdStart, list[deployment.AdmissionSample]]:
    """One replica left at the SUT's default threshold (no override), started cold: held one
    above it before its middleware has read the queue (how long does it fail open?), then it
    admits at that depth and rejects one above it."""
    default = profile.queue_admission.default_threshold
    run = deployment.RunDirectory.create(allocation.cluster, DEFAULT_THRESHOLD_RUN)
    launch = {"profile": profile, "retry_after": retry_after, "options": fast, "seed": seed}
    replica = deployment.start_replicas(
        allocation, 1, run=run, port_base=DEFAULT_THRESHOLD_PORT_BASE, prime=False, **launch
    )
    # Down from the cold start's deeper queue: rc1 may still judge by that reading for its
    # staleness bound (1 s), so the depth it must admit at is watched once that has passed.
    settle_s = profile.queue_admission.stale_after_seconds + 0.5
    try:
        cold = replica.cold_start(0, depth=default + 1, threshold=default)
        return cold, [
            replica.hold_at(None, depth=default, threshold=default, settle_s=settle_s),
            replica.overload(None, depth=default + 1, threshold=default),
        ]
    finally:
        replica.stop()


def save_admission(
    run: deployment.RunDirectory, samples: list[deployment.AdmissionSample], cold: deployment.ColdStart | None
) -> None:
    _, path = run.path("admission.jsonl")
    rows = [sample.to_json() for sample in samples] + ([cold.to_json()] if cold else [])
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
