"""Strict TOML tables → frozen dataclasses, for every file a user hands dd-accept.

SUT profiles and gate files share one rule: an unknown key, a missing key or a value of the
wrong type is a usage error naming the file and the key, so a typo cannot silently change
what a run checks. Fields with a default are optional; nested dataclasses are sub-tables.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
import types
import typing
from typing import Any, get_type_hints

from dd_accept.base.errors import UsageError


def parse_toml(text: str, kind: str, source: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise UsageError(f"{kind} {source} is not valid TOML: {error}") from None


def _optional_inner(hint: Any) -> Any | None:
    """`X | None` → X; anything else → None."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        inner = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if len(inner) == 1:
            return inner[0]
    return None


def _describe(hint: Any) -> str:
    if typing.get_origin(hint) is tuple:
        return f"a list of {typing.get_args(hint)[0].__name__}"
    return {float: "a number", int: "a whole number", bool: "true or false", str: "a string"}.get(hint, str(hint))


def _value(hint: Any, value: Any, key: str, kind: str, source: str) -> Any:
    inner = _optional_inner(hint)
    if inner is not None:
        return _value(inner, value, key, kind, source)
    if dataclasses.is_dataclass(hint):
        return build_table(hint, value, key, kind, source)
    if typing.get_origin(hint) is tuple:
        (item,) = {arg for arg in typing.get_args(hint) if arg is not Ellipsis}
        if not isinstance(value, list):
            raise UsageError(f"{kind} {source}: {key} must be {_describe(hint)}, got {type(value).__name__}")
        return tuple(_value(item, element, f"{key}[{i}]", kind, source) for i, element in enumerate(value))
    accepted = {str: str, int: int, float: (int, float), bool: bool}[hint]
    if not isinstance(value, accepted) or (hint is not bool and isinstance(value, bool)):
        raise UsageError(f"{kind} {source}: {key} must be {_describe(hint)}, got {type(value).__name__}")
    if hint is float and not math.isfinite(value):
        raise UsageError(f"{kind} {source}: {key} must be a finite number, got {value}")
    return float(value) if hint is float else value


def build_table(cls: type, data: Any, where: str, kind: str, source: str) -> Any:
    """Build `cls` from a TOML table, naming `kind source: where.key` in every complaint."""
    if not isinstance(data, dict):
        raise UsageError(f"{kind} {source}: [{where}] must be a table")
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        key = f"{where}.{unknown[0]}" if where else unknown[0]
        raise UsageError(f"{kind} {source}: unknown key {key} (known: {', '.join(sorted(fields))})")
    values = {}
    for name, field in fields.items():
        key = f"{where}.{name}" if where else name
        if name not in data:
            has_default = field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
            if not has_default:
                raise UsageError(f"{kind} {source}: missing key {key}")
            continue
        values[name] = _value(hints[name], data[name], key, kind, source)
    try:
        return cls(**values)
    except ValueError as error:  # a table's own rule (its __post_init__), named with the file
        raise UsageError(f"{kind} {source}: {error}") from None
