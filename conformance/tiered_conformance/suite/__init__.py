"""The suite's test mixins, and :class:`DriverConformance`, which combines them."""

from __future__ import annotations

from tiered_conformance.areas import AREAS
from tiered_conformance.suite.base import ConformanceBase
from tiered_conformance.suite.composite import CompositeAccessTests
from tiered_conformance.suite.contract import DriverContractTests
from tiered_conformance.suite.faults import FaultTests
from tiered_conformance.suite.metadata import MetadataStoreConformance
from tiered_conformance.suite.segment import FileSegmentTests
from tiered_conformance.suite.stateful import FileSegmentStateMachineTests



class DriverConformance(DriverContractTests, FileSegmentTests, FaultTests, FileSegmentStateMachineTests,
                        CompositeAccessTests):
    """The whole conformance suite, for a third party to subclass in a test file.

    Subclass it under a ``Test*`` name and define a ``driver`` fixture yielding a driver
    instance (a fresh one per test is best; one shared location is fine, since every
    test works below its own random prefix). ``driver.reopen()`` must give another
    instance on the same location. Optionally override ``capabilities`` to declare gaps
    (``driver.capabilities.override("why", field=value)``); the affected tests are then
    skipped with that reason. Tests are selected by capabilities only, never by name.
    """


__all__ = [
    "AREAS",
    "CompositeAccessTests",
    "ConformanceBase",
    "DriverConformance",
    "DriverContractTests",
    "FaultTests",
    "FileSegmentStateMachineTests",
    "FileSegmentTests",
    "MetadataStoreConformance",
]
