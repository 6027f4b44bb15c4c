"""The batch forms of the local write path against their per-message references.

* ``encode_message_buffer`` / ``pack_message`` against the earlier encoder (kept here as
  the oracle): the same bytes, the same errors;
* ``scan_reput_records`` against ``decode_message``: the same fields for every record it
  accepts, and it accepts a prefix of the records, stopping at the first one ``decode_message``
  (without the CRC) refuses;
* ``find_property`` / ``index_keys_of`` against ``parse_properties`` / ``message_index_keys``;
* ``ConsumeQueue.put_units`` against ``put`` of each unit, ``IndexService.put_batch``
  against ``put_keys`` of each message: byte-identical files.
"""

from __future__ import annotations

import os
import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tiered_core.codec.consume_queue import encode_cq_unit
from tiered_core.codec.index_keys import message_index_keys
from tiered_core.codec.message import (
    _LAYOUTS,
    BORNHOST_V6_FLAG,
    MAGIC_V1,
    MAGIC_V2,
    MAX_PROPERTIES_BYTES,
    MAX_TOTAL_SIZE,
    MAX_V1_TOPIC_BYTES,
    MAX_V2_TOPIC_BYTES,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    STOREHOSTADDRESS_V6_FLAG,
    Message,
    _cached_host_parts,
    _check_ranges,
    decode_message,
    encode_message,
    encode_message_buffer,
    format_properties,
    parse_properties,
)
from tiered_core.codec.prop_crc import CRC32_PLACEHOLDER, CRC32_RESERVED_LEN, PROPERTY_CRC32, prop_crc_digits
from tiered_core.codec.reput_scan import (
    SCAN_END,
    SCAN_OTHER,
    SCAN_PARTIAL,
    find_property,
    index_keys_of,
    scan_reput_records,
)
from tiered_core.common import INT_MAX, INT_MIN, LONG_MAX, LONG_MIN
from tiered_core.errors import CorruptData, IllegalParam
from tiered_core.local.local_consume_queue import ConsumeQueue
from tiered_core.local.index_file import IndexService

_HOST_FLAGS = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG


# -- the earlier encoder (the oracle) -------------------------------------------------------


