"""One segment layout for every object-store driver (GCS, S3, any fsspec filesystem).

:mod:`.layout` says how a segment is laid out in objects (a base plus exclusively created
parts chained by position) and why its size is exact after a crash at any point;
:mod:`.driver` implements the segment operations once, as
:class:`~tiered_core.spi.objectstore.chained_driver.ChainedObjectDriver`, over a few primitives a
backend provides (list, exclusive create, ranged read, delete, conditional metadata
update, and optionally a server-side consolidation).
"""

from tiered_core.spi.objectstore.chained_driver import ChainedObjectDriver, new_segment_id, own_part_names
from tiered_core.spi.objectstore.layout import (
    META_ID, META_SEALED, META_SEALED_SIZE, PART_MARK, ObjectInfo, Part, SegmentView, group_listing, interpret,
    part_key,
)

__all__ = [
    "META_ID", "META_SEALED", "META_SEALED_SIZE", "PART_MARK", "ChainedObjectDriver", "ObjectInfo", "Part",
    "SegmentView", "group_listing", "interpret", "new_segment_id", "own_part_names", "part_key",
]
