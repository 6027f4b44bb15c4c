"""Collected by ``pytest --pyargs tiered_conformance --tiered-driver NAME``."""

from tiered_conformance.suite.stateful import FileSegmentStateMachineTests


class TestSegmentStateMachine(FileSegmentStateMachineTests):
    """(c) the hypothesis state machine over the ``--tiered-driver`` driver."""
