"""Collected by ``pytest --pyargs tiered_conformance --tiered-driver NAME``."""

from tiered_conformance.suite.faults import FaultTests


class TestFaults(FaultTests):
    """(b) FileSegment recovery from injected write faults on the ``--tiered-driver`` driver."""
