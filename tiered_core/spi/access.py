"""CompositeAccess (RIP-65): one queue's tiered commit log and consume queue as a unit.

The access layer (dispatcher, fetcher, store) and Spark talk to a queue's tiered data only
through this ABC -- never to its commit-log or consume-queue files directly;
:class:`tiered_core.flat.FlatMessageFile` is the implementation.
"""

from __future__ import annotations

import abc
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Sequence

from tiered_core.codec.checks import PropCrcPolicy
from tiered_core.codec.message_batch import MessageBatch
from tiered_core.common import AppendResult, BoundaryType


@dataclass(frozen=True)
class ConsumeQueueRequest:
    """One consume-queue unit to append: where message ``queue_offset`` lies in the tiered commit log."""

    queue_offset: int
    commitlog_offset: int  # the tiered commit-log offset (not the local one)
    size: int
    tags_code: int
    store_timestamp: int


class CompositeAccess(abc.ABC):
    """A queue's tiered commit log + consume queue.

    Guarantees: the commit log is committed before the consume queue, so every durable
    consume-queue unit points at durable commit-log bytes; queue offsets are contiguous
    (an append at the wrong queue offset raises
    :class:`~tiered_core.errors.IllegalOffset`). Reads see committed data only.
    """

    #: The queue this is.
    topic: str
    queue_id: int

    # -- identity and offsets ------------------------------------------------------------

    @property
    @abc.abstractmethod
    def topic_id(self) -> int:
        """The topic's id in the metadata store (what the tiered index stores)."""

    @property
    @abc.abstractmethod
    def initialized(self) -> bool:
        """True once the consume queue has a segment (``init_offset`` was called)."""

    @abc.abstractmethod
    def commit_log_min_offset(self) -> int:
        """Tiered commit-log offset of the oldest stored byte."""

    @abc.abstractmethod
    def commit_log_max_offset(self) -> int:
        """Tiered commit-log append offset: where the next appended message will lie."""

    @abc.abstractmethod
    def commit_log_commit_offset(self) -> int:
        """Tiered commit-log offset after the last durable byte."""

    @abc.abstractmethod
    def consume_queue_min_offset(self) -> int:
        """First queue offset still readable."""

    @abc.abstractmethod
    def consume_queue_max_offset(self) -> int:
        """Queue offset after the last appended unit."""

    @abc.abstractmethod
    def consume_queue_commit_offset(self) -> int:
        """Queue offset after the last durable unit."""

    @abc.abstractmethod
    def consume_queue_room(self) -> int:
        """Units the writable consume-queue segment takes before it must roll (at least 1)."""

    @abc.abstractmethod
    def segment_count(self) -> int:
        """Segments of the commit log and the consume queue together."""

    @abc.abstractmethod
    def rolling_file(self, interval_ms: int | None = None) -> bool:
        """Seal the commit log's writable segment and start a new one when it is older than
        ``interval_ms`` (default: the configured rolling interval) and big enough; True if it rolled."""

    # -- writes ------------------------------------------------------------------------

    @abc.abstractmethod
    def init_offset(self, queue_offset: int) -> None:
        """Start an empty queue at ``queue_offset`` (no-op once initialised)."""

    @abc.abstractmethod
    def append_commit_log(self, message: bytes, commit: bool = False) -> AppendResult:
        """Buffer one whole encoded message; its physical offset is rewritten to the tiered offset."""

    @abc.abstractmethod
    def append_consume_queue(self, request: ConsumeQueueRequest, commit: bool = False) -> AppendResult:
        """Buffer one consume-queue unit."""

    @abc.abstractmethod
    def append_commit_log_batch(self, data: bytes | bytearray, sizes: Sequence[int],
                                timestamps: Sequence[int], base_offset: int) -> tuple[AppendResult, int]:
        """Buffer a group of whole messages (``data``, already rewritten for commit-log offset
        ``base_offset``), the same bytes as one :meth:`append_commit_log` each; returns the
        result and how many were appended."""

    @abc.abstractmethod
    def append_consume_queue_batch(self, queue_offset: int, units: bytes | bytearray,
                                   timestamps: Sequence[int]) -> tuple[AppendResult, int]:
        """Buffer consume-queue units (20 bytes each) from ``queue_offset`` on, the same bytes
        as one :meth:`append_consume_queue` each; returns the result and how many were appended."""

    @abc.abstractmethod
    def commit_commit_log(self) -> bool: ...

    @abc.abstractmethod
    def commit_consume_queue(self) -> bool: ...

    @abc.abstractmethod
    def commit(self, sync: bool = True) -> "bool | Future[bool]":
        """Commit the commit log, then (only if that succeeded) the consume queue."""

    def commit_error(self) -> Exception | None:
        """Why the last commit left bytes unuploaded (the backend's retryable error), or None."""
        return None

    def first_lost_queue_offset(self) -> int | None:
        """The first queue offset whose tiered copy is known lost, or None."""
        return None

    # -- reads -------------------------------------------------------------------------

    @abc.abstractmethod
    def read_batch(self, queue_offset: int, count: int, max_bytes: int, *,
                   prop_crc: PropCrcPolicy = PropCrcPolicy.IGNORE) -> MessageBatch:
        """Up to ``count`` validated messages from ``queue_offset`` (committed ones only; at
        most ``max_bytes`` of commit log but at least one message), read with one
        consume-queue read and one commit-log read and checked in one pass. The batch
        ends before the first bad message; ``batch.error`` says why that one is bad."""

    @abc.abstractmethod
    def get_message_async(self, queue_offset: int) -> "Future[bytes]":
        """The encoded message at ``queue_offset``."""

    @abc.abstractmethod
    def get_commit_log_async(self, offset: int, length: int) -> "Future[bytes]": ...

    @abc.abstractmethod
    def get_consume_queue_async(self, queue_offset: int, count: int = 1) -> "Future[bytes]": ...

    @abc.abstractmethod
    def get_commit_log_dispatch_commit_offset(self) -> int:
        """Next queue offset to dispatch: everything below is durably tiered."""

    @abc.abstractmethod
    def get_offset_in_consume_queue_by_time(self, timestamp: int, boundary: BoundaryType) -> int: ...

    @abc.abstractmethod
    def clean_expired_file(self, expire_timestamp: int) -> None:
        """Forget segments whose newest message is older than ``expire_timestamp``."""

    @abc.abstractmethod
    def destroy_expired_file(self, expire_timestamp: int) -> None:
        """Delete expired segments from the backend and the metadata (consume queue first)."""

    @abc.abstractmethod
    def shutdown(self) -> None: ...

    @abc.abstractmethod
    def destroy(self) -> None: ...
