"""The parts of the suite, as the rows of ``tiered conformance``'s table.

Each test mixin sets ``tiered_area`` to one of these.
"""

RAW_CONTRACT = "raw driver contract"
FILE_SEGMENT = "FileSegment"
FAULTS = "faults"
STATEFUL = "stateful"
COMPOSITE_ACCESS = "CompositeAccess"

#: In report order.
AREAS = (RAW_CONTRACT, FILE_SEGMENT, FAULTS, STATEFUL, COMPOSITE_ACCESS)

#: The metadata store suite (``MetadataStoreConformance``): not a row of ``tiered
#: conformance NAME``, which runs the driver suite.
METADATA_STORE = "metadata store"
