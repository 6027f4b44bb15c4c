"""The read-ahead cache: a bytes-bounded memory tier, and the diskcache tier behind it."""

from __future__ import annotations

from tiered_core.access.cache import ReadAheadCache, cache_key


def test_memory_tier_is_bounded_and_spills_to_disk(tmp_path):
    cache = ReadAheadCache(1000, 60_000, disk_path=str(tmp_path / "disk"))
    try:
        for i in range(10):
            cache.put(cache_key("t", 0, i), bytes([i]) * 300, tags_code=i)
        assert cache.size_bytes <= 1000 and cache.stats.evictions == 7
        assert cache.get(cache_key("t", 0, 0)) == (bytes([0]) * 300, 0)  # from disk
        assert cache.stats.disk_hits == 1
        assert cache.get(cache_key("t", 0, 9)) == (bytes([9]) * 300, 9)  # still in memory
        assert cache.get(cache_key("t", 1, 0)) is None and cache.stats.misses == 1
    finally:
        cache.close()


def test_without_a_disk_tier_evicted_entries_are_gone():
    cache = ReadAheadCache(1000, 60_000)
    for i in range(10):
        cache.put(cache_key("t", 0, i), b"x" * 300)
    assert cache.get(cache_key("t", 0, 0)) is None and cache.get(cache_key("t", 0, 9)) is not None
