"""The tiered key index: find messages in the tiered store by key.

:class:`IndexStoreFile` is one local hash file, :class:`UploadedIndexFile` a compacted
file read through its segment, :class:`IndexStoreService` the set of them with rolling,
compaction, upload, expiry and queries. The byte format is :mod:`tiered_core.codec.tiered_index`;
which keys of a message are indexed is :func:`tiered_core.codec.index_keys.message_index_keys`.
"""

from tiered_core.codec.tiered_index import IndexEntry
from tiered_core.index.service import IndexConfig, IndexStoreService
from tiered_core.index.store_file import CompactionResult, IndexFileStatus, IndexStoreFile, UploadedIndexFile

__all__ = [
    "IndexEntry",
    "IndexFileStatus",
    "CompactionResult",
    "IndexStoreFile",
    "UploadedIndexFile",
    "IndexConfig",
    "IndexStoreService",
]