def _reference_encode(msg: Message, *, queue_id, queue_offset, store_timestamp, physical_offset=0,
                      store_host=("127.0.0.1", 0), sys_flag=None, version=None, prop_crc=False) -> bytes:
    props = msg.all_properties()
    if prop_crc:
        props.pop(PROPERTY_CRC32, None)
        props_text = format_properties(props) + CRC32_PLACEHOLDER.decode()
    else:
        props_text = format_properties(props)
    topic = msg.topic
    try:
        topic_b = topic.encode("utf-8")
    except (UnicodeEncodeError, AttributeError):
        raise IllegalParam(f"topic {topic!r} is not an encodable string", topic=topic) from None
    props_b = props_text.encode("utf-8")
    body = msg.body
    if not isinstance(body, bytes):
        if not isinstance(body, (bytearray, memoryview)):
            raise IllegalParam(f"body must be bytes, got {type(body).__name__}", topic=topic)
        body = bytes(body)
    if version is None:
        v2 = len(topic_b) > MAX_V1_TOPIC_BYTES
    elif isinstance(version, int) and not isinstance(version, bool) and version in (1, 2):
        v2 = version == 2
    else:
        raise IllegalParam(f"message version {version!r} is not 1 or 2", version=version)
    if len(topic_b) > (MAX_V2_TOPIC_BYTES if v2 else MAX_V1_TOPIC_BYTES):
        raise IllegalParam("topic too long", topic=topic)
    if len(props_b) > MAX_PROPERTIES_BYTES:
        raise IllegalParam("properties too long", topic=topic)
    born_ip, born_port, born_v6 = _cached_host_parts(msg.born_host, "born_host")
    store_ip, store_port, store_v6 = _cached_host_parts(store_host, "store_host")
    sys_flag = msg.sys_flag if sys_flag is None else sys_flag
    sys_flag &= ~_HOST_FLAGS
    sys_flag |= (BORNHOST_V6_FLAG if born_v6 else 0) | (STOREHOSTADDRESS_V6_FLAG if store_v6 else 0)
    layout = _LAYOUTS[sys_flag & _HOST_FLAGS]
    total = layout.size + len(body) + (2 if v2 else 1) + len(topic_b) + 2 + len(props_b)
    if total > MAX_TOTAL_SIZE:
        raise IllegalParam("too big", topic=topic)
    try:
        head = layout.pack(total, MAGIC_V2 if v2 else MAGIC_V1, zlib.crc32(body) & 0x7FFFFFFF, queue_id,
                           msg.flag, queue_offset, physical_offset, sys_flag, msg.born_timestamp, born_ip,
                           born_port, store_timestamp, store_ip, store_port, msg.reconsume_times,
                           msg.prepared_transaction_offset, len(body))
    except struct.error:
        _check_ranges(queue_id=(queue_id, INT_MIN, INT_MAX), flag=(msg.flag, INT_MIN, INT_MAX),
                      queue_offset=(queue_offset, LONG_MIN, LONG_MAX),
                      physical_offset=(physical_offset, LONG_MIN, LONG_MAX),
                      sys_flag=(sys_flag, INT_MIN, INT_MAX),
                      born_timestamp=(msg.born_timestamp, LONG_MIN, LONG_MAX),
                      store_timestamp=(store_timestamp, LONG_MIN, LONG_MAX),
                      reconsume_times=(msg.reconsume_times, INT_MIN, INT_MAX),
                      prepared_transaction_offset=(msg.prepared_transaction_offset, LONG_MIN, LONG_MAX))
        raise
    topic_len = struct.pack(">H", len(topic_b)) if v2 else struct.pack(">B", len(topic_b))
    data = b"".join((head, body, topic_len, topic_b, struct.pack(">H", len(props_b)), props_b))
    if not prop_crc:
        return data
    crc = zlib.crc32(memoryview(data)[:-CRC32_RESERVED_LEN]) & 0x7FFFFFFF
    return b"".join((data[:-11], prop_crc_digits(crc), b"\x02"))


_names = st.sampled_from(["a", "KEYS", "TAGS", "UNIQ_KEY", PROPERTY_CRC32, "é", "x y", "\x01", "\x02", ""])
_words = st.one_of(st.text(alphabet="abé \x01\x02", max_size=6), st.sampled_from(["k", "TAGS", "v"]))
_hosts = st.sampled_from([("127.0.0.1", 1), ("::1", 9), ("10.0.0.1", 65535), ("10.0.0.1", 70000)])
_messages = st.builds(
    Message,
    topic=st.sampled_from(["t", "orders", "é" * 70, "x" * 130]),
    body=st.binary(max_size=64),
    keys=st.one_of(st.lists(_words, max_size=3), _words, st.none()),
    tags=st.one_of(st.none(), _words, st.just(5)),
    properties=st.dictionaries(st.one_of(_names, _words), _words, max_size=4),
    flag=st.sampled_from([0, 1, -7, 1 << 31]),
    born_timestamp=st.integers(0, 1 << 42),
    born_host=_hosts,
    sys_flag=st.integers(0, 1023),
    reconsume_times=st.integers(0, 3),
)
_encode_args = st.fixed_dictionaries({
    "queue_id": st.sampled_from([0, 7, INT_MAX, 1 << 31]),
    "queue_offset": st.integers(0, 1 << 40),
    "store_timestamp": st.integers(0, 1 << 42),
    "physical_offset": st.integers(0, 1 << 40),
    "store_host": _hosts,
    "sys_flag": st.sampled_from([None, 0, 16, 32]),
    "version": st.sampled_from([None, 1, 2, 3]),
    "prop_crc": st.booleans(),
})


def _outcome(fn, msg, args):
    try:
        return fn(msg, **args)
    except IllegalParam as exc:
        return ("IllegalParam", str(exc))


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow])
@given(_messages, _encode_args)
def test_encode_matches_the_earlier_encoder(msg, args):
    expected = _outcome(_reference_encode, msg, args)
    got = _outcome(encode_message_buffer, msg, args)
    if isinstance(expected, bytes):
        assert type(got) is bytearray and got == expected
        assert encode_message(msg, **args) == expected
    else:
        assert isinstance(got, tuple)
        if not expected[1].endswith(("too long", "too big")):  # (the oracle words these shorter)
            assert got == expected


