"""The container layer's flat files over the posix driver and SQLite metadata."""

from __future__ import annotations

import pytest

from tiered_core.codec.consume_queue import CQ_UNIT_SIZE, decode_cq_unit
from tiered_core.codec.message import Message, decode_message, encode_message
from tiered_core.errors import CorruptData, IllegalOffset, StateConflict
from tiered_core.flat import FlatAppendFile, FlatCommitLogFile, FlatFileConfig, FlatFileStore, FlatMessageFile
from tiered_core.metadata.sqlite import SqliteMetadataStore
from tiered_core.plugins import open_driver
from tiered_core.common import AppendResult, BoundaryType, FileSegmentType, SegmentStatus
from tiered_core.spi.access import ConsumeQueueRequest


@pytest.fixture
def driver(tmp_path):
    d = open_driver("posix", root=str(tmp_path / "root"))
    yield d
    d.close()


@pytest.fixture
def metadata(tmp_path):
    m = SqliteMetadataStore(str(tmp_path / "meta.db"))
    yield m
    m.close()


def cq_file(driver, metadata, max_size=2000) -> FlatAppendFile:
    return FlatAppendFile(driver, metadata, "broker/topic/0", FileSegmentType.CONSUME_QUEUE,
                          lambda base: f"cq/{base:020d}", max_size=max_size)


def message(queue_offset: int, store_ts: int, body: bytes = b"x" * 40, topic: str = "TopicTest") -> bytes:
    return encode_message(Message(topic=topic, body=body, keys=[f"k{queue_offset}"], tags="t"),
                          queue_id=0, queue_offset=queue_offset, store_timestamp=store_ts)


def put(flat: FlatMessageFile, queue_offset: int, store_ts: int, **kw) -> None:
    raw = message(queue_offset, store_ts, **kw)
    offset = flat.commit_log.append_offset
    assert flat.append_commit_log(raw) is AppendResult.SUCCESS
    req = ConsumeQueueRequest(queue_offset, offset, len(raw), 0, store_ts)
    assert flat.append_consume_queue(req) is AppendResult.SUCCESS


# -- FlatAppendFile --------------------------------------------------------------------


def test_empty_file_needs_a_base_offset(driver, metadata):
    f = cq_file(driver, metadata)
    assert f.commit()  # committing nothing is fine
    with pytest.raises(IllegalOffset):
        f.append(b"x" * 10)
    assert (f.min_offset, f.commit_offset, f.append_offset) == (0, 0, 0)


def test_append_commit_roll_and_read_across_segments(driver, metadata):
    f = cq_file(driver, metadata)
    f.roll(500)
    assert f.append(b"a" * 1000, 1) is AppendResult.SUCCESS
    with pytest.raises(IllegalOffset):
        f.read(500, 200)  # not committed yet
    assert f.commit()
    assert f.read(500, 200) == b"a" * 200
    assert f.append(b"b" * 1500, 2) is AppendResult.SUCCESS  # 1000 + 1500 > 2000: roll at 1500
    assert [s.base_offset for s in f] == [500, 1500]
    assert f.segments[0].sealed and driver.is_sealed(f.segments[0].path)
    assert f.commit()
    assert f.read(1000, 1000) == b"a" * 500 + b"b" * 500  # spans both segments
    assert f.read(2900, 500) == b"b" * 100  # clamped to what is committed


def test_recover_from_metadata_and_backend_size(driver, metadata):
    f = cq_file(driver, metadata)
    f.roll(500)
    f.append(b"a" * 1000, 7)
    f.commit()
    f.roll(f.append_offset)
    f.append(b"c" * 200, 9)
    f.commit()
    meta = metadata.get_file_segment(int(FileSegmentType.CONSUME_QUEUE), "broker/topic/0", 1500)
    assert meta.size == 200 and meta.end_timestamp == 9
    # Bytes that landed after the last metadata update are adopted from the backend.
    driver.write(f.segments[-1].path, 200, b"d" * 40)
    again = cq_file(driver, metadata)
    assert [s.base_offset for s in again] == [500, 1500]
    assert again.commit_offset == 1740
    assert again.read(1500, 240) == b"c" * 200 + b"d" * 40
    assert metadata.get_file_segment(int(FileSegmentType.CONSUME_QUEUE), "broker/topic/0", 1500).size == 240


