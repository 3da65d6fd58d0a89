"""The docker SDK, imported where it is first used rather than where it is named.

Every command of the CLI loads the cluster machinery (its options, plans and records), but
only the commands that reach the engine need the SDK, which with requests and urllib3 costs
about 150 ms of CPU per start: `--help`, a dry run, `verify`, `report` and every usage
error paid it, and the tests start the CLI some 400 times. The modules here name
`docker.errors.APIError` and the like at run time only (their annotations are strings), so
an attribute read is the first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any


class _ImportedOnFirstUse:
    def __getattr__(self, name: str) -> Any:
        module = importlib.import_module("docker")
        for part in ("errors", "types"):  # the SDK's __init__ does not promise these
            importlib.import_module(f"docker.{part}")
        return getattr(module, name)


if TYPE_CHECKING:
    import docker
else:
    docker = _ImportedOnFirstUse()
