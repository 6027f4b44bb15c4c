"""IndexStoreFile (local hash file), its compaction, and UploadedIndexFile over a real segment."""

from __future__ import annotations

import os
import struct
import threading
from collections import defaultdict

import pytest

from tiered_core.codec.hashing import index_key_hash
from tiered_core.errors import CorruptData, IllegalParam
from tiered_core.codec.tiered_index import BEGIN_MAGIC, END_MAGIC, IndexEntry
from tiered_core.index import IndexFileStatus, IndexStoreFile, UploadedIndexFile
from tiered_core.plugins import open_driver
from tiered_core.segment import FileSegment
from tiered_core.common import AppendResult, FileSegmentType

BEGIN = 1_700_000_000_000
T = "TopicTest"


def new_file(tmp_path, slots=5, max_items=20, begin=BEGIN) -> IndexStoreFile:
    return IndexStoreFile.create(str(tmp_path), begin, slot_count=slots, max_items=max_items)


def header_on_disk(path: str) -> tuple:
    with open(path, "rb") as fh:
        return struct.unpack(">iqqii", fh.read(28))


def put(f: IndexStoreFile, key: str, offset: int, ts: int, topic: str = T, topic_id: int = 1,
        queue_id: int = 0, size: int = 100) -> AppendResult:
    return f.put_key(topic, topic_id, queue_id, {key}, offset, size, ts)


@pytest.fixture
def f(tmp_path):
    file = new_file(tmp_path)
    yield file
    file.close()


# -- layout ---------------------------------------------------------------------------


def test_header_constants_and_positions(f):
    assert BEGIN_MAGIC == 0xCCDDEEFF ^ (1880681586 + 4)
    assert END_MAGIC == 0xCCDDEEFF ^ (1880681586 + 8)
    assert struct.unpack(">i", struct.pack(">I", BEGIN_MAGIC))[0] == -1127939447
    assert struct.unpack(">i", struct.pack(">I", END_MAGIC))[0] == -1127939451
    assert f.slot_position(2) == 28 + 16
    assert f.item_position(2) == 28 + 40 + 64
    assert index_key_hash("TopicTest", "MessageKey") == 638347386


def test_new_file_layout(f):
    assert os.path.basename(f.path) == str(BEGIN)
    assert os.path.getsize(f.path) == 28 + 5 * 8 + 20 * 32
    assert header_on_disk(f.path) == (-1127939447, BEGIN, 0, 0, 0)
    assert (f.status, f.end_timestamp, f.item_count, f.used_slot_count) == (IndexFileStatus.UNSEALED, 0, 0, 0)


def test_put_fills_file_then_file_full(f):
    assert f.put_key(T, 1, 0, set(), 0, 10, BEGIN) is AppendResult.SUCCESS
    assert f.put_key(T, 1, 0, ["", "  "], 0, 10, BEGIN) is AppendResult.SUCCESS
    assert f.item_count == 0
    for i in range(18):
        assert put(f, "MessageKey", i * 100, BEGIN + i) is AppendResult.SUCCESS
        assert (f.end_timestamp, f.used_slot_count, f.item_count) == (BEGIN + i, 1, i + 1)
    assert put(f, "MessageKey", 1800, BEGIN + 18) is AppendResult.SUCCESS
    assert f.item_count == 19 and f.sealed  # max_items - 1 items: full
    assert header_on_disk(f.path)[0] == -1127939451
    assert put(f, "MessageKey", 1900, BEGIN + 19) is AppendResult.FILE_FULL
    assert f.item_count == 19
    assert header_on_disk(f.path) == (-1127939451, BEGIN, BEGIN + 18, 1, 19)


def test_put_that_does_not_fit_writes_nothing(f):
    for i in range(17):
        assert put(f, f"k{i}", i, BEGIN) is AppendResult.SUCCESS
    assert f.put_key(T, 1, 0, ["a", "b", "c"], 99, 1, BEGIN) is AppendResult.FILE_FULL
    assert f.item_count == 17 and f.sealed
    assert f.query(T, "a", 10, 0, BEGIN * 2) == []


@pytest.mark.parametrize("kwargs", [
    dict(topic=""), dict(topic="  "), dict(topic_id=-1), dict(queue_id=1 << 31), dict(offset=-1),
    dict(size=-5), dict(timestamp=-1), dict(keys="abc"), dict(keys=[1]),
])
def test_put_rejects_bad_arguments(f, kwargs):
    args = dict(topic=T, topic_id=1, queue_id=0, keys={"k"}, offset=0, size=1, timestamp=BEGIN)
    args.update(kwargs)
    with pytest.raises(IllegalParam):
        f.put_key(**args)
    assert f.item_count == 0


