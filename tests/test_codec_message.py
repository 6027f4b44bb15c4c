"""The RocketMQ message codec: layout vectors, round trips, malformed input."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tiered_core.codec import (
    BLANK_MAGIC,
    BORNHOST_V6_FLAG,
    MAGIC_V1,
    MAGIC_V2,
    STOREHOSTADDRESS_V6_FLAG,
    TRANSACTION_COMMIT_TYPE,
    Host,
    Message,
    MessageExt,
    MessageSpan,
    MessageVersion,
    decode_message,
    decode_messages,
    encode_message,
    encode_message_ext,
    format_properties,
    new_uniq_key,
    offset_msg_id,
    parse_properties,
    peek_body_crc,
    peek_born_timestamp,
    peek_flag,
    peek_magic,
    peek_physical_offset,
    peek_queue_id,
    peek_queue_offset,
    peek_store_host,
    peek_store_timestamp,
    peek_sys_flag,
    peek_total_size,
    rewrite_physical_offset,
    split_messages,
    validate_message,
)
from tiered_core.errors import CorruptData, ErrorCode, IllegalParam

# Java's HashMap iterates {"UNIQ_KEY": "uk", "UserKey": "UserValue0"} as UserKey first:
# measured once with javac/java 17 (new HashMap<>(), two put()s, entrySet() order).
MOCK_PROPERTIES = "UserKey\x01UserValue0\x02UNIQ_KEY\x01uk\x02"


def mocked_message_buffer() -> bytes:
    """RocketMQ MessageFormatUtilTest.buildMockedMessageBuffer(), field by field.

    Built with struct directly (not with the encoder under test): a V2 message whose
    fields are 123, magic, crc 3, queueId 4, flag 5, queueOffset 6, physicalOffset 7,
    sysFlag 8, bornTs 9, bornHost long 10, storeTs 11, storeHost long 10, reconsume 13,
    prepTx 14, empty body, empty topic (short 0) and 31 bytes of properties.
    """
    props = MOCK_PROPERTIES.encode()
    buf = struct.pack(">iIiiiqqiqqqqiqi", 123, MAGIC_V2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 10, 13, 14, 0)
    buf += struct.pack(">h", 0) + struct.pack(">h", len(props)) + props
    return buf


def sample(topic: str = "TopicTest", body: bytes = b"hello world", **kw) -> Message:
    kw.setdefault("keys", ["k1", "k2"])
    kw.setdefault("tags", "TagA")
    kw.setdefault("properties", {"UNIQ_KEY": "7F0000010001", "user": "v"})
    kw.setdefault("born_timestamp", 1_700_000_000_000)
    kw.setdefault("born_host", ("10.0.0.7", 51234))
    return Message(topic=topic, body=body, **kw)


def enc(msg: Message, **kw) -> bytes:
    kw.setdefault("queue_id", 3)
    kw.setdefault("queue_offset", 42)
    kw.setdefault("store_timestamp", 1_700_000_000_123)
    kw.setdefault("physical_offset", 4096)
    kw.setdefault("store_host", ("192.168.1.2", 10911))
    return encode_message(msg, **kw)


# -- the digest's mocked message ----------------------------------------------------


def test_mocked_message_is_123_bytes_and_fields_sit_at_fixed_offsets():
    buf = mocked_message_buffer()
    assert len(buf) == 123
    assert peek_total_size(buf) == 123
    assert peek_magic(buf) == MAGIC_V2
    assert peek_body_crc(buf) == 3
    assert peek_queue_id(buf) == 4
    assert peek_flag(buf) == 5
    assert peek_queue_offset(buf) == 6
    assert peek_physical_offset(buf) == 7
    assert peek_sys_flag(buf) == 8
    assert peek_born_timestamp(buf) == 9
    assert peek_store_timestamp(buf) == 11
    assert peek_store_host(buf) == Host("0.0.0.0", 10)


def test_mocked_message_decodes_without_crc_check():
    m = decode_message(mocked_message_buffer(), verify_crc=False)
    assert m.version is MessageVersion.V2
    assert (m.store_size, m.body_crc, m.queue_id, m.flag) == (123, 3, 4, 5)
    assert (m.queue_offset, m.commitlog_offset, m.sys_flag) == (6, 7, TRANSACTION_COMMIT_TYPE)
    assert (m.born_timestamp, m.store_timestamp) == (9, 11)
    assert m.born_host == ("0.0.0.0", 10) and m.store_host == ("0.0.0.0", 10)
    assert (m.reconsume_times, m.prepared_transaction_offset) == (13, 14)
    assert m.topic == "" and m.body == b""
    assert m.properties == {"UserKey": "UserValue0", "UNIQ_KEY": "uk"}
    assert m.uniq_key == "uk" and m.keys == [] and m.tags is None
    # createMessageId: store ip 0.0.0.0, port 10, offset 7.
    assert m.msg_id == "00000000" "0000000A" "0000000000000007"


def test_mocked_message_crc_is_wrong_for_its_empty_body():
    # The mock stores crc 3, but crc32(b"") & 0x7FFFFFFF is 0.
    with pytest.raises(CorruptData) as ei:
        decode_message(mocked_message_buffer())
    assert ei.value.code is ErrorCode.CORRUPT_DATA
    assert ei.value.reason == "crc_mismatch" and ei.value.offset == 0


def test_encoder_reproduces_the_mock_byte_for_byte_except_the_crc():
    mock = mocked_message_buffer()
    again = encode_message_ext(decode_message(mock, verify_crc=False))
    assert len(again) == 123
    assert again[:8] == mock[:8] and again[12:] == mock[12:]
    assert struct.unpack_from(">i", again, 8)[0] == zlib.crc32(b"") & 0x7FFFFFFF == 0


# -- round trips ----------------------------------------------------------------------


def assert_matches(m: MessageExt, msg: Message, **store):
    assert m.topic == msg.topic
    assert m.body == msg.body
    assert m.keys == list(msg.keys)
    assert m.tags == (msg.tags or None)
    assert m.properties == msg.all_properties()
    assert m.flag == msg.flag
    assert m.born_timestamp == msg.born_timestamp
    assert m.born_host == tuple(msg.born_host)
    assert m.reconsume_times == msg.reconsume_times
    assert m.prepared_transaction_offset == msg.prepared_transaction_offset
    for k, v in store.items():
        assert getattr(m, k) == v, k


@pytest.mark.parametrize("version", [MessageVersion.V1, MessageVersion.V2])
def test_round_trip_both_versions(version):
    msg = sample()
    buf = enc(msg, version=version)
    assert peek_magic(buf) == version.magic
    m = decode_message(buf)
    assert_matches(m, msg, queue_id=3, queue_offset=42, commitlog_offset=4096,
                   store_timestamp=1_700_000_000_123, store_host=("192.168.1.2", 10911),
                   store_size=len(buf), version=version,
                   body_crc=zlib.crc32(b"hello world") & 0x7FFFFFFF)
    assert m.uniq_key == "7F0000010001"
    assert encode_message_ext(m) == buf


def test_v2_adds_exactly_one_byte_of_topic_length():
    msg = sample()
    assert len(enc(msg, version=2)) == len(enc(msg, version=1)) + 1


def test_version_follows_rocketmq_topic_length_rule():
    assert peek_magic(enc(sample(topic="t" * 127))) == MAGIC_V1
    buf = enc(sample(topic="t" * 128))
    assert peek_magic(buf) == MAGIC_V2
    assert decode_message(buf).topic == "t" * 128
    with pytest.raises(IllegalParam) as ei:
        enc(sample(topic="t" * 128), version=MessageVersion.V1)
    assert ei.value.topic == "t" * 128


def test_unicode_topic_keys_tags_and_properties():
    msg = sample(topic="主题-ü", keys=["键1", "ключ", "😀"], tags="标签😀",
                 properties={"ñame": "välue 😀 with spaces", "UNIQ_KEY": "u-1"}, body="正文".encode())
    m = decode_message(enc(msg))
    assert_matches(m, msg)
    assert m.keys == ["键1", "ключ", "😀"] and m.tags == "标签😀"


def test_unicode_topic_uses_its_utf8_byte_length():
    topic = "é" * 64  # 64 characters, 128 UTF-8 bytes: a V1 length byte would read negative in Java
    buf = enc(sample(topic=topic))
    assert peek_magic(buf) == MAGIC_V2
    assert decode_message(buf).topic == topic


def test_empty_body_keys_tags_and_properties():
    msg = Message(topic="T", body=b"", born_timestamp=1)
    buf = enc(msg)
    assert len(buf) == 88 + 1 + 1 + 2  # fixed header, topic length, topic, properties length
    m = decode_message(buf)
    assert m.body == b"" and m.keys == [] and m.tags is None and m.properties == {}
    assert m.body_crc == 0


def test_keys_given_as_a_string_are_split_like_setkeys():
    m = decode_message(enc(sample(keys="a b  c")))
    assert m.keys == ["a", "b", "c"]
    assert m.properties["KEYS"] == "a b c"


def test_explicit_keys_and_tags_override_properties():
    msg = sample(keys=["x"], tags="T1", properties={"KEYS": "old", "TAGS": "old"})
    m = decode_message(enc(msg))
    assert m.keys == ["x"] and m.tags == "T1"


def test_ipv6_hosts_set_flags_and_move_the_store_fields():
    msg = sample(born_host=("::1", 9876), sys_flag=TRANSACTION_COMMIT_TYPE)
    buf = enc(msg, store_host=("fe80::1:2", 10911), store_timestamp=777)
    assert len(buf) == len(enc(sample(sys_flag=TRANSACTION_COMMIT_TYPE), store_timestamp=777)) + 24
    flag = peek_sys_flag(buf)
    assert flag == TRANSACTION_COMMIT_TYPE | BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG
    assert peek_store_timestamp(buf) == 777  # at 68, not RocketMQ's hard-coded 56
    assert peek_store_host(buf) == ("fe80::1:2", 10911)
    m = decode_message(buf)
    assert m.born_host == ("::1", 9876) and m.store_host == ("fe80::1:2", 10911)
    assert m.store_timestamp == 777 and m.sys_flag == flag
    assert encode_message_ext(m) == buf


@pytest.mark.parametrize("born,store,bits", [
    ("::1", "1.2.3.4", BORNHOST_V6_FLAG),
    ("1.2.3.4", "::1", STOREHOSTADDRESS_V6_FLAG),
])
def test_mixed_host_kinds(born, store, bits):
    buf = enc(sample(born_host=(born, 1)), store_host=(store, 2), store_timestamp=55)
    assert peek_sys_flag(buf) & (BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG) == bits
    m = decode_message(buf)
    assert (m.born_host, m.store_host, m.store_timestamp) == ((born, 1), (store, 2), 55)


def test_stale_v6_bits_in_sys_flag_are_corrected_from_the_hosts():
    buf = enc(sample(sys_flag=BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG | 1))
    assert peek_sys_flag(buf) == 1
    assert decode_message(buf).born_host == ("10.0.0.7", 51234)


def test_negative_and_extreme_field_values_round_trip():
    msg = sample(flag=-1, reconsume_times=2**31 - 1, prepared_transaction_offset=-(2**63),
                 born_timestamp=2**63 - 1)
    m = decode_message(enc(msg, queue_id=-5, queue_offset=2**63 - 1, physical_offset=-1))
    assert_matches(m, msg, queue_id=-5, queue_offset=2**63 - 1, commitlog_offset=-1)


def test_body_accepts_bytearray_and_memoryview():
    a = enc(sample(body=bytearray(b"xyz")))
    b = enc(sample(body=memoryview(b"xyz")))
    assert a == b == enc(sample(body=b"xyz"))


def test_decode_accepts_memoryview_and_bytearray_at_an_offset():
    buf = b"\xff" * 10 + enc(sample()) + b"\xee" * 5
    for view in (buf, bytearray(buf), memoryview(buf)):
        assert decode_message(view, 10).body == b"hello world"


# -- properties -------------------------------------------------------------------------


def test_properties_text_matches_rocketmq_encoding():
    assert format_properties({"A": "1", "B": "2"}) == "A\x011\x02B\x012\x02"
    assert parse_properties(format_properties({"A": "1", "B": "2"})) == {"A": "1", "B": "2"}


def test_parse_properties_is_lenient_like_java():
    # empty names/values are dropped, a missing final separator is fine, later wins
    text = "a\x01b\x02\x01x\x02c\x01\x02\x02d\x01e\x01f\x02a\x01z"
    assert parse_properties(text) == {"a": "z", "d": "e\x01f"}
    assert parse_properties("") == {}


@pytest.mark.parametrize("props", [
    {"": "v"}, {"k": ""}, {"k\x01": "v"}, {"k": "v\x02"}, {"k": 1},
])
def test_unstorable_properties_are_rejected(props):
    with pytest.raises(IllegalParam):
        enc(sample(properties=props))


# -- encode argument errors -------------------------------------------------------------


@pytest.mark.parametrize("kw,name", [
    ({"queue_id": 2**31}, "queue_id"),
    ({"queue_offset": 2**63}, "queue_offset"),
    ({"physical_offset": -(2**63) - 1}, "physical_offset"),
    ({"store_timestamp": 1.5}, "store_timestamp"),
])
def test_out_of_range_store_fields_name_the_field(kw, name):
    with pytest.raises(IllegalParam) as ei:
        enc(sample(), **kw)
    assert name in ei.value.context


@pytest.mark.parametrize("msg", [
    sample(keys=["has space"]),
    sample(keys=[""]),
    sample(born_host=("localhost", 1)),
    sample(born_host=("1.2.3.4", 70000)),
    sample(born_host="1.2.3.4"),
    sample(topic="bad\ud800"),
    sample(properties={"k": "x" * 40000}),
    sample(flag=2**31),
    sample(body="text"),
])
def test_unencodable_messages_raise_illegal_param(msg):
    with pytest.raises(IllegalParam):
        enc(msg)


def test_bad_version_is_rejected():
    with pytest.raises(IllegalParam):
        enc(sample(), version=3)


# -- malformed input ---------------------------------------------------------------------


def corrupt(buf: bytes, pos: int, fmt: str, value: int) -> bytes:
    out = bytearray(buf)
    struct.pack_into(fmt, out, pos, value)
    return bytes(out)


def expect_corrupt(buf, reason, offset=0, **kw) -> CorruptData:
    with pytest.raises(CorruptData) as ei:
        decode_message(buf, **kw)
    assert ei.value.reason == reason
    assert ei.value.offset == offset
    assert str(offset) in str(ei.value)
    return ei.value


def test_bad_magic():
    err = expect_corrupt(corrupt(enc(sample()), 4, ">I", 0x12345678), "bad_magic")
    assert "0x12345678" in str(err)


def test_blank_record_is_not_a_message():
    coda = struct.pack(">iIq", 16, BLANK_MAGIC, 123)
    expect_corrupt(coda, "blank")


def test_total_size_smaller_than_parts():
    buf = enc(sample())
    expect_corrupt(corrupt(buf, 0, ">i", len(buf) - 1), "length_mismatch")


def test_total_size_larger_than_parts():
    buf = enc(sample()) + b"\0"
    expect_corrupt(corrupt(buf, 0, ">i", len(buf)), "length_mismatch")


@pytest.mark.parametrize("total", [-1, 0, 8, 90])
def test_total_size_below_minimum(total):
    expect_corrupt(corrupt(enc(sample()), 0, ">i", total), "length_mismatch")


def test_total_size_beyond_the_buffer_is_truncation():
    buf = enc(sample())
    expect_corrupt(corrupt(buf, 0, ">i", len(buf) + 1), "truncated")


@pytest.mark.parametrize("body_len", [-1, 2**31 - 1, 12])
def test_corrupt_body_length(body_len):
    expect_corrupt(corrupt(enc(sample()), 84, ">i", body_len), "length_mismatch")


def test_corrupt_topic_and_properties_lengths():
    buf = enc(sample(topic="abc", body=b""))
    topic_len_pos = 88
    expect_corrupt(corrupt(buf, topic_len_pos, ">B", 200), "length_mismatch")
    props_len_pos = 88 + 1 + 3
    expect_corrupt(corrupt(buf, props_len_pos, ">H", 3), "length_mismatch")


def test_every_truncation_is_reported():
    buf = enc(sample())
    for n in range(len(buf)):
        with pytest.raises(CorruptData) as ei:
            decode_message(buf[:n], base_offset=500)
        assert ei.value.reason == "truncated" and ei.value.offset == 500


def test_crc_mismatch():
    buf = bytearray(enc(sample()))
    buf[88] ^= 0x01  # first body byte
    expect_corrupt(bytes(buf), "crc_mismatch")
    assert decode_message(bytes(buf), verify_crc=False).body == b"iello world"


def test_invalid_utf8_topic():
    buf = bytearray(enc(sample(topic="abc")))
    buf[88 + len(b"hello world") + 1] = 0xFF
    expect_corrupt(bytes(buf), "bad_encoding")


def test_error_offset_is_absolute():
    buf = b"\0" * 7 + corrupt(enc(sample()), 4, ">I", 0)
    with pytest.raises(CorruptData) as ei:
        decode_message(buf, 7, base_offset=1000)
    assert ei.value.reason == "bad_magic"
    assert ei.value.offset == 1007 and "1007" in str(ei.value)


def test_negative_offset_is_illegal_param():
    with pytest.raises(IllegalParam):
        decode_message(enc(sample()), -1)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_damage_never_escapes_as_a_raw_error(data):
    buf = bytearray(enc(sample(born_host=data.draw(st.sampled_from([("::1", 1), ("1.1.1.1", 1)])))))
    for _ in range(data.draw(st.integers(1, 4))):
        buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(buf)))
    damaged = bytes(buf[:cut])
    for fn in (decode_message, validate_message, lambda b: list(split_messages(b)),
               peek_store_timestamp, peek_store_host, peek_queue_offset):
        try:
            fn(damaged)
        except CorruptData:
            pass


# -- peeks and in-place rewrite --------------------------------------------------------


def test_peeks_agree_with_decode():
    buf = enc(sample())
    m = decode_message(buf)
    assert peek_total_size(buf) == m.store_size
    assert peek_queue_offset(buf) == m.queue_offset
    assert peek_physical_offset(buf) == m.commitlog_offset
    assert peek_store_timestamp(buf) == m.store_timestamp
    assert peek_store_host(buf) == m.store_host
    assert peek_body_crc(buf) == m.body_crc


def test_peeks_on_bad_bytes_raise_corrupt_data():
    with pytest.raises(CorruptData):
        peek_queue_offset(b"\0" * 40)  # bad magic
    with pytest.raises(CorruptData):
        peek_store_timestamp(enc(sample())[:60])
    with pytest.raises(CorruptData):
        peek_total_size(b"\0\0")


def test_rewrite_physical_offset_in_place():
    first, second = enc(sample()), enc(sample(body=b"second"))
    buf = bytearray(first + second)
    rewrite_physical_offset(buf, len(first), 13131313)
    assert peek_physical_offset(buf, len(first)) == 13131313
    assert peek_physical_offset(buf, 0) == 4096
    assert decode_message(buf, len(first)).commitlog_offset == 13131313  # CRC covers the body only
    view = memoryview(buf)
    rewrite_physical_offset(view, 0, 7)
    assert peek_physical_offset(buf) == 7


def test_rewrite_refuses_read_only_and_non_messages():
    with pytest.raises(IllegalParam):
        rewrite_physical_offset(enc(sample()), 0, 1)
    with pytest.raises(IllegalParam):
        rewrite_physical_offset(bytearray(enc(sample())), 0, 2**63)
    junk = bytearray(b"\x01" * 100)
    with pytest.raises(CorruptData):
        rewrite_physical_offset(junk, 0, 5)
    assert junk == bytearray(b"\x01" * 100)


# -- splitting a range of messages -----------------------------------------------------


def three_messages() -> tuple[bytes, list[bytes]]:
    parts = [enc(sample(body=b"a" * n, keys=[f"k{n}"]), queue_offset=n) for n in (0, 1, 50)]
    return b"".join(parts), parts


def test_split_yields_absolute_offsets_and_sizes():
    buf, parts = three_messages()
    spans = list(split_messages(buf, base_offset=10_000))
    sizes = [len(p) for p in parts]
    assert spans == [MessageSpan(10_000, sizes[0]), MessageSpan(10_000 + sizes[0], sizes[1]),
                     MessageSpan(10_000 + sizes[0] + sizes[1], sizes[2])]
    assert [m.queue_offset for m in decode_messages(buf)] == [0, 1, 50]
    assert list(split_messages(b"")) == []


def test_split_skips_blank_records_unless_told_not_to():
    buf, parts = three_messages()
    coda = struct.pack(">iIq", 16, BLANK_MAGIC, 99)
    joined = parts[0] + coda + parts[1]
    spans = list(split_messages(joined))
    assert [s.offset for s in spans] == [0, len(parts[0]) + 16]
    assert [m.queue_offset for m in decode_messages(joined)] == [0, 1]
    with pytest.raises(CorruptData) as ei:
        list(split_messages(joined, skip_blank=False))
    assert ei.value.reason == "blank" and ei.value.offset == len(parts[0])


@pytest.mark.parametrize("fn", [split_messages, decode_messages])
def test_split_names_the_offset_of_the_bad_message(fn):
    buf, parts = three_messages()
    bad = bytearray(buf)
    bad[len(parts[0]) + 88] ^= 0xFF  # the second message's (1-byte) body
    it = fn(bytes(bad), 2000)
    next(it)
    with pytest.raises(CorruptData) as ei:
        next(it)
    assert ei.value.reason == "crc_mismatch" and ei.value.offset == 2000 + len(parts[0])


def test_split_reports_trailing_partial_bytes():
    buf, parts = three_messages()
    with pytest.raises(CorruptData) as ei:
        list(split_messages(buf + b"\x00\x00\x00", base_offset=1))
    assert ei.value.reason == "truncated" and ei.value.offset == 1 + len(buf)
    with pytest.raises(CorruptData) as ei:
        list(split_messages(buf[:-1]))
    assert ei.value.offset == len(parts[0]) + len(parts[1])


# -- helpers -----------------------------------------------------------------------------


def test_offset_msg_id_layout_for_v4_and_v6():
    assert offset_msg_id(("192.168.1.2", 10911), 4096) == "C0A80102" "00002A9F" "0000000000001000"
    assert len(offset_msg_id(("::1", 1), 1)) == (16 + 4 + 8) * 2


def test_new_uniq_key_shape_and_uniqueness():
    keys = {new_uniq_key() for _ in range(1000)}
    assert len(keys) == 1000
    for k in keys:
        assert len(k) == 32 and k == k.upper() and int(k, 16) >= 0


# -- property: any encodable message round-trips ------------------------------------------

_no_sep = st.text(min_size=1, max_size=12).filter(lambda s: "\x01" not in s and "\x02" not in s)
_key = _no_sep.filter(lambda s: " " not in s)
_host = st.tuples(st.ip_addresses().map(str), st.integers(0, 65535))
_int32 = st.integers(-(2**31), 2**31 - 1)
_int64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def messages(draw):
    return Message(
        topic=draw(st.text(max_size=150)),
        body=draw(st.binary(max_size=300)),
        keys=draw(st.lists(_key, max_size=4)),
        tags=draw(st.none() | _no_sep),
        properties=draw(st.dictionaries(_no_sep.filter(lambda s: s not in ("KEYS", "TAGS")),
                                        _no_sep, max_size=4)),
        flag=draw(_int32),
        born_timestamp=draw(_int64),
        born_host=draw(_host),
        sys_flag=draw(st.integers(0, 0x7FF)),
        reconsume_times=draw(_int32),
        prepared_transaction_offset=draw(_int64),
    )


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(msg=messages(), queue_id=_int32, queue_offset=_int64, physical_offset=_int64,
       store_timestamp=_int64, store_host=_host,
       version=st.sampled_from([None, MessageVersion.V2]))
def test_round_trip_property(msg, queue_id, queue_offset, physical_offset, store_timestamp,
                             store_host, version):
    buf = encode_message(msg, queue_id=queue_id, queue_offset=queue_offset,
                         physical_offset=physical_offset, store_timestamp=store_timestamp,
                         store_host=store_host, version=version)
    m = decode_message(buf)
    assert_matches(m, msg, queue_id=queue_id, queue_offset=queue_offset,
                   commitlog_offset=physical_offset, store_timestamp=store_timestamp,
                   store_size=len(buf), body_crc=zlib.crc32(msg.body) & 0x7FFFFFFF)
    assert m.store_host == tuple(store_host)
    assert m.sys_flag & ~(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG) == \
        msg.sys_flag & ~(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)
    assert list(split_messages(buf + buf, 7)) == [(7, len(buf)), (7 + len(buf), len(buf))]
    assert encode_message_ext(m) == buf