def test_expiry_keeps_the_writable_segment(driver, metadata):
    f = cq_file(driver, metadata, max_size=100)
    f.roll(0)
    for ts in (1, 2, 3):
        assert f.append(b"z" * 100, ts) is AppendResult.SUCCESS
    f.commit()
    assert len(f.segments) == 3
    assert f.destroy_expired(2) == 1  # the segment whose newest message is at 1
    assert [s.base_offset for s in f] == [100, 200]
    paths = [p for p, _ in driver.list("cq/")]
    assert paths == ["cq/00000000000000000100", "cq/00000000000000000200"]
    assert f.destroy_expired(10**12) == 1  # everything older, but never the last segment
    assert [s.base_offset for s in f] == [200]
    f.destroy()
    assert list(driver.list("cq/")) == []
    assert list(metadata.iterate_file_segments(int(FileSegmentType.CONSUME_QUEUE))) == []


def test_deleted_mark_survives_a_crash_before_the_delete(driver, metadata):
    f = cq_file(driver, metadata, max_size=100)
    f.roll(0)
    for ts in (1, 2):
        f.append(b"z" * 100, ts)
    f.commit()
    assert f.clean_expired(2) == 1  # marked, not yet deleted (a crash here)
    meta = metadata.get_file_segment(int(FileSegmentType.CONSUME_QUEUE), "broker/topic/0", 0)
    assert meta.status == SegmentStatus.DELETED
    again = cq_file(driver, metadata, max_size=100)
    assert [s.base_offset for s in again] == [100]  # not served
    assert again.destroy_expired(0) == 1  # and finished later
    assert driver.size("cq/00000000000000000000") == 0


# -- FlatCommitLogFile -----------------------------------------------------------------


def test_commit_log_starts_at_zero_and_rewrites_physical_offsets(driver, metadata):
    cl = FlatCommitLogFile(driver, metadata, "b/t/0", segment_path=lambda b: f"cl/{b:020d}", max_size=400)
    assert [s.base_offset for s in cl] == [0]
    assert cl.first_message_queue_offset() == -1
    sizes = []
    for q in range(6, 12):
        raw = message(q, 1000 + q)
        sizes.append(len(raw))
        assert cl.append_message(raw, 1000 + q) is AppendResult.SUCCESS
    assert cl.commit()
    assert len(cl.segments) > 1  # rolled by size
    pos = 0
    for q, size in zip(range(6, 12), sizes):
        m = decode_message(cl.read(pos, size))
        assert (m.queue_offset, m.commitlog_offset) == (q, pos)
        pos += size
    assert cl.first_message_queue_offset() == 6
    cl.destroy_expired(1000 + 8)
    assert cl.first_message_queue_offset() > 6


def test_try_rolling_by_age_and_size(driver, metadata):
    cl = FlatCommitLogFile(driver, metadata, "b/t/0", segment_path=lambda b: f"cl/{b:020d}")
    raw = message(0, 5)
    cl.append_message(raw, 5)
    assert not cl.try_rolling(interval_ms=1, min_size=1, now_ms=100)  # not committed yet
    cl.commit()
    assert not cl.try_rolling(interval_ms=1000, min_size=1, now_ms=100)  # too young
    assert not cl.try_rolling(interval_ms=1, min_size=len(raw) + 1, now_ms=100)  # too small
    assert cl.try_rolling(interval_ms=1, min_size=len(raw), now_ms=100)
    assert [s.base_offset for s in cl] == [0, len(raw)]


# -- FlatMessageFile ---------------------------------------------------------------------


def test_message_file_append_commit_read(driver, metadata):
    flat = FlatMessageFile(driver, metadata, "TopicTest", 1)
    assert flat.topic_metadata.topic_id >= 0 and not flat.initialized
    flat.init_offset(100)
    for i in range(5):
        put(flat, 100 + i, 11)
    assert flat.consume_queue_min_offset() == 100
    assert flat.consume_queue_max_offset() == 105
    assert flat.consume_queue_commit_offset() == 100
    assert flat.get_commit_log_dispatch_commit_offset() == 100
    assert flat.commit()
    assert flat.consume_queue_commit_offset() == 105
    got = decode_message(flat.get_message_async(102).result())
    assert got.queue_offset == 102 and got.keys == ["k102"]
    units = flat.get_consume_queue_async(100, 5).result()
    assert len(units) == 5 * CQ_UNIT_SIZE
    assert decode_cq_unit(units, 0).commitlog_offset == 0
    q = metadata.get_queue("TopicTest", 1)
    assert (q.min_offset, q.max_offset) == (100, 105)
    with pytest.raises(IllegalOffset):
        put(flat, 107, 11)  # a gap in queue offsets
    with pytest.raises(IllegalOffset):
        flat.get_message(105)