def test_different_keys_use_their_slots(f):
    expected_slots = set()
    for t in range(5):
        for k in range(3):
            assert put(f, f"key{k}", t * 10 + k, BEGIN, topic=f"Topic{t}") is AppendResult.SUCCESS
            expected_slots.add(index_key_hash(f"Topic{t}", f"key{k}") % 5)
    assert f.item_count == 15
    assert f.used_slot_count == len(expected_slots)
    for t in range(5):
        for k in range(3):
            got = f.query(f"Topic{t}", f"key{k}", 10, 0, BEGIN + 1000)
            assert [(e.offset, e.store_timestamp) for e in got] == [(t * 10 + k, BEGIN)]


# -- queries --------------------------------------------------------------------------


def test_keys_sharing_a_slot_are_told_apart(tmp_path):
    f = new_file(tmp_path, slots=1, max_items=64)  # every key lands in the one slot
    keys = ["alpha", "beta", "gamma"]
    for round_ in range(3):
        for i, key in enumerate(keys):
            assert put(f, key, round_ * 10 + i, BEGIN + round_ * 1000) is AppendResult.SUCCESS
    assert f.used_slot_count == 1
    for i, key in enumerate(keys):
        got = f.query(T, key, 10, 0, BEGIN + 10_000)
        assert [e.offset for e in got] == [20 + i, 10 + i, i]  # newest first
        assert all(e.topic_id == 1 and e.size == 100 for e in got)


def test_colliding_hashes_and_topic_id_filter(f):
    # Java hashCode("Aa") == hashCode("BB"), so "Aa#k" and "BB#k" collide; so do keys "Aa"/"BB".
    assert index_key_hash("Aa", "k") == index_key_hash("BB", "k")
    assert put(f, "k", 1, BEGIN, topic="Aa", topic_id=7) is AppendResult.SUCCESS
    assert put(f, "k", 2, BEGIN, topic="BB", topic_id=8) is AppendResult.SUCCESS
    assert {e.offset for e in f.query("Aa", "k", 10, 0, BEGIN)} == {1, 2}  # a hash index: caller verifies
    assert [e.offset for e in f.query("Aa", "k", 10, 0, BEGIN, topic_id=7)] == [1]
    assert [e.offset for e in f.query("BB", "k", 10, 0, BEGIN, topic_id=8)] == [2]
    assert f.query("Aa", "other", 10, 0, BEGIN) == []


def test_time_window_has_second_granularity(f):
    stamps = {"d0": BEGIN + 500, "d1": BEGIN + 1500, "d2": BEGIN + 2999, "d10": BEGIN + 10_000}
    for i, (key, ts) in enumerate(stamps.items()):
        assert put(f, "k", i, ts) is AppendResult.SUCCESS

    def offsets(begin, end):
        return sorted(e.offset for e in f.query(T, "k", 10, begin, end))

    # The stored time is the whole second since the file's begin (RocketMQ #9358: ms, not s).
    got = {e.offset: e.store_timestamp for e in f.query(T, "k", 10, 0, BEGIN * 2)}
    assert got == {0: BEGIN, 1: BEGIN + 1000, 2: BEGIN + 2000, 3: BEGIN + 10_000}
    assert offsets(BEGIN + 1500, BEGIN + 1500) == [1]  # the exact store time finds it
    assert offsets(BEGIN + 1000, BEGIN + 1999) == [1]
    assert offsets(BEGIN + 2000, BEGIN + 9000) == [2]
    assert offsets(BEGIN + 3000, BEGIN + 9999) == []
    assert offsets(0, BEGIN + 999) == [0]
    assert offsets(BEGIN + 10_000, BEGIN + 10_000) == [3]
    assert offsets(BEGIN + 11_000, BEGIN * 2) == []
    assert offsets(BEGIN + 5, BEGIN + 4) == []  # begin > end


