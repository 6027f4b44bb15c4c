"""The one segment reader (issue 20) against real posix-driver segments written by the
store's flat files: read from segment references alone, as a Spark executor does."""

from __future__ import annotations

import os

import pytest

from tiered_core.codec.consume_queue import CQ_UNIT_SIZE
from tiered_core.codec.message import BODY_CRC_POS, Message, decode_message, encode_message
from tiered_core.common import AppendResult, BoundaryType
from tiered_core.errors import CorruptData
from tiered_core.flat import FlatFileConfig, FlatMessageFile
from tiered_core.flat.segment_ref import RefLog
from tiered_core.flat.segment_reader import SegmentReader
from tiered_core.metadata.sqlite import SqliteMetadataStore
from tiered_core.plugins import open_driver
from tiered_core.spi.access import ConsumeQueueRequest

TOPIC = "orders"
COUNT = 60
# ~6 messages per commit-log segment, 8 units per consume-queue segment: many boundaries.
CONFIG = FlatFileConfig(commit_log_max_size=1024, consume_queue_max_size=8 * CQ_UNIT_SIZE)


def store_time(i: int) -> int:
    return 1_700_000_000_000 + (i // 3) * 10  # runs of three equal times


def message(queue_offset: int, body: bytes | None = None) -> bytes:
    return encode_message(Message(topic=TOPIC, body=body or f"body-{queue_offset:04d}".encode() * 4,
                                  keys=[f"k{queue_offset}"], tags="t"),
                          queue_id=0, queue_offset=queue_offset, store_timestamp=store_time(queue_offset))


def put(flat: FlatMessageFile, queue_offset: int) -> None:
    raw = message(queue_offset)
    offset = flat.commit_log.append_offset
    assert flat.append_commit_log(raw) is AppendResult.SUCCESS
    req = ConsumeQueueRequest(queue_offset, offset, len(raw), 0, store_time(queue_offset))
    assert flat.append_consume_queue(req) is AppendResult.SUCCESS
    assert flat.commit()


@pytest.fixture
def tier(tmp_path):
    """A queue of COUNT messages written by the store's flat file to a posix tier, with
    commit-log bytes no unit points at (a crash between the two commits) after message 29."""
    driver = open_driver("posix", root=str(tmp_path / "root"))
    metadata = SqliteMetadataStore(str(tmp_path / "meta.db"))
    flat = FlatMessageFile(driver, metadata, TOPIC, 0, CONFIG)
    flat.init_offset(0)
    for q in range(COUNT):
        put(flat, q)
        if q == 29:
            orphan = message(30, body=b"orphan")
            assert flat.append_commit_log(orphan) is AppendResult.SUCCESS
            assert flat.commit_commit_log()  # the crash comes before the consume queue's commit
    yield driver, flat
    flat.shutdown()
    metadata.close()
    driver.close()


def ref_reader(driver, flat: FlatMessageFile) -> SegmentReader:
    """A reader from segment references and the driver alone (no metadata database)."""
    return SegmentReader.from_refs(driver, TOPIC, 0, flat.consume_queue.segment_refs(),
                                   flat.commit_log.segment_refs())


def test_reads_every_message_in_order_from_refs_alone(tier):
    driver, flat = tier
    assert len(flat.commit_log.segment_refs()) > 5 and len(flat.consume_queue.segment_refs()) > 5
    reader = ref_reader(driver, flat)
    got = [(q, decode_message(raw)) for batch in reader.batches(0, COUNT) for q, raw, _tags in batch]
    assert [q for q, _ in got] == list(range(COUNT))
    assert [m.queue_offset for _, m in got] == list(range(COUNT))
    assert [m.body for _, m in got] == [f"body-{q:04d}".encode() * 4 for q in range(COUNT)]
    # A range starting and ending inside consume-queue segments.
    inner = [q for batch in reader.batches(13, 47) for q, _raw, _tags in batch]
    assert inner == list(range(13, 47))


def test_each_batch_stays_inside_one_commit_log_segment(tier):
    driver, flat = tier
    refs = flat.commit_log.segment_refs()
    bounds = [(r.base_offset, r.base_offset + r.size) for r in refs]
    batches = list(ref_reader(driver, flat).batches(0, COUNT))
    assert len(batches) >= len(refs)  # trimmed at every segment boundary
    for batch in batches:
        lo = batch.units[0][0]
        hi = max(off + size for off, size, _ in batch.units)
        assert any(a <= lo and hi <= b for a, b in bounds), (lo, hi, bounds)


def test_commit_log_bytes_no_unit_points_at_are_never_returned(tier):
    driver, flat = tier
    messages = [decode_message(raw) for batch in ref_reader(driver, flat).batches(0, COUNT) for _q, raw, _t in batch]
    assert len(messages) == COUNT
    assert all(m.body != b"orphan" for m in messages)
    # Guard: the orphan is really in the commit log, right after message 29.
    last = messages[29]
    assert decode_message(flat.get_commit_log(last.commitlog_offset + last.store_size, 4096)).body == b"orphan"
    assert messages[30].commitlog_offset > last.commitlog_offset + last.store_size
    # read_batch over the gap skips it too.
    batch = ref_reader(driver, flat).read_batch(28, 4, 1 << 20)
    assert [decode_message(raw).queue_offset for _q, raw, _t in batch] == [28, 29, 30, 31]
    assert all(decode_message(raw).body != b"orphan" for _q, raw, _t in batch)


@pytest.mark.parametrize("start,count,max_bytes", [(0, 60, 1 << 20), (5, 9, 1 << 20), (7, 30, 500), (59, 10, 1)])
def test_read_batch_from_refs_equals_the_flat_files(tier, start, count, max_bytes):
    driver, flat = tier
    via_refs = ref_reader(driver, flat).read_batch(start, min(count, COUNT - start), max_bytes)
    via_flat = flat.read_batch(start, count, max_bytes)
    assert via_refs.error is None and via_flat.error is None
    assert list(via_refs) == list(via_flat) and len(via_refs) >= 1
    assert via_refs.queue_offset == start


def test_offset_by_time_matches_a_linear_scan(tier):
    driver, flat = tier
    reader = ref_reader(driver, flat)
    times = [store_time(q) for q in range(COUNT)]
    for t in sorted(set(times)) + [times[0] - 1, times[-1] + 1, times[4] + 5]:
        lower = next((q for q, s in enumerate(times) if s >= t), COUNT)
        assert reader.offset_by_time(t, 0, COUNT) == lower
        assert flat.get_offset_in_consume_queue_by_time(t, BoundaryType.LOWER) == lower
        if t in times:
            upper = max(q for q, s in enumerate(times) if s == t)
            assert reader.offset_by_time(t, 0, COUNT, BoundaryType.UPPER) == upper
    assert [reader.store_time(q) for q in (0, 7, 8, 59)] == [times[0], times[7], times[8], times[59]]


def test_first_unit_at_or_after_a_commit_log_offset(tier):
    driver, flat = tier
    reader = ref_reader(driver, flat)
    offsets = [reader.unit(q).commitlog_offset for q in range(COUNT)]
    for target in (0, offsets[10], offsets[10] + 1, offsets[-1], offsets[-1] + 1):
        expected = next((q for q, off in enumerate(offsets) if off >= target), COUNT)
        assert reader.first_unit_at_or_after(target, 0, COUNT) == expected
    assert reader.unit(COUNT) is None  # no unit past the end


def test_a_corrupt_message_surfaces_naming_topic_queue_and_offset(tier, tmp_path):
    driver, flat = tier
    bad = 17
    unit = ref_reader(driver, flat).unit(bad)
    ref = next(r for r in reversed(flat.commit_log.segment_refs()) if r.base_offset <= unit.commitlog_offset)
    path = os.path.join(str(tmp_path / "root"), ref.path)
    os.chmod(path, 0o644)  # a sealed segment is read-only
    with open(path, "r+b") as fh:
        fh.seek(unit.commitlog_offset - ref.base_offset + BODY_CRC_POS)
        fh.write(b"\x00\x00\x00\x01")  # the body CRC no longer matches
    reader = ref_reader(driver, flat)
    seen = []
    with pytest.raises(CorruptData) as info:
        for batch in reader.batches(0, COUNT):
            seen.extend(q for q, _raw, _tags in batch)
    assert seen == list(range(bad))  # every message before it, none after
    err = info.value
    assert (err.context["topic"], err.context["queue_id"], err.context["queue_offset"]) == (TOPIC, 0, bad)
    assert err.reason == "crc_mismatch"
    assert f"{TOPIC}/0" in err.message or TOPIC in err.message
    # The fetcher's path (read_batch over the flat files) reports the same message.
    batch = flat.read_batch(15, 10, 1 << 20)
    assert len(batch) == 2 and batch.error.context["queue_offset"] == bad


def test_a_truncated_consume_queue_is_reported_after_its_units(tier, tmp_path):
    driver, flat = tier
    refs = flat.consume_queue.segment_refs()
    # Asked for one unit more than its only consume-queue segment holds.
    reader = SegmentReader.from_refs(driver, TOPIC, 0, refs[:1], flat.commit_log.segment_refs())
    end = refs[0].base_offset // CQ_UNIT_SIZE + refs[0].size // CQ_UNIT_SIZE + 1
    seen = []
    with pytest.raises(CorruptData) as info:
        for batch in reader.batches(0, end):
            seen.extend(q for q, _raw, _tags in batch)
    assert seen == list(range(end - 1))
    assert info.value.reason == "truncated" and info.value.context["queue_offset"] == end - 1


def test_ref_log_reads_across_segments_and_stops_at_the_end(tier):
    driver, flat = tier
    log = RefLog(driver, flat.commit_log.segment_refs())
    total = flat.commit_log.commit_offset
    assert log.read(0, total) == flat.get_commit_log(0, total)
    assert log.read(100, 2000) == flat.get_commit_log(100, 2000)
    assert log.read(total - 10, 100) == flat.get_commit_log(total - 10, 10)
    assert log.read(total, 10) == b""


def test_the_codec_header_positions_the_readers_use_match_encoded_messages():
    import struct

    from tiered_core.codec import message as codec

    raw = message(7)
    m = decode_message(raw)
    i64, i32 = struct.Struct(">q"), struct.Struct(">i")
    assert raw[:codec.MAGIC_END] == raw[:8] and codec.peek_total_size(raw[:codec.MAGIC_END]) == len(raw)
    assert i64.unpack_from(raw, codec.QUEUE_OFFSET_END - 8)[0] == 7
    assert i64.unpack_from(raw, codec.STORE_TIMESTAMP_POS_V4)[0] == m.store_timestamp == store_time(7)
    assert i32.unpack_from(raw, codec.BODY_LENGTH_POS_V4)[0] == len(m.body)
    assert raw[codec.HEADER_SIZE_V4:codec.HEADER_SIZE_V4 + len(m.body)] == m.body
    v6 = encode_message(Message(topic=TOPIC, body=b"x", born_host=("::1", 9)), queue_id=0, queue_offset=1,
                        store_timestamp=12345)
    assert i32.unpack_from(v6, codec.SYS_FLAG_POS)[0] & codec.HOST_V6_FLAGS
    assert i64.unpack_from(v6, codec.STORE_TIMESTAMP_POS_V6)[0] == 12345
    assert codec.STORE_TIMESTAMP_POS_V6 + 8 <= codec.STORE_TIMESTAMP_END
