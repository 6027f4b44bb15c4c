"""FlatCommitLogFile: a queue's tiered commit log.

Tiered commit-log offsets start at 0 per queue, independent of the broker's local
offsets; each message's physical-offset field is rewritten to its tiered offset as
it is appended, so a message read back names where it lives in the tiered store.

A message that carries RocketMQ's whole-message CRC property (``__CRC32#``, see
:mod:`tiered_core.codec.prop_crc`) covers that field too, so its CRC is recomputed after
the rewrite -- but only once the CRC it arrived with was checked against its bytes, so
a message damaged on the local disk is refused (CorruptData) instead of being uploaded
under a fresh, matching CRC. (RocketMQ's Java tiered store rewrites the field without
recomputing: its uploads carry stale CRCs.)
"""

from __future__ import annotations

import logging
import time
from typing import Collection, Sequence

from tiered_core.codec._impl import peek_queue_offset
from tiered_core.codec.message import QUEUE_OFFSET_END, rewrite_physical_offset
from tiered_core.codec.prop_crc import stored_prop_crc, upload_crc_error, write_prop_crc
from tiered_core.errors import CorruptData, IllegalOffset, IllegalParam, TieredStoreError
from tiered_core.flat.append_file import FlatAppendFile
from tiered_core.flat.read_back import TailWitness, read_back_messages, tail_messages
from tiered_core.common import AppendResult, FileSegmentType

log = logging.getLogger(__name__)


class FlatCommitLogFile(FlatAppendFile):
    """Whole encoded messages, one after another, from tiered offset 0.

    Raises :class:`~tiered_core.errors.IllegalParam` for a buffer too short to be a message.
    """

    def __init__(self, *args, witness: TailWitness | None = None, **kwargs) -> None:
        #: Asked about the messages of a tail before it is adopted (set before the recovery).
        self.witness = witness
        super().__init__(*args, file_type=FileSegmentType.COMMIT_LOG, **kwargs)
        self.init_offset(0)
        self._first_queue_offset = -1
        self._head_damage_logged = False

    def _tail_fails_read_back(self, last, size: int) -> str | None:
        """Whole messages of this queue, each stored at its own offset (maybe a torn last one)."""
        _broker, topic, queue = self.file_path.split("/")
        data = self.driver.read(last.path, last.commit_position, size - last.commit_position)
        found = read_back_messages(data, last.base_offset + last.commit_position, topic, int(queue))
        if not found.ok:
            return found.reason
        if self.witness is not None and found.records:
            return self.witness(topic, int(queue), tail_messages(data, found.good_bytes))
        return None

    def append_message(self, message: bytes | bytearray, timestamp: int) -> AppendResult:
        """Append one whole message, rewriting its physical offset to the tiered append offset.

        When the message carries a ``__CRC32#`` property (non-zero), it must match the bytes
        as given -- else CorruptData (``reason="prop_crc_mismatch"``, ``offset`` = the
        message's physical-offset field, i.e. where it lies in the local commit log) and
        nothing is appended -- and it is recomputed after the rewrite. Without the property
        the bytes are appended exactly as before.
        """
        if len(message) < QUEUE_OFFSET_END:
            raise IllegalParam(f"a message is at least {QUEUE_OFFSET_END} bytes, got {len(message)}",
                               length=len(message))
        buf = bytearray(message)
        size = len(buf)
        stored = stored_prop_crc(buf, 0, size)
        error = upload_crc_error(buf, size, stored)
        if error is not None:
            raise error
        with self._lock:
            # A roll on FILE_FULL starts the new segment at this same offset.
            rewrite_physical_offset(buf, 0, self.writable().append_offset)
            if stored is not None:
                write_prop_crc(buf, 0, size)
            return self.append(buf, timestamp)

    def append_batch(self, data: bytes | bytearray, sizes: Sequence[int], timestamps: Sequence[int],
                     base_offset: int) -> tuple[AppendResult, int]:
        """Append messages already made ready for this commit log from ``base_offset`` on:
        message ``i`` (the next ``sizes[i]`` bytes of ``data``, stored at ``timestamps[i]``)
        carries its tiered offset as physical offset and, with a ``__CRC32#`` property, the
        CRC recomputed after that rewrite -- what
        :func:`~tiered_core.codec.dispatch_batch.build_group` makes with ``tiered_offset =
        base_offset``, which checked the property against the local bytes first.

        The same bytes and segments as one :meth:`append_message` per message. IllegalOffset
        when ``base_offset`` is not the append offset (nothing is appended). Returns
        ``(result, appended)`` (see :meth:`FlatAppendFile.append_records`).
        """
        with self._lock:
            expected = self.append_offset
            if base_offset != expected:
                raise IllegalOffset(f"{self.file_path!r}: batch made for commit-log offset {base_offset}, "
                                    f"the append offset is {expected}", offset=base_offset, expected=expected)
            return self.append_records(data, sizes, timestamps)

    def try_rolling(self, interval_ms: int, min_size: int, now_ms: int | None = None) -> bool:
        """Roll when the last segment's oldest message is older than ``interval_ms`` and it
        holds at least ``min_size`` bytes. The caller must have committed it."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        with self._lock:
            last = self.writable()
            if (last.min_timestamp is None or last.min_timestamp + interval_ms >= now_ms
                    or last.append_position < min_size or last.needs_commit()):
                return False
            try:
                last.seal()
            except TieredStoreError:
                return False
            self.flush_metadata(last)
            self.roll(last.append_offset)
            return True

    def first_message_queue_offset(self) -> int:
        """Queue offset of the first message still stored (cached); -1 if none is committed,
        or if the first segment is damaged so that its first message cannot be read (not
        cached: the damage answers the reads of its own range, the rest stays readable)."""
        if self._first_queue_offset >= 0:
            return self._first_queue_offset
        segs = self.segments
        if not segs or segs[0].commit_position < QUEUE_OFFSET_END:
            return -1
        try:
            head = self.read(self.min_offset, QUEUE_OFFSET_END)
            if len(head) < QUEUE_OFFSET_END:  # the head segment holds less than one header
                return -1
            # A damaged first header (its magic, say) is damage of that message only.
            self._first_queue_offset = peek_queue_offset(head, 0)
        except CorruptData as exc:
            if not self._head_damage_logged:
                self._head_damage_logged = True
                log.warning("the first message of commit log %r is damaged (%s): its queue's first offset is "
                            "taken from the consume queue", self.file_path, exc)
            return -1
        return self._first_queue_offset

    def clean_expired(self, expire_timestamp: int, only: Collection[str] | None = None) -> int:
        cleaned = super().clean_expired(expire_timestamp, only)
        if cleaned:
            self._first_queue_offset = -1  # RocketMQ #8076: the min moved
        return cleaned
