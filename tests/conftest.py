pytest_plugins = ["pytester"]

# `make test` runs two workers, each handed whole files in collection order (--dist
# loadfile). Started last, a file of several minutes (a login-node cluster, node loss)
# would run alone at the end while the other worker idles; collected first, the long
# cluster files overlap and the many short unit files fill the gaps. Longest first, by
# directory (within one, the order stays as collected).
LONGEST_FIRST = ("existing", "controls", "gate", "sut", "cluster")


def pytest_collection_modifyitems(items):
    def weight(item) -> int:
        parts = item.nodeid.split("/")
        where = parts[1] if len(parts) > 2 and parts[0] == "tests" else ""
        return LONGEST_FIRST.index(where) if where in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=weight)
