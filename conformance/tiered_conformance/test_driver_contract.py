"""Collected by ``pytest --pyargs tiered_conformance --tiered-driver NAME``."""

from tiered_conformance.suite.contract import DriverContractTests


class TestDriverContract(DriverContractTests):
    """(a) the raw driver contract, against the ``--tiered-driver`` driver."""
