"""The wheelhouse cache keeps the most recently used entries, never one a run may be reading."""

import os

from dd_accept.sut.wheelhouse import IN_USE_SECONDS, MANIFEST, evict_wheelhouses


def _cached(root, name, last_used):
    entry = root / name
    entry.mkdir()
    (entry / MANIFEST).write_text("{}")
    (entry / "x-1-py3-none-any.whl").write_bytes(b"w")
    os.utime(entry / MANIFEST, (last_used, last_used))
    return entry


def test_all_but_the_most_recently_used_are_evicted(tmp_path):
    now = 1_800_000_000.0
    for age_hours in range(6):
        _cached(tmp_path, f"h{age_hours}", now - (age_hours + 2) * 3600)
    (tmp_path / "tmp-in-progress").mkdir()  # a fetch under way has no manifest yet: not an entry
    removed = evict_wheelhouses(tmp_path, keep=3, now=now)
    assert sorted(removed) == ["h3", "h4", "h5"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h0", "h1", "h2", "tmp-in-progress"]


def test_one_used_within_the_hour_is_kept_beyond_the_count(tmp_path):
    now = 1_800_000_000.0
    for index in range(4):
        _cached(tmp_path, f"recent{index}", now - IN_USE_SECONDS / 2 - index)
    assert evict_wheelhouses(tmp_path, keep=1, now=now) == []
    assert len(list(tmp_path.iterdir())) == 4


def test_the_eviction_rule_is_one_for_every_cache():
    from dd_accept.base.state import beyond_keeping

    ages = {"a": 10.0, "b": 500.0, "c": 20.0, "d": 9000.0}
    # newest first: a (kept), c (used 20 s ago: protected), then b and d go
    assert beyond_keeping(ages, lambda k: 10_000.0 - ages[k], keep=1, protect_s=100.0, now=10_000.0) == ["b", "d"]
