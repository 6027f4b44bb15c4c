"""Local ConsumeQueue: 20-byte units in byte-offset-named files, recovery, retention."""

from __future__ import annotations

import os
import struct

import pytest

from tiered_core.codec import CQ_UNIT_SIZE, tags_hash_code
from tiered_core.errors import IllegalOffset
from tiered_core.local.local_consume_queue import ConsumeQueue
from tiered_core.local.mapped_file import offset_file_name

UNITS = 10


def _read(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _cq(path) -> ConsumeQueue:
    return ConsumeQueue(str(path), "orders", 3, units_per_file=UNITS)


def _put(cq: ConsumeQueue, start: int, count: int) -> None:
    for q in range(start, start + count):
        assert cq.put(q, q * 100, 90 + q % 7, tags_hash_code(f"tag{q % 3}"))


def test_units_are_20_bytes_in_files_named_by_byte_offset(tmp_path):
    cq = _cq(tmp_path)
    _put(cq, 0, 25)
    assert (cq.min_offset, cq.max_offset) == (0, 25)
    assert sorted(os.listdir(tmp_path)) == [offset_file_name(i * UNITS * CQ_UNIT_SIZE) for i in range(3)]
    assert sorted(os.listdir(tmp_path))[1] == "00000000000000000200"
    raw = _read(os.path.join(tmp_path, offset_file_name(200)))
    assert len(raw) == UNITS * CQ_UNIT_SIZE
    assert struct.unpack_from(">qiq", raw, 3 * CQ_UNIT_SIZE) == (1300, 90 + 13 % 7, tags_hash_code("tag1"))
    units = cq.get_units(8, 5)  # across a file boundary
    assert [u.commitlog_offset for u in units] == [800, 900, 1000, 1100, 1200]
    assert cq.get_unit(24).size == 90 + 24 % 7
    assert cq.get_units(20, 100)[-1].commitlog_offset == 2400
    assert cq.get_units(25, 3) == []
    with pytest.raises(IllegalOffset):
        cq.get_units(26, 1)


def test_put_is_idempotent_and_gaps_are_invalid_units(tmp_path):
    cq = _cq(tmp_path)
    _put(cq, 0, 3)
    assert cq.put(1, 12345, 1, 0) is False  # already stored: untouched
    assert cq.get_unit(1).commitlog_offset == 100
    assert cq.put(6, 600, 10, 0)
    assert cq.max_offset == 7
    assert [u.is_valid for u in cq.get_units(0, 7)] == [True, True, True, False, False, False, True]


def test_a_queue_can_start_late(tmp_path):
    cq = _cq(tmp_path)
    assert cq.put(23, 5000, 10, 0)
    assert (cq.min_offset, cq.max_offset) == (23, 24)
    assert os.listdir(tmp_path) == [offset_file_name(20 * CQ_UNIT_SIZE)]
    cq.close()
    cq = _cq(tmp_path)
    cq.correct_min_offset(0)
    assert (cq.min_offset, cq.max_offset) == (23, 24)


def test_recovery_cuts_units_beyond_the_commit_log_and_partial_units(tmp_path):
    cq = _cq(tmp_path)
    _put(cq, 0, 25)
    cq.close()
    last = os.path.join(tmp_path, offset_file_name(400))
    with open(last, "ab") as f:
        f.write(b"\x01" * 7)  # a torn unit
    cq = _cq(tmp_path)
    # messages are at q*100 with size 90 + q%7: unit 14 ends at 1490, unit 15 at 1591
    removed = cq.recover(1500)
    assert cq.max_offset == 15
    assert removed == 10
    assert cq.get_unit(14).commitlog_offset == 1400
    assert sorted(os.listdir(tmp_path)) == [offset_file_name(0), offset_file_name(200)]
    assert os.path.getsize(os.path.join(tmp_path, offset_file_name(200))) == 5 * CQ_UNIT_SIZE
    assert cq.put(15, 1500, 10, 0)


def test_recovery_of_an_intact_queue_changes_nothing(tmp_path):
    cq = _cq(tmp_path)
    _put(cq, 0, 20)
    assert cq.recover(10**9) == 0
    assert cq.max_offset == 20


def test_retention_moves_min_offset_and_deletes_whole_files(tmp_path):
    cq = _cq(tmp_path)
    _put(cq, 0, 25)
    assert cq.delete_expired(1250) == 1  # units 0..12 point below 1250
    assert cq.min_offset == 13
    assert sorted(os.listdir(tmp_path)) == [offset_file_name(200), offset_file_name(400)]
    with pytest.raises(IllegalOffset):
        cq.get_units(12, 1)
    assert cq.get_units(13, 1)[0].commitlog_offset == 1300
    # even when everything expired the newest file stays: max offset survives
    cq.delete_expired(10**9)
    assert cq.min_offset == cq.max_offset == 25
    assert os.listdir(tmp_path) == [offset_file_name(400)]
    cq.close()
    cq = _cq(tmp_path)
    cq.correct_min_offset(10**9)
    assert cq.min_offset == cq.max_offset == 25
    assert cq.put(25, 10**9, 10, 0)
    assert cq.last_unit_end() == 10**9 + 10
