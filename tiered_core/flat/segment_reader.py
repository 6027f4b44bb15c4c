"""The one reader of a queue's tiered segments: consume-queue units first, in groups, then
the commit-log span they point at, every message through the store's checks.

:class:`SegmentReader` needs only the queue's two logs (:class:`~tiered_core.flat.segment_ref.SegmentedLog`):
built from :class:`~tiered_core.flat.segment_ref.SegmentRef` s and a driver
(:meth:`SegmentReader.from_refs`: what a Spark executor, the metadata rebuild or any tool
without the metadata database has), or over the store's flat files
(:meth:`FlatMessageFile.reader <tiered_core.flat.message_file.FlatMessageFile.reader>`,
which add their damage accounting). Every tiered read goes through it: the fetcher
(:meth:`FlatMessageFile.read_batch`), the Spark batch and stream readers and reindex
(:meth:`SegmentReader.batches`), the rebuild and key queries (:meth:`SegmentReader.unit`,
:meth:`SegmentReader.message_at`), the stream source's start by time
(:meth:`SegmentReader.offset_by_time`).

It works on groups (units decoded by the thousand, one commit-log read per run of units,
one validation pass per run: :func:`tiered_core.flat.batch_check.check_batch`), never message by
message. Commit-log bytes no unit points at (left by a crash between the two commits) are
never returned: only the spans units point at are read and split. A bad message ends a
read: the messages before it are returned, its :class:`~tiered_core.errors.CorruptData`
names topic, queue, queue offset and reason.
"""

from __future__ import annotations

import bisect
from typing import Iterator, Sequence

from tiered_core.codec._impl import cq_runs, cq_units_ends, peek_store_timestamp
from tiered_core.codec.checks import PropCrcPolicy
from tiered_core.codec.consume_queue import CQ_UNIT_SIZE, ConsumeQueueUnit
from tiered_core.codec.message import (
    MAGIC_END, MAGIC_V1, MAGIC_V2, STORE_TIMESTAMP_END, peek_magic, peek_total_size,
)
from tiered_core.codec.message_batch import MessageBatch
from tiered_core.common import BoundaryType, offset_by_time
from tiered_core.errors import CorruptData
from tiered_core.flat.batch_check import check_batch, check_cq_batch, decode_units, read_batch, span_end
from tiered_core.flat.segment_ref import RefLog, SegmentedLog, SegmentRef
from tiered_core.spi.driver import SegmentDriver

#: A zero-filled (never written) consume-queue unit.
_ZERO_UNIT = (0, 0, 0)
#: Units read from the consume queue per request by :meth:`SegmentReader.batches`.
UNITS_PER_READ = 4096
#: A commit-log read of :meth:`SegmentReader.batches` spans at most this many bytes (one
#: larger message is read alone).
MAX_READ_BYTES = 16 << 20


