"""The one read path (issue 11): ``read_batch`` / ``check_batch`` against a per-message
reference, the lazy ``MessageExt``, the batch cache and the one time search."""

from __future__ import annotations

import pickle
import random
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tiered_core.access.cache import ReadAheadCache
from tiered_core.codec.checks import STRUCTURAL_REASONS, PropCrcPolicy, check_units
from tiered_core.codec.hashing import tags_hash_code
from tiered_core.codec.message import (
    QUEUE_ID_POS,
    Message,
    MessageExt,
    decode_message,
    encode_message,
    lazy_message_ext,
)
from tiered_core.codec.message_batch import MessageBatch
from tiered_core.common import AppendResult, BoundaryType, offset_by_time
from tiered_core.flat import FlatMessageFile
from tiered_core.flat.batch_check import check_batch, read_batch
from tiered_core.metadata.sqlite import SqliteMetadataStore
from tiered_core.plugins import open_driver
from tiered_core.spi.access import CompositeAccess, ConsumeQueueRequest
from test_store_validation import batches, reference_check  # tests/ is on sys.path under pytest

# The per-unit oracle of the batch check (decode_message on each unit, then compare fields).
reference = reference_check



def queues(damage: bool = True):
    """A queue's commit-log buffer and raw units (``test_store_validation.batches``, units as tuples)."""
    return batches(damage).map(lambda b: (*b[:5], [tuple(u) for u in b[5]]))


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(q=queues(), policy=st.sampled_from(list(PropCrcPolicy)), max_bytes=st.sampled_from([1, 200, 1 << 20]))
def test_read_batch_agrees_with_a_per_message_reference(q, policy, max_bytes):
    topic, queue_id, first_q, base, buf, units = q
    cq = b"".join(struct.pack(">qiq", *u) for u in units)  # raw units: damage may make them invalid
    reads = []

    def read_cq(queue_offset, count):
        reads.append("cq")
        assert queue_offset == first_q
        return cq[:count * 20]

    def read_cl(offset, length):
        reads.append("cl")
        return buf[max(offset - base, 0):max(offset - base + length, 0)] if offset >= base else b""

    batch = read_batch(read_cq, read_cl, first_q, len(units), max_bytes, topic=topic, queue_id=queue_id,
                       prop_crc=policy)
    assert reads in (["cq"], ["cq", "cl"])  # the units once, the commit-log span once
    # The units read: trimmed to max_bytes (at least one); the span read from the first.
    first = units[0][0]
    taken = [units[0]]
    for u in units[1:]:
        if u[0] + u[1] > first + max_bytes:
            break
        taken.append(u)
        if u[0] < first:
            break
    span = buf[max(first - base, 0):] if first >= base else b""
    index, reason = reference(taken, span, first, topic=topic, queue_id=queue_id, queue_offset=first_q, policy=policy)
    assert len(batch) == index, (batch.error, reason)
    assert batch.queue_offset == first_q and batch.end_offset == first_q + index
    for i, (q_off, raw, tags) in enumerate(batch):
        assert q_off == first_q + i and tags == taken[i][2]
        assert raw == span[taken[i][0] - first:][:taken[i][1]]
        assert batch.message(i) == decode_message(raw)
    if reason is None:
        assert batch.error is None
        return
    err = batch.error
    assert err is not None and err.offset == taken[index][0] and err.queue_offset == first_q + index
    assert err.topic == topic and err.queue_id == queue_id and err.size == taken[index][1]
    assert err.reason == reason or {err.reason, reason} <= STRUCTURAL_REASONS, (err, reason)
    # ... and reported exactly as check_units reports it.
    old = check_units(taken, span, first, topic=topic, queue_id=queue_id, queue_offset=first_q, prop_crc=policy)
    assert old.valid == index and (old.error.message, old.error.reason) == (err.message, err.reason)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(q=queues(damage=False), data=st.data())
