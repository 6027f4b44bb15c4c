"""Consume-queue units (20 bytes: commit-log offset, size, tags code)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tiered_core.codec import (
    CQ_UNIT_SIZE,
    ConsumeQueueUnit,
    decode_cq_unit,
    decode_cq_units,
    encode_cq_unit,
    encode_cq_units,
    iter_cq_units,
)
from tiered_core.errors import CorruptData, IllegalParam


def test_mocked_unit_from_the_rocketmq_tests():
    # MessageFormatUtilTest.buildMockedConsumeQueueBuffer(): (1L, 2, 3L), big-endian
    raw = struct.pack(">qiq", 1, 2, 3)
    assert CQ_UNIT_SIZE == len(raw) == 20
    assert encode_cq_unit(1, 2, 3) == raw
    assert decode_cq_unit(raw) == ConsumeQueueUnit(1, 2, 3)
    assert ConsumeQueueUnit(1, 2, 3).encode() == raw


def test_units_at_offsets_and_iteration():
    units = [ConsumeQueueUnit(i * 123, 123, -i) for i in range(5)]
    buf = encode_cq_units(units)
    assert len(buf) == 5 * CQ_UNIT_SIZE
    assert decode_cq_unit(buf, 3 * CQ_UNIT_SIZE) == units[3]
    assert list(iter_cq_units(buf)) == units == decode_cq_units(memoryview(buf))
    assert decode_cq_units(b"") == []


def test_partial_units_are_corrupt_data_naming_the_offset():
    buf = encode_cq_units([(0, 1, 0), (1, 1, 0)])
    with pytest.raises(CorruptData) as ei:
        iter_cq_units(buf[:-1], base_offset=100)
    assert ei.value.offset == 120 and ei.value.reason == "truncated"
    with pytest.raises(CorruptData) as ei:
        decode_cq_unit(buf, 30, base_offset=1000)
    assert ei.value.offset == 1030


@pytest.mark.parametrize("args", [(-1, 1, 0), (0, 0, 0), (0, -5, 0), (0, 2**31, 0),
                                  (2**63, 1, 0), (0, 1, 2**63), (0.5, 1, 0)])
def test_unencodable_units(args):
    with pytest.raises(IllegalParam):
        encode_cq_unit(*args)


def test_validity_of_zero_filled_units():
    assert not decode_cq_unit(bytes(20)).is_valid
    assert ConsumeQueueUnit(0, 1, 0).is_valid


@given(st.integers(0, 2**63 - 1), st.integers(1, 2**31 - 1), st.integers(-(2**63), 2**63 - 1))
def test_unit_round_trip(offset, size, tags):
    assert decode_cq_unit(encode_cq_unit(offset, size, tags)) == (offset, size, tags)
