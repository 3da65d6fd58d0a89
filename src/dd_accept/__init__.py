"""dd-accept: acceptance harness for Slurm-hosted LLM runtimes.

`__version__` is read from the installed metadata on first use, not at import: every process
on a compute node (replicas, load clients, probes) imports this package, and the metadata
scan cost each of them 60 ms of CPU for a version none of them reads.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("dd-accept")
    except PackageNotFoundError:  # running from a source tree without an install
        found = "0.0.0+source"
    globals()["__version__"] = found
    return found
