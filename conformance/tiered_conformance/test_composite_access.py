"""Collected by ``pytest --pyargs tiered_conformance --tiered-driver NAME``."""

from tiered_conformance.suite.composite import CompositeAccessTests


class TestCompositeAccess(CompositeAccessTests):
    """(d) CompositeAccess (FlatMessageFile) over the ``--tiered-driver`` driver."""
