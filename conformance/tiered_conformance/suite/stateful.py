"""(c) A hypothesis state machine: random FileSegment use against a reference model.

Rules append, commit, inject a write fault, read, seal and reopen (a new FileSegment
over ``driver.reopen()``, as after a restart: buffered bytes are gone, the backend's
size is the truth). After every step the bytes the backend holds must be exactly a
prefix of what was appended - nothing duplicated, nothing torn - and at least
everything ``commit`` reported as durable.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tiered_core.errors import IllegalParam
from tiered_core.segment import FileSegment
from tiered_core.common import AppendResult
from tiered_core.spi.capabilities import Capabilities
from tiered_core.spi.driver import SegmentDriver
from tiered_conformance.faults import Fault, FaultLayer
from tiered_conformance import areas
from tiered_conformance.plugin import suite_settings
from tiered_conformance.suite.base import ConformanceBase, read_all

#: Examples per run unless ``--tiered-hypothesis-examples`` says otherwise.
DEFAULT_EXAMPLES = 40
STEPS = 40
MAX_SIZE = 8192
MAX_PENDING_FAULTS = 3

_WRITE_FAULTS = {"before": Fault.before, "lost-ack": Fault.after, "partial": Fault.partial}
_FAULTS = {**_WRITE_FAULTS, "size-error": Fault.size_error}


class SegmentMachine(RuleBasedStateMachine):
    """Reference model: ``appended`` (every byte accepted by append, in order) and
    ``durable`` (how many of them a successful commit or seal guaranteed)."""

    # Bound per test run by FileSegmentStateMachineTests.
    base_driver: SegmentDriver
    caps: Capabilities
    prefix: str
    counter = 0

    def __init__(self) -> None:
        super().__init__()
        type(self).counter += 1
        self.path = f"{self.prefix}machine-{type(self).counter}"
        self.opened: list[SegmentDriver] = []
        self.driver = FaultLayer(self.base_driver)
        self.segment = FileSegment(self.driver, self.path, max_size=MAX_SIZE)
        self.appended = bytearray()
        self.durable = 0
        self.sealed = False

    # -- rules ----------------------------------------------------------------------

    @initialize(data=st.binary(min_size=2, max_size=600))
    def start_with_a_commit(self, data: bytes) -> None:
        """Every example starts from committed bytes, so each one has something to protect."""
        assert self.segment.append(data) is AppendResult.SUCCESS
        self.appended += data
        assert self.segment.commit() is True
        self.durable = len(self.appended)

    @rule(data=st.binary(min_size=0, max_size=600), ts=st.integers(0, 2**40))
    def append(self, data: bytes, ts: int) -> None:
        result = self.segment.append(data, ts)
        if self.sealed:
            assert result is AppendResult.SEGMENT_SEALED
        elif len(self.appended) + len(data) > MAX_SIZE:
            assert result is AppendResult.FILE_FULL
        else:
            assert result is AppendResult.SUCCESS
            self.appended += data

    @rule()
    def commit(self) -> None:
        if self.segment.commit():
            self.durable = len(self.appended)

    @precondition(lambda self: self.driver.pending < MAX_PENDING_FAULTS)
    @rule(kind=st.sampled_from(sorted(_FAULTS)))
    def inject_fault(self, kind: str) -> None:
        self.driver.inject(_FAULTS[kind](path=self.path))

    @precondition(lambda self: self.segment.needs_commit() and not self.sealed)
    @rule(kind=st.sampled_from(sorted(_WRITE_FAULTS)))
    def commit_through_fault(self, kind: str) -> None:
        """A commit whose first write fails: it must not report success unless all landed."""
        self.driver.inject(_WRITE_FAULTS[kind](path=self.path))
        if self.segment.commit():
            self.durable = len(self.appended)

    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        committed = self.segment.commit_position
        if committed == 0:
            with pytest.raises(IllegalParam):
                self.segment.read(0, 1)
            return
        position = data.draw(st.integers(0, committed - 1), label="position")
        length = data.draw(st.integers(1, committed + 10), label="length")
        got = self.segment.read(position, length)
        assert got == bytes(self.appended[position:min(position + length, committed)])

    @rule(extra=st.integers(0, 100))
    def read_uncommitted(self, extra: int) -> None:
        with pytest.raises(IllegalParam):
            self.segment.read(self.segment.commit_position + extra, 1)

    @precondition(lambda self: not self.sealed)
    @rule()
    def seal(self) -> None:
        self.segment.seal()  # retries buffered bytes through any pending faults
        self.sealed = True
        self.durable = len(self.appended)

    @rule()
    def reopen(self) -> None:
        """A restart: buffered bytes are lost; a new segment over a fresh driver instance."""
        self.segment.close()
        inner = self.base_driver
        if self.caps.persistent:
            inner = self.base_driver.reopen()
            self.opened.append(inner)
        self.driver = FaultLayer(inner)
        # The seal status comes from metadata in the store; the model plays that part.
        self.segment = FileSegment(self.driver, self.path, max_size=MAX_SIZE, sealed=self.sealed)
        size = self.segment.commit_position
        assert self.durable <= size <= len(self.appended)
        del self.appended[size:]
        self.durable = size

    # -- invariants -------------------------------------------------------------------

    @invariant()
    def backend_holds_a_prefix_of_what_was_appended(self) -> None:
        inner = self.driver.inner
        size = inner.size(self.path)
        assert self.durable <= size <= len(self.appended), (self.durable, size, len(self.appended))
        assert self.segment.commit_position <= size
        if size:
            assert read_all(inner, self.path, size) == bytes(self.appended[:size])

    @invariant()
    def positions_follow_the_model(self) -> None:
        assert self.segment.append_position == len(self.appended)
        assert self.segment.commit_position <= self.segment.append_position

    def teardown(self) -> None:
        for drv in self.opened:
            drv.close()


class FileSegmentStateMachineTests(ConformanceBase):
    """Random append/commit/fault/read/seal/reopen sequences against a reference model."""

    tiered_area = areas.STATEFUL

    def test_segment_state_machine(self, driver, capabilities, prefix, request):
        examples = suite_settings(request.config).hypothesis_examples or DEFAULT_EXAMPLES
        machine = type("BoundSegmentMachine", (SegmentMachine,),
                       {"base_driver": driver, "caps": capabilities, "prefix": prefix, "counter": 0})
        run_state_machine_as_test(machine, settings=settings(
            max_examples=examples,
            stateful_step_count=STEPS,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
            # No shrinking: a failing run must end in seconds (recovery paths sleep
            # between retries); the report still lists the failing steps.
            phases=[Phase.explicit, Phase.reuse, Phase.generate],
        ))
