"""Local CommitLog: offset-named files, BLANK-ended rolls, reads, flush, torn-tail recovery."""

from __future__ import annotations

import os
import random
import struct

import pytest

from tiered_core.codec import (
    BLANK_MAGIC,
    Message,
    decode_message,
    encode_message,
    peek_physical_offset,
)
from tiered_core.errors import CorruptData, IllegalOffset, IllegalParam
from tiered_core.local.commit_log import END_FILE_MIN_BLANK_LENGTH, CommitLog
from tiered_core.local.mapped_file import offset_file_name

FILE_SIZE = 64 * 1024


def _read(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _encoded(i: int, body_size: int) -> bytearray:
    msg = Message(topic="orders", body=bytes([i % 251]) * body_size, keys=[f"k{i}"], tags="t")
    return bytearray(encode_message(msg, queue_id=i % 4, queue_offset=i // 4, store_timestamp=1000 + i))


def _fill(log: CommitLog, count: int, seed: int = 7) -> list[tuple[int, bytes]]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        data = _encoded(i, rng.randrange(0, 9000))
        res = log.append(data, 1000 + i)
        assert res.size == len(data)
        out.append((res.commitlog_offset, bytes(data)))
    return out


def test_files_are_named_by_start_offset_and_end_in_a_blank_record(tmp_path):
    log = CommitLog(str(tmp_path), FILE_SIZE)
    written = _fill(log, 60)
    files = log.files()
    assert len(files) > 3
    names = sorted(os.listdir(tmp_path))
    assert names == [offset_file_name(i * FILE_SIZE) for i in range(len(files))]
    assert names[0] == "00000000000000000000" and names[1] == "00000000000000065536"
    for mf in files[:-1]:
        raw = _read(mf.path)
        assert len(raw) == FILE_SIZE
        # the last message of the file ends where the BLANK record begins
        ends = [off + len(d) for off, d in written if mf.start <= off < mf.limit]
        blank_at = max(ends) - mf.start
        size, magic = struct.unpack_from(">iI", raw, blank_at)
        assert magic == BLANK_MAGIC and blank_at + size == FILE_SIZE
        assert size >= END_FILE_MIN_BLANK_LENGTH
    # no message spans two files, and each carries its own offset
    for off, data in written:
        assert off // FILE_SIZE == (off + len(data) - 1) // FILE_SIZE
        got = log.read(off, len(data))
        assert peek_physical_offset(got) == off
        assert got[:28] == data[:28] and got[36:] == data[36:]
        assert decode_message(log.read_message(off)).keys == decode_message(data).keys


def test_iter_records_walks_all_files_in_order(tmp_path):
    log = CommitLog(str(tmp_path), FILE_SIZE)
    written = _fill(log, 50)
    got = [(r.offset, bytes(r.data)) for r in log.iter_records(0, verify_crc=True)]
    assert [o for o, _ in got] == [o for o, _ in written]
    # starting mid-way and stopping early
    mid = written[20][0]
    stop = written[30][0]
    assert [r.offset for r in log.iter_records(mid, stop)] == [o for o, _ in written[20:30]]


def test_message_that_does_not_fit_a_file_is_rejected(tmp_path):
    log = CommitLog(str(tmp_path), FILE_SIZE)
    too_big = _encoded(1, FILE_SIZE)
    with pytest.raises(IllegalParam) as err:
        log.append(too_big, 1)
    assert err.value.size == len(too_big)
    with pytest.raises(IllegalParam):
        log.append(bytearray(b"\x00" * 100), 1)  # not a message
    assert log.max_offset == 0
    # the largest message that fits goes alone into a file
    biggest = _encoded(2, 0)
    body = log.max_message_size - len(biggest)
    data = _encoded(2, body)
    assert len(data) == log.max_message_size
    assert log.append(data, 1).commitlog_offset == 0
    assert log.append(_encoded(3, 10), 2).commitlog_offset == FILE_SIZE


def test_reads_outside_the_log_are_illegal_offsets(tmp_path):
    log = CommitLog(str(tmp_path), FILE_SIZE)
    written = _fill(log, 3)
    end = log.max_offset
    with pytest.raises(IllegalOffset):
        log.read(end, 8)
    with pytest.raises(IllegalOffset):
        log.read(written[-1][0], len(written[-1][1]) + 1)
    with pytest.raises(IllegalOffset):
        log.read(10 * FILE_SIZE, 8)
    with pytest.raises(CorruptData):
        log.read_message(written[0][0] + 4)  # not a record boundary


def test_flush_advances_the_confirmed_offset(tmp_path):
    log = CommitLog(str(tmp_path), FILE_SIZE)
    _fill(log, 5)
    assert log.flushed_offset < log.max_offset
    assert log.flush() == log.max_offset
    assert log.confirmed_offset == log.flushed_offset == log.max_offset
    _fill(log, 30, seed=3)
    target = log.max_offset
    assert log.flush_to(target) >= target


def _reopen(path, hint=None):
    log = CommitLog(str(path), FILE_SIZE)
    return log, log.recover(hint)


def test_recovery_keeps_an_intact_log(tmp_path):
    log = CommitLog(str(tmp_path), FILE_SIZE)
    written = _fill(log, 40)
    end = log.max_offset
    log.close()
    log, rec = _reopen(tmp_path)
    assert rec.max_offset == end and rec.truncated_bytes == 0 and rec.messages == 40
    assert [r.offset for r in log.iter_records(0)] == [o for o, _ in written]
    # the log goes on where it stopped
    assert log.append(_encoded(99, 10), 1).commitlog_offset == end


@pytest.mark.parametrize("cut", [1, 7, 60, "half"])
def test_recovery_cuts_a_torn_last_message(tmp_path, cut):
    log = CommitLog(str(tmp_path), FILE_SIZE)
    written = _fill(log, 40)
    log.close()
    last_off, last = written[-1]
    path = os.path.join(tmp_path, offset_file_name(last_off - last_off % FILE_SIZE))
    keep = len(last) // 2 if cut == "half" else len(last) - cut
    with open(path, "r+b") as f:
        f.truncate(last_off % FILE_SIZE + keep)
    log, rec = _reopen(tmp_path)
    assert rec.max_offset == last_off
    assert rec.truncated_bytes == keep
    assert [r.offset for r in log.iter_records(0, verify_crc=True)] == [o for o, _ in written[:-1]]
    assert log.append(_encoded(5, 100), 1).commitlog_offset == last_off


def test_recovery_removes_garbage_and_bad_crc(tmp_path):
    log = CommitLog(str(tmp_path), FILE_SIZE)
    written = _fill(log, 40)
    end = log.max_offset
    log.close()
    last_file = os.path.join(tmp_path, offset_file_name(end - end % FILE_SIZE))
    with open(last_file, "ab") as f:
        f.write(os.urandom(333))
    log, rec = _reopen(tmp_path)
    assert rec.max_offset == end and rec.truncated_bytes == 333
    log.close()
    # flip a body byte of the second-to-last message: it and everything after go
    off, data = written[-2]
    with open(last_file, "r+b") as f:
        f.seek(off % FILE_SIZE + len(data) - 30)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0xFF]))
    log, rec = _reopen(tmp_path)
    assert rec.max_offset == off
    assert [r.offset for r in log.iter_records(0)] == [o for o, _ in written[:-2]]


