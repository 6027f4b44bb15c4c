"""The dispatch batch path against the per-message reference it replaced.

Each batch function is compared, on real files and on generated input, with what the
per-message code makes of the same input: ``build_group`` with ``get_message_bytes`` +
``decode_message`` + ``FlatCommitLogFile.append_message`` + ``encode_cq_unit`` +
``message_index_keys`` (same bytes, same first bad message and reason); the batch appends
with one append per message (same segments, bytes and timestamps); ``put_keys`` with one
``put_key`` per message (same index file bytes); ``read_group`` with ``get_message_bytes``.
"""

from __future__ import annotations

import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tiered_core.codec.consume_queue import CQ_UNIT_SIZE, encode_cq_unit
from tiered_core.codec.dispatch_batch import build_group
from tiered_core.codec.hashing import index_key_hash, java_string_hash
from tiered_core.codec.index_keys import message_index_keys, message_index_keys_from_properties
from tiered_core.codec.message import (
    Message,
    decode_message,
    encode_message,
    parse_properties,
    rewrite_physical_offset,
    validate_message,
)
from tiered_core.codec.prop_crc import compute_prop_crc, stored_prop_crc, write_prop_crc
from tiered_core.common import AppendResult
from tiered_core.errors import CorruptData, IllegalOffset
from tiered_core.flat import FlatFileConfig, FlatMessageFile
from tiered_core.index import IndexStoreFile
from tiered_core.index.service import IndexConfig, IndexStoreService
from tiered_core.local.local_store import LocalMessageStore, LocalStoreConfig
from tiered_core.metadata.sqlite import SqliteMetadataStore
from tiered_core.plugins import open_driver
from tiered_core.spi.access import ConsumeQueueRequest

BEGIN = 1_700_000_000_000
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# -- generated messages -------------------------------------------------------------------------

_texts = st.text(alphabet=st.sampled_from("abK Y\tü€ _-#0"), max_size=8)


@st.composite
def messages(draw) -> bytes:
    keys = draw(st.lists(st.text(alphabet="abck-1é", min_size=1, max_size=6), max_size=3))
    props = {}
    if draw(st.booleans()):
        props["UNIQ_KEY"] = draw(st.sampled_from(["U1", "  ", "Ü-2", "A" * 32]))
    for name in draw(st.lists(st.sampled_from(["a", "KEYSX", "x1", "é"]), max_size=2)):
        value = draw(_texts.filter(lambda t: t != "" and "\x01" not in t and "\x02" not in t))
        props[name] = value
    msg = Message(topic=draw(st.sampled_from(["t", "orders", "x" * 127, "y" * 130])),
                  body=draw(st.binary(max_size=300)), keys=keys,
                  tags=draw(st.sampled_from([None, "t1", "TagA"])), properties=props,
                  born_host=draw(st.sampled_from([("10.0.0.1", 1), ("::1", 2)])))
    return encode_message(msg, queue_id=draw(st.integers(0, 7)), queue_offset=draw(st.integers(0, 1 << 40)),
                          physical_offset=draw(st.integers(0, 1 << 40)),
                          store_timestamp=draw(st.integers(0, 1 << 45)),
                          store_host=draw(st.sampled_from([("10.0.0.2", 3), ("fe80::1", 4)])),
                          prop_crc=draw(st.booleans()))


def reference(raws: list[bytes], local_offsets: list[int], tags: list[int], tiered: int):
    """What the per-message dispatcher made: (bytes, units, timestamps, keys, first bad, reason)."""
    data, units, stamps, keys = bytearray(), bytearray(), [], []
    for i, raw in enumerate(raws):
        try:
            total = validate_message(raw, base_offset=local_offsets[i])  # get_message_bytes
            if total != len(raw):
                raise CorruptData("size", offset=local_offsets[i], reason="length_mismatch")
            msg = decode_message(raw, verify_crc=False)
            buf = bytearray(raw)  # FlatCommitLogFile.append_message
            stored = stored_prop_crc(buf, 0, len(buf))
            if stored is not None and compute_prop_crc(buf, 0, len(buf)) != stored:
                raise CorruptData("crc", offset=0, reason="prop_crc_mismatch")
        except CorruptData as exc:
            return data, units, stamps, keys, i, exc.reason
        rewrite_physical_offset(buf, 0, tiered)
        if stored is not None:
            write_prop_crc(buf, 0, len(buf))
        data += buf
        units += encode_cq_unit(tiered, len(raw), tags[i])
        stamps.append(msg.store_timestamp)
        keys.append(tuple(message_index_keys(msg)))
        tiered += len(raw)
    return data, units, stamps, keys, len(raws), None


