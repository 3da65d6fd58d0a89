"""Every JSON document dd-accept writes or prints, held to a published schema.

A release gate, an auditor's script and a dashboard read these documents without reading
dd-accept's code, so each one names its schema (`"schema": "dd-accept/<kind>/v<N>"`) and the
schema is published (`docs/schema/`, the same files as the package's). What dd-accept writes
is validated before it leaves: a document that departs from its own schema is a fault of
dd-accept and stops it, rather than reaching a consumer that trusted the schema. Schemas refer
to each other by `$id` (the run summary's checks are the results' checks), so a shape is
defined once.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where a document is validated: 120 ms a command that writes none need not pay
    import jsonschema
    from referencing import Registry

# Schema id -> its file in dd_accept/base/schemas (and docs/schema). One version per file:
# a reader that still reads an old version keeps its entry.
SCHEMA_FILES = {
    "dd-accept/results/v1": "results-v1.json",
    "dd-accept/results/v2": "results-v2.json",
    "dd-accept/results/v3": "results-v3.json",
    "dd-accept/results/v4": "results-v4.json",
    "dd-accept/results/v5": "results-v5.json",
    "dd-accept/results/v6": "results-v6.json",
    "dd-accept/run/v1": "run-v1.json",
    "dd-accept/verify/v1": "verify-v1.json",
    "dd-accept/verify/v2": "verify-v2.json",
    "dd-accept/audit/v1": "audit-v1.json",
    "dd-accept/compare/v1": "compare-v1.json",
    "dd-accept/gate/v1": "gate-v1.json",
    "dd-accept/doctor/v1": "doctor-v1.json",
    "dd-accept/cluster-status/v1": "cluster-status-v1.json",
    "dd-accept/checks/v1": "checks-v1.json",
    "dd-accept/error/v1": "error-v1.json",
}


def schema_text(schema_id: str) -> str:
    return resources.files("dd_accept.base").joinpath("schemas", SCHEMA_FILES[schema_id]).read_text()


@functools.cache
def _registry() -> Registry:
    from referencing import Registry, Resource

    resources_by_id = [(sid, Resource.from_contents(json.loads(schema_text(sid)))) for sid in SCHEMA_FILES]
    return Registry().with_resources(resources_by_id)


@functools.cache
def validator(schema_id: str) -> jsonschema.Draft202012Validator:
    import jsonschema

    return jsonschema.Draft202012Validator(json.loads(schema_text(schema_id)), registry=_registry())


def problem(document: Any, schema_id: str) -> str | None:
    """Where `document` departs from `schema_id`: the first place, or None."""
    import jsonschema

    error = jsonschema.exceptions.best_match(validator(schema_id).iter_errors(document))
    if error is None:
        return None
    where = "/".join(str(part) for part in error.absolute_path) or "the top level"
    return f"at {where}: {error.message[:200]}"


def checked(document: dict[str, Any]) -> dict[str, Any]:
    """`document` as dd-accept is about to write or print it, refused (AssertionError: a
    fault of dd-accept, never of the user's input) when it does not follow the schema it names."""
    schema_id = document.get("schema")
    if schema_id not in SCHEMA_FILES:
        raise AssertionError(f"dd-accept built a document naming no published schema: {schema_id!r}")
    found = problem(document, schema_id)
    if found:
        raise AssertionError(f"dd-accept's {schema_id} document does not follow its schema ({found})")
    return document
