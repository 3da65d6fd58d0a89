"""The user options, each defined once: one typed model per concern.

A model is a frozen dataclass whose fields marked with `option(...)` carry everything the
front ends need: the type (the annotation), the default, the bounds or choices and the help.
`dd-accept run`'s arguments, the pytest plugin's `--dd-*` options, gate-file keys, the
runner's pytest argv and the dry-run plan are all derived from these fields, so adding an
option is one field (plus its use in a scenario), and the front ends cannot drift. Rules
that relate two fields live in the model's `__post_init__`, written in terms of CLI flags;
each front end renames the flags to its own spelling (`--dd-x`, `section.x`).

This module sits at the bottom of the house: it imports nothing of dd-accept.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import Field, dataclass, field, fields
from typing import Any

from dd_accept.base.slurm_releases import DEFAULT_PROCTRACK, DEFAULT_RELEASE, PROCTRACK, RELEASES

MISSING = dataclasses.MISSING


def option(
    default: Any,
    help_text: str,
    *,
    minimum: float | None = None,
    above: float | None = None,
    choices: tuple[str, ...] | None = None,
    flag: str | None = None,
    gate_key: str | None = None,
    pytest_flag: str | None = None,
    metavar: str | None = None,
    unit: str = "seconds",
) -> Any:
    """A user option: a dataclass field whose metadata the front ends read.

    `flag` names the CLI flag when the field's name does not read well as one (`srun_args`
    is `--srun-arg`, given once per value); `gate_key` names its gate-file key when that file
    spells it differently; `pytest_flag` the pytest option where the plugin's older option
    of the same name means something else (`--dd-cluster` names the session cluster)."""
    metadata = {
        "option": True,
        "help": help_text,
        "minimum": minimum,
        "above": above,
        "choices": choices,
        "flag": flag,
        "gate_key": gate_key,
        "pytest_flag": pytest_flag,
        "metavar": metavar,
        "unit": unit,
    }
    if isinstance(default, tuple):
        return field(default_factory=lambda: default, metadata=metadata)
    return field(default=default, metadata=metadata)


def user_options(model: type | None = None) -> tuple[Field[Any], ...]:
    """The fields of `model` that users set (CLI, pytest, gate files), in declaration order."""
    return tuple(f for f in fields(model or OverloadOptions) if f.metadata.get("option"))


def flag(option_field: Field[Any], prefix: str = "--") -> str:
    """`queue_depth` → `--queue-depth` (CLI) or, with prefix "--dd-", `--dd-queue-depth` (pytest)."""
    meta = option_field.metadata
    name = (prefix != "--" and meta.get("pytest_flag")) or meta.get("flag") or option_field.name.replace("_", "-")
    return prefix + name


def gate_key(option_field: Field[Any]) -> str:
    return option_field.metadata.get("gate_key") or option_field.name


def default_of(option_field: Field[Any]) -> Any:
    if option_field.default_factory is not MISSING:
        return option_field.default_factory()
    return option_field.default


def _hints(model: type) -> dict[str, Any]:
    return typing.get_type_hints(model)


def _scalar(hint: Any) -> tuple[type, bool]:
    """(scalar type, repeated) of a field's annotation; `X | None` is X."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    if typing.get_origin(hint) is tuple:
        return typing.get_args(hint)[0], True
    return hint, False


def _describe(option_field: Field[Any], kind: type) -> str:
    meta = option_field.metadata
    if meta["choices"]:
        return f"one of {', '.join(meta['choices'])}"
    if kind is int:
        return "a whole number" + (f" >= {meta['minimum']:g}" if meta["minimum"] is not None else "")
    if kind is float:
        bound = f" > {meta['above']:g}" if meta["above"] is not None else ""
        return f"a number of {meta.get('unit', 'seconds')}" + bound
    return "a string"


def convert(option_field: Field[Any], kind: type, value: Any, name: str) -> Any:
    """One value of an option, from text (CLI, pytest) or TOML; ValueError names `name`."""
    meta = option_field.metadata
    try:
        if kind is int:
            if isinstance(value, bool) or not isinstance(value, int | str):
                raise ValueError
            converted: Any = int(value, 10) if isinstance(value, str) else value
        elif kind is float:
            if isinstance(value, bool) or not isinstance(value, int | float | str):
                raise ValueError
            converted = float(value)
        else:
            if not isinstance(value, str):
                raise ValueError
            converted = value
    except ValueError:
        converted = None
    if isinstance(converted, float) and not math.isfinite(converted):
        converted = None  # inf and nan are never a count, a rate or a time
    out_of_bounds = converted is None or (
        (meta["choices"] and converted not in meta["choices"])
        or (meta["minimum"] is not None and converted < meta["minimum"])
        or (meta["above"] is not None and not converted > meta["above"])
    )
    if out_of_bounds:
        raise ValueError(f"{name} must be {_describe(option_field, kind)}, got {value!r}")
    return converted


