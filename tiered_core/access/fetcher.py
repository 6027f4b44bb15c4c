"""MessageStoreFetcher: reads messages from the tiered store, through a read-ahead cache.

A cold read is one :meth:`CompositeAccess.read_batch
<tiered_core.spi.access.CompositeAccess.read_batch>`: the consume-queue units of the batch,
then ONE commit-log range that spans them (trimmed to ``read_ahead_bytes`` and
``read_ahead_count``, at least one message), split and validated in one pass against
each unit and the request (magic, size, CRC, topic, queue id, queue offset, physical
offset, tags code, and the ``__CRC32#`` property when ``verify_prop_crc``). The whole
batch is one cache entry; messages are sliced out of it and decoded lazily
(:func:`~tiered_core.codec.message.lazy_message_ext`) when served. A message that fails
validation is reported, never served.
"""

from __future__ import annotations

import logging
from typing import Callable

from tiered_core.access.cache import ReadAheadCache
from tiered_core.access.results import GetMessageResult, GetMessageStatus, StoreTier
from tiered_core.codec.checks import PropCrcPolicy
from tiered_core.codec._impl import lazy_message_ext
from tiered_core.codec.message import MessageExt
from tiered_core.codec.message_batch import MessageBatch
from tiered_core.errors import CorruptData, TieredStoreError
from tiered_core.flat.file_store import FlatFileStore
from tiered_core.spi.access import CompositeAccess
from tiered_core.common import BoundaryType
from tiered_core.configdef import KEYS

log = logging.getLogger(__name__)

#: RocketMQ defaults: readAheadMessageCountThreshold, readAheadMessageSizeThreshold.
READ_AHEAD_COUNT = 4096
READ_AHEAD_BYTES = 16 << 20
#: A pull returns at most this many bytes (always at least one message) -- RocketMQ #9080.
MAX_TRANSFER_BYTES = 16 << 20

#: ``(tags_code) -> bool``: True keeps the message.
MessageFilter = Callable[[int], bool]