def test_messages_older_than_the_file_begin(f):
    assert put(f, "old", 1, BEGIN - 2500) is AppendResult.SUCCESS  # -2.5 s -> second -3
    assert put(f, "new", 2, BEGIN + 100) is AppendResult.SUCCESS
    assert f.min_timestamp == BEGIN - 3000
    assert [e.store_timestamp for e in f.query(T, "old", 5, BEGIN - 2600, BEGIN - 2400)] == [BEGIN - 3000]
    assert f.query(T, "old", 5, BEGIN - 1999, BEGIN) == []


@pytest.mark.parametrize("max_count", [0, 1, 2, 5, 9, 10, 11, 50])
def test_max_count_is_exact(f, max_count):
    for i in range(10):
        assert put(f, "hot", i, BEGIN + i * 1000) is AppendResult.SUCCESS
    got = f.query(T, "hot", max_count, 0, BEGIN * 2)
    assert len(got) == min(max_count, 10)
    assert [e.offset for e in got] == list(range(9, 9 - len(got), -1))


def test_scan_limit_bounds_the_chain_walk(f):
    for i in range(10):
        put(f, "hot", i, BEGIN)
    assert len(f.query(T, "hot", 10, 0, BEGIN, max_scan_items=3)) == 3


def test_query_rejects_bad_arguments(f):
    for args in [("", "k", 1, 0, BEGIN), (T, "", 1, 0, BEGIN), (T, None, 1, 0, BEGIN),
                 (T, "k", -1, 0, BEGIN), (T, "k", 1, None, BEGIN), (T, "k", 1, 0, 1.5)]:
        with pytest.raises(IllegalParam):
            f.query(*args)


def test_concurrent_puts_fill_exactly(f):
    results = []
    lock = threading.Lock()

    def worker(i):
        r = put(f, f"key{i}", i, BEGIN + i)
        with lock:
            results.append(r)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(19)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [AppendResult.SUCCESS] * 19
    assert put(f, "one-more", 99, BEGIN) is AppendResult.FILE_FULL
    assert f.item_count == 19
    for i in range(19):
        assert [e.offset for e in f.query(T, f"key{i}", 5, 0, BEGIN * 2)] == [i]


# -- reopen ---------------------------------------------------------------------------


def test_reopen_keeps_items_and_layout(tmp_path):
    f = new_file(tmp_path, slots=7, max_items=30)
    for i in range(10):
        put(f, f"k{i % 4}", i, BEGIN + i * 1000)
    put(f, "early", 100, BEGIN - 5000)
    before = {k: f.query(T, k, 20, 0, BEGIN * 2) for k in ["k0", "k1", "k2", "k3", "early"]}
    f.close()
    assert f.status is IndexFileStatus.SHUTDOWN
    # A different configured slot count does not matter: the file records its own.
    g = IndexStoreFile.open(f.path, default_slot_count=3)
    assert (g.slot_count, g.max_items, g.item_count, g.min_timestamp) == (7, 30, 11, BEGIN - 5000)
    assert g.status is IndexFileStatus.UNSEALED
    assert {k: g.query(T, k, 20, 0, BEGIN * 2) for k in before} == before
    assert put(g, "k0", 11, BEGIN + 20_000) is AppendResult.SUCCESS
    assert [e.offset for e in g.query(T, "k0", 2, 0, BEGIN * 2)] == [11, 8]
    g.close()


def test_reopen_sealed_file_stays_sealed(tmp_path):
    f = new_file(tmp_path, max_items=3)
    put(f, "a", 1, BEGIN)
    put(f, "b", 2, BEGIN)
    assert f.sealed
    f.close()
    g = IndexStoreFile.open(f.path, default_slot_count=5)
    assert g.sealed and put(g, "c", 3, BEGIN) is AppendResult.FILE_FULL
    g.close()


def test_open_rejects_foreign_files(tmp_path):
    bad_magic = tmp_path / "123"
    bad_magic.write_bytes(b"\x00" * (28 + 5 * 8 + 20 * 32))
    with pytest.raises(CorruptData):
        IndexStoreFile.open(str(bad_magic), default_slot_count=5)
    f = new_file(tmp_path, begin=456)
    put(f, "a", 1, 456)
    f.close()
    with open(f.path, "r+b") as fh:
        fh.truncate(28 + 5 * 8 + 20 * 32 - 7)  # cut
    with pytest.raises(CorruptData):
        IndexStoreFile.open(f.path, default_slot_count=5)
    short = tmp_path / "789"
    short.write_bytes(b"\x01")
    with pytest.raises(CorruptData):
        IndexStoreFile.open(str(short), default_slot_count=5)
    with pytest.raises(IllegalParam):
        IndexStoreFile.open(str(tmp_path / "notanumber"), default_slot_count=5)