def add_arguments(
    add: Callable[..., Any], model: type, prefix: str = "--", only: tuple[str, ...] | None = None
) -> None:
    """Declare every option of `model` with `add` (argparse's `add_argument` or pytest's
    `addoption`). Nothing is converted here: `build` does it, so both front ends report a
    bad value the same way. The default shown is the model's; the parsed default is None
    (or empty), so `build` can tell an option given from one left alone."""
    for option_field in user_options(model):
        if only is not None and option_field.name not in only:
            continue
        meta = option_field.metadata
        _, repeated = _scalar(_hints(model)[option_field.name])
        default = default_of(option_field)
        kwargs: dict[str, Any] = {"help": meta["help"], "dest": _dest(option_field, prefix)}
        if meta["choices"]:
            kwargs["choices"] = meta["choices"]
        kind, _ = _scalar(_hints(model)[option_field.name])
        kwargs["metavar"] = meta["metavar"] or _METAVARS.get(kind)
        if repeated:
            kwargs.update(action="append", default=[])
            kwargs["help"] += " (repeat; default: none)"
        else:
            kwargs["default"] = None
            if "(default:" not in meta["help"]:  # a help text that words its own default keeps it
                kwargs["help"] += f" (default: {'none' if default is None else default})"
        add(flag(option_field, prefix), **kwargs)


_METAVARS: dict[type, str] = {int: "N", float: "SECONDS"}  # a str option names its own metavar


def _dest(option_field: Field[Any], prefix: str) -> str:
    return (prefix.strip("-").replace("-", "_") + "_" if prefix != "--" else "") + option_field.name


def given(model: type, lookup: Callable[[str], Any], prefix: str = "--") -> dict[str, Any]:
    """The raw values of `model`'s options a front end holds, by field name, left-alone
    options (None, empty) dropped. `lookup(dest)` reads one parsed value."""
    values = {}
    for option_field in user_options(model):
        raw = lookup(_dest(option_field, prefix))
        if raw is None or raw == [] or raw == ():
            continue
        values[option_field.name] = raw
    return values


def build(model: type, raw: Mapping[str, Any], names: Callable[[Field[Any]], str] | None = None, **extra: Any) -> Any:
    """`model` from raw values (text or TOML values) by field name, converted and checked.

    Raises ValueError naming the option as `names(field)` spells it (default: the CLI
    flag); the model's own cross-field rules speak in CLI flags and are renamed the same way."""
    spell = names or flag
    hints = _hints(model)
    values = {}
    for option_field in user_options(model):
        if option_field.name not in raw:
            continue
        kind, repeated = _scalar(hints[option_field.name])
        value = raw[option_field.name]
        if repeated:
            items = value if isinstance(value, list | tuple) else [value]
            values[option_field.name] = tuple(convert(option_field, kind, item, spell(option_field)) for item in items)
        else:
            values[option_field.name] = convert(option_field, kind, value, spell(option_field))
    try:
        return model(**values, **extra)
    except ValueError as error:
        raise ValueError(rename_flags(str(error), model, spell)) from None


def rename_flags(message: str, model: type, names: Callable[[Field[Any]], str]) -> str:
    """A model's message, with its CLI flags spelled the way a front end spells them."""
    spelled = {flag(f): names(f) for f in user_options(model)}
    return re.sub(r"--[a-z][a-z0-9-]*", lambda m: spelled.get(m.group(0), m.group(0)), message)


def to_argv(instance: Any, prefix: str = "--dd-") -> list[str]:
    """The options of `instance` that differ from their defaults, as argv (the runner passes
    these to the pytest child, which builds the same instance from them)."""
    argv: list[str] = []
    for option_field in user_options(type(instance)):
        value = getattr(instance, option_field.name)
        if value == default_of(option_field):
            continue
        if isinstance(value, tuple):
            argv += [f"{flag(option_field, prefix)}={item}" for item in value]
        else:
            argv += [flag(option_field, prefix), str(value)]
    return argv