class MessageStoreFetcher:
    """Reads from the tiered store. Thread-safe; never raises for a missing queue or offset
    (statuses say it). A message that fails validation -- or that a damaged segment lost
    (:mod:`tiered_core.flat.damage`) -- is logged, counted in ``corrupt_messages`` and never
    served: reads stop before it (a read-ahead ends there, so every intact message before
    it is served), and a read at it answers OFFSET_FOUND_NULL with the CorruptData in the
    result's ``error`` (the store then falls back to its local copy, if any).
    ``last_corruption`` keeps the latest such error (offset, reason, queue).

    ``verify_prop_crc`` (config ``verify_prop_crc``, RocketMQ ``forceVerifyPropCRC``) makes
    every message verified by, and require, its ``__CRC32#`` property."""

    def __init__(self, flat_files: FlatFileStore, cache: ReadAheadCache | None = None, *,
                 read_ahead_count: int = READ_AHEAD_COUNT, read_ahead_bytes: int = READ_AHEAD_BYTES,
                 max_transfer_bytes: int = MAX_TRANSFER_BYTES,
                 verify_prop_crc: bool = KEYS.verify_prop_crc.default) -> None:
        self.flat_files = flat_files
        self.cache = cache
        self.read_ahead_count = read_ahead_count
        self.read_ahead_bytes = read_ahead_bytes
        self.max_transfer_bytes = max_transfer_bytes
        self.prop_crc = PropCrcPolicy.from_config(verify_prop_crc)
        self.corrupt_messages = 0
        self.last_corruption: CorruptData | None = None

    # -- reads ---------------------------------------------------------------------------

    def get_message(self, topic: str, queue_id: int, offset: int, max_count: int,
                    message_filter: MessageFilter | None = None) -> GetMessageResult:
        flat = self.flat_files.get(topic, queue_id)
        if flat is None:
            return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, next_begin_offset=offset,
                                    tier=StoreTier.TIERED)
        lo, hi = flat.consume_queue_min_offset(), flat.consume_queue_commit_offset()
        status = self._bounds(offset, lo, hi)
        if status is not None:
            nxt = {GetMessageStatus.OFFSET_TOO_SMALL: lo, GetMessageStatus.NO_MESSAGE_IN_QUEUE: offset}.get(status, hi)
            return GetMessageResult(status, next_begin_offset=nxt, min_offset=lo, max_offset=hi,
                                    tier=StoreTier.TIERED)
        max_count = max(1, max_count)
        cache = self.cache
        error = None
        if cache is not None and not cache.busy():
            batch = cache.get_batch(flat.topic, flat.queue_id, offset)
            if batch is None:
                # Miss: read ahead (a short prefetch for single-message reads) and cache the batch.
                batch, error = self._read(flat, offset, 32 if max_count == 1 else self.read_ahead_count)
                cache.put_batch(batch)  # (not when empty)
        else:
            batch, error = self._read(flat, offset, max_count)
        if not len(batch):  # the message at `offset` cannot be served; `error` says why
            return GetMessageResult(GetMessageStatus.OFFSET_FOUND_NULL, next_begin_offset=offset,
                                    min_offset=lo, max_offset=hi, tier=StoreTier.TIERED, error=error)
        return self._serve(batch, offset, max_count, message_filter, lo, hi)

    @staticmethod
    def _bounds(offset: int, lo: int, hi: int) -> GetMessageStatus | None:
        if hi <= 0:
            return GetMessageStatus.NO_MESSAGE_IN_QUEUE
        if offset < lo:
            return GetMessageStatus.OFFSET_TOO_SMALL
        if offset == hi:
            return GetMessageStatus.OFFSET_OVERFLOW_ONE
        if offset > hi:
            return GetMessageStatus.OFFSET_OVERFLOW_BADLY
        return None

    def _serve(self, batch: MessageBatch, offset: int, max_count: int, message_filter: MessageFilter | None,
               lo: int, hi: int) -> GetMessageResult:
        """Messages from ``offset`` out of ``batch`` (which holds it), continuing into the next
        cached batches of the queue while more are wanted (never reading)."""
        messages: list[MessageExt] = []
        append = messages.append
        lazy = lazy_message_ext
        nxt, total, budget = offset, 0, self.max_transfer_bytes
        while True:
            data, base, units, topic = batch.data, batch.base, batch.units, batch.topic
            start = nxt - batch.queue_offset
            for off, size, tags in units[start:]:
                nxt += 1  # filtered-out messages are skipped past too
                if message_filter is not None and not message_filter(tags):
                    continue
                pos = off - base
                append(lazy(data[pos:pos + size], topic))  # validated when read
                total += size
                if len(messages) >= max_count or total >= budget:
                    break
            else:
                if nxt < hi and self.cache is not None and nxt - offset < self.read_ahead_count:
                    following = self.cache.get_batch(batch.topic, batch.queue_id, nxt)
                    if following is not None:
                        batch = following
                        continue
            break
        status = GetMessageStatus.FOUND if messages else GetMessageStatus.NO_MATCHED_MESSAGE
        return GetMessageResult(status, messages, nxt, lo, hi, StoreTier.TIERED)

    def _read(self, flat: CompositeAccess, offset: int, count: int) -> tuple[MessageBatch, TieredStoreError | None]:
        """:meth:`read_batch` and why it ended at ``offset`` (an I/O error, or the batch's own
        ``error``): a read that failed is an empty batch."""
        try:
            batch = self.read_batch(flat, offset, count)
            return batch, batch.error
        except TieredStoreError as exc:
            log.warning("read of %s at %d failed: %s", flat, offset, exc)
            return MessageBatch(flat.topic, flat.queue_id, offset, b"", 0, []), exc

    def read_batch(self, flat: CompositeAccess, offset: int, count: int) -> MessageBatch:
        """Up to ``count`` (at most ``read_ahead_count``) validated messages from ``offset``
        (:meth:`CompositeAccess.read_batch`: one consume-queue read, one commit-log read
        trimmed to ``read_ahead_bytes``, one split + validate pass). The batch ends before
        the first bad message: it is never served, and never skipped over (the caller
        answers OFFSET_FOUND_NULL there, and the store falls back to local); it is logged
        and counted here."""
        batch = flat.read_batch(offset, min(count, self.read_ahead_count), self.read_ahead_bytes,
                                prop_crc=self.prop_crc)
        if batch.error is not None:
            self._corrupt(flat, batch.error)
        return batch

    def read(self, flat: CompositeAccess, offset: int, count: int) -> list[tuple[int, bytes, int]]:
        """Up to ``count`` validated messages from ``offset``: ``(queue_offset, bytes, tags_code)``
        (:meth:`read_batch`, unpacked)."""
        return self.read_batch(flat, offset, count).items()

    def _corrupt(self, flat: CompositeAccess, error: CorruptData) -> None:
        self.corrupt_messages += 1
        self.last_corruption = error
        log.error("not serving corrupt tiered message of %s (%s): %s", flat, error.reason, error.message)

    # -- lookups ---------------------------------------------------------------------------

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        flat = self.flat_files.get(topic, queue_id)
        return -1 if flat is None else flat.min_store_timestamp()

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int,
                                    boundary: BoundaryType = BoundaryType.LOWER) -> int:
        flat = self.flat_files.get(topic, queue_id)
        if flat is None:
            return -1
        return flat.get_offset_in_consume_queue_by_time(timestamp, boundary)