@settings(max_examples=300)
@given(st.lists(st.tuples(st.sampled_from(["KEYS", "TAGS", "UNIQ_KEY", "K", "XTAGS", ""]),
                          st.text(alphabet="ab \x01", max_size=3)), max_size=6),
       st.booleans())
def test_find_property_and_index_keys_match_the_property_map(pairs, trailing):
    text = "\x02".join(f"{k}\x01{v}" if k or v else "" for k, v in pairs) + ("\x02" if trailing else "")
    props = parse_properties(text)
    for name in ("KEYS", "TAGS", "UNIQ_KEY", "K"):
        assert find_property(text, name) == props.get(name)
    keys_text = props.get(PROPERTY_KEYS)
    decoded_keys = [k for k in keys_text.split(" ") if k] if keys_text else []

    class _Decoded:
        properties = props
        keys = decoded_keys

    assert index_keys_of(props.get("UNIQ_KEY"), keys_text) == message_index_keys(_Decoded)


# -- the reput scan ---------------------------------------------------------------------------


def _records(draw_msgs, prop_crc=False) -> bytes:
    out = bytearray()
    for i, (msg, qid) in enumerate(draw_msgs):
        data = bytearray(encode_message_buffer(msg, queue_id=qid, queue_offset=i, store_timestamp=1000 + i,
                                               physical_offset=len(out), prop_crc=prop_crc))
        out += data
    return bytes(out)


_good_messages = st.builds(
    Message,
    topic=st.sampled_from(["t", "orders", "é" * 40]),
    body=st.binary(max_size=40),
    keys=st.lists(st.sampled_from(["a", "b", "k1"]), max_size=3),
    tags=st.sampled_from([None, "", "tg"]),
    properties=st.dictionaries(st.sampled_from(["UNIQ_KEY", "p", "é"]), st.sampled_from(["1", "v", " "]),
                               max_size=2),
    born_timestamp=st.integers(0, 1 << 42),
    born_host=st.sampled_from([("127.0.0.1", 1), ("::1", 9)]),
    sys_flag=st.sampled_from([0, 4, 8]),
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_good_messages, st.integers(0, 3)), min_size=1, max_size=8), st.booleans(),
       st.data())
def test_scan_reput_records_matches_decode(msgs, prop_crc, data):
    buf = _records(msgs, prop_crc)
    # cut or corrupt the buffer somewhere (or not)
    mode = data.draw(st.sampled_from(["whole", "cut", "flip", "blank"]))
    if mode == "cut":
        buf = buf[:data.draw(st.integers(0, len(buf)))]
    elif mode == "flip":
        at = data.draw(st.integers(0, len(buf) - 1))
        buf = buf[:at] + bytes([buf[at] ^ data.draw(st.integers(1, 255))]) + buf[at + 1:]
    elif mode == "blank":
        buf = buf + struct.pack(">iI", 64, 0xCBD43194) + bytes(56)
    records, stop, status, value = scan_reput_records(buf, 0, len(buf))
    pos = 0
    for rec in records:
        assert rec[0] == pos
        try:
            m = decode_message(buf, pos, verify_crc=False)
        except CorruptData as exc:
            # the caller decodes topic and properties, and stops there
            assert exc.reason == "bad_encoding"
            with pytest.raises(UnicodeDecodeError):
                rec[5].decode()
                rec[6].decode()
            return
        assert rec[1:5] == (m.store_size, m.queue_id, m.queue_offset, m.store_timestamp)
        assert rec[5].decode() == m.topic
        assert parse_properties(rec[6].decode()) == m.properties
        assert rec[7:] == (m.sys_flag, m.born_timestamp)
        pos += m.store_size
    assert stop == pos
    # where the scan stopped, the per-record path does not accept a whole record either,
    # or the record goes past the buffer
    if status == SCAN_END:
        assert len(buf) - stop < 8
    elif status == SCAN_PARTIAL:
        assert value == struct.unpack_from(">i", buf, stop)[0] and stop + value > len(buf)
    else:
        assert status == SCAN_OTHER
        with pytest.raises(CorruptData):
            decode_message(buf, stop, verify_crc=False)