def lay_out(raws: list[bytes], gaps: list[int]) -> tuple[bytes, list[int]]:
    """The messages in one buffer, each after a gap of junk (other queues' messages)."""
    out, positions = bytearray(), []
    for raw, gap in zip(raws, gaps):
        out += os.urandom(gap)
        positions.append(len(out))
        out += raw
    return bytes(out), positions


def check_against_reference(raws, gaps, tiered, tags, want_keys=True):
    buf, positions = lay_out(raws, gaps)
    offsets = [1000 + p for p in positions]
    built = build_group(buf, positions, offsets, [len(r) for r in raws], tags, tiered, want_keys)
    data, units, stamps, keys, good, reason = reference(raws, offsets, tags, tiered)
    assert built.count == good
    assert (None if built.error is None else built.error.reason) == reason
    assert bytes(built.data) == bytes(data)
    assert bytes(built.units) == bytes(units)
    assert built.timestamps == stamps
    assert built.keys == (keys if want_keys else None)
    if reason is not None and reason != "prop_crc_mismatch":
        assert built.error.offset == offsets[good]


@SETTINGS
@given(st.lists(messages(), min_size=1, max_size=8), st.data())
def test_build_group_equals_the_per_message_path(raws, data):
    gaps = data.draw(st.lists(st.integers(0, 50), min_size=len(raws), max_size=len(raws)))
    tags = data.draw(st.lists(st.integers(-(1 << 63), (1 << 63) - 1), min_size=len(raws), max_size=len(raws)))
    check_against_reference(raws, gaps, data.draw(st.integers(0, 1 << 50)), tags, data.draw(st.booleans()))


@SETTINGS
@given(st.lists(messages(), min_size=1, max_size=6), st.data())
def test_build_group_stops_at_the_same_bad_message(raws, data):
    victim = data.draw(st.integers(0, len(raws) - 1))
    raw = bytearray(raws[victim])
    how = data.draw(st.sampled_from(["flip", "flip", "size", "zero_magic"]))
    if how == "flip":  # any byte: header, body (CRC), lengths, topic, properties, CRC property
        pos = data.draw(st.integers(0, len(raw) - 1))
        raw[pos] ^= 1 << data.draw(st.integers(0, 7))
    elif how == "size":
        raw[0:4] = (len(raw) + data.draw(st.sampled_from([-1, 1, 1000]))).to_bytes(4, "big")
    else:
        raw[4:8] = b"\xcb\xd4\x31\x94"  # BLANK magic
    raws = raws[:victim] + [bytes(raw)] + raws[victim + 1:]
    check_against_reference(raws, [7] * len(raws), 4096, [0] * len(raws))


def test_build_group_bad_utf8_properties_and_truncated_unit():
    good = encode_message(Message(topic="t", body=b"b", keys=["k"]), queue_id=0, queue_offset=0, store_timestamp=1)
    bad = bytearray(good)
    bad[-3] = 0xFF  # inside the properties: not UTF-8
    check_against_reference([good, bytes(bad), good], [0, 0, 0], 0, [0, 0, 0])
    built = build_group(good, [0], [0], [len(good) + 5], [0], 0)  # the unit says more than there is
    assert built.count == 0 and built.error.reason in ("truncated", "length_mismatch")


def test_build_group_empty():
    built = build_group(b"", [], [], [], [], 0)
    assert (built.count, bytes(built.data), bytes(built.units), built.error) == (0, b"", b"", None)


# -- keys and hashes --------------------------------------------------------------------------

_prop_text = st.lists(st.sampled_from(["KEYS", "UNIQ_KEY", "TAGS", "\x01", "\x02", " ", "a", "b", "\t",
                                       "K", "EYS", "ü", "X_"]), max_size=16).map("".join)


@settings(max_examples=2000, deadline=None)
@given(_prop_text)
def test_keys_from_the_properties_text_follow_the_one_rule(text):
    assert message_index_keys_from_properties(text) == tuple(message_index_keys(parse_properties(text)))


def _java_hash_loop(s: str) -> int:
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=80))
def test_java_string_hash_equals_the_loop(s):
    assert java_string_hash(s) == _java_hash_loop(s)


# -- the index: put_keys writes what put_key writes ------------------------------------------