def test_recovery_scans_from_the_hinted_file_and_finishes_a_half_written_blank(tmp_path):
    log = CommitLog(str(tmp_path), FILE_SIZE)
    written = _fill(log, 60)
    end = log.max_offset
    files = log.files()
    log.close()
    # killed after the BLANK head of file 1 was written but before the fill
    second = files[1]
    ends = [o + len(d) for o, d in written if second.start <= o < second.limit]
    with open(second.path, "r+b") as f:
        f.truncate(max(ends) - second.start + 8)
    log, rec = _reopen(tmp_path, hint=second.start + 5)
    assert rec.scanned_from == second.start
    assert rec.max_offset == end and rec.truncated_bytes == 0
    assert os.path.getsize(second.path) == FILE_SIZE
    assert [r.offset for r in log.iter_records(0, verify_crc=True)] == [o for o, _ in written]


def test_recovery_drops_files_after_a_file_that_is_not_complete(tmp_path):
    log = CommitLog(str(tmp_path), FILE_SIZE)
    written = _fill(log, 60)
    files = log.files()
    log.close()
    first = files[0]
    in_first = [(o, d) for o, d in written if o < first.limit]
    cut_at = in_first[-3][0]
    with open(first.path, "r+b") as f:
        f.truncate(cut_at)  # the tail of file 0 vanished (e.g. never reached the disk)
    log, rec = _reopen(tmp_path)
    assert rec.max_offset == cut_at
    assert [mf.start for mf in log.files()] == [0]
    assert [r.offset for r in log.iter_records(0)] == [o for o, _ in in_first[:-3]]


def test_recovery_of_a_file_killed_while_being_ended(tmp_path):
    """Killed after the zero fill but before the BLANK head: the fill is cut again."""
    log = CommitLog(str(tmp_path), FILE_SIZE)
    written = _fill(log, 60)
    files = log.files()
    log.close()
    first = files[0]
    ends = [o + len(d) for o, d in written if o < first.limit]
    with open(first.path, "r+b") as f:
        f.seek(max(ends))
        f.write(b"\x00" * 8)  # the BLANK head never landed
    for mf in files[1:]:
        os.unlink(mf.path)  # nor did anything after it
    log, rec = _reopen(tmp_path)
    assert rec.max_offset == max(ends)
    assert os.path.getsize(first.path) == max(ends)
    res = log.append(_encoded(1, FILE_SIZE - max(ends)), 1)  # does not fit: ends the file again
    assert res.commitlog_offset == FILE_SIZE
    assert [r.offset for r in log.iter_records(0)] == [o for o, _ in written if o < first.limit] + [FILE_SIZE]


def test_readers_never_see_a_half_ended_file(tmp_path):
    """A reader racing the writer only ever sees whole records (the BLANK record and
    the zero fill appear at once)."""
    import threading

    log = CommitLog(str(tmp_path), FILE_SIZE)
    stop = threading.Event()
    errors = []

    def reader() -> None:
        offset = 0
        while not stop.is_set() or offset < log.max_offset:
            end = log.max_offset
            try:
                for rec in log.iter_records(offset, end):
                    offset = rec.offset + len(rec.data)
                offset = max(offset, end)
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                return

    t = threading.Thread(target=reader)
    t.start()
    _fill(log, 400)
    stop.set()
    t.join()
    assert errors == []


def test_recovery_checks_files_before_the_hint_that_are_not_full(tmp_path):
    log = CommitLog(str(tmp_path), FILE_SIZE)
    written = _fill(log, 60)
    files = log.files()
    log.close()
    in_first = [(o, d) for o, d in written if o < files[0].limit]
    with open(files[0].path, "r+b") as f:
        f.truncate(in_first[-1][0] + 10)
    log, rec = _reopen(tmp_path, hint=files[-1].start)
    assert rec.scanned_from == 0
    assert rec.max_offset == in_first[-1][0]
    assert [mf.start for mf in log.files()] == [0]