def test_scan_reput_records_of_real_messages_reads_the_fields():
    msgs = [(Message(topic="orders", body=b"x" * 10, keys=["a", "b"], tags="tg",
                     properties={"UNIQ_KEY": "U1"}, born_host=("::1", 3)), 2),
            (Message(topic="pay", body=b""), 0)]
    buf = _records(msgs)
    records, stop, status, _ = scan_reput_records(buf, 0, len(buf))
    assert (stop, status, len(records)) == (len(buf), SCAN_END, 2)
    first = records[0]
    assert first[2:5] == (2, 0, 1000) and first[5] == b"orders"
    text = first[6].decode()
    assert find_property(text, PROPERTY_TAGS) == "tg" and find_property(text, "UNIQ_KEY") == "U1"
    assert index_keys_of(find_property(text, "UNIQ_KEY"), find_property(text, PROPERTY_KEYS)) == ["U1", "a", "b"]
    # a partial record at the end
    records, stop, status, value = scan_reput_records(buf[:-3], 0, len(buf) - 3)
    assert len(records) == 1 and status == SCAN_PARTIAL and stop + value == len(buf)


# -- batched writes against one at a time -----------------------------------------------------


def _files_of(root: str) -> dict[str, bytes]:
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = fh.read()
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 6)), min_size=1, max_size=10))
def test_put_units_writes_what_put_writes(tmp_path_factory, runs):
    """Runs starting at, before (already stored) or after (a gap) the end, across files."""
    base = tmp_path_factory.mktemp("cq")
    one = ConsumeQueue(str(base / "one"), "t", 0, units_per_file=4)
    many = ConsumeQueue(str(base / "many"), "t", 0, units_per_file=4)
    for back_or_gap, n in runs:
        start = max(one.max_offset + back_or_gap - 1, 0)
        units = [encode_cq_unit(100 * (start + i), 10 + i, i) for i in range(n)]
        new = sum(one.put(start + i, 100 * (start + i), 10 + i, i) for i in range(n))
        assert many.put_units(start, b"".join(units)) == new
        assert (many.min_offset, many.max_offset) == (one.min_offset, one.max_offset)
    one.close()
    many.close()
    assert _files_of(str(base / "one")) == _files_of(str(base / "many"))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.lists(st.sampled_from(["a", "b", "", "k1", "é"]), max_size=3),
                          st.integers(0, 2)), min_size=1, max_size=30),
       st.integers(1, 5))
def test_index_put_batch_writes_what_put_keys_writes(tmp_path_factory, messages, split):
    """Items in one batch or message by message: the same files (rolling included), and
    replayed offsets are skipped alike."""
    base = tmp_path_factory.mktemp("idx")
    clock = iter(range(1_700_000_000_000, 1_700_000_100_000, 7))
    one = IndexService(str(base / "one"), hash_slots=7, max_items=6, clock=lambda: next(clock))
    clock2 = iter(range(1_700_000_000_000, 1_700_000_100_000, 7))
    many = IndexService(str(base / "many"), hash_slots=7, max_items=6, clock=lambda: next(clock2))
    entries = []
    phy = 0
    for keys, back in messages:
        phy = max(phy - back * 50, 0) + 100  # sometimes an offset already indexed
        entries.append(("t", keys, phy, 1_700_000_000_000 + phy * 10))
    written = sum(one.put_keys(*e) for e in entries)
    assert sum(many.put_batch(entries[i:i + split]) for i in range(0, len(entries), split)) == written
    one.close()
    many.close()
    assert _files_of(str(base / "one")) == _files_of(str(base / "many"))


# -- the store: queue listeners, a batch that meets a bad record ----------------------------


