"""Appending messages to one queue's FlatMessageFile in queue-offset order (import, sample data)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterable

from tiered_core.codec.hashing import tags_hash_code
from tiered_core.codec._impl import encode_message
from tiered_core.codec.message import PROPERTY_KEYS, PROPERTY_TAGS, Message
from tiered_core.codec.prop_crc import PROPERTY_CRC32
from tiered_core.errors import DriverError, IllegalOffset, StateConflict
from tiered_core.spi.access import CompositeAccess, ConsumeQueueRequest
from tiered_core.common import AppendResult

#: Messages buffered between commits.
COMMIT_EVERY = 2000
_COMMIT_ATTEMPTS = 8


@dataclass
class AppendStats:
    """What :class:`QueueAppender` did: messages appended, and skipped as already stored."""

    appended: int = 0
    skipped: int = 0


class QueueAppender:
    """Appends rows to one queue in ``queue_offset`` order; durable after :meth:`finish`.

    A row whose queue offset is below the queue's next offset is already stored and is
    skipped (so a re-run of an interrupted load does not duplicate); the first and the last
    row of each skipped run are compared with the stored message at their offset, and a
    different body or store time raises :class:`~tiered_core.errors.StateConflict` (the input is another
    store's history: skipping it would drop its messages there); a gap raises
    :class:`~tiered_core.errors.IllegalOffset` naming the queue and both offsets. An empty
    queue starts at the first row's offset.
    """

    def __init__(self, flat: CompositeAccess) -> None:
        self.flat = flat
        self.stats = AppendStats()
        self._buffered = 0
        self._last_skipped: tuple[int, Message, int | None] | None = None  # the last of a skipped run

    @property
    def next_offset(self) -> int | None:
        return self.flat.consume_queue_max_offset() if self.flat.initialized else None

    def append(self, queue_offset: int, message: Message, store_timestamp: int, *, time_given: bool = True) -> None:
        """``time_given``: ``store_timestamp`` came with the row (False: the writer chose it), so
        an already stored message must have it too."""
        flat = self.flat
        if not flat.initialized:
            flat.init_offset(queue_offset)
        expected = flat.consume_queue_max_offset()
        if queue_offset < expected:
            if self._last_skipped is None:
                self._check_stored(queue_offset, message, store_timestamp if time_given else None)
            self.stats.skipped += 1
            self._last_skipped = (queue_offset, message, store_timestamp if time_given else None)
            return
        self._check_last_skipped()
        if queue_offset > expected:
            raise IllegalOffset(f"{flat.topic}/{flat.queue_id}: next message has queue offset {queue_offset} "
                                f"but the queue continues at {expected} (a gap in the input)",
                                topic=flat.topic, queue_id=flat.queue_id, offset=queue_offset, expected=expected)
        # A row exported from a store with append_prop_crc carries the old message's __CRC32#:
        # replace it by one over these bytes (a stale one would be refused at upload, or fail
        # verify_prop_crc later).
        raw = encode_message(message, queue_id=flat.queue_id, queue_offset=queue_offset,
                             store_timestamp=store_timestamp, prop_crc=PROPERTY_CRC32 in message.properties)
        offset = self._append_commit_log(raw)
        request = ConsumeQueueRequest(queue_offset, offset, len(raw), tags_hash_code(message.tags), store_timestamp)
        result = flat.append_consume_queue(request)
        if result is AppendResult.BUFFER_FULL:
            self.commit()
            result = flat.append_consume_queue(request)
        if result is not AppendResult.SUCCESS:
            raise DriverError(f"{flat.topic}/{flat.queue_id}: consume-queue append at {queue_offset} "
                              f"returned {result.name}", retryable=True, topic=flat.topic)
        self.stats.appended += 1
        self._buffered += 1
        if self._buffered >= COMMIT_EVERY:
            self.commit()

    def _append_commit_log(self, raw: bytes) -> int:
        flat = self.flat
        for _ in range(2):
            offset = flat.commit_log_max_offset()
            result = flat.append_commit_log(raw)
            if result is AppendResult.SUCCESS:
                return offset
            if result is AppendResult.BUFFER_FULL:
                self.commit()
                continue
            break
        raise DriverError(f"{flat.topic}/{flat.queue_id}: commit-log append of {len(raw)} bytes returned "
                          f"{result.name}", retryable=result is not AppendResult.FILE_FULL, topic=flat.topic)

    def commit(self) -> None:
        """Commit everything buffered (commit log, then consume queue), retrying a failed commit."""
        delay = 0.05
        for attempt in range(_COMMIT_ATTEMPTS):
            if self.flat.commit():
                self._buffered = 0
                return
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
        raise DriverError(f"{self.flat.topic}/{self.flat.queue_id}: commit failed {_COMMIT_ATTEMPTS} times",
                          retryable=True, topic=self.flat.topic, queue_id=self.flat.queue_id)

    def finish(self) -> AppendStats:
        self._check_last_skipped()
        self.commit()
        return self.stats

    def _check_last_skipped(self) -> None:
        if self._last_skipped is not None:
            last, self._last_skipped = self._last_skipped, None
            self._check_stored(*last)

    def _check_stored(self, queue_offset: int, message: Message, store_timestamp: int | None) -> None:
        from tiered_core.codec._impl import decode_message

        flat = self.flat
        stored = decode_message(flat.get_message_async(queue_offset).result())
        differs = stored_difference(stored.body, stored.store_timestamp, message.body, store_timestamp)
        if differs:
            raise StateConflict(
                f"{flat.topic}/{flat.queue_id}: the store already holds another message at queue offset "
                f"{queue_offset} (its {differs} differs from the input's): the input is not this store's history, "
                "and skipping it there would drop it. Nothing of this queue was written; write the input into "
                "a new store", topic=flat.topic, queue_id=flat.queue_id, offset=queue_offset)


def stored_difference(stored_body: bytes, stored_time: int, body: bytes | None,
                      store_timestamp: int | None) -> str | None:
    """What tells the stored message apart from an input row at its offset (``"body"``,
    ``"store time"``; the time only when the row has one), or None when it is that row: two
    stores' histories may share bodies (heartbeats, retries), not the store time of each
    message as well."""
    if bytes(stored_body) != bytes(body or b""):
        return "body"
    if store_timestamp is not None and stored_time != store_timestamp:
        return "store time"
    return None


def message_from_row(topic: str, keys: Iterable[str] | None, tags: str | None,
                     properties: dict[str, str] | Iterable[tuple[str, str]] | None, body: bytes | None,
                     born_timestamp: int | None) -> Message:
    """A :class:`Message` from the columns of a tiered row; ``keys``/``tags`` win over
    ``KEYS``/``TAGS`` in ``properties``."""
    props = dict(properties or {})
    key_list = list(keys or [])
    if not key_list and PROPERTY_KEYS in props:
        key_list = [k for k in props[PROPERTY_KEYS].split(" ") if k]
    props.pop(PROPERTY_KEYS, None)
    stored_tags = props.pop(PROPERTY_TAGS, None)
    return Message(topic=topic, body=bytes(body or b""), keys=key_list, tags=tags if tags is not None else stored_tags,
                   properties=props, born_timestamp=0 if born_timestamp is None else born_timestamp)
