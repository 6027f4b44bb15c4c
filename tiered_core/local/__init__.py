"""The local hot tier (seeds 001/003): CommitLog, ConsumeQueue, IndexFile, LocalMessageStore.

Everything is real files under one root directory, laid out as RocketMQ lays out a
broker's store; :class:`LocalMessageStore` is the entry point.
"""

from tiered_core.local.commit_log import AppendMessageResult, CommitLog, RecoveryResult
from tiered_core.local.local_consume_queue import ConsumeQueue
from tiered_core.local.index_file import IndexFile, IndexService
from tiered_core.local.mapped_file import MappedFile, MappedFileQueue
from tiered_core.local.local_store import (
    BoundaryType,
    DispatchListener,
    QueueListener,
    DispatchRequest,
    FlushMode,
    LocalMessageStore,
    LocalPutResult,
    LocalReadResult,
    LocalStoreConfig,
)

__all__ = [
    "AppendMessageResult",
    "BoundaryType",
    "CommitLog",
    "ConsumeQueue",
    "DispatchListener",
    "QueueListener",
    "DispatchRequest",
    "FlushMode",
    "IndexFile",
    "IndexService",
    "LocalMessageStore",
    "LocalPutResult",
    "LocalReadResult",
    "LocalStoreConfig",
    "MappedFile",
    "MappedFileQueue",
    "RecoveryResult",
]
