import fcntl
import os

import pytest

pytest_plugins = ["pytester"]

# `make test` runs three workers, each handed whole files in collection order (--dist
# loadfile). Started last, a file of several minutes (a login-node cluster, node loss)
# would run alone at the end while the other worker idles; collected first, the long
# cluster files overlap. Longest first, by directory (within one, the order stays as
# collected); the short files (unit, reports, architecture) go between them, a few after
# each: a cluster test waits on Slurm and paced streams more than it computes, so the short
# files' CPU fills that wait instead of piling up at the end (CI: the shared stage was 80%
# busy on average, 64-86% in its first half and 90-96% in its last minutes).
LONGEST_FIRST = ("existing", "controls", "gate", "sut", "cluster")


def _is_exclusive(item) -> bool:
    return item.get_closest_marker("exclusive") is not None


# Module node id -> "exclusive" (it holds an `exclusive` test) or "shared".
MACHINE_SHARE: dict[str, str] = {}


def _weight(item) -> float:
    if _is_exclusive(item):
        return len(LONGEST_FIRST) - 0.5
    parts = item.nodeid.split("/")
    where = parts[1] if len(parts) > 2 and parts[0] == "tests" else ""
    return LONGEST_FIRST.index(where) if where in LONGEST_FIRST else len(LONGEST_FIRST)


def spread(long: list, short: list) -> list:
    """`long` in its order with `short` spread evenly between its members, in their order."""
    order, taken = [], 0
    for index, member in enumerate(long):
        order.append(member)
        upto = round((index + 1) * len(short) / len(long))
        order += short[taken:upto]
        taken = upto
    return order + short[taken:]


def pytest_collection_modifyitems(items):
    """Longest first, the short files spread between the long ones; the tests that need the
    machine to themselves last among the cluster files, so that the other workers spend
    their time on other files rather than waiting."""
    items.sort(key=_weight)
    modules: dict[str, list] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::")[0], []).append(item)
    long = [m for m, held in modules.items() if _weight(held[0]) < len(LONGEST_FIRST)]
    short = [m for m, held in modules.items() if _weight(held[0]) >= len(LONGEST_FIRST)]
    items[:] = [item for module in spread(long, short) for item in modules[module]]
    for item in items:
        module = item.nodeid.split("::")[0]
        if _is_exclusive(item):
            MACHINE_SHARE[module] = "exclusive"
        else:
            MACHINE_SHARE.setdefault(module, "shared")


@pytest.fixture(scope="module", autouse=True)
def _machine_share(request, tmp_path_factory):
    """Tests that measure capacity need the machine to themselves, and saturate it: beside
    another cluster test, a timing check of that test judges the machine (CI: rc1 blamed for
    299 ms per event beside a capacity run); beside unit tests, capacity's proxy waits for a
    CPU 41-46% of the time and its knee is not its own. A module holding an `exclusive` test
    holds this lock alone; every other module shares it. `make test` runs the exclusive tests
    on their own after the others (scripts/test.sh); the lock keeps any other `pytest -n`
    run honest too. Held per module (--dist loadfile keeps a module on one worker) and
    autouse, so it is taken before the module's own fixtures run their scenarios."""
    share = MACHINE_SHARE.get(request.node.nodeid)
    if share is None:
        yield
        return
    # the workers' common root (each worker's basetemp is one level below it)
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    handle = os.open(root / "machine-share.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX if share == "exclusive" else fcntl.LOCK_SH)
        yield
    finally:
        os.close(handle)  # closing releases the lock