def gate_fields(model: type) -> list[tuple[str, Any, Any]]:
    """`make_dataclass` fields for a gate-file section holding `model`'s options."""
    hints = _hints(model)
    out = []
    for option_field in user_options(model):
        default = default_of(option_field)
        factory = field(default_factory=lambda d=default: d) if isinstance(default, tuple) else field(default=default)
        out.append((gate_key(option_field), hints[option_field.name], factory))
    return out


def from_gate(model: type, section: Any, where: str, **extra: Any) -> Any:
    """`model` from a parsed gate-file section; complaints name `where.key`."""
    raw = {f.name: getattr(section, gate_key(f)) for f in user_options(model)}
    raw = {name: value for name, value in raw.items() if value is not None}
    return build(model, raw, lambda f: f"{where}.{gate_key(f)}", **extra)


def _refuse_given(instance: Any, names: tuple[str, ...], applies_to: str) -> None:
    """An option given where it has no effect is a usage error, never silently ignored."""
    for name in names:
        if getattr(instance, name) not in (None, ()):
            raise ValueError(f"{flag(type(instance).__dataclass_fields__[name])} applies to {applies_to} only")


# ---- the models ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OverloadOptions:
    replicas: int = option(8, "synthetic replicas behind the proxy", minimum=1)
    overloaded: int | None = option(
        None, "replicas held in overload during partial overload (default: 2, at most --replicas minus 1)", minimum=1
    )
    queue_depth: int = option(
        7, "waiting requests held on each overloaded replica (the seed's acceptance ran at 7)", minimum=1
    )
    threshold: int = option(0, "queue admission threshold, the SUT's override (its own default is 128)", minimum=0)
    retry_after: int = option(3, "Retry-After seconds the replicas' queue admission sends", minimum=1)
    admission_limit: int = option(8, "the SUT client's initial admission limit", minimum=1)
    records: int = option(32, "records per client run", minimum=1)
    recovery_records: int = 40
    decrease_wait_s: float = 30.0  # two rounds take ~2 x Retry-After on a correct SUT
    # The load client's own deadline per phase: what a SUT that never lets a record through
    # costs the run before its checks judge what it did.
    partial_deadline_s: float = 120.0
    total_deadline_s: float = 150.0
    seed: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.replicas <= 64:
            raise ValueError("--replicas must be between 1 and 64")
        if self.overloaded is not None and not 1 <= self.overloaded < self.replicas:
            raise ValueError(
                "--overloaded must be at least 1 and below --replicas: partial overload needs a replica left"
            )
        if self.queue_depth <= self.threshold:
            raise ValueError("--queue-depth must be above --threshold, or nothing is overloaded")
        if self.retry_after < 1 or self.admission_limit < 1 or self.records < 1 or self.threshold < 0:
            raise ValueError("--retry-after, --admission-limit and --records must be positive, --threshold >= 0")

    @property
    def partial_overloaded(self) -> int:
        """Replicas held in partial overload: as given, else 2, leaving at least one serving
        (so `--replicas 2` alone is a valid run, and scenarios that never overload never fail
        on it). 0 only at one replica, where partial overload cannot run."""
        return self.overloaded if self.overloaded is not None else max(0, min(2, self.replicas - 1))

    def check_partial_overload(self) -> None:
        """For a run that overloads: partial overload needs a replica left to fail over to."""
        if self.partial_overloaded < 1:
            raise ValueError("the overload scenario needs --replicas 2 or more: partial overload keeps one serving")


@dataclass(frozen=True, slots=True)
class DrainOptions:
    """The SUT profile's drain timing, replaced for one run (None: the profile's own)."""

    window_seconds: float | None = option(
        None,
        "seconds; replaces the SUT profile's drain window (default: the profile's)",
        above=0,
        flag="drain-window",
        gate_key="drain_window_s",
    )
    allowance_seconds: float | None = option(
        None,
        "seconds; replaces the SUT profile's drain allowance (default: the profile's)",
        above=0,
        flag="drain-allowance",
        gate_key="drain_allowance_s",
    )

    def __post_init__(self) -> None:
        window, allowance = self.window_seconds, self.allowance_seconds
        if window is not None and allowance is not None and allowance < window:
            raise ValueError("--drain-allowance must be at least --drain-window")

    def overrides(self) -> dict[str, float]:
        """The profile fields to replace, by their names in the profile's [drain] table."""
        return {f.name: getattr(self, f.name) for f in user_options(DrainOptions) if getattr(self, f.name) is not None}