def test_queue_listener_is_told_once_per_queue_and_listeners_see_every_message(tmp_path):
    from tiered_core.local.local_store import LocalMessageStore, LocalStoreConfig

    store = LocalMessageStore(str(tmp_path / "s"), LocalStoreConfig(background_services=False))
    told: list[tuple[str, int]] = []
    seen = []
    store.add_queue_listener(lambda topic, qid: told.append((topic, qid)))
    store.add_queue_listener(lambda topic, qid: 1 / 0)  # a failing listener does not stop others
    for i in range(20):
        store.put_message("a", i % 3, Message(topic="a", body=b"x", keys=[f"k{i}"]))
    assert store.reput() == 20
    assert told == [("a", 0), ("a", 1), ("a", 2)]
    store.add_dispatch_listener(seen.append)
    store.put_message("a", 0, Message(topic="a", body=b"y", tags="t"))
    store.put_message("b", 5, Message(topic="b", body=b"z"))
    assert store.reput() == 2
    assert told == [("a", 0), ("a", 1), ("a", 2), ("b", 5)]
    assert [(r.topic, r.queue_id, r.queue_offset, r.tags) for r in seen] == [("a", 0, 7, "t"), ("b", 5, 0, None)]
    assert store.query_message("a", "k7")[0].queue_offset == 2
    store.close()


def test_a_bad_record_inside_a_batch_stops_the_reput_right_before_it(tmp_path):
    """Records before it are dispatched; the error is the per-record path's."""
    from tiered_core.local.local_store import LocalMessageStore, LocalStoreConfig

    root = str(tmp_path / "s")
    cfg = LocalStoreConfig(background_services=False)
    store = LocalMessageStore(root, cfg)
    results = [store.put_message("a", 0, Message(topic="a", body=b"x" * 10)) for _ in range(5)]
    bad = results[3].commitlog_offset
    # a topic that is not UTF-8: the scan accepts the lengths, the topic decode refuses
    path = store.commit_log.files()[0].path
    store.commit_log.files()[0].flush()
    with open(path, "r+b") as f:
        raw = bytearray(f.read())
        m = decode_message(raw, bad, verify_crc=False)
        topic_at = bad + m.store_size - 3  # topic "a", then a properties length of 0
        assert raw[topic_at:topic_at + 1] == b"a"
        f.seek(topic_at)
        f.write(b"\xff")
    assert store.reput() == 3
    assert store.reput_offset == bad
    assert store.reput_error is not None and store.reput_error.reason == "bad_encoding"
    assert store.get_max_offset_in_queue("a", 0) == 3
    store.close()


@pytest.mark.parametrize("variant", range(4))
def test_index_put_batch_steps_over_uncounted_items_like_put_keys(tmp_path, variant):
    """A kill between an item (and its slot) and the header leaves items past indexCount:
    both forms step over them alike."""
    import shutil

    from tiered_core.codec.local_index import HEADER

    clock = iter(range(1_700_000_000_000, 1_700_000_100_000, 7))
    first = IndexService(str(tmp_path / "one"), hash_slots=3, max_items=40, clock=lambda: next(clock))
    for i in range(8):
        first.put_keys("t", [f"k{i}", f"j{i % 3}"], 100 + i, 1_700_000_000_000 + i)
    first.close()
    path = os.path.join(tmp_path / "one", os.listdir(tmp_path / "one")[0])
    with open(path, "r+b") as f:
        header = list(HEADER.unpack(f.read(HEADER.size)))
        header[5] -= 3  # the last items were written, their header updates were not
        header[4] -= 3
        f.seek(0)
        f.write(HEADER.pack(*header))
    shutil.copytree(tmp_path / "one", tmp_path / "many")
    one = IndexService(str(tmp_path / "one"), hash_slots=3, max_items=40)
    many = IndexService(str(tmp_path / "many"), hash_slots=3, max_items=40)
    entries = [("t", [f"n{i}.{variant}", f"j{i % 3}"], 200 + i, 1_700_000_005_000 + i) for i in range(10)]
    for e in entries:
        one.put_keys(*e)
    many.put_batch(entries)
    assert [f.select(0, 0, 1 << 62, 100) for f in one.files] == [f.select(0, 0, 1 << 62, 100) for f in many.files]
    one.close()
    many.close()
    assert _files_of(str(tmp_path / "one")) == _files_of(str(tmp_path / "many"))