def test_create_rejects_bad_layout(tmp_path):
    for slots, items in [(0, 10), (5, 1), (5, 1 << 30)]:
        with pytest.raises(IllegalParam):
            IndexStoreFile.create(str(tmp_path), BEGIN, slot_count=slots, max_items=items)


# -- compaction -----------------------------------------------------------------------


def expected_compacted(begin, end, slots, puts, shift_s=0) -> bytes:
    """Build the compacted file from first principles: per slot, newest first, 28-byte items."""
    by_slot = defaultdict(list)
    for key, topic_id, queue_id, offset, size, ts in puts:
        h = index_key_hash(T, key)
        by_slot[h % slots].append(struct.pack(">iiiqii", h, topic_id, queue_id, offset, size,
                                              (ts - begin) // 1000 - shift_s))
    used = len(by_slot)
    table, items = b"", b""
    pos = 28 + slots * 8
    for slot in range(slots):
        run = b"".join(reversed(by_slot[slot]))
        table += struct.pack(">ii", pos, len(run))
        items += run
        pos += len(run)
    header = struct.pack(">iqqii", -1127939451, begin + shift_s * 1000, end, used, len(puts))
    return header + table + items


def fill(f, puts):
    for key, topic_id, queue_id, offset, size, ts in puts:
        assert f.put_key(T, topic_id, queue_id, [key], offset, size, ts) is AppendResult.SUCCESS


def small_puts():
    keys = ["a", "b", "c", "d", "e", "a", "c", "a"]
    return [(k, 3, i % 2, 1000 + i * 64, 64 + i, BEGIN + i * 700) for i, k in enumerate(keys)]


def test_compaction_layout_is_byte_exact(tmp_path):
    f = new_file(tmp_path, slots=3, max_items=12)
    puts = small_puts()
    fill(f, puts)
    assert len({index_key_hash(T, p[0]) % 3 for p in puts}) >= 2  # the runs really differ
    with pytest.raises(IllegalParam):
        f.compacted_bytes()  # still open for keys
    f.seal()
    data = f.compacted_bytes()
    assert data == expected_compacted(BEGIN, puts[-1][5], 3, puts)
    assert len(data) == 28 + 3 * 8 + 28 * len(puts)
    # Every slot's (position, length) pair covers contiguous 28-byte items of that slot only.
    for slot in range(3):
        pos, length = struct.unpack_from(">ii", data, 28 + slot * 8)
        assert length % 28 == 0
        for p in range(pos, pos + length, 28):
            assert struct.unpack_from(">i", data, p)[0] % 3 == slot
    f.close()


def test_compaction_moves_begin_back_for_older_messages(tmp_path):
    f = new_file(tmp_path, slots=3, max_items=12)
    puts = [("a", 1, 0, 10, 5, BEGIN + 1200), ("b", 1, 0, 20, 5, BEGIN - 4500), ("a", 1, 0, 30, 5, BEGIN)]
    fill(f, puts)
    f.seal()
    data = f.compacted_bytes()
    # Oldest second is -5 s: begin moves back 5 s and every diff grows by 5 (none negative).
    assert data == expected_compacted(BEGIN, BEGIN + 1200, 3, puts, shift_s=-5)
    header = struct.unpack_from(">iqqii", data, 0)
    assert header[1] == BEGIN - 5000 == f.min_timestamp
    seg = FileSegment(open_driver("memory", namespace=str(tmp_path)), "index/x", FileSegmentType.INDEX, 0)
    seg.append(data)
    assert seg.commit()
    uploaded = UploadedIndexFile(seg)
    for key in ["a", "b"]:
        assert uploaded.query(T, key, 10, 0, BEGIN * 2) == f.query(T, key, 10, 0, BEGIN * 2)
    f.close()


@pytest.mark.parametrize("seed", range(6))
def test_compaction_of_many_slots_mostly_empty_is_byte_exact(tmp_path, seed):
    """Compaction visits only the slots with a chain and fills the empty ones between them in
    bulk: the file must be the one built slot by slot, whatever the gaps (none, at either end,
    long runs of empty slots, neighbouring used slots)."""
    import random

    rng = random.Random(seed)
    slots, count = rng.choice([(1, 5), (7, 40), (1000, 60), (5000, 3), (20000, 150)])
    puts = [(f"k{rng.randrange(count * 2)}", 3, i % 4, 1000 + i * 64, 64 + i % 9, BEGIN + i * 300)
            for i in range(count)]
    f = new_file(tmp_path, slots=slots, max_items=count + 1)
    fill(f, puts)
    f.seal()
    assert f.compacted_bytes() == expected_compacted(BEGIN, puts[-1][5], slots, puts)
    f.close()


def test_compaction_of_empty_slots_and_tiny_file(tmp_path):
    f = new_file(tmp_path, slots=4, max_items=2)
    put(f, "only", 7, BEGIN)
    assert f.sealed
    data = f.compacted_bytes()
    slot = index_key_hash(T, "only") % 4
    pos = 28 + 4 * 8
    for i in range(4):
        want = (pos, 28) if i == slot else (pos + (28 if i > slot else 0), 0)
        assert struct.unpack_from(">ii", data, 28 + i * 8) == want
    f.close()


# -- uploaded file over a real segment --------------------------------------------------


@pytest.fixture
def driver(tmp_path):
    d = open_driver("posix", root=str(tmp_path / "root"))
    yield d
    d.close()


def upload(driver, f: IndexStoreFile, path="index/00000000000000000000") -> FileSegment:
    f.seal()
    data = f.compacted_bytes()
    seg = FileSegment(driver, path, FileSegmentType.INDEX, 0)
    assert seg.append(data) is AppendResult.SUCCESS
    assert seg.commit()
    seg.seal()
    assert seg.commit_position == len(data)
    seg.min_timestamp, seg.max_timestamp = f.min_timestamp, f.end_timestamp
    return seg


def test_query_uploaded_segment_with_two_ranged_reads(tmp_path, driver):
    f = new_file(tmp_path, slots=7, max_items=40)
    for topic in ["TopicTest0", "TopicTest1", "TopicTest2"]:
        for i in range(3):
            assert put(f, "key", i, BEGIN + i * 1000, topic=topic, queue_id=1) is AppendResult.SUCCESS
    local = f.query("TopicTest1", "key", 10, 0, BEGIN * 2)
    seg = upload(driver, f)
    f.destroy()
    reads = []

    def spy(position, length):
        reads.append((position, length))
        return seg.read(position, length)

    uploaded = UploadedIndexFile(seg, read=spy)
    assert uploaded.status is IndexFileStatus.UPLOAD
    assert uploaded.slot_count == 7  # from the file, no configuration involved
    reads.clear()
    got = uploaded.query("TopicTest1", "key", 10, 0, BEGIN * 2)
    assert got == local and len(got) == 3
    assert len(reads) == 2 and reads[0][1] == 8  # the slot, then its run of items
    assert uploaded.query("TopicTest9", "key", 10, 0, BEGIN * 2) == []
    assert uploaded.query("TopicTest1", "nokey", 10, 0, BEGIN * 2) == []
    assert [e.offset for e in uploaded.query("TopicTest1", "key", 2, 0, BEGIN * 2)] == [2, 1]
    assert [e.offset for e in uploaded.query("TopicTest1", "key", 10, BEGIN + 1000, BEGIN + 1000)] == [1]
    assert uploaded.query("TopicTest1", "key", 10, 0, BEGIN * 2, max_scan_items=1) == [local[0]]
    assert all(isinstance(e, IndexEntry) for e in got)


def test_uploaded_garbage_is_corrupt_data(driver):
    seg = FileSegment(driver, "index/garbage", FileSegmentType.INDEX, 0)
    seg.append(b"\x01" * 100)
    assert seg.commit()
    with pytest.raises(CorruptData):
        UploadedIndexFile(seg).query(T, "k", 1, 0, BEGIN)


def test_open_file_without_recorded_slot_count_uses_the_default(tmp_path):
    """A file written by RocketMQ leaves slot 0's second word 0: the configured count applies."""
    f = new_file(tmp_path)
    put(f, "k", 42, BEGIN + 2000)
    f.close()
    with open(f.path, "r+b") as fh:
        fh.seek(28 + 4)
        fh.write(b"\x00\x00\x00\x00")
    g = IndexStoreFile.open(f.path, default_slot_count=5)
    assert g.slot_count == 5 and [e.offset for e in g.query(T, "k", 5, 0, BEGIN * 2)] == [42]
    g.close()
    with pytest.raises(CorruptData):
        IndexStoreFile.open(f.path, default_slot_count=6)
