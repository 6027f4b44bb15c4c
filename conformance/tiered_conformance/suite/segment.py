"""(b) FileSegment semantics over the driver under test (no faults; see ``faults``)."""

from __future__ import annotations

import threading

import pytest

from tiered_core.errors import IllegalParam, StateConflict
from tiered_core.segment import FileSegment
from tiered_core.common import AppendResult, FileSegmentType
from tiered_conformance.faults import Fault, FaultLayer
from tiered_conformance import areas
from tiered_conformance.requirements import requires
from tiered_conformance.suite.base import ConformanceBase, payload, read_all, segment_holding


class FileSegmentTests(ConformanceBase):
    """The append buffer -> commit state machine of ``tiered_core.segment`` on this driver."""

    tiered_area = areas.FILE_SEGMENT

    # -- append -----------------------------------------------------------------------

    def test_append_buffers_without_storing(self, driver, prefix):
        seg = FileSegment(driver, prefix + "seg")
        assert seg.append(b"hello", 1) is AppendResult.SUCCESS
        assert seg.append(b" world", 2) is AppendResult.SUCCESS
        assert (seg.commit_position, seg.append_position) == (0, 11)
        assert seg.needs_commit()
        assert driver.size(prefix + "seg") == 0, "append must not reach the backend"

    def test_file_full_at_max_size_with_equality_allowed(self, driver, prefix):
        seg = FileSegment(driver, prefix + "seg", max_size=100)
        assert seg.append(b"a" * 60) is AppendResult.SUCCESS
        assert seg.append(b"b" * 41) is AppendResult.FILE_FULL
        assert seg.append(b"b" * 40) is AppendResult.SUCCESS
        assert seg.append_position == 100
        assert seg.append(b"c") is AppendResult.FILE_FULL
        assert seg.commit() is True
        assert driver.size(prefix + "seg") == 100
        assert driver.read(prefix + "seg", 0, 100) == b"a" * 60 + b"b" * 40

    def test_buffer_full_at_max_buffer_count(self, driver, prefix):
        seg = FileSegment(driver, prefix + "seg", max_buffer_count=3)
        results = [seg.append(bytes([i]) * 4) for i in range(4)]
        assert results == [AppendResult.SUCCESS] * 3 + [AppendResult.BUFFER_FULL]
        assert seg.append_position == 12
        assert seg.commit() is True
        assert seg.append(b"next") is AppendResult.SUCCESS
        assert seg.commit() is True
        assert driver.read(prefix + "seg", 0, 16) == b"\0" * 4 + b"\1" * 4 + b"\2" * 4 + b"next"

    def test_append_after_close_is_file_closed(self, driver, prefix):
        seg = FileSegment(driver, prefix + "seg")
        seg.append(b"abc")
        seg.close()
        assert seg.closed
        assert seg.append(b"x") is AppendResult.FILE_CLOSED
        assert seg.commit() is False
        assert driver.size(prefix + "seg") == 0

    def test_append_after_seal_is_segment_sealed(self, driver, prefix):
        seg = FileSegment(driver, prefix + "seg")
        seg.append(b"abc")
        seg.seal()
        assert seg.append(b"x") is AppendResult.SEGMENT_SEALED
        assert seg.append_position == 3

    def test_timestamps_and_offsets(self, driver, prefix):
        seg = FileSegment(driver, prefix + "seg", FileSegmentType.CONSUME_QUEUE, base_offset=1000)
        for ts in (50, 20, 90, 30):
            assert seg.append(b"u" * 20, ts) is AppendResult.SUCCESS
        assert (seg.min_timestamp, seg.max_timestamp) == (20, 90)
        assert (seg.commit_offset, seg.append_offset) == (1000, 1080)
        assert seg.commit()
        assert (seg.commit_offset, seg.append_offset) == (1080, 1080)
        assert seg.file_type is FileSegmentType.CONSUME_QUEUE

    # -- commit and read ------------------------------------------------------------

    def test_commit_makes_bytes_readable_in_order(self, driver, prefix):
        path = prefix + "seg"
        seg = FileSegment(driver, path)
        parts = [payload(1 + i * 97 % 700, ("commit", i)) for i in range(50)]
        for part in parts:
            assert seg.append(part) is AppendResult.SUCCESS
        with pytest.raises(IllegalParam):
            seg.read(0, 1)
        assert seg.commit() is True
        data = b"".join(parts)
        assert not seg.needs_commit()
        assert seg.commit_position == seg.append_position == len(data)
        assert seg.read(0, len(data)) == data
        assert driver.size(path) == len(data)
        assert read_all(driver, path, len(data)) == data

    def test_commit_with_nothing_buffered_is_true(self, driver, prefix):
        seg = FileSegment(driver, prefix + "seg")
        assert seg.commit() is True
        assert seg.commit_async().result(timeout=30) is True
        assert driver.size(prefix + "seg") == 0

    def test_commits_accumulate(self, driver, prefix):
        path = prefix + "seg"
        seg = FileSegment(driver, path)
        expected = b""
        for i in range(20):
            part = payload(10 + i, ("acc", i))
            seg.append(part)
            expected += part
            assert seg.commit() is True
            assert driver.size(path) == len(expected) == seg.commit_position
        assert seg.read(0, len(expected)) == expected

    def test_commit_async_resolves_true(self, driver, prefix):
        seg = FileSegment(driver, prefix + "seg")
        seg.append(b"async bytes")
        assert seg.commit_async().result(timeout=60) is True
        assert seg.read(0, 100) == b"async bytes"

    def test_large_commit(self, driver, prefix):
        path = prefix + "seg"
        seg = FileSegment(driver, path)
        parts = [payload(256 * 1024 + 3, ("large", i)) for i in range(20)]
        for part in parts:
            assert seg.append(part) is AppendResult.SUCCESS
        assert seg.commit() is True
        data = b"".join(parts)
        assert driver.size(path) == len(data)
        assert read_all(driver, path, len(data)) == data

    def test_read_rejects_uncommitted_and_bad_ranges(self, driver, prefix):
        seg = FileSegment(driver, prefix + "seg")
        seg.append(b"0123456789")
        seg.commit()
        seg.append(b"uncommitted")
        for position, length in [(10, 1), (15, 3), (-1, 1), (0, 0), (0, -5)]:
            with pytest.raises(IllegalParam):
                seg.read(position, length)

    def test_read_clamps_to_committed(self, driver, prefix):
        seg = FileSegment(driver, prefix + "seg")
        seg.append(b"0123456789")
        seg.commit()
        seg.append(b"not yet")
        assert seg.read(0, 1000) == b"0123456789"
        assert seg.read(7, 1000) == b"789"
        assert seg.read(9, 1) == b"9"
        assert seg.read(2, 3) == b"234"

    def test_one_commit_in_flight(self, driver, prefix):
        path = prefix + "seg"
        release = threading.Event()
        faulty = FaultLayer(driver, [Fault.hold(release, path=path)])
        seg = segment_holding(faulty, path, b"first")
        results: list[bool] = []
        first = threading.Thread(target=lambda: results.append(seg.commit()))
        first.start()
        try:
            for _ in range(6000):  # until the first commit is inside the held write
                if faulty.pending == 0:
                    break
                threading.Event().wait(0.005)
            assert faulty.pending == 0, "the first commit never reached the driver"
            seg.append(b"second")
            assert seg.commit() is False, "a second commit must not run while one is in flight"
            assert seg.commit_async().result(timeout=30) is False
        finally:
            release.set()
            first.join(60)
        assert results == [True]
        assert seg.commit() is True
        assert driver.read(path, 0, driver.size(path)) == b"firstsecond"

    def test_commit_fails_when_backend_object_changed(self, driver, prefix):
        path = prefix + "seg"
        seg = segment_holding(driver, path, b"mine")
        assert seg.commit()
        driver.write(path, 4, b"someone else's")
        seg.append(b"more")
        with pytest.raises(StateConflict):
            seg.commit()
        assert driver.read(path, 0, 18) == b"minesomeone else's"

    def test_destroy_deletes_object(self, driver, prefix):
        path = prefix + "seg"
        seg = segment_holding(driver, path, b"abc")
        seg.commit()
        seg.destroy()
        assert not driver.exists(path)
        assert seg.append(b"x") is AppendResult.FILE_CLOSED

    # -- seal ---------------------------------------------------------------------------

    def test_seal_commits_buffered_bytes(self, driver, prefix):
        path = prefix + "seg"
        seg = segment_holding(driver, path, b"buffered ")
        seg.append(b"then sealed")
        seg.seal()
        assert seg.sealed
        assert seg.seal_timestamp is not None
        assert not seg.needs_commit()
        assert driver.size(path) == 20
        assert seg.read(0, 20) == b"buffered then sealed"
        seg.seal()  # idempotent

    def test_seal_of_empty_segment(self, driver, prefix):
        path = prefix + "seg"
        seg = FileSegment(driver, path)
        seg.seal()
        assert seg.sealed
        assert driver.exists(path)
        assert driver.size(path) == 0
        assert seg.append(b"x") is AppendResult.SEGMENT_SEALED

    @requires.seal
    def test_seal_reaches_backend(self, driver, prefix):
        path = prefix + "seg"
        seg = segment_holding(driver, path, b"abc")
        seg.seal()
        assert driver.is_sealed(path)
        seg2 = FileSegment(driver, path)
        assert seg2.sealed
        assert seg2.append(b"x") is AppendResult.SEGMENT_SEALED

    # -- reopen ---------------------------------------------------------------------------

    @requires.persistent
    def test_reopen_recovers_position_from_driver_size(self, driver, prefix):
        path = prefix + "seg"
        seg = segment_holding(driver, path, b"committed", base_offset=500)
        seg.commit()
        seg.append(b"lost on restart")
        seg.close()
        fresh_driver = driver.reopen()
        try:
            fresh = FileSegment(fresh_driver, path, base_offset=500)
            assert (fresh.commit_position, fresh.append_position) == (9, 9)
            assert fresh.commit_offset == 509
            assert fresh.read(0, 100) == b"committed"
            fresh.append(b"+more")
            assert fresh.commit()
        finally:
            fresh_driver.close()
        assert driver.read(path, 0, driver.size(path)) == b"committed+more"

    @requires.persistent
    @requires.seal
    def test_reopen_of_sealed_segment(self, driver, prefix):
        path = prefix + "seg"
        seg = segment_holding(driver, path, b"final")
        seg.seal()
        fresh_driver = driver.reopen()
        try:
            fresh = FileSegment(fresh_driver, path)
            assert fresh.sealed
            assert fresh.commit_position == 5
            assert fresh.append(b"x") is AppendResult.SEGMENT_SEALED
            assert fresh.read(0, 5) == b"final"
        finally:
            fresh_driver.close()