@pytest.mark.parametrize("ts,lower,upper", [
    (0, 50, 50), (999, 50, 50), (1000, 50, 50), (1001, 51, 51), (1100, 51, 53),
    (1101, 54, 54), (1200, 54, 54), (1201, 55, 55),
])
def test_offset_by_time_matches_rocketmq_table(driver, metadata, ts, lower, upper):
    flat = FlatMessageFile(driver, metadata, "TopicTest", 0)
    flat.init_offset(50)
    for q, t in zip(range(50, 55), (1000, 1100, 1100, 1100, 1200)):
        put(flat, q, t)
    flat.commit()
    assert flat.get_offset_in_consume_queue_by_time(ts, BoundaryType.LOWER) == lower
    assert flat.get_offset_in_consume_queue_by_time(ts, BoundaryType.UPPER) == upper


def test_commit_lock_refuses_a_second_commit(driver, metadata):
    flat = FlatMessageFile(driver, metadata, "TopicTest", 0)
    flat.init_offset(0)
    put(flat, 0, 1)
    flat._commit_lock.acquire()
    try:
        assert flat.commit() is False
    finally:
        flat._commit_lock.release()
    assert flat.commit(sync=False).result() is True


def test_torn_consume_queue_unit_is_realigned(driver, metadata):
    flat = FlatMessageFile(driver, metadata, "TopicTest", 0)
    flat.init_offset(0)
    for q in range(3):
        put(flat, q, 10 + q)
    flat.commit()
    cq_path = flat.consume_queue.segments[-1].path
    driver.write(cq_path, 60, b"\x00" * 7)  # a crash left 7 bytes of a fourth unit
    flat.shutdown()
    again = FlatMessageFile(driver, metadata, "TopicTest", 0)
    assert again.consume_queue_commit_offset() == 3
    put(again, 3, 13)
    again.commit()
    assert [decode_message(again.get_message(q)).queue_offset for q in range(4)] == [0, 1, 2, 3]
    assert decode_cq_unit(again.get_consume_queue(2, 2), 20).size > 0


def test_flat_file_store_recovers_every_queue(driver, metadata):
    store = FlatFileStore(driver, metadata, FlatFileConfig())
    assert store.load()
    for qid in range(4):
        flat = store.compute_if_absent("TopicTest", qid)
        flat.init_offset(0)
        put(flat, 0, 1)
        flat.commit()
    store.shutdown()
    again = FlatFileStore(driver, metadata, FlatFileConfig())
    assert again.load()
    assert sorted(f.queue_id for f in again) == [0, 1, 2, 3]
    assert decode_message(again.get("TopicTest", 3).get_message(0)).queue_offset == 0
    again.destroy_file("TopicTest", 0)
    again.destroy_file("TopicTest", 1)
    assert len(again.files()) == 2
    third = FlatFileStore(driver, metadata, FlatFileConfig())
    assert third.load() and len(third.files()) == 2
    third.destroy()
    assert third.files() == []


# -- data safety: never touch what is not ours; reads over many segments -----------------


def test_roll_refuses_bytes_the_metadata_does_not_list(driver, metadata):
    f = cq_file(driver, metadata, max_size=100)
    f.init_offset(0)
    for i in range(5):
        assert f.append(bytes([i]) * 20) is AppendResult.SUCCESS
    assert f.commit()
    foreign = b"somebody else's bytes"
    driver.write("cq/00000000000000000100", 0, foreign)  # where the next roll would go
    with pytest.raises(StateConflict) as info:
        f.append(b"z" * 20)  # the segment is full: seal, then roll at 100
    assert info.value.path == "cq/00000000000000000100"
    assert driver.read("cq/00000000000000000100", 0, len(foreign)) == foreign, "nothing of it may be deleted"


def test_reads_span_any_number_of_segments(driver, metadata):
    f = cq_file(driver, metadata, max_size=40)
    f.init_offset(0)
    data = bytes(range(256)) * 4
    for i in range(0, len(data), 20):
        assert f.append(data[i:i + 20]) is AppendResult.SUCCESS
        assert f.commit()
    assert len(f.segments) >= 25
    assert f.read(0, len(data)) == data
    assert f.read(7, 900) == data[7:907]
    assert f.read(1000, 500) == data[1000:]  # clamped to what is committed
    reopened = cq_file(driver, metadata, max_size=40)
    assert reopened.read(33, 990) == data[33:1023]


