"""The tiered key index: find messages in the tiered store by key.

:class:`IndexItem` is one entry (RocketMQ's 32/28-byte record), :class:`IndexStoreFile`
one local hash file, :class:`UploadedIndexFile` a compacted file read through its
segment, :class:`IndexStoreService` the set of them with rolling, compaction, upload,
expiry and queries.
"""

from tiered_core.index.item import COMPACT_ITEM_SIZE, ITEM_SIZE, IndexEntry, IndexItem
from tiered_core.index.keys import message_index_keys
from tiered_core.index.service import IndexConfig, IndexStoreService
from tiered_core.index.store_file import (
    BEGIN_MAGIC,
    END_MAGIC,
    HEADER_SIZE,
    SLOT_SIZE,
    CompactionResult,
    IndexFileStatus,
    IndexHeader,
    IndexStoreFile,
    UploadedIndexFile,
)

__all__ = [
    "ITEM_SIZE",
    "COMPACT_ITEM_SIZE",
    "HEADER_SIZE",
    "SLOT_SIZE",
    "BEGIN_MAGIC",
    "END_MAGIC",
    "IndexItem",
    "IndexEntry",
    "IndexHeader",
    "IndexFileStatus",
    "CompactionResult",
    "IndexStoreFile",
    "UploadedIndexFile",
    "IndexConfig",
    "IndexStoreService",
    "message_index_keys",
]
