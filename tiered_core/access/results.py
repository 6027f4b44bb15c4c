"""Result types of the public API (RocketMQ's names and statuses)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from tiered_core.codec.message import MessageExt
from tiered_core.errors import TieredStoreError


class PutMessageStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


class GetMessageStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


class StoreTier(enum.Enum):
    """Which tier served a read."""

    LOCAL = "local"
    TIERED = "tiered"


@dataclass(slots=True)  # (one per put: slots make it cheaper to build)
class PutMessageResult:
    status: PutMessageStatus
    queue_offset: int = -1
    commitlog_offset: int = -1
    store_timestamp: int = -1

    @property
    def ok(self) -> bool:
        return self.status is PutMessageStatus.PUT_OK


@dataclass
class GetMessageResult:
    """Messages from ``offset`` on; ``next_begin_offset`` is where the next read starts.

    ``error``: with OFFSET_FOUND_NULL from the tiered store, why the message at
    ``next_begin_offset`` could not be served -- a
    :class:`~tiered_core.errors.CorruptData` when its tiered copy is damaged (its bytes fail
    validation, or its segment is missing or truncated), another typed error when the read
    failed; None otherwise. Consumers go by ``status`` (and retry); tools report ``error``.
    """

    status: GetMessageStatus
    messages: list[MessageExt] = field(default_factory=list)
    next_begin_offset: int = 0
    min_offset: int = 0
    max_offset: int = 0
    tier: StoreTier | None = None
    error: TieredStoreError | None = None

    @property
    def found(self) -> bool:
        return self.status is GetMessageStatus.FOUND


@dataclass
class QueryMessageResult:
    """The messages a key lookup found. ``error``: why a tiered message the key index names
    could not be read (the backend failed or is down), so the lookup may have missed it, or
    (a :class:`~tiered_core.errors.StateConflict` with ``key_index_gap``) that the key index
    misses keys of tiered messages a read-only open cannot index again (a restored copy of
    the store directory); None when every hit was read (a damaged or foreign copy is skipped,
    not an error). Without it such a lookup would read as "no such key"."""

    messages: list[MessageExt] = field(default_factory=list)
    error: TieredStoreError | None = None
