"""Exit-status contract shared by every command.

Release gates branch on the exit status, so the meaning of each code is fixed here once:
0 all checks passed, 1 a check failed, 2 the run could not be judged (usage or environment).
"""

from __future__ import annotations

EXIT_PASS = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # Ctrl-C or TERM: 128 + SIGINT, as a shell reports it
EXIT_TIMED_OUT = 124  # `cluster exec` gave up waiting on its command, as coreutils' timeout reports it


class DDAcceptError(Exception):
    """Base for errors the CLI reports as one line with exit status 2."""

    exit_status = EXIT_USAGE


class UsageError(DDAcceptError):
    """The user asked for something that cannot be done (bad argument, unknown name)."""


class EnvironmentProblem(DDAcceptError):
    """The machine lacks something the run needs (Docker engine, debootstrap, disk)."""


class ClusterError(DDAcceptError):
    """The cluster could not be built, started or reached; the message carries log tails."""


class SutBehaviourMissing(Exception):
    """A behaviour of the SUT that a scenario waits on never happened (its proxy never became
    healthy, say). That is a finding about the SUT: it becomes a failed check named after the
    behaviour (exit 1), never "could not be judged" (exit 2, which is for the harness and
    the machine)."""

    def __init__(self, behaviour: str, expected: str, observed: str) -> None:
        super().__init__(f"{behaviour}: expected {expected}; observed {observed}")
        self.behaviour = behaviour
        self.expected = expected
        self.observed = observed
