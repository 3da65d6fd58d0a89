"""dd-accept: acceptance harness for Slurm-hosted LLM runtimes."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("dd-accept")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+source"
