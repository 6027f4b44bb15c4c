"""(b) FileSegment under injected faults: every byte exactly once, nothing torn; and the
standard layers over a failing backend: idempotent calls retried, writes never resent.

Faults come from :class:`tiered_conformance.faults.FaultLayer`, which wraps the driver
under test and lands bytes (or prefixes) through its real ``write``; so what the backend
reports afterwards is real, and recovery is tested against this backend. Above the
standard layers the faults reach ``FileSegment`` as they are; below them (the
``failing`` fixture) they play a backend failing under the retry layer.
"""

from __future__ import annotations

import pytest

from tiered_core.errors import DriverError
from tiered_core.segment import FileSegment
from tiered_core.common import AppendResult
from tiered_core.spi.driver import SegmentDriver
from tiered_core.spi.layer import RetryPolicy, backend_of, layered
from tiered_conformance.faults import Fault, FaultKind, FaultLayer
from tiered_conformance import areas
from tiered_conformance.requirements import requires
from tiered_conformance.suite.base import ConformanceBase, payload, read_all, segment_holding

#: The three ways a write can fail, as (id, fault factory).
WRITE_FAULTS = {
    "before-landing": Fault.before,
    "lost-ack": Fault.after,
    "partial": Fault.partial,
}

#: Commit attempts allowed to converge after a fault plan is used up.
MAX_ATTEMPTS = 25

#: The retry layer's policy over the failing backend: quick, so the tests stay fast.
QUICK_RETRY = RetryPolicy(retries=3, base_delay=0.001, max_delay=0.004, budget=30.0)


def commit_until_done(seg: FileSegment) -> int:
    """Call ``commit`` until it reports success; the number of attempts it took."""
    for attempt in range(1, MAX_ATTEMPTS + 1):
        if seg.commit():
            return attempt
    raise AssertionError(f"commit did not converge in {MAX_ATTEMPTS} attempts: {seg!r}")


def stored(faulty: FaultLayer, path: str) -> bytes:
    size = faulty.inner.size(path)
    return read_all(faulty.inner, path, size) if size else b""