def test_recovery_refuses_a_backend_that_lost_committed_bytes(driver, metadata, tmp_path):
    """A newest segment that lost committed bytes: every write is refused (appending after
    the gap would hand its offsets out again); the bytes before the damage still read."""
    f = cq_file(driver, metadata)
    f.init_offset(0)
    assert f.append(b"a" * 100) is AppendResult.SUCCESS and f.commit()
    path = f.segments[-1].path
    with open(tmp_path / "root" / path, "r+b") as fh:  # someone truncates the object
        fh.truncate(60)
    again = cq_file(driver, metadata)
    assert isinstance(again.refused, StateConflict) and again.refused.path == path
    for write in (lambda: again.append(b"b" * 20), lambda: again.roll(100), again.writable):
        with pytest.raises(StateConflict) as info:
            write()
        assert info.value.path == path
    assert again.read(0, 100) == b"a" * 60  # the read ends at the damage
    (damage,) = again.damage.values()
    assert (damage.path, damage.found, damage.recorded) == (path, 60, 100)
    assert metadata.get_file_segment(int(again.file_type), again.file_path, 0).size == 100  # not papered over


def test_a_read_ends_at_a_hole_between_segments(driver, metadata, tmp_path):
    """Metadata rebuilt from a listing where an older segment's object was short records it
    at that size: a hole lies between it and the next segment. A read ends at the hole
    (it never asks the next segment for a negative position); past it, reads go on."""
    f = cq_file(driver, metadata, max_size=100)
    f.init_offset(0)
    for i in range(8):
        assert f.append(bytes([i]) * 20) is AppendResult.SUCCESS
    assert f.commit() and [s.base_offset for s in f.segments] == [0, 100]
    first = f.segments[0]
    meta = metadata.get_file_segment(int(f.file_type), f.file_path, 0)
    meta.size = 60  # as a rebuild records an object cut to 60 bytes
    metadata.update_file_segment(meta)
    again = cq_file(driver, metadata, max_size=100)
    assert again.read(0, 160) == b"".join(bytes([i]) * 20 for i in range(3))
    assert again.read(40, 100) == bytes([2]) * 20
    assert again.read(100, 60) == b"".join(bytes([i]) * 20 for i in range(5, 8))
    with pytest.raises(CorruptData) as info:  # in the hole: lost bytes, not an offset out of range
        again.read(60, 20)
    assert (info.value.reason, info.value.path, info.value.offset) == ("segment_truncated", first.path, 60)
    # one listing (the object cut to 60 bytes, as rebuilt): the hole is reported as damage
    [hole] = again.check_damage({first.path: 60, again.segments[1].path: 60})
    assert (hole.path, hole.gap, hole.lost, hole.reason) == (first.path, True, (60, 100), "segment_truncated")
    assert "next segment starts 100 bytes after its start" in hole.problem


def test_a_seal_by_another_store_is_seen_at_recovery(driver, metadata):
    f = cq_file(driver, metadata)
    f.init_offset(0)
    assert f.append(b"a" * 100) is AppendResult.SUCCESS and f.commit()
    driver.seal(f.segments[-1].path)  # a take-over seals our tail
    again = cq_file(driver, metadata)
    assert again.segments[-1].sealed
    assert again.append(b"b" * 20) is AppendResult.SUCCESS and again.commit()  # rolled, not refused
    assert len(again.segments) == 2 and again.read(0, 120) == b"a" * 100 + b"b" * 20


def test_torn_unit_alone_in_its_segment_is_replaced(driver, metadata):
    from tiered_core.flat.consume_queue_file import FlatConsumeQueueFile

    def open_cq():
        return FlatConsumeQueueFile(driver, metadata, "broker/topic/0", segment_path=lambda b: f"cq/{b:020d}",
                                    max_size=CQ_UNIT_SIZE * 10)

    cq = open_cq()
    cq.init_offset(0)
    for _ in range(10):
        assert cq.append(b"u" * CQ_UNIT_SIZE) is AppendResult.SUCCESS
    assert cq.commit()
    tail = cq.roll(200)  # recorded in metadata: this store's own segment
    driver.write(tail.path, 0, b"t" * 7)  # a crash tore its first unit
    again = open_cq()
    assert again.commit_queue_offset == 10 and again.append_queue_offset == 10
    assert again.append(b"v" * CQ_UNIT_SIZE) is AppendResult.SUCCESS and again.commit()
    assert again.read(180, 40) == b"u" * CQ_UNIT_SIZE + b"v" * CQ_UNIT_SIZE
