"""The machinery of user options, each defined once, in one typed model per concern.

A model is a frozen dataclass whose fields marked with `option(...)` carry everything the
front ends need: the type (the annotation), the default, the bounds or choices and the help;
its other fields are what its owner fixes. Each model lives with what it configures: a
scenario's in its module (`acceptance/<name>.py`, found through the scenario registry), and
the run's own where they are used (`ClusterOptions` in slurm_docker, `BackendOptions` with
the vLLM backend, `DrainTiming` with the SUT profile). `dd-accept run`'s arguments, the
pytest plugin's `--dd-*` options, gate-file keys, the request the runner hands its pytest
child and the dry-run plan are all derived from these fields, so adding an option is one
field (plus its use), and the front ends cannot drift. Rules that relate two fields live in
the model's `__post_init__`, written in terms of CLI flags; each front end renames the flags
to its own spelling (`--dd-x`, `section.x`).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import Field, field, fields
from typing import Any

MISSING = dataclasses.MISSING


def option(
    default: Any,
    help_text: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    above: float | None = None,
    choices: tuple[str, ...] | None = None,
    flag: str | None = None,
    gate_key: str | None = None,
    pytest_flag: str | None = None,
    metavar: str | None = None,
    unit: str = "seconds",
    in_gate: bool = True,
) -> Any:
    """A user option: a dataclass field whose metadata the front ends read.

    `flag` names the CLI flag when the field's name does not read well as one (`srun_args`
    is `--srun-arg`, given once per value); `gate_key` names its gate-file key when that file
    spells it differently; `pytest_flag` the pytest option where the plugin's older option
    of the same name means something else (`--dd-cluster` names the session cluster);
    `in_gate=False` keeps it out of gate files (what only a person at a terminal sets, or a
    secret such as a client header). A bool option is a switch: given, it is on."""
    metadata = {
        "option": True,
        "help": help_text,
        "minimum": minimum,
        "maximum": maximum,
        "above": above,
        "choices": choices,
        "flag": flag,
        "gate_key": gate_key,
        "pytest_flag": pytest_flag,
        "metavar": metavar,
        "unit": unit,
        "in_gate": in_gate,
    }
    if default is True:  # a switch (store_true) is off unless given: one on by default could not be turned off
        raise TypeError(f"a switch must default to False, not True: {help_text!r}")
    if isinstance(default, tuple):
        return field(default_factory=lambda: default, metadata=metadata)
    return field(default=default, metadata=metadata)


def user_options(model: type) -> tuple[Field[Any], ...]:
    """The fields of `model` that users set (CLI, pytest, gate files), in declaration order."""
    return tuple(f for f in fields(model) if f.metadata.get("option"))


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
    if kind is bool:
        return "true or false"
    if kind is int:
        if meta["minimum"] is not None and meta["maximum"] is not None:
            return f"a whole number from {meta['minimum']:g} to {meta['maximum']:g}"
        return "a whole number" + (f" >= {meta['minimum']:g}" if meta["minimum"] is not None else "")
    if kind is float:
        bound = f" > {meta['above']:g}" if meta["above"] is not None else ""
        bound += f" and at most {meta['maximum']:g}" if meta["maximum"] is not None else ""
        return f"a number of {meta.get('unit', 'seconds')}" + bound
    return "a string"


def convert(option_field: Field[Any], kind: type, value: Any, name: str) -> Any:
    """One value of an option, from text (CLI, pytest) or TOML; ValueError names `name`."""
    meta = option_field.metadata
    try:
        if kind is bool:
            if not isinstance(value, bool):
                raise ValueError
            converted: Any = value
        elif kind is int:
            if isinstance(value, bool) or not isinstance(value, int | str):
                raise ValueError
            converted = int(value, 10) if isinstance(value, str) else value
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
        or (meta["maximum"] is not None and converted > meta["maximum"])
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
        kwargs["metavar"] = meta["metavar"] or _metavar(kind, meta["unit"])
        if kind is bool:  # a switch: None when left alone, so that `given` drops it
            kwargs.update(action="store_true", default=None)
            del kwargs["metavar"]
        elif repeated:
            kwargs.update(action="append", default=[])
            kwargs["help"] += " (repeat; default: none)"
        else:
            kwargs["default"] = None
            if "(default:" not in meta["help"]:  # a help text that words its own default keeps it
                kwargs["help"] += f" (default: {'none' if default is None else default})"
        add(flag(option_field, prefix), **kwargs)


# A number's metavar names its unit (a str option names its own; one in a unit not here, N).
UNIT_METAVARS = {
    "seconds": "SECONDS",
    "milliseconds": "MS",
    "microseconds": "US",
    "tokens/s": "TOK_S",
    "times": "FACTOR",
}


def _metavar(kind: type, unit: str) -> str | None:
    if kind is float:
        return UNIT_METAVARS.get(unit, "N")
    return "N" if kind is int else None


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
        elif isinstance(value, bool):
            argv += [flag(option_field, prefix)] if value else []
        else:
            argv += [flag(option_field, prefix), str(value)]
    return argv


def gate_options(model: type) -> tuple[Field[Any], ...]:
    return tuple(f for f in user_options(model) if f.metadata["in_gate"])


def gate_fields(model: type) -> list[tuple[str, Any, Any]]:
    """`make_dataclass` fields for a gate-file section holding `model`'s options."""
    hints = _hints(model)
    out = []
    for option_field in gate_options(model):
        default = default_of(option_field)
        factory = field(default_factory=lambda d=default: d) if isinstance(default, tuple) else field(default=default)
        out.append((gate_key(option_field), hints[option_field.name], factory))
    return out


def gate_values(model: type, section: Any) -> dict[str, Any]:
    """The raw values of `model`'s options a parsed gate-file section holds, by field name
    (keys left unset, None, dropped)."""
    raw = {f.name: getattr(section, gate_key(f)) for f in gate_options(model)}
    return {name: value for name, value in raw.items() if value is not None}


def from_gate(model: type, section: Any, where: str, **extra: Any) -> Any:
    """`model` from a parsed gate-file section; complaints name `where.key`."""
    return build(model, gate_values(model, section), lambda f: f"{where}.{gate_key(f)}", **extra)


def refuse_given(instance: Any, names: tuple[str, ...], applies_to: str) -> None:
    """An option given where it has no effect is a usage error, never silently ignored."""
    for name in names:
        if getattr(instance, name) not in (None, ()):
            raise ValueError(f"{flag(type(instance).__dataclass_fields__[name])} applies to {applies_to} only")


def parse_argv_values(parser_values: argparse.Namespace, model: type, prefix: str = "--") -> dict[str, Any]:
    """`given` over an argparse namespace."""
    return given(model, lambda dest: getattr(parser_values, dest, None), prefix)


def raw_values(instance: Any) -> dict[str, Any]:
    """The options of `instance` that differ from their defaults, by field name, as JSON holds
    them (the request the runner hands its pytest child; `build` reads them back)."""
    values: dict[str, Any] = {}
    for option_field in user_options(type(instance)):
        value = getattr(instance, option_field.name)
        if value != default_of(option_field):
            values[option_field.name] = list(value) if isinstance(value, tuple) else value
    return values