def _index_batch(rnd: random.Random, n: int, with_blank: bool = True):
    keys, offsets, sizes, stamps = [], [], [], []
    for i in range(n):
        ks = [f"k{rnd.randrange(40)}" for _ in range(rnd.choice([0, 1, 1, 1, 2, 3]))]
        if with_blank and rnd.random() < 0.1:
            ks.append(" ")
        keys.append(tuple(ks))
        offsets.append(rnd.randrange(1 << 40))
        sizes.append(rnd.randrange(1, 1 << 20))
        stamps.append(BEGIN + rnd.randrange(-20_000, 200_000))
    return keys, offsets, sizes, stamps


@pytest.mark.parametrize("seed", range(6))
def test_index_file_put_keys_writes_the_bytes_of_put_key(tmp_path, seed):
    rnd = random.Random(seed)
    slots, max_items = rnd.choice([(1, 50), (7, 40), (97, 400)])
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one = IndexStoreFile.create(str(tmp_path / "a"), BEGIN, slot_count=slots, max_items=max_items)
    batch = IndexStoreFile.create(str(tmp_path / "b"), BEGIN, slot_count=slots, max_items=max_items)
    try:
        for _ in range(8):
            keys, offsets, sizes, stamps = _index_batch(rnd, rnd.randrange(1, 30))
            expected_done = 0
            expected = AppendResult.SUCCESS
            for m in range(len(keys)):
                r = one.put_key("T", 3, 1, keys[m], offsets[m], sizes[m], stamps[m])
                if r is not AppendResult.SUCCESS:
                    expected = r
                    break
                expected_done = m + 1
            result, done = batch.put_keys("T", 3, 1, keys, offsets, sizes, stamps)
            assert (result, done) == (expected, expected_done)
            assert batch.header() == one.header() and batch.sealed == one.sealed
            if result is not AppendResult.SUCCESS:
                break
        batch.flush()
        with open(one.path, "rb") as fa, open(batch.path, "rb") as fb:
            assert fa.read() == fb.read()
        for k in range(40):
            assert batch.query("T", f"k{k}", 100, 0, 1 << 62) == one.query("T", f"k{k}", 100, 0, 1 << 62)
    finally:
        one.close()
        batch.close()


def test_index_service_put_keys_rolls_like_put_key(tmp_path):
    # The service's put_key is a batch of one, so this checks what batching adds -- many
    # messages across file rolls -- against batches of one; the item bytes themselves are
    # checked against IndexStoreFile.put_key (its own code) in the test above.
    def service(name):
        return IndexStoreService(open_driver("memory", namespace=f"dispatch-batch-{name}-{os.getpid()}"),
                                 SqliteMetadataStore(str(tmp_path / f"{name}.db")), str(tmp_path / name),
                                 config=IndexConfig(max_hash_slots=13, max_items=30), clock=lambda: BEGIN)
    one, batch = service("one"), service("batch")
    rnd = random.Random(5)
    try:
        for _ in range(10):
            keys, offsets, sizes, stamps = _index_batch(rnd, rnd.randrange(1, 40), with_blank=False)
            for m in range(len(keys)):
                assert one.put_key("T", 1, 2, keys[m], offsets[m], sizes[m], stamps[m]) is AppendResult.SUCCESS
            assert batch.put_keys("T", 1, 2, keys, offsets, sizes, stamps) is AppendResult.SUCCESS
        a, b = one.files(), batch.files()
        assert [f.header() for f in a] == [f.header() for f in b] and len(a) > 2
        for fa, fb in zip(a, b):
            fb.flush()
            with open(fa.path, "rb") as ra, open(fb.path, "rb") as rb:
                assert ra.read() == rb.read()
        assert batch.put_keys("T", 1, 2, [(), (" ",)], [0, 1], [1, 1], [BEGIN, BEGIN]) is AppendResult.SUCCESS
    finally:
        one.shutdown()
        batch.shutdown()


# -- the flat files: one append per group, the bytes of one append per message ---------------


def _flat(tmp_path, name, **cfg):
    driver = open_driver("posix", root=str(tmp_path / name))
    meta = SqliteMetadataStore(str(tmp_path / f"{name}.db"))
    return FlatMessageFile(driver, meta, "TopicTest", 0, FlatFileConfig(**cfg))


