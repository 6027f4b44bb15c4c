"""Collected by ``pytest --pyargs tiered_conformance --tiered-driver NAME``."""

from tiered_conformance.suite.segment import FileSegmentTests


class TestFileSegment(FileSegmentTests):
    """(b) FileSegment semantics over the ``--tiered-driver`` driver."""
