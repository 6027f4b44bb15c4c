"""MessageStoreFetcher: reads messages from the tiered store, through a read-ahead cache.

A cold read takes the consume-queue units of the batch, then ONE commit-log range that
spans them (trimmed to ``read_ahead_bytes`` and ``read_ahead_count``, at least one
message), and validates every message against its unit and the request with the shared
:func:`~tiered_core.codec.checks.check_units` (magic, size, CRC, topic, queue id, queue
offset, physical offset, tags code, and the ``__CRC32#`` property when
``verify_prop_crc``) before caching it. A message that fails validation is reported,
never served.
"""

from __future__ import annotations

import logging
from typing import Callable

from tiered_core.access.cache import ReadAheadCache, cache_key
from tiered_core.access.results import GetMessageResult, GetMessageStatus, StoreTier
from tiered_core.codec._impl import check_units, decode_cq_units, decode_message
from tiered_core.codec.checks import PropCrcPolicy
from tiered_core.codec.message import MessageExt
from tiered_core.errors import CorruptData, TieredStoreError
from tiered_core.flat.file_store import FlatFileStore
from tiered_core.flat.message_file import FlatMessageFile
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
    (statuses say it). A message that fails validation is logged, counted in
    ``corrupt_messages`` and never served: reads stop before it, and a read at it answers
    OFFSET_FOUND_NULL (the store then falls back to its local copy, if any).
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
        if self.cache is not None and not self.cache.busy():
            result = self._from_cache(flat, offset, max_count, message_filter, lo, hi)
            if result.found:
                return result
            # Miss: read ahead (a short prefetch for single-message reads), then retry.
            fetch = 32 if max_count == 1 else self.read_ahead_count
            try:
                for q, raw, tags in self.read(flat, offset, fetch):
                    self.cache.put(cache_key(flat.topic, flat.queue_id, q), raw, tags)
            except TieredStoreError as exc:
                log.warning("read-ahead of %s at %d failed: %s", flat, offset, exc)
                return GetMessageResult(GetMessageStatus.OFFSET_FOUND_NULL, next_begin_offset=offset,
                                        min_offset=lo, max_offset=hi, tier=StoreTier.TIERED)
            result = self._from_cache(flat, offset, max_count, message_filter, lo, hi)
            if result.found or result.next_begin_offset > offset:
                return result
            # Not cached after all (e.g. larger than the whole cache budget): read it directly.
        return self._direct(flat, offset, max_count, message_filter, lo, hi)

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

    def _from_cache(self, flat: FlatMessageFile, offset: int, max_count: int,
                    message_filter: MessageFilter | None, lo: int, hi: int) -> GetMessageResult:
        assert self.cache is not None
        messages: list[MessageExt] = []
        nxt, total = offset, 0
        for cur in range(offset, min(offset + self.read_ahead_count, hi)):
            hit = self.cache.get(cache_key(flat.topic, flat.queue_id, cur))
            if hit is None:
                break
            nxt = cur + 1  # filtered-out messages are skipped past too
            raw, tags = hit
            if message_filter is not None and not message_filter(tags):
                continue
            messages.append(decode_message(raw, verify_crc=False))  # validated when cached
            total += len(raw)
            if len(messages) >= max_count or total >= self.max_transfer_bytes:
                break
        status = GetMessageStatus.FOUND if messages else GetMessageStatus.NO_MATCHED_MESSAGE
        return GetMessageResult(status, messages, nxt, lo, hi, StoreTier.TIERED)

    def _direct(self, flat: FlatMessageFile, offset: int, max_count: int,
                message_filter: MessageFilter | None, lo: int, hi: int) -> GetMessageResult:
        try:
            batch = self.read(flat, offset, max_count)
        except TieredStoreError as exc:
            log.warning("read of %s at %d failed: %s", flat, offset, exc)
            return GetMessageResult(GetMessageStatus.OFFSET_FOUND_NULL, next_begin_offset=offset,
                                    min_offset=lo, max_offset=hi, tier=StoreTier.TIERED)
        if not batch:  # the message at `offset` cannot be served (see read)
            return GetMessageResult(GetMessageStatus.OFFSET_FOUND_NULL, next_begin_offset=offset,
                                    min_offset=lo, max_offset=hi, tier=StoreTier.TIERED)
        messages, nxt, total = [], offset, 0
        for q, raw, tags in batch:
            nxt = q + 1
            if message_filter is not None and not message_filter(tags):
                continue
            messages.append(decode_message(raw, verify_crc=False))
            total += len(raw)
            if len(messages) >= max_count or total >= self.max_transfer_bytes:
                break
        status = GetMessageStatus.FOUND if messages else GetMessageStatus.NO_MATCHED_MESSAGE
        return GetMessageResult(status, messages, nxt, lo, hi, StoreTier.TIERED)

    def read(self, flat: FlatMessageFile, offset: int, count: int) -> list[tuple[int, bytes, int]]:
        """Up to ``count`` validated messages from ``offset``: ``(queue_offset, bytes, tags_code)``.

        One consume-queue read, then one commit-log read spanning the batch (trimmed).
        """
        count = min(count, flat.consume_queue_commit_offset() - offset, self.read_ahead_count)
        if count <= 0:
            return []
        units = decode_cq_units(flat.get_consume_queue(offset, count))
        first = units[0].commitlog_offset
        # Trim to the byte budget, keeping at least one message.
        n = len(units)
        while n > 1 and units[n - 1].commitlog_offset + units[n - 1].size - first > self.read_ahead_bytes:
            n -= 1
        units = units[:n]
        last = units[-1]
        if last.commitlog_offset < first:
            return []
        data = flat.get_commit_log(first, last.commitlog_offset + last.size - first)
        # The batch ends before the first bad message: it is never served, and never skipped
        # over (the caller answers OFFSET_FOUND_NULL there, and the store falls back to local).
        checked = check_units(units, data, first, topic=flat.topic, queue_id=flat.queue_id,
                              queue_offset=offset, prop_crc=self.prop_crc)
        out = [(offset + i, data[pos:pos + unit.size], unit.tags_code)
               for i, (pos, unit) in enumerate(zip(checked.positions, units))]
        if checked.error is not None:
            self._corrupt(flat, checked.error)
        return out

    def _corrupt(self, flat: FlatMessageFile, error: CorruptData) -> None:
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
