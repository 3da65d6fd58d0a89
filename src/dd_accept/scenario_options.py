"""The scenarios' user options, each defined once: name, type, default, lower bound and help.

`dd-accept run` arguments, the pytest plugin's `--dd-*` options, gate-file `[options]` keys
and the runner's pytest argv are all derived from the fields marked here, so adding an
option is one field (plus its use in the scenario), and the three front ends cannot drift.
This module sits at the bottom of the house: it imports nothing of dd-accept.
"""

from __future__ import annotations

from dataclasses import Field, dataclass, field, fields
from typing import Any


def option(default: int, minimum: int, help_text: str) -> Any:
    """A user option: a dataclass field whose metadata the front ends read."""
    return field(default=default, metadata={"option": True, "minimum": minimum, "help": help_text})


@dataclass(frozen=True, slots=True)
class OverloadOptions:
    replicas: int = option(8, 1, "synthetic replicas behind the proxy")
    overloaded: int = option(2, 1, "replicas held in overload during partial overload")
    queue_depth: int = option(7, 1, "waiting requests held on each overloaded replica (the seed's acceptance ran at 7)")
    threshold: int = option(0, 0, "queue admission threshold, the SUT's override (its own default is 128)")
    retry_after: int = option(3, 1, "Retry-After seconds the replicas' queue admission sends")
    admission_limit: int = option(8, 1, "the SUT client's initial admission limit")
    records: int = option(32, 1, "records per client run")
    recovery_records: int = 40
    decrease_wait_s: float = 30.0  # two rounds take ~2 x Retry-After on a correct SUT
    seed: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.replicas <= 64:
            raise ValueError("--replicas must be between 1 and 64")
        if not 1 <= self.overloaded < self.replicas:
            raise ValueError(
                "--overloaded must be at least 1 and below --replicas: partial overload needs a replica left"
            )
        if self.queue_depth <= self.threshold:
            raise ValueError("--queue-depth must be above --threshold, or nothing is overloaded")
        if self.retry_after < 1 or self.admission_limit < 1 or self.records < 1 or self.threshold < 0:
            raise ValueError("--retry-after, --admission-limit and --records must be positive, --threshold >= 0")


def user_options(model: type = OverloadOptions) -> tuple[Field[Any], ...]:
    """The fields of `model` that users set (CLI, pytest, gate files), in declaration order."""
    return tuple(f for f in fields(model) if f.metadata.get("option"))


def flag(option_field: Field[Any], prefix: str = "--") -> str:
    """`queue_depth` → `--queue-depth` (CLI) or, with prefix "--dd-", `--dd-queue-depth` (pytest)."""
    return prefix + option_field.name.replace("_", "-")
