"""IndexItem: the 32-byte and 28-byte index records."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tiered_core.errors import IllegalParam
from tiered_core.codec.tiered_index import COMPACT_ITEM_SIZE, ITEM_SIZE, IndexItem

INT = st.integers(-(1 << 31), (1 << 31) - 1)
LONG = st.integers(-(1 << 63), (1 << 63) - 1)


def test_field_offsets_are_rocketmq_layout():
    item = IndexItem(hash_code=0x01020304, topic_id=5, queue_id=6, offset=0x0708090A0B0C0D0E,
                     size=15, time_diff=-16, item_index=17)
    raw = item.encode()
    assert len(raw) == ITEM_SIZE == 32
    # Offsets 0/4/8/12/20/24/28, big-endian, read independently of the codec.
    assert raw[0:4] == b"\x01\x02\x03\x04"
    assert struct.unpack(">i", raw[4:8])[0] == 5
    assert struct.unpack(">i", raw[8:12])[0] == 6
    assert raw[12:20] == bytes(range(7, 15))
    assert struct.unpack(">i", raw[20:24])[0] == 15
    assert struct.unpack(">i", raw[24:28])[0] == -16
    assert struct.unpack(">i", raw[28:32])[0] == 17
    compact = item.encode_compact()
    assert len(compact) == COMPACT_ITEM_SIZE == 28
    assert compact == raw[:28]


@given(INT, INT, INT, LONG, INT, INT, INT)
def test_round_trip(h, topic_id, queue_id, offset, size, diff, prev):
    item = IndexItem(h, topic_id, queue_id, offset, size, diff, prev)
    assert IndexItem.decode(item.encode()) == item
    compact = IndexItem.decode(item.encode_compact())
    assert compact == IndexItem(h, topic_id, queue_id, offset, size, diff, 0)
    buf = b"\xff" * 3 + item.encode() + b"\xee"
    assert IndexItem.unpack_from(buf, 3, compact=False) == item
    assert IndexItem.unpack_from(buf, 3, compact=True) == compact


@pytest.mark.parametrize("length", [0, 27, 29, 31, 33, 64])
def test_decode_rejects_other_lengths(length):
    with pytest.raises(IllegalParam) as err:
        IndexItem.decode(b"\x00" * length)
    assert err.value.length == length


def test_decode_rejects_non_bytes():
    with pytest.raises(IllegalParam):
        IndexItem.decode(None)  # type: ignore[arg-type]


def test_unpack_from_checks_bounds():
    with pytest.raises(IllegalParam):
        IndexItem.unpack_from(b"\x00" * 40, 10, compact=False)
    with pytest.raises(IllegalParam):
        IndexItem.unpack_from(b"\x00" * 40, -1, compact=True)


@pytest.mark.parametrize("field,value", [
    ("hash_code", 1 << 31), ("topic_id", -(1 << 31) - 1), ("queue_id", "1"), ("offset", 1 << 63),
    ("size", 1.5), ("time_diff", True), ("item_index", 1 << 40),
])
def test_out_of_range_fields_are_named(field, value):
    kwargs = dict(hash_code=1, topic_id=2, queue_id=3, offset=4, size=5, time_diff=6, item_index=7)
    kwargs[field] = value
    with pytest.raises(IllegalParam) as err:
        IndexItem(**kwargs)
    assert field in err.value.message


def test_message_index_keys():
    from tiered_core.codec.message import Message, decode_message, encode_message
    from tiered_core.codec.index_keys import message_index_keys

    msg = Message(topic="T", body=b"x", keys=["o-1", "o-2", "o-1"], properties={"UNIQ_KEY": "U1"})
    assert message_index_keys(msg) == ["U1", "o-1", "o-2"]
    assert message_index_keys({"KEYS": " a  b ", "UNIQ_KEY": ""}) == ["a", "b"]
    assert message_index_keys({}) == [] and message_index_keys(None) == []
    ext = decode_message(encode_message(msg, queue_id=0, queue_offset=0, store_timestamp=1))
    assert message_index_keys(ext) == ["U1", "o-1", "o-2"]
