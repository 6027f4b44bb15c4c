"""Cutting a commit-log range into messages along consume-queue units."""

from __future__ import annotations

import pytest

from tiered_core.codec import (
    ConsumeQueueUnit,
    Message,
    encode_message,
    split_by_units,
    tags_hash_code,
)
from tiered_core.errors import CorruptData


def commit_log(n: int, start: int = 1000) -> tuple[bytes, list[ConsumeQueueUnit]]:
    parts, units, off = [], [], start
    for i in range(n):
        msg = Message(topic="T", body=bytes([i]) * (i + 1), tags=f"t{i}", born_timestamp=i)
        raw = encode_message(msg, queue_id=0, queue_offset=i, store_timestamp=i,
                             physical_offset=off)
        parts.append(raw)
        units.append(ConsumeQueueUnit(off, len(raw), tags_hash_code(f"t{i}")))
        off += len(raw)
    return b"".join(parts), units


def test_every_unit_found():
    buf, units = commit_log(4)
    slices = split_by_units(units, buf)
    assert [s.index for s in slices] == [0, 1, 2, 3]
    assert [s.position for s in slices] == [u.commitlog_offset - 1000 for u in units]
    assert split_by_units([], buf) == []


def test_a_trimmed_buffer_stops_at_the_first_unit_outside_it():
    buf, units = commit_log(4)
    cut = units[2].commitlog_offset - 1000 + 5
    assert [s.index for s in split_by_units(units, buf[:cut])] == [0, 1]


def test_explicit_buffer_offset():
    buf, units = commit_log(3)
    slices = split_by_units(units[1:], buf, 1000)
    assert [(s.index, s.position) for s in slices] == [(0, units[1].commitlog_offset - 1000),
                                                        (1, units[2].commitlog_offset - 1000)]


def test_size_mismatch_is_corrupt_or_skipped_keeping_unit_indexes():
    buf, units = commit_log(3)
    units[1] = units[1]._replace(size=units[1].size - 1)
    with pytest.raises(CorruptData) as ei:
        split_by_units(units, buf)
    assert ei.value.offset == units[1].commitlog_offset and ei.value.reason == "unit_mismatch"
    assert [s.index for s in split_by_units(units, buf, skip_corrupt=True)] == [0, 2]


def test_bad_bytes_under_a_unit():
    buf, units = commit_log(3)
    bad = bytearray(buf)
    bad[units[2].commitlog_offset - 1000 + 4] ^= 0xFF  # magic of the third message
    with pytest.raises(CorruptData) as ei:
        split_by_units(units, bytes(bad))
    assert ei.value.offset == units[2].commitlog_offset and ei.value.reason == "bad_magic"
    assert [s.index for s in split_by_units(units, bytes(bad), skip_corrupt=True)] == [0, 1]