class FaultTests(ConformanceBase):
    """Commit recovery after before-landing, lost-ack and partial write faults."""

    tiered_area = areas.FAULTS

    @pytest.fixture
    def faulty(self, driver) -> FaultLayer:
        """Faults above the standard layers: they reach the caller as they are."""
        return FaultLayer(driver)

    @pytest.fixture
    def failing(self, driver) -> tuple[FaultLayer, SegmentDriver]:
        """``(faults, stack)``: the backend under test with a fault layer right above it
        and fresh standard layers above that (quick retries): a failing backend."""
        faults = FaultLayer(backend_of(driver))
        return faults, layered(faults, QUICK_RETRY)

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
        seg = segment_holding(faulty, path, b"A" * 1000)
        faulty.inject(WRITE_FAULTS[kind]())
        seg.commit()
        seg.append(b"B" * 500)
        seg.append(b"C" * 3)
        commit_until_done(seg)
        assert not seg.needs_commit()
        assert stored(faulty, path) == b"A" * 1000 + b"B" * 500 + b"C" * 3

    def test_lost_ack_is_not_written_twice(self, faulty, prefix):
        path = prefix + "seg"
        seg = segment_holding(faulty, path, b"exactly once")
        faulty.inject(Fault.after())
        seg.commit()
        assert faulty.inner.size(path) == 12
        commit_until_done(seg)
        assert faulty.inner.size(path) == 12
        assert stored(faulty, path) == b"exactly once"

    def test_partial_write_resumes_where_it_stopped(self, faulty, prefix):
        path = prefix + "seg"
        data = payload(10_000, "partial")
        seg = segment_holding(faulty, path, data)
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
        seg = segment_holding(faulty, path, b"x" * 100)
        faulty.inject(Fault.partial(keep=40), Fault.size_error(), Fault.size_error())
        assert seg.commit() is False
        commit_until_done(seg)
        assert stored(faulty, path) == b"x" * 100

    def test_non_retryable_fault_raises_then_recovers(self, faulty, prefix):
        path = prefix + "seg"
        seg = segment_holding(faulty, path, b"important")
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
        seg = segment_holding(faulty, path, b"sealed after a fault")
        faulty.inject(Fault.partial(keep=5), Fault.after())
        seg.seal()
        assert seg.sealed
        assert stored(faulty, path) == b"sealed after a fault"
        assert [f.kind for f in faulty.injected] == [FaultKind.PARTIAL, FaultKind.AFTER]

    @requires.persistent
    def test_restart_after_partial_write_trusts_backend_size(self, faulty, prefix):
        # The process dies after a partial write: the next one sees exactly the prefix.
        path = prefix + "seg"
        data = payload(5000, "restart")
        seg = segment_holding(faulty, path, data)
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

    # -- the standard layers over a failing backend -----------------------------------

    def test_layers_retry_failed_lookups_and_reads(self, failing, capabilities, prefix):
        faults, stack = failing
        path = prefix + "seg"
        stack.write(path, 0, b"retried reads")
        faults.inject(*(Fault.before(op=op, path=path) for op in ("size", "exists", "is_sealed", "read")))
        assert stack.size(path) == 13
        assert stack.exists(path)
        assert stack.is_sealed(path) is False
        assert stack.read(path, 0, 13) == b"retried reads"
        if capabilities.list:
            faults.inject(Fault.before(op="list"), Fault.before(op="list"))
            assert list(stack.list(prefix)) == [(path, 13)]
        assert faults.pending == 0 and len(faults.injected) == (6 if capabilities.list else 4)

    def test_layers_repeat_idempotent_calls_whose_answer_was_lost(self, failing, capabilities, prefix):
        faults, stack = failing
        path = prefix + "seg"
        faults.inject(Fault.after(op="create", path=path))
        stack.create(path)
        assert stack.exists(path) and stack.size(path) == 0
        stack.write(path, 0, b"abc")
        if capabilities.seal:
            faults.inject(Fault.after(op="seal", path=path))
            stack.seal(path)
            assert stack.is_sealed(path) and stack.read(path, 0, 3) == b"abc"
        faults.inject(Fault.after(op="delete", path=path))
        stack.delete(path)
        assert not stack.exists(path)
        assert faults.pending == 0

    def test_layers_never_resend_a_write(self, failing, prefix):
        faults, stack = failing
        path = prefix + "seg"
        stack.write(path, 0, b"base-")
        faults.inject(Fault.after(path=path))
        with pytest.raises(DriverError) as info:
            stack.write(path, 5, b"once")
        assert info.value.retryable
        assert stack.size(path) == 9, "a write whose answer was lost must not be sent again"
        faults.inject(Fault.before(path=path))
        with pytest.raises(DriverError):
            stack.write(path, 9, b"never")
        assert stack.read(path, 0, stack.size(path)) == b"base-once"
        # FileSegment over the stack: the size says what landed, nothing is written twice.
        seg = segment_holding(stack, path, b"-and-more")
        faults.inject(Fault.partial(keep=4, path=path), Fault.after(path=path))
        commit_until_done(seg)
        assert stack.read(path, 0, stack.size(path)) == b"base-once-and-more"

    def test_layers_write_if_absent_sees_its_own_lost_answer(self, failing, prefix):
        faults, stack = failing
        mine, theirs = prefix + "mine", prefix + "theirs"
        faults.inject(Fault.after(op="write_if_absent", path=mine))
        assert stack.write_if_absent(mine, b"claimed once") is True, "the lost answer was this call's object"
        assert stack.write_if_absent(mine, b"claimed once") is False
        assert stack.read(mine, 0, 12) == b"claimed once"
        faults.inject(Fault.before(op="write_if_absent", path=theirs))
        assert stack.write_if_absent(theirs, b"retried") is True  # nothing had landed: the retry creates it
        stack.delete(theirs)
        stack.write(theirs, 0, b"someone else's")
        faults.inject(Fault.before(op="write_if_absent", path=theirs))
        assert stack.write_if_absent(theirs, b"mine, not theirs") is False
        assert faults.pending == 0

    def test_layers_give_up_on_a_lasting_failure(self, failing, prefix):
        faults, stack = failing
        path = prefix + "seg"
        stack.write(path, 0, b"x")
        faults.inject(*[Fault.before(op="size", path=path)] * (QUICK_RETRY.retries + 1))
        with pytest.raises(DriverError) as info:
            stack.size(path)
        assert info.value.retryable and info.value.attempts == QUICK_RETRY.retries + 1
        assert faults.pending == 0
        faults.inject(Fault.before(op="read", path=path, retryable=False), Fault.before(op="read", path=path))
        with pytest.raises(DriverError) as info:
            stack.read(path, 0, 1)
        assert info.value.retryable is False and faults.pending == 1, "a permanent failure is not retried"
        assert stack.read(path, 0, 1) == b"x"
