"""Local IndexFile / IndexService: the seed's byte layout, slot chains, rolling, retention."""

from __future__ import annotations

import itertools
import os
import struct

import pytest

from tiered_core.codec import index_key_hash
from tiered_core.errors import StateConflict
from tiered_core.codec.local_index import HEADER_SIZE, ITEM_SIZE, SLOT_SIZE, index_file_name, parse_index_file_name
from tiered_core.local.index_file import IndexFile, IndexService

SLOTS = 8
ITEMS = 6


def _read(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _header(raw: bytes) -> tuple:
    return struct.unpack_from(">qqqqii", raw, 0)


def _item(raw: bytes, n: int) -> tuple:
    return struct.unpack_from(">iqii", raw, HEADER_SIZE + SLOTS * SLOT_SIZE + n * ITEM_SIZE)


def _slot(raw: bytes, h: int) -> int:
    return struct.unpack_from(">i", raw, HEADER_SIZE + (h % SLOTS) * SLOT_SIZE)[0]


def test_layout_follows_the_seed(tmp_path):
    path = str(tmp_path / "20260101000000000")
    f = IndexFile(path, SLOTS, ITEMS, create=True)
    assert os.path.getsize(path) == HEADER_SIZE + SLOTS * 4 + ITEMS * 20 == 40 + 32 + 120
    h1, h2, h3 = 11, 11 + SLOTS, 12  # h1 and h2 share a slot
    assert f.put(h1, 100, 10_000)
    assert f.put(h2, 200, 12_500)
    assert f.put(h3, 300, 15_999)
    f.flush()
    raw = _read(path)
    # begin/end timestamp, begin/end phy offset, hash slot count (puts), index count (next number)
    assert _header(raw) == (10_000, 15_999, 100, 300, 3, 4)
    # item: key hash, phy offset, seconds since begin, previous item of the slot
    assert _item(raw, 1) == (h1, 100, 0, 0)
    assert _item(raw, 2) == (h2, 200, 2, 1)
    assert _item(raw, 3) == (h3, 300, 5, 0)
    assert _slot(raw, h1) == 2 and _slot(raw, h3) == 3
    assert _slot(raw, 13) == 0
    # chains are walked newest first and filtered by the full hash
    assert f.select(h1, 0, 10**15, 10) == [100]
    assert f.select(h2, 0, 10**15, 10) == [200]
    assert f.select(h3, 0, 10**15, 10) == [300]
    assert f.select(13, 0, 10**15, 10) == []


def test_full_file_refuses_and_reopen_keeps_state(tmp_path):
    path = str(tmp_path / "20260101000000000")
    f = IndexFile(path, SLOTS, ITEMS, create=True)
    for i in range(ITEMS - 1):  # item numbers start at 1
        assert f.put(5, 1000 + i, 1000 * i)
    assert f.is_full()
    assert f.put(5, 9999, 9999) is False
    f.close()
    f = IndexFile(path, SLOTS, ITEMS)
    assert f.item_count == ITEMS - 1
    assert f.select(5, 0, 10**15, 100) == [1004, 1003, 1002, 1001, 1000]
    assert f.select(5, 0, 10**15, 2) == [1004, 1003]
    f.close()
    with pytest.raises(StateConflict):
        IndexFile(path, SLOTS * 2, ITEMS)


def test_time_range_uses_second_precision(tmp_path):
    f = IndexFile(str(tmp_path / "20260101000000000"), SLOTS, 20, create=True)
    for i, ts in enumerate([10_000, 11_400, 12_999, 14_000]):
        f.put(3, i, ts)
    # item times are stored as whole seconds after 10_000: 0, 1, 2, 4
    assert f.select(3, 11_500, 13_000, 10) == [2, 1]  # 11_400 lies in second 1 (11_000..11_999)
    assert f.select(3, 13_000, 13_999, 10) == []
    assert f.select(3, 0, 9_999, 10) == []
    assert f.select(3, 14_000, 14_000, 10) == [3]


def test_an_item_written_but_not_counted_keeps_the_chain(tmp_path):
    """Killed after writing item N and its slot but before the header counted it."""
    path = str(tmp_path / "20260101000000000")
    f = IndexFile(path, SLOTS, ITEMS, create=True)
    f.put(7, 10, 1000)
    f.put(7, 20, 2000)
    f.close()
    with open(path, "r+b") as fh:
        fh.seek(HEADER_SIZE + SLOTS * SLOT_SIZE + 3 * ITEM_SIZE)
        fh.write(struct.pack(">iqii", 7, 30, 2, 2))
        fh.seek(HEADER_SIZE + 7 * SLOT_SIZE)
        fh.write(struct.pack(">i", 3))
    f = IndexFile(path, SLOTS, ITEMS)
    assert f.item_count == 2
    assert f.select(7, 0, 10**15, 10) == [20, 10]
    f.put(7, 30, 3000)  # the replayed put
    assert f.select(7, 0, 10**15, 10) == [30, 20, 10]


def test_service_rolls_names_files_by_time_and_queries_across_them(tmp_path):
    times = itertools.count(1_767_225_600_000, 1000)  # 2026-01-01T00:00:00Z
    svc = IndexService(str(tmp_path), SLOTS, 5, clock=lambda: next(times))
    for i in range(10):
        assert svc.put_keys("orders", [f"k{i % 3}"], 100 * (i + 1), 1_767_225_600_000 + i * 1000) == 1
    names = sorted(os.listdir(tmp_path))
    assert len(names) == 3  # 4 items per file
    assert names[0] == index_file_name(1_767_225_600_000) == "20260101000000000"
    assert [parse_index_file_name(n) for n in names] == sorted(parse_index_file_name(n) for n in names)
    assert svc.query("orders", "k0", 10) == [1000, 700, 400, 100]
    assert svc.query("orders", "k0", 2) == [1000, 700]
    assert svc.query("orders", "k1", 10, begin=1_767_225_600_000 + 1000, end=1_767_225_600_000 + 4000) == [500, 200]
    assert svc.query("other", "k0", 10) == []
    # replays of already indexed messages are skipped
    assert svc.put_keys("orders", ["k0"], 1000, 0) == 0
    assert svc.max_phy_offset == 1000
    # the accept filter drops candidates before they count
    assert svc.query("orders", "k0", 2, accept=lambda phy: phy != 1000) == [700, 400]
    svc.close()
    svc = IndexService(str(tmp_path), SLOTS, 5)
    assert svc.query("orders", "k2", 10) == [900, 600, 300]
    # retention: files whose newest message is below the commit-log min go, never the newest
    assert svc.delete_expired(500) == 1
    assert len(os.listdir(tmp_path)) == 2
    assert svc.query("orders", "k0", 10) == [1000, 700]
    assert svc.delete_expired(10**9) == 1
    assert len(os.listdir(tmp_path)) == 1


def test_index_key_hash_is_abs_java_hash_of_topic_and_key():
    # "Aa" and "BB" have the same Java hashCode, so do t#Aa and t#BB
    assert index_key_hash("t", "Aa") == index_key_hash("t", "BB")
    assert index_key_hash("t", "Aa") != index_key_hash("t", "Ab")


def test_index_file_names():
    assert index_file_name(0) == "19700101000000000"
    assert index_file_name(1_767_225_600_123) == "20260101000000123"
    assert parse_index_file_name("20260101000000123") == 1_767_225_600_123
    assert parse_index_file_name("2026010100000012") is None
    assert parse_index_file_name("20261301000000123") is None


def _puts(f: IndexFile, items) -> None:
    for h, phy, ts in items:
        assert f.put(h, phy, ts)


def test_truncate_from_undoes_items_exactly(tmp_path):
    items = [(11, 100, 10_000), (19, 200, 11_000), (12, 300, 12_000), (11, 400, 13_000), (27, 500, 14_000)]
    fresh = IndexFile(str(tmp_path / "20260101000000000"), SLOTS, 12, create=True)
    _puts(fresh, items)
    f = IndexFile(str(tmp_path / "20260101000000001"), SLOTS, 12, create=True)
    _puts(f, items)
    assert f.truncate_from(300) == 3
    assert f.item_count == 2 and f.end_phy_offset == 200
    assert f.select(11, 0, 10**15, 10) == [100]
    assert f.select(12, 0, 10**15, 10) == []
    assert f.select(27, 0, 10**15, 10) == []
    _puts(f, items[2:])  # the replay
    fresh.flush()
    f.flush()
    body = slice(HEADER_SIZE, HEADER_SIZE + SLOTS * SLOT_SIZE + 12 * ITEM_SIZE)
    assert _read(f.path)[body] == _read(fresh.path)[body]
    assert _header(_read(f.path))[2:] == _header(_read(fresh.path))[2:]
    assert f.truncate_from(0) == 5
    assert f.item_count == 0 and f.select(11, 0, 10**15, 10) == []


def test_truncate_from_also_undoes_an_uncounted_item(tmp_path):
    path = str(tmp_path / "20260101000000000")
    f = IndexFile(path, SLOTS, ITEMS, create=True)
    _puts(f, [(7, 10, 1000), (7, 20, 2000)])
    f.close()
    with open(path, "r+b") as fh:  # item 3 and its slot landed, the header did not
        fh.seek(HEADER_SIZE + SLOTS * SLOT_SIZE + 3 * ITEM_SIZE)
        fh.write(struct.pack(">iqii", 7, 30, 2, 2))
        fh.seek(HEADER_SIZE + 7 * SLOT_SIZE)
        fh.write(struct.pack(">i", 3))
    f = IndexFile(path, SLOTS, ITEMS)
    assert f.truncate_from(20) == 1
    raw = _read(path)
    assert _slot(raw, 7) == 1
    assert f.select(7, 0, 10**15, 10) == [10]


def test_service_truncation_drops_emptied_files(tmp_path):
    svc = IndexService(str(tmp_path), SLOTS, 3)  # 2 items per file
    for i in range(7):
        svc.put_keys("t", [f"k{i}"], 100 * (i + 1), 1000 * (i + 1))
    assert len(svc.files) == 4
    assert svc.truncate_from(300) == 5
    assert len(svc.files) == 1 and svc.max_phy_offset == 200
    assert svc.query("t", "k4", 10) == [] and svc.query("t", "k1", 10) == [200]
    assert svc.put_keys("t", ["k2"], 300, 3000) == 1  # replayed
    assert svc.query("t", "k2", 10) == [300]
    assert svc.put_keys("t", ["k2"], 300, 3000) == 0  # but only once


def test_a_file_killed_between_create_and_size_opens_empty(tmp_path):
    # SIGKILL after O_CREAT|O_EXCL and before ftruncate leaves a 0-byte index file: it holds
    # nothing, so the next open sizes it instead of refusing every restart (seen in the
    # TORN SIGKILL test as "is 0 bytes but ... need ...").
    path = str(tmp_path / "20261123123142445")
    open(path, "wb").close()
    f = IndexFile(path, 64, 128)
    assert os.path.getsize(path) == f.file_size and f.item_count == 0
    assert f.put(5, 100, 1000)
    assert f.select(5, 0, 10**15, 10) == [100]
    f.close()
    # A file of the wrong non-zero size still stops the open: it may hold items.
    with open(path, "r+b") as fh:
        fh.truncate(100)
    with pytest.raises(StateConflict):
        IndexFile(path, 64, 128)