def _segments(flat: FlatMessageFile):
    out = []
    for part in (flat.commit_log, flat.consume_queue):
        for seg in part.segments:
            out.append((seg.base_offset, seg.commit_position, seg.sealed, seg.min_timestamp, seg.max_timestamp,
                        flat.driver.read(seg.path, 0, seg.commit_position) if seg.commit_position else b""))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_batch_appends_make_the_segments_of_per_message_appends(tmp_path, seed):
    rnd = random.Random(seed)
    cfg = dict(commit_log_max_size=rnd.choice([3000, 5000, 20000]), consume_queue_max_size=CQ_UNIT_SIZE * 7)
    one, batch = _flat(tmp_path, "one", **cfg), _flat(tmp_path, "batch", **cfg)
    one.init_offset(0)
    batch.init_offset(0)
    q = 0
    for _ in range(12):
        raws = [encode_message(Message(topic="TopicTest", body=os.urandom(rnd.randrange(0, 900)), keys=["k"]),
                               queue_id=0, queue_offset=q + i, store_timestamp=BEGIN + rnd.randrange(10_000),
                               prop_crc=rnd.random() < 0.5) for i in range(rnd.randrange(1, 8))]
        tags = [rnd.randrange(-5, 5) for _ in raws]
        room = min(len(raws), batch.consume_queue_room())  # the dispatcher's rule
        raws, tags = raws[:room], tags[:room]
        for raw, tag in zip(raws, tags):
            offset = one.commit_log.append_offset
            assert one.append_commit_log(raw) is AppendResult.SUCCESS
            ts = decode_message(raw).store_timestamp
            assert one.append_consume_queue(ConsumeQueueRequest(q, offset, len(raw), tag, ts)) is AppendResult.SUCCESS
            q += 1
        base = batch.commit_log.append_offset
        buf = b"".join(raws)
        positions = [sum(len(r) for r in raws[:i]) for i in range(len(raws))]
        built = build_group(buf, positions, positions, [len(r) for r in raws], tags, base, False)
        assert built.error is None
        assert batch.append_commit_log_batch(built.data, [len(r) for r in raws], built.timestamps, base) \
            == (AppendResult.SUCCESS, len(raws))
        assert batch.append_consume_queue_batch(q - len(raws), built.units, built.timestamps) \
            == (AppendResult.SUCCESS, len(raws))
        if rnd.random() < 0.7:
            assert one.commit() and batch.commit()
    assert one.commit() and batch.commit()
    assert _segments(batch) == _segments(one)
    assert len(batch.commit_log.segments) > 1


def test_batch_append_refuses_a_batch_made_for_another_offset(tmp_path):
    flat = _flat(tmp_path, "x")
    flat.init_offset(0)
    raw = encode_message(Message(topic="TopicTest", body=b"b"), queue_id=0, queue_offset=0, store_timestamp=1)
    with pytest.raises(IllegalOffset):
        flat.append_commit_log_batch(raw, [len(raw)], [0], 10)
    with pytest.raises(IllegalOffset):
        flat.append_consume_queue_batch(3, encode_cq_unit(0, len(raw), 0), [0])
    assert flat.commit_log.append_offset == 0 and flat.consume_queue_max_offset() == 0


# -- the local group read -----------------------------------------------------------------------


@pytest.mark.parametrize("file_size", [4096, 1 << 20])
def test_read_group_returns_the_bytes_get_message_bytes_returns(tmp_path, file_size):
    store = LocalMessageStore(str(tmp_path / "local"), LocalStoreConfig(commit_log_file_size=file_size,
                                                                        background_services=False))
    try:
        rnd = random.Random(1)
        for i in range(120):
            store.put_message("t", i % 3, Message(topic="t", body=os.urandom(rnd.randrange(10, 600))))
        store.reput()
        store.flush()
        for qid in range(3):
            offset = 0
            while offset < store.get_max_offset_in_queue("t", qid):
                group = store.read_group("t", qid, offset, 7, 2000)
                assert group.taken >= 1
                taken = group.units[:group.taken]
                assert sum(u.size for u in taken[1:]) + taken[0].size <= max(2000, taken[0].size)
                for unit, pos in zip(taken, group.positions):
                    assert bytes(group.buf[pos:pos + unit.size]) == store.get_message_bytes(unit.commitlog_offset,
                                                                                           unit.size)
                offset += group.taken
        assert store.read_group("t", 0, store.get_max_offset_in_queue("t", 0), 5).taken == 0
        assert store.read_group("nope", 0, 0, 5).units == []
    finally:
        store.close()


@settings(max_examples=500, deadline=None)
@given(st.text(min_size=1, max_size=20), st.text(max_size=40))
def test_index_key_hash_equals_the_loop_over_topic_and_key(topic, key):
    h = _java_hash_loop(f"{topic}#{key}")
    assert index_key_hash(topic, key) == (0 if h == -(1 << 31) else abs(h))
