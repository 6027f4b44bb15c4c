"""(b) FileSegment under injected write faults: every byte exactly once, nothing torn.

Faults come from :class:`tiered_conformance.faults.FaultyDriver`, which wraps the
driver under test and lands bytes (or prefixes) through its real ``write``; so what the
backend reports afterwards is real, and recovery is tested against this backend.
"""

from __future__ import annotations

import pytest

from tiered_core.errors import DriverError
from tiered_core.segment import FileSegment
from tiered_core.common import AppendResult
from tiered_conformance.faults import Fault, FaultKind, FaultyDriver
from tiered_conformance import areas
from tiered_conformance.requirements import requires
from tiered_conformance.suite.base import ConformanceBase, payload, read_all

#: The three ways a write can fail, as (id, fault factory).
WRITE_FAULTS = {
    "before-landing": Fault.before,
    "lost-ack": Fault.after,
    "partial": Fault.partial,
}

#: Commit attempts allowed to converge after a fault plan is used up.
MAX_ATTEMPTS = 25


def commit_until_done(seg: FileSegment) -> int:
    """Call ``commit`` until it reports success; the number of attempts it took."""
    for attempt in range(1, MAX_ATTEMPTS + 1):
        if seg.commit():
            return attempt
    raise AssertionError(f"commit did not converge in {MAX_ATTEMPTS} attempts: {seg!r}")


def stored(faulty: FaultyDriver, path: str) -> bytes:
    size = faulty.inner.size(path)
    return read_all(faulty.inner, path, size) if size else b""


class FaultTests(ConformanceBase):
    """Commit recovery after before-landing, lost-ack and partial write faults."""

    tiered_area = areas.FAULTS

    @pytest.fixture
    def faulty(self, driver) -> FaultyDriver:
        return FaultyDriver(driver)

    @pytest.mark.parametrize("kind", list(WRITE_FAULTS))
    def test_commit_converges_after_fault(self, faulty, prefix, kind):
        path = prefix + "seg"
        seg = FileSegment(faulty, path)
        parts = [payload(100 + i, (kind, i)) for i in range(10)]
        for part in parts:
            assert seg.append(part) is AppendResult.SUCCESS
        faulty.inject(WRITE_FAULTS[kind]())
        first = seg.commit()
        assert faulty.pending == 0 and len(faulty.injected) == 1, "the fault must have fired"
        if kind == "before-landing":
            assert first is False and faulty.inner.size(path) == 0
        commit_until_done(seg)
        data = b"".join(parts)
        assert stored(faulty, path) == data, "every byte exactly once, in order"
        assert seg.commit_position == seg.append_position == len(data)
        assert seg.read(0, len(data)) == data

    @pytest.mark.parametrize("kind", list(WRITE_FAULTS))
    def test_failed_bytes_go_before_newer_ones(self, faulty, prefix, kind):
        path = prefix + "seg"
        seg = FileSegment(faulty, path)
        seg.append(b"A" * 1000)
        faulty.inject(WRITE_FAULTS[kind]())
        seg.commit()
        seg.append(b"B" * 500)
        seg.append(b"C" * 3)
        commit_until_done(seg)
        assert not seg.needs_commit()
        assert stored(faulty, path) == b"A" * 1000 + b"B" * 500 + b"C" * 3

    def test_lost_ack_is_not_written_twice(self, faulty, prefix):
        path = prefix + "seg"
        seg = FileSegment(faulty, path)
        seg.append(b"exactly once")
        faulty.inject(Fault.after())
        seg.commit()
        assert faulty.inner.size(path) == 12
        commit_until_done(seg)
        assert faulty.inner.size(path) == 12
        assert stored(faulty, path) == b"exactly once"

    def test_partial_write_resumes_where_it_stopped(self, faulty, prefix):
        path = prefix + "seg"
        seg = FileSegment(faulty, path)
        data = payload(10_000, "partial")
        seg.append(data)
        faulty.inject(Fault.partial(keep=3_333))
        assert seg.commit() is False
        assert faulty.inner.size(path) == 3_333, "the wrapper lands the prefix through the driver"
        assert faulty.inner.read(path, 0, 3_333) == data[:3_333]
        commit_until_done(seg)
        assert stored(faulty, path) == data

    def test_many_consecutive_faults_converge(self, faulty, prefix):
        path = prefix + "seg"
        seg = FileSegment(faulty, path)
        data = b""
        for i in range(5):
            part = payload(777 + i, ("many", i))
            seg.append(part)
            data += part
        faulty.inject(Fault.partial(), Fault.partial(keep=1), Fault.after(), Fault.before(),
                      Fault.partial(), Fault.size_error(), Fault.after())
        commit_until_done(seg)
        # A plan may outlive the first success; later commits must keep the invariant.
        part = payload(4096, "after-success")
        seg.append(part)
        data += part
        commit_until_done(seg)
        faulty.clear()
        seg.append(b"tail")
        data += b"tail"
        commit_until_done(seg)
        assert stored(faulty, path) == data
        assert seg.read(0, len(data)) == data

    def test_size_unavailable_during_recovery(self, faulty, prefix):
        path = prefix + "seg"
        seg = FileSegment(faulty, path)
        seg.append(b"x" * 100)
        faulty.inject(Fault.partial(keep=40), Fault.size_error(), Fault.size_error())
        assert seg.commit() is False
        commit_until_done(seg)
        assert stored(faulty, path) == b"x" * 100

    def test_non_retryable_fault_raises_then_recovers(self, faulty, prefix):
        path = prefix + "seg"
        seg = FileSegment(faulty, path)
        seg.append(b"important")
        faulty.inject(Fault.before(retryable=False))
        with pytest.raises(DriverError) as info:
            seg.commit()
        assert info.value.retryable is False
        assert faulty.inner.size(path) == 0
        seg.append(b" bytes")
        commit_until_done(seg)
        assert stored(faulty, path) == b"important bytes"

    def test_seal_after_fault_commits_everything_once(self, faulty, prefix):
        path = prefix + "seg"
        seg = FileSegment(faulty, path)
        seg.append(b"sealed after a fault")
        faulty.inject(Fault.partial(keep=5), Fault.after())
        seg.seal()
        assert seg.sealed
        assert stored(faulty, path) == b"sealed after a fault"
        assert [f.kind for f in faulty.injected] == [FaultKind.PARTIAL, FaultKind.AFTER]

    @requires.persistent
    def test_restart_after_partial_write_trusts_backend_size(self, faulty, prefix):
        # The process dies after a partial write: the next one sees exactly the prefix.
        path = prefix + "seg"
        seg = FileSegment(faulty, path)
        data = payload(5000, "restart")
        seg.append(data)
        faulty.inject(Fault.partial(keep=1234))
        assert seg.commit() is False
        seg.close()
        fresh_driver = faulty.inner.reopen()
        try:
            fresh = FileSegment(fresh_driver, path)
            assert fresh.commit_position == fresh.append_position == 1234
            assert fresh.read(0, 5000) == data[:1234]
            fresh.append(data[1234:])
            commit_until_done(fresh)
        finally:
            fresh_driver.close()
        assert stored(faulty, path) == data

    def test_fault_wrapper_is_transparent_without_faults(self, faulty, prefix):
        path = prefix + "seg"
        faulty.write(path, 0, b"abc")
        assert faulty.size(path) == 3 and faulty.exists(path)
        assert faulty.read(path, 0, 3) == b"abc"
        assert faulty.injected == []
        assert faulty.capabilities.persistent == faulty.inner.capabilities.persistent