def test_corrupting_one_message_stops_the_batch_right_before_it(q, data):
    topic, queue_id, first_q, base, buf, units = q
    k = data.draw(st.integers(0, len(units) - 1))
    bad = bytearray(buf)
    bad[units[k][0] - base + QUEUE_ID_POS + 3] ^= 0x40  # queue id of message k
    for payload in (buf, bytes(bad)):
        batch = check_batch(units, payload, base, topic=topic, queue_id=queue_id, queue_offset=first_q)
        if payload is buf:
            assert len(batch) == len(units) and batch.error is None
        else:
            assert len(batch) == k and batch.error.reason == "queue_id_mismatch"
            assert batch.error.offset == units[k][0] and batch.error.queue_offset == first_q + k
            assert [m.queue_offset for m in batch.messages()] == list(range(first_q, first_q + k))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(q=queues(damage=False), fields=st.permutations(["topic", "queue_id", "queue_offset", "commitlog_offset",
                                                       "store_timestamp", "born_timestamp", "keys", "tags",
                                                       "properties", "body", "sys_flag", "body_crc", "store_size",
                                                       "born_host", "store_host", "version", "msg_id"]))
def test_a_lazy_message_equals_the_decoded_one_in_any_access_order(q, fields):
    _topic, _qid, _first, base, buf, units = q
    off, size, _ = units[0]
    raw = buf[off - base:off - base + size]
    eager, lazy = decode_message(raw), lazy_message_ext(raw)
    for name in fields:
        assert getattr(lazy, name) == getattr(eager, name), name
    assert lazy == eager and repr(lazy) == repr(eager)
    assert pickle.loads(pickle.dumps(lazy_message_ext(raw))) == eager


def test_a_lazy_message_keeps_what_is_assigned_before_it_is_read():
    raw = encode_message(Message(topic="t", body=b"abc", keys=["k"], tags="x"), queue_id=2, queue_offset=5,
                         store_timestamp=1)
    m = lazy_message_ext(raw)
    m.topic = "other"
    assert (m.topic, m.queue_id, m.keys, m.tags, m.body) == ("other", 2, ["k"], "x", b"abc")
    with pytest.raises(AttributeError):
        m.no_such_field
    built = MessageExt("t", 0, 0, 0, 0, 0, [], None, {}, b"")
    assert built.version.name == "V1" and built == MessageExt(topic="t", queue_id=0, queue_offset=0, commitlog_offset=0,
                                                              store_timestamp=0, born_timestamp=0, keys=[],
                                                              tags=None, properties={}, body=b"")


# -- FlatMessageFile.read_batch: the CompositeAccess contract ----------------------------


@pytest.fixture
def flat(tmp_path):
    driver = open_driver("posix", root=str(tmp_path / "root"))
    metadata = SqliteMetadataStore(str(tmp_path / "meta.db"))
    f = FlatMessageFile(driver, metadata, "TopicTest", 3)
    yield f
    f.shutdown()
    metadata.close()
    driver.close()


def test_flat_read_batch_matches_reading_each_message(flat):
    assert isinstance(flat, CompositeAccess) and flat.topic_id == flat.topic_metadata.topic_id
    flat.init_offset(10)
    for i in range(50):
        raw = encode_message(Message(topic="TopicTest", body=bytes([i]) * (i * 7 % 300), keys=[f"k{i}"],
                                     tags=f"t{i % 3}"), queue_id=3, queue_offset=10 + i, store_timestamp=1000 + i)
        offset = flat.commit_log_max_offset()
        assert flat.append_commit_log(raw) is AppendResult.SUCCESS
        assert flat.append_consume_queue(ConsumeQueueRequest(10 + i, offset, len(raw), tags_hash_code(f"t{i % 3}"),
                                                             1000 + i)) is AppendResult.SUCCESS
        if i % 17 == 0:
            assert flat.commit()
            assert flat.rolling_file(0) in (True, False)
    assert flat.commit()
    assert flat.commit_log_commit_offset() == flat.commit_log_max_offset() and flat.commit_log_min_offset() == 0
    assert flat.segment_count() >= 2
    batch = flat.read_batch(10, 100, 1 << 20)
    assert batch.error is None and (batch.queue_offset, batch.end_offset) == (10, 60)  # clamped to committed
    assert [m for m in batch.messages()] == [decode_message(flat.get_message(q)) for q in range(10, 60)]
    small = flat.read_batch(20, 100, 1)  # at least one message, whatever max_bytes says
    assert len(small) == 1 and small.message(0).queue_offset == 20
    assert len(flat.read_batch(60, 5, 1 << 20)) == 0
    for ts, lower, upper in ((999, 10, 10), (1020, 30, 30), (2000, 60, 60)):
        assert flat.get_offset_in_consume_queue_by_time(ts, BoundaryType.LOWER) == lower
        assert flat.get_offset_in_consume_queue_by_time(ts, BoundaryType.UPPER) == upper


