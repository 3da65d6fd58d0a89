"""Exit-status contract shared by every command.

Release gates branch on the exit status, so the meaning of each code is fixed here once:
0 all checks passed, 1 a check failed, 2 the run could not be judged (usage or environment).
"""

from __future__ import annotations

EXIT_PASS = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2


class DDAcceptError(Exception):
    """Base for errors the CLI reports as one line with exit status 2."""

    exit_status = EXIT_USAGE


class UsageError(DDAcceptError):
    """The user asked for something that cannot be done (bad argument, unknown name)."""


class EnvironmentProblem(DDAcceptError):
    """The machine lacks something the run needs (Docker engine, debootstrap, disk)."""


class ClusterError(DDAcceptError):
    """The cluster could not be built, started or reached; the message carries log tails."""