@dataclass(frozen=True, slots=True)
class ClusterOptions:
    """Where to run, and what a site needs on its allocations and steps."""

    mode: str = option(
        "docker",
        "existing: this machine is a login node of a real Slurm cluster (srun, salloc, scancel on PATH)",
        choices=("docker", "existing"),
        flag="cluster",
        pytest_flag="cluster-mode",
    )
    run_dir: str | None = option(
        None, "existing cluster: absolute path of a directory every node shares", metavar="DIR"
    )
    partition: str | None = option(
        None, "existing cluster: partition of the allocations (default: the site's)", metavar="NAME"
    )
    account: str | None = option(
        None, "existing cluster: account of the allocations (default: the user's)", metavar="NAME"
    )
    time: str | None = option(
        None, "existing cluster: time limit of the allocations, e.g. 30:00 (default: the partition's)", metavar="LIMIT"
    )
    gres: str | None = option(
        None, "existing cluster: generic resources of the allocations, e.g. gpu:8", metavar="TYPE:N"
    )
    srun_args: tuple[str, ...] = option((), "existing cluster: extra srun argument", flag="srun-arg", metavar="ARG")
    slurm: str | None = option(
        None,
        "docker cluster: Slurm release of the nodes, from the Debian suite that carries it: "
        + ", ".join(f"{r.version} ({r.suite})" for r in RELEASES.values())
        + f" (default: {DEFAULT_RELEASE})",
        choices=tuple(RELEASES),
        metavar="RELEASE",
    )
    slurm_config: str | None = option(
        None,
        "docker cluster: process tracking, a site setting: linuxproc (task/none) or cgroup "
        f"(proctrack/cgroup with task/cgroup; needs a cgroup v1 host) (default: {DEFAULT_PROCTRACK})",
        choices=PROCTRACK,
    )

    def __post_init__(self) -> None:
        if self.mode == "docker":
            _refuse_given(self, ("run_dir", "partition", "account", "time", "gres", "srun_args"), "--cluster existing")
        else:
            _refuse_given(self, ("slurm", "slurm_config"), "--cluster docker")

    @property
    def release(self) -> str:
        """The docker cluster's Slurm release (the default when none was chosen)."""
        return self.slurm or DEFAULT_RELEASE

    @property
    def proctrack(self) -> str:
        """The docker cluster's process tracking (linuxproc when none was chosen)."""
        return self.slurm_config or DEFAULT_PROCTRACK

    def salloc_args(self) -> tuple[str, ...]:
        pairs = (("--partition", self.partition), ("--account", self.account), ("--gres", self.gres))
        return tuple(f"{option_flag}={value}" for option_flag, value in pairs if value)


@dataclass(frozen=True, slots=True)
class BackendOptions:
    """Which replicas serve: synthetic vLLM stand-ins, or `vllm serve` (overload only)."""

    backend: str = option(
        "synthetic",
        "vllm: `vllm serve` replicas, steered by real load (overload scenario only)",
        choices=("synthetic", "vllm"),
        gate_key="kind",
    )
    model: str | None = option(
        None, "vllm: the model `vllm serve` loads (default: none; --backend vllm needs it)", metavar="NAME_OR_PATH"
    )
    gpus_per_replica: int | None = option(None, "vllm: GPUs per replica step (default: 1; 0: no --gres)", minimum=0)
    vllm_args: tuple[str, ...] = option((), "vllm: extra `vllm serve` argument", flag="vllm-arg", metavar="ARG")
    vllm_command: str | None = option(
        None,
        "vllm: how to run vllm on the nodes, e.g. '/opt/vllm/bin/vllm' (default: the SUT venv's bin/vllm)",
        metavar="CMD",
    )

    def __post_init__(self) -> None:
        if self.backend == "synthetic":
            _refuse_given(self, ("model", "gpus_per_replica", "vllm_args", "vllm_command"), "--backend vllm")
        elif not self.model:
            raise ValueError("--backend vllm needs --model MODEL (what `vllm serve` loads)")


LOAD_MODES = ("concurrency", "constant", "poisson")