# -- the batch cache ---------------------------------------------------------------------


def _batch(topic: str, queue_id: int, start: int, count: int, size: int = 100) -> MessageBatch:
    units = [(i * size, size, 0) for i in range(count)]
    return MessageBatch(topic, queue_id, start, b"x" * (count * size), 0, units)


def test_cache_finds_the_batch_holding_an_offset_and_stays_bounded(tmp_path):
    cache = ReadAheadCache(1000, 60_000)
    cache.put_batch(_batch("t", 0, 10, 4))  # 10..13, 400 bytes
    cache.put_batch(_batch("t", 0, 20, 4))  # 20..23
    cache.put_batch(_batch("t", 1, 10, 1))
    assert cache.get_batch("t", 0, 12).queue_offset == 10 and cache.get_batch("t", 0, 23).queue_offset == 20
    assert cache.get_batch("t", 0, 14) is None and cache.get_batch("t", 0, 9) is None
    assert cache.get_batch("t", 1, 10).queue_id == 1 and cache.get_batch("t", 2, 10) is None
    cache.put_batch(_batch("t", 0, 30, 4))  # 1300 bytes > 1000: the least recently used goes
    assert cache.size_bytes <= 1000 and cache.stats.evictions == 1
    assert cache.get_batch("t", 0, 10) is None and cache.get_batch("t", 0, 31).queue_offset == 30
    cache.put_batch(_batch("t", 0, 40, 20))  # bigger than the budget: never cached
    assert cache.get_batch("t", 0, 40) is None
    disk = ReadAheadCache(500, 60_000, disk_path=str(tmp_path / "disk"))
    try:
        disk.put_batch(_batch("t", 0, 0, 4))
        disk.put_batch(_batch("t", 0, 4, 4))  # spills 0..3
        assert disk.get_batch("t", 0, 2).queue_offset == 0 and disk.stats.disk_hits == 1
    finally:
        disk.close()


# -- the one time search -----------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(times=st.lists(st.integers(0, 20), max_size=30).map(sorted), lo=st.integers(0, 5),
       ts=st.integers(-1, 22), upper=st.booleans())
def test_offset_by_time_agrees_with_a_linear_scan(times, lo, ts, upper):
    hi = lo + len(times) - 1
    got = offset_by_time(lo, hi, ts, BoundaryType.UPPER if upper else BoundaryType.LOWER, lambda o: times[o - lo])
    at = [lo + i for i, t in enumerate(times) if t == ts]
    if not times:
        expected = lo
    elif upper and at:
        expected = at[-1]
    else:
        expected = next((lo + i for i, t in enumerate(times) if t >= ts), hi + 1)
    assert got == expected


def test_offset_by_time_on_rocketmq_table():
    times = dict(zip(range(10, 17), (40, 50, 50, 50, 60, 60, 70)))
    for ts, lower, upper in ((35, 10, 10), (45, 11, 11), (50, 11, 13), (60, 14, 15), (75, 17, 17)):
        assert offset_by_time(10, 16, ts, BoundaryType.LOWER, times.__getitem__) == lower
        assert offset_by_time(10, 16, ts, BoundaryType.UPPER, times.__getitem__) == upper


