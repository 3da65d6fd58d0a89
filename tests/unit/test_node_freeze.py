"""Losing a node (docker pause) on a busy machine: runc's transient "unable to freeze" is
tried again, each try recorded; any other failure, or the transient one every time, is the
machine's error at once (a node still running must never be judged as lost)."""

import docker
import pytest

from dd_accept.slurm_docker import engine
from dd_accept.slurm_docker.records import CommandLog

TRANSIENT = "Cannot pause container f3e5: OCI runtime pause failed: unable to freeze: unknown"


class Container:
    """Fails its first pauses with the given messages, then pauses."""

    def __init__(self, *failures: str) -> None:
        self.failures, self.pauses = list(failures), 0

    def pause(self) -> None:
        self.pauses += 1
        if self.failures:
            raise docker.errors.APIError("500 Server Error", explanation=self.failures.pop(0))


@pytest.mark.parametrize(
    ("failures", "ok", "tries"),
    [
        ((), True, 1),
        ((TRANSIENT, TRANSIENT), True, 3),  # frozen at the third try
        ((TRANSIENT,) * 3, False, 3),  # every try: the machine's error
        (("OCI runtime pause failed: cannot toggle freezer: cgroups not configured for container",), False, 1),
    ],
)
def test_a_transient_freeze_failure_is_tried_again_and_every_try_is_recorded(failures, ok, tries):
    container, log = Container(*failures), CommandLog()
    record = engine.freeze(container, node="node2", log=log, wait_s=0.0)
    assert record.ok is ok and container.pauses == tries
    records = list(log)
    assert len(records) == tries and all(r.argv == ("docker", "pause", "node2") for r in records)
    assert [r.exit_code for r in records] == [1] * (tries - 1) + [0 if ok else 1]