class SegmentReader:
    """Validated reads of one queue (``topic``/``queue_id``) from its consume queue and commit log.

    Guarantees: messages come in queue order, each checked against its unit, topic and
    queue (:func:`~tiered_core.flat.batch_check.check_batch`, with ``prop_crc``); only commit-log
    spans that units point at are read. Raises :class:`~tiered_core.errors.CorruptData`
    (naming topic, queue, queue offset) for a bad unit or a truncated consume queue;
    a bad message is a batch's ``error``. Driver errors propagate. Never writes."""

    def __init__(self, consume_queue: SegmentedLog, commit_log: SegmentedLog, *, topic: str, queue_id: int,
                 prop_crc: PropCrcPolicy = PropCrcPolicy.IGNORE) -> None:
        self.consume_queue, self.commit_log = consume_queue, commit_log
        self.topic, self.queue_id, self.prop_crc = topic, queue_id, prop_crc

    @classmethod
    def from_refs(cls, driver: SegmentDriver, topic: str, queue_id: int, consume_queue: Sequence[SegmentRef],
                  commit_log: Sequence[SegmentRef], prop_crc: PropCrcPolicy = PropCrcPolicy.IGNORE) -> "SegmentReader":
        """A reader of the queue whose segments ``consume_queue`` and ``commit_log`` name
        (each ordered by base offset), through ``driver`` alone."""
        return cls(RefLog(driver, consume_queue), RefLog(driver, commit_log), topic=topic, queue_id=queue_id,
                   prop_crc=prop_crc)

    def __repr__(self) -> str:
        return f"SegmentReader({self.topic!r}, {self.queue_id})"

    # -- groups ---------------------------------------------------------------------------

    def read_batch(self, queue_offset: int, count: int, max_bytes: int, *, verify_crc: bool = True,
                   check_tags: bool = True) -> MessageBatch:
        """Up to ``count`` validated messages from ``queue_offset``: one consume-queue read,
        one commit-log read of at most ``max_bytes`` (at least one message), one validation
        pass (:func:`tiered_core.flat.batch_check.read_batch`). The caller bounds ``count`` by what
        is committed. Errors of the logs' reads propagate."""
        cq = self.consume_queue
        return read_batch(lambda q, n: cq.read(q * CQ_UNIT_SIZE, n * CQ_UNIT_SIZE), self.commit_log.read,
                          queue_offset, count, max_bytes, topic=self.topic, queue_id=self.queue_id,
                          prop_crc=self.prop_crc, verify_crc=verify_crc, check_tags=check_tags)

    def batches(self, start: int, end: int, *, max_read_bytes: int = MAX_READ_BYTES) -> Iterator[MessageBatch]:
        """The validated messages of queue offsets ``[start, end)`` in queue order, as
        :class:`MessageBatch` es. A bad message ends the read: the batch of the messages
        before it is yielded, then its CorruptData is raised.

        Units are read ``UNITS_PER_READ`` at a time and decoded in one call; a batch is a run
        of them that stays in one commit-log segment, points forward from its first unit and
        spans at most ``max_read_bytes`` (a larger message is read alone). Units that point
        at nothing (never written) or below the commit log's first segment (expired,
        RocketMQ #8076) are skipped while no readable unit came before them; any other unit
        whose offset or size is negative, or that points below the commit log after a
        readable unit, is corrupt (:class:`CorruptData` naming it), never skipped. A
        consume queue that ends before ``end`` raises CorruptData (reason ``truncated``)
        after the units it holds."""
        bases = self.commit_log.segment_bases()
        if not bases:
            return
        min_cl = bases[0]
        pos, stop_pos = start * CQ_UNIT_SIZE, end * CQ_UNIT_SIZE
        readable = False  # a unit pointing into the commit log was seen
        while pos < stop_pos:
            length = min(stop_pos - pos, UNITS_PER_READ * CQ_UNIT_SIZE)
            raw = self.consume_queue.read(pos, length)
            first_offset = pos // CQ_UNIT_SIZE
            runs = cq_runs(raw, bases, max_read_bytes) if len(raw) == length else None
            if runs is not None:  # a healthy queue's units: planned and checked from their bytes
                readable = True
                for i, j, first, span in runs:
                    batch = check_cq_batch(raw[i * CQ_UNIT_SIZE:j * CQ_UNIT_SIZE],
                                           self.commit_log.read(first, span - first), first, topic=self.topic,
                                           queue_id=self.queue_id, queue_offset=first_offset + i,
                                           prop_crc=self.prop_crc)
                    if len(batch):
                        yield batch
                    if batch.error is not None:
                        raise batch.error
                    del batch  # before the next read: its buffer can reuse this one's memory
                pos += length
                continue
            # ends (a healthy queue's): the run from unit i is found by bisection, not a loop
            units, ends = cq_units_ends(raw)
            i, n = 0, len(units)
            while i < n:
                first, size, _tags = units[i]
                if first < min_cl or size <= 0:
                    if first < 0 or size < 0 or (size == 0 and units[i] != _ZERO_UNIT):
                        raise self._bad_unit(first_offset + i, units[i], "is not a valid unit")
                    if readable and units[i] != _ZERO_UNIT:
                        raise self._bad_unit(first_offset + i, units[i],
                                             f"points below the commit log's first segment ({min_cl}) after "
                                             "units that point into it (units only point forward)")
                    i += 1
                    continue
                readable = True
                index = _segment_index(bases, first)
                limit = first + max_read_bytes
                if index + 1 < len(bases):
                    limit = min(limit, bases[index + 1])
                if ends is not None:  # the same run as the loop below finds
                    j = bisect.bisect_right(ends, limit, i + 1, n)
                    span = ends[j - 1]
                else:
                    j = i + 1
                    while j < n:
                        off, size, _tags = units[j]
                        if size <= 0 or off < first or off + size > limit:
                            break
                        j += 1
                    span = span_end(units[i:j])
                run = units[i:j]
                batch = check_batch(run, self.commit_log.read(first, span - first), first,
                                    topic=self.topic, queue_id=self.queue_id, queue_offset=first_offset + i,
                                    prop_crc=self.prop_crc)
                if len(batch):
                    yield batch
                if batch.error is not None:
                    raise batch.error
                del batch, run  # before the next read: its buffer can reuse this one's memory
                i = j
            pos += length
            if len(raw) < length:  # after the intact units before the cut
                cut = pos - length + len(raw) - len(raw) % CQ_UNIT_SIZE
                path = self.consume_queue.segment_path(cut)
                raise CorruptData(f"{self.topic}/{self.queue_id}: consume-queue segment {path!r} ends at queue "
                                  f"offset {cut // CQ_UNIT_SIZE}, before offset {end} that the metadata records "
                                  "as committed (the segment was truncated)", path=path, reason="truncated",
                                  topic=self.topic, queue_id=self.queue_id, queue_offset=cut // CQ_UNIT_SIZE,
                                  offset=cut)

    # -- single units and messages ------------------------------------------------------------

    def unit(self, queue_offset: int) -> ConsumeQueueUnit | None:
        """The unit at ``queue_offset`` (maybe a zero-filled, never written one), or None
        when the consume queue holds no whole unit there."""
        raw = self.consume_queue.read(queue_offset * CQ_UNIT_SIZE, CQ_UNIT_SIZE)
        if len(raw) < CQ_UNIT_SIZE:
            return None
        return ConsumeQueueUnit(*decode_units(raw)[0])

    def message_size(self, offset: int) -> int | None:
        """The total size a message at commit-log ``offset`` declares in its head; None when
        the bytes there do not start like a message (no magic code, or too few)."""
        head = self.commit_log.read(offset, MAGIC_END)
        if len(head) < MAGIC_END or peek_magic(head) not in (MAGIC_V1, MAGIC_V2):
            return None
        return peek_total_size(head)

    def message_at(self, offset: int, size: int, *, queue_offset: int | None = None,
                   tags_code: int | None = None) -> MessageBatch:
        """The message at commit-log ``offset`` of ``size`` bytes as a batch of one, checked
        as this queue's message number ``queue_offset`` with tags code ``tags_code`` (None:
        not known, not checked). A bad one is the batch's ``error``."""
        raw = self.commit_log.read(offset, size) if size > 0 else b""
        return check_batch([(offset, size, 0 if tags_code is None else tags_code)], raw, offset, topic=self.topic,
                           queue_id=self.queue_id, queue_offset=queue_offset, prop_crc=self.prop_crc,
                           check_tags=tags_code is not None)

    # -- offsets by unit and by time -----------------------------------------------------------

    def first_unit_at_or_after(self, commit_offset: int, lo: int, hi: int) -> int | None:
        """The smallest queue offset in ``[lo, hi)`` whose unit points at or after commit-log
        ``commit_offset`` (units point forward: a bisect of ~log2(hi - lo) unit reads);
        ``hi`` when none does. A zero-filled (never written) unit counts as pointing before
        it (such units only precede written ones); None when a unit on the way is missing
        or otherwise invalid: the search gives up rather than guess."""
        unit = self.unit(lo) if lo < hi else None
        if unit is not None and unit.is_valid and unit.commitlog_offset >= commit_offset:
            return lo  # the usual case: one read
        while lo < hi:
            mid = (lo + hi) // 2
            unit = self.unit(mid)
            if unit is None or (not unit.is_valid and unit != _ZERO_UNIT):
                return None
            if unit.is_valid and unit.commitlog_offset >= commit_offset:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def store_time(self, queue_offset: int) -> int:
        """The store time of message ``queue_offset``, from its head (codec positions); -1
        when its unit is empty or points below the commit log (expired: older than any
        time asked for). CorruptData when the unit or the message's head is missing."""
        unit = self.unit(queue_offset)
        if unit is None:
            raise CorruptData(f"{self.topic}/{self.queue_id} queue offset {queue_offset}: the consume queue holds "
                              "no unit there", reason="truncated", topic=self.topic, queue_id=self.queue_id,
                              queue_offset=queue_offset, offset=queue_offset * CQ_UNIT_SIZE)
        bases = self.commit_log.segment_bases()
        if not unit.is_valid or not bases or unit.commitlog_offset < bases[0]:
            return -1
        head = self.commit_log.read(unit.commitlog_offset, min(unit.size, STORE_TIMESTAMP_END))
        if len(head) < min(unit.size, STORE_TIMESTAMP_END):
            raise CorruptData(f"{self.topic}/{self.queue_id} queue offset {queue_offset}: the commit log ends "
                              f"inside the message at {unit.commitlog_offset}", reason="unit_out_of_range",
                              topic=self.topic, queue_id=self.queue_id, queue_offset=queue_offset,
                              offset=unit.commitlog_offset, size=unit.size)
        return peek_store_timestamp(head, 0)

    def offset_by_time(self, timestamp: int, lo: int, hi: int,
                       boundary: BoundaryType = BoundaryType.LOWER) -> int:
        """The queue offset in ``[lo, hi]`` of the first message stored at or after
        ``timestamp`` (LOWER), or of the last one stored exactly at it (UPPER); ``hi`` when
        all of ``[lo, hi)`` are older (:func:`tiered_core.common.offset_by_time` over
        :meth:`store_time`)."""
        return offset_by_time(lo, hi - 1, timestamp, boundary, self.store_time)

    # -- errors --------------------------------------------------------------------------------

    def _bad_unit(self, queue_offset: int, unit: tuple[int, int, int], detail: str) -> CorruptData:
        offset, size, _tags = unit
        return CorruptData(f"{self.topic}/{self.queue_id} queue offset {queue_offset}: consume-queue unit "
                           f"(commit-log offset {offset}, size {size}) {detail}", offset=offset, reason="unit",
                           topic=self.topic, queue_id=self.queue_id, queue_offset=queue_offset, size=size,
                           path=self.consume_queue.segment_path(queue_offset * CQ_UNIT_SIZE))


def _segment_index(bases: list[int], offset: int) -> int:
    return bisect.bisect_right(bases, offset) - 1


__all__ = ["MAX_READ_BYTES", "SegmentReader", "UNITS_PER_READ"]