def test_random_units_never_raise():
    rng = random.Random(7)
    for _ in range(300):
        buf = bytes(rng.randrange(256) for _ in range(rng.randrange(200)))
        units = [(rng.randrange(-5, 250), rng.randrange(-5, 200), rng.randrange(-3, 3)) for _ in range(rng.randrange(4))]
        batch = check_batch(units, buf, 0, topic="t", queue_id=0, queue_offset=0)
        assert len(batch) == 0 or batch.error is None or batch.error.offset == units[len(batch)][0]


# -- the fetcher over cached batches ----------------------------------------------------


class _Files:
    def __init__(self, flat):
        self.flat = flat

    def get(self, topic, queue_id):
        return self.flat if (topic, queue_id) == (self.flat.topic, self.flat.queue_id) else None


def _fill(flat, count: int) -> None:
    flat.init_offset(0)
    for i in range(count):
        raw = encode_message(Message(topic="TopicTest", body=bytes([i]) * 100, keys=[f"k{i}"], tags=f"t{i % 3}"),
                             queue_id=3, queue_offset=i, store_timestamp=1000 + i)
        offset = flat.commit_log_max_offset()
        assert flat.append_commit_log(raw) is AppendResult.SUCCESS
        assert flat.append_consume_queue(ConsumeQueueRequest(i, offset, len(raw), tags_hash_code(f"t{i % 3}"),
                                                             1000 + i)) is AppendResult.SUCCESS
    assert flat.commit()


@pytest.mark.parametrize("cached", [True, False])
def test_fetcher_serves_from_whole_batches(flat, cached):
    from tiered_core.access.fetcher import MessageStoreFetcher
    from tiered_core.access.results import GetMessageStatus

    _fill(flat, 40)
    expected = [decode_message(flat.get_message(q)) for q in range(40)]
    cache = ReadAheadCache(1 << 20) if cached else None
    fetcher = MessageStoreFetcher(_Files(flat), cache, read_ahead_count=16, read_ahead_bytes=1 << 20)
    got = fetcher.get_message("TopicTest", 3, 5, 4)
    assert got.status is GetMessageStatus.FOUND and got.messages == expected[5:9] and got.next_begin_offset == 9
    if cached:
        assert cache.get_batch("TopicTest", 3, 20).queue_offset == 5  # one entry: the read-ahead batch 5..20
        assert cache.stats.misses == 1 and len(cache._items) == 1
    again = fetcher.get_message("TopicTest", 3, 9, 100)  # from the cached batch, up to its end
    assert again.messages == expected[9:9 + len(again.messages)] and again.next_begin_offset == 9 + len(again.messages)
    assert len(again.messages) == (12 if cached else 16)
    only_t1 = fetcher.get_message("TopicTest", 3, 0, 5, message_filter=lambda tags: tags == tags_hash_code("t1"))
    # Cached: scanned through the read-ahead batch; uncached: only the max_count read (as before).
    assert [m.queue_offset for m in only_t1.messages] == ([1, 4, 7, 10, 13] if cached else [1, 4])
    assert only_t1.next_begin_offset == (14 if cached else 5)
    assert all(m.tags == "t1" for m in only_t1.messages)
    small = MessageStoreFetcher(_Files(flat), cache, read_ahead_count=16, max_transfer_bytes=250)
    assert len(small.get_message("TopicTest", 3, 30, 10).messages) == 2  # stops once 250 bytes are reached
    assert fetcher.get_message("TopicTest", 3, 40, 1).status is GetMessageStatus.OFFSET_OVERFLOW_ONE


def test_cache_finds_an_offset_in_an_overlapping_batch():
    cache = ReadAheadCache(10_000, 60_000)
    cache.put_batch(_batch("t", 0, 0, 20))  # 0..19
    cache.put_batch(_batch("t", 0, 5, 2))  # 5..6, read later at 5 (e.g. a short prefetch)
    assert cache.get_batch("t", 0, 10).queue_offset == 0 and cache.get_batch("t", 0, 6).queue_offset == 5
    assert cache.get_batch("t", 0, 20) is None