@dataclass(frozen=True, slots=True)
class CapacityOptions:
    """How the capacity scenario raises the load: a ladder of levels, each `--load-factor`
    times the one before, every level held `--level-seconds`, until the SLO breaks."""

    load_mode: str = option(
        "concurrency",
        "capacity: streams held in flight (concurrency), or requests arriving at a rate, evenly (constant) "
        "or as a seeded Poisson process (poisson), as vLLM's bench serve and guidellm send them",
        choices=LOAD_MODES,
    )
    load_start: float | None = option(
        None,
        "capacity: the first level, streams in flight or requests/s (default: 8 streams; 40 requests/s)",
        above=0,
        unit="streams or requests/s",
        metavar="N",
    )
    load_factor: float = option(
        1.5, "capacity: each level's load over the one before", above=1, unit="times", metavar="FACTOR"
    )
    load_levels: int = option(12, "capacity: the most levels the ladder climbs, 2 to 30", minimum=2)
    level_seconds: float = option(3.0, "capacity: seconds each level sends new requests", above=0)
    slo_added_ttft_ms: float = option(
        150.0,
        "capacity SLO: the proxy's added time to first token, p95 (ms)",
        above=0,
        unit="milliseconds",
        metavar="MS",
    )
    slo_chunk_delay_ms: float = option(
        25.0,
        "capacity SLO: each chunk's delay from the replica's write to the client's read, p95 (ms)",
        above=0,
        unit="milliseconds",
        metavar="MS",
    )

    knee_floor: float | None = option(
        None,
        "capacity: output tokens/s the knee must reach (default: the SUT profile's)",
        above=0,
        unit="tokens/s",
        metavar="TOK_S",
    )
    max_cpu_per_chunk_us: float | None = option(
        None,
        "capacity: the most proxy CPU per forwarded chunk, microseconds (default: the SUT profile's)",
        above=0,
        unit="microseconds",
        metavar="US",
    )

    def __post_init__(self) -> None:
        if self.load_mode == "concurrency" and self.load_start is not None and self.load_start != int(self.load_start):
            raise ValueError("--load-start must be a whole number of streams with --load-mode concurrency")
        if self.load_start is not None and self.load_start < 0.1:
            raise ValueError("--load-start must be at least 0.1 (requests/s) or 1 (stream)")
        if self.load_levels > 30:
            raise ValueError("--load-levels must be between 2 and 30")
        if self.level_seconds > 3600:
            raise ValueError("--level-seconds must be at most 3600")
        top = self.levels()[-1]
        if top > 100_000:
            raise ValueError(
                f"the ladder would climb to {top:g} {self.unit()}: lower --load-start, --load-factor or --load-levels"
            )

    @property
    def start(self) -> float:
        return self.load_start if self.load_start is not None else (8 if self.load_mode == "concurrency" else 40)

    def levels(self) -> list[float]:
        """The ladder: whole streams in concurrency mode (each level above the one before),
        requests/s rounded to 0.1 at a rate."""
        found: list[float] = []
        value = self.start
        for _ in range(self.load_levels):
            if self.load_mode == "concurrency":
                level = float(max(round(value), int(found[-1]) + 1 if found else 1))
            else:  # always climbing, by at least 0.1 requests/s
                level = max(round(value, 1), round(found[-1] + 0.1, 1) if found else 0.1)
            found.append(level)
            value = level * self.load_factor
        return found

    def unit(self) -> str:
        return "streams in flight" if self.load_mode == "concurrency" else "requests/s"

    def ladder(self) -> tuple[tuple[str, float], ...]:
        """How the ladder is built, as the knee's metrics carry it (regressions.LADDER): two
        knees compare only when these are equal."""
        return (
            ("ladder_mode", float(LOAD_MODES.index(self.load_mode))),
            ("ladder_start", float(self.start)),
            ("ladder_factor", self.load_factor),
            ("ladder_levels", float(self.load_levels)),
            ("level_seconds", self.level_seconds),
            ("slo_added_ttft_ms", self.slo_added_ttft_ms),
            ("slo_chunk_delay_ms", self.slo_chunk_delay_ms),
        )


MODELS: tuple[type, ...] = (OverloadOptions, DrainOptions, ClusterOptions, BackendOptions, CapacityOptions)


def parse_argv_values(parser_values: argparse.Namespace, model: type, prefix: str = "--") -> dict[str, Any]:
    """`given` over an argparse namespace."""
    return given(model, lambda dest: getattr(parser_values, dest, None), prefix)
