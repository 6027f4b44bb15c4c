"""FlatMessageFile: the CompositeAccess of one queue (tiered commit log + consume queue)."""

from __future__ import annotations

import bisect
import dataclasses
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Collection, Sequence

from tiered_core.codec._impl import encode_cq_unit, peek_store_timestamp
from tiered_core.codec.consume_queue import CQ_UNIT_SIZE, decode_cq_unit
from tiered_core.codec.naming import queue_path, segment_path, validate_topic
from tiered_core.errors import CorruptData, IllegalOffset, IllegalParam, StateConflict, TieredStoreError
from tiered_core.flat.commit_log_file import FlatCommitLogFile
from tiered_core.flat.settings import FlatFileConfig
from tiered_core.flat.consume_queue_file import FlatConsumeQueueFile
from tiered_core.flat.damage import DAMAGE_REASONS, SegmentDamage
from tiered_core.flat.read_back import TailWitness
from tiered_core.segment import default_executor
from tiered_core.codec.checks import PropCrcPolicy
from tiered_core.codec.message_batch import MessageBatch
from tiered_core.common import AppendResult, BoundaryType, FileSegmentType, now_ms, offset_by_time
from tiered_core.flat.segment_reader import SegmentReader
from tiered_core.spi.access import CompositeAccess, ConsumeQueueRequest
from tiered_core.spi.driver import SegmentDriver
from tiered_core.spi.metadata import TieredMetadataStore


class FlatMessageFile(CompositeAccess):
    """One queue's tiered data: commit log, consume queue, topic and queue metadata.

    Guarantees (see :class:`CompositeAccess`): commit order commit log -> consume queue;
    contiguous queue offsets; committed-only reads. A commit holds the file lock, so no
    unit can be appended between the commit log's commit and the consume queue's.
    """

    def __init__(
        self,
        driver: SegmentDriver,
        metadata: TieredMetadataStore,
        topic: str,
        queue_id: int,
        config: FlatFileConfig | None = None,
        executor: ThreadPoolExecutor | None = None,
        witness: TailWitness | None = None,
    ) -> None:
        validate_topic(topic)
        if not isinstance(queue_id, int) or queue_id < 0:
            raise IllegalParam(f"queue_id must be an int >= 0, got {queue_id!r}", queue_id=queue_id)
        self.config = cfg = config or FlatFileConfig()
        self.topic, self.queue_id = topic, queue_id
        self.driver, self.metadata = driver, metadata
        self.file_path = queue_path(cfg.broker, topic, queue_id)
        self._executor = executor
        self.topic_metadata = metadata.get_topic(topic) or metadata.add_topic(topic)
        self.queue_metadata = (metadata.get_queue(topic, queue_id)
                               or metadata.add_queue(topic, queue_id, broker_name=cfg.broker))

        def path_of(kind: FileSegmentType):
            return lambda base: segment_path(cfg.cluster, cfg.broker, topic, queue_id, kind.name, base)

        self.commit_log = FlatCommitLogFile(
            driver, metadata, self.file_path, segment_path=path_of(FileSegmentType.COMMIT_LOG),
            max_size=cfg.commit_log_max_size, max_buffer_count=cfg.max_group_commit_count, witness=witness)
        self.consume_queue = FlatConsumeQueueFile(
            driver, metadata, self.file_path, segment_path=path_of(FileSegmentType.CONSUME_QUEUE),
            max_size=cfg.consume_queue_max_size, max_buffer_count=cfg.max_group_commit_count,
            commit_log_end=lambda: self.commit_log.commit_offset)
        self._lock = threading.RLock()  # the file lock: appends and commits
        self._commit_lock = threading.Lock()
        self.closed = False

    def __repr__(self) -> str:
        return f"FlatMessageFile({self.topic!r}, {self.queue_id})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FlatMessageFile) and other.file_path == self.file_path

    def __hash__(self) -> int:
        return hash(self.file_path)

    @property
    def executor(self) -> ThreadPoolExecutor:
        return self._executor or default_executor()

    # -- offsets and times ----------------------------------------------------------------

    @property
    def refused(self) -> StateConflict | None:
        """Why this queue refuses every write (a newest segment lost committed bytes, so
        where the queue continues is unknown), or None. Reads still serve what is intact."""
        return self.commit_log.refused or self.consume_queue.refused

    @property
    def initialized(self) -> bool:
        return bool(self.consume_queue.segments)

    def init_offset(self, queue_offset: int) -> None:
        if queue_offset < 0:
            raise IllegalParam(f"{self}: queue offset must be >= 0, got {queue_offset}", offset=queue_offset)
        with self._lock:
            self.consume_queue.init_offset(queue_offset * CQ_UNIT_SIZE)

    @property
    def topic_id(self) -> int:
        return self.topic_metadata.topic_id

    def commit_log_min_offset(self) -> int:
        return self.commit_log.min_offset

    def commit_log_max_offset(self) -> int:
        return self.commit_log.append_offset

    def commit_log_commit_offset(self) -> int:
        return self.commit_log.commit_offset

    def segment_count(self) -> int:
        return len(self.commit_log.segments) + len(self.consume_queue.segments)

    def rolling_file(self, interval_ms: int | None = None) -> bool:
        cfg = self.config
        return self.commit_log.try_rolling(cfg.rolling_interval_ms if interval_ms is None else interval_ms,
                                           cfg.rolling_min_size)

    def consume_queue_min_offset(self) -> int:
        """First queue offset still readable (RocketMQ #8076: never below the first stored message)."""
        return max(self.consume_queue.min_queue_offset, self.commit_log.first_message_queue_offset())

    def consume_queue_max_offset(self) -> int:
        """Queue offset after the last appended unit."""
        return self.consume_queue.append_queue_offset

    def consume_queue_room(self) -> int:
        """Units the writable consume-queue segment still takes before it must roll (at least 1:
        a full segment rolls at the next append). A writer that keeps each group within this
        room makes units durable only through :meth:`commit`, never through the seal of a
        full segment in the middle of a group."""
        last = self.consume_queue.writable()
        whole = max(1, last.max_size // CQ_UNIT_SIZE)  # what a freshly rolled segment takes
        room = (last.max_size - last.append_position) // CQ_UNIT_SIZE
        return whole if last.sealed or room <= 0 else room

    def consume_queue_commit_offset(self) -> int:
        """Queue offset after the last durable unit."""
        return self.consume_queue.commit_queue_offset

    def get_commit_log_dispatch_commit_offset(self) -> int:
        return self.consume_queue_commit_offset()

    def min_store_timestamp(self) -> int:
        """Earliest store time known from segment metadata; -1 when nothing is stored."""
        times = [t for t in (self.commit_log.min_timestamp, self.consume_queue.min_timestamp) if t is not None]
        return max(times) if times else -1

    def max_store_timestamp(self) -> int:
        t = self.commit_log.max_timestamp
        return -1 if t is None else t

    # -- appends ----------------------------------------------------------------------------

    def append_commit_log(self, message: bytes, commit: bool = False) -> AppendResult:
        if self.closed:
            return AppendResult.FILE_CLOSED
        with self._lock:
            result = self.commit_log.append_message(message, peek_store_timestamp(message, 0))
        if commit and result is AppendResult.SUCCESS:
            self.commit()
        return result

    def append_consume_queue(self, request: ConsumeQueueRequest, commit: bool = False) -> AppendResult:
        if self.closed:
            return AppendResult.FILE_CLOSED
        with self._lock:
            expected = self.consume_queue.append_queue_offset
            if request.queue_offset != expected:
                raise IllegalOffset(
                    f"{self}: consume-queue append at queue offset {request.queue_offset}, expected {expected}",
                    offset=request.queue_offset, expected=expected)
            unit = encode_cq_unit(request.commitlog_offset, request.size, request.tags_code)
            last = self.consume_queue.writable()
            if last.append_position + CQ_UNIT_SIZE > last.max_size and not self.commit_log.commit():
                # This unit rolls the consume queue, and sealing the full segment commits its
                # buffered units: their messages must be durable first (commit order), or a
                # crash leaves units pointing past the commit log.
                return AppendResult.UNKNOWN_ERROR
            result = self.consume_queue.append(unit, request.store_timestamp)
        if commit and result is AppendResult.SUCCESS:
            self.commit()
        return result

    def append_commit_log_batch(self, data: bytes | bytearray, sizes: Sequence[int],
                                timestamps: Sequence[int], base_offset: int) -> tuple[AppendResult, int]:
        """Append a group's messages, made ready by
        :func:`~tiered_core.codec.dispatch_batch.build_group` for commit-log offset
        ``base_offset`` (see :meth:`FlatCommitLogFile.append_batch`): one buffer per segment,
        the same bytes as one :meth:`append_commit_log` per message. Returns ``(result, appended)``."""
        if self.closed:
            return AppendResult.FILE_CLOSED, 0
        with self._lock:
            return self.commit_log.append_batch(data, sizes, timestamps, base_offset)

    def append_consume_queue_batch(self, queue_offset: int, units: bytes | bytearray,
                                   timestamps: Sequence[int]) -> tuple[AppendResult, int]:
        """Append consume-queue units (20 bytes each, unit ``i`` for queue offset ``queue_offset
        + i``, its message stored at ``timestamps[i]``): one buffer per segment, the same bytes
        and rules as one :meth:`append_consume_queue` per unit (a unit that rolls the consume
        queue first commits the commit log). Returns ``(result, appended)``."""
        if self.closed:
            return AppendResult.FILE_CLOSED, 0
        n = len(timestamps)
        if len(units) != n * CQ_UNIT_SIZE:
            raise IllegalParam(f"{self}: {len(units)} bytes are not {n} consume-queue units", count=n)
        with self._lock:
            expected = self.consume_queue.append_queue_offset
            if queue_offset != expected:
                raise IllegalOffset(
                    f"{self}: consume-queue append at queue offset {queue_offset}, expected {expected}",
                    offset=queue_offset, expected=expected)
            return self.consume_queue.append_records(units, [CQ_UNIT_SIZE] * n, timestamps,
                                                     before_roll=self.commit_log.commit)

    # -- commits ----------------------------------------------------------------------------

    def commit_commit_log(self) -> bool:
        with self._lock:
            return self.commit_log.commit()

    def commit_consume_queue(self) -> bool:
        """Commit the consume queue; the commit log goes first, so no unit is durable before its message."""
        with self._lock:
            return self.commit_log.commit() and self.consume_queue.commit()

    def commit(self, sync: bool = True) -> "bool | Future[bool]":
        if not sync:
            return self.executor.submit(self.commit, True)
        if self.closed or not self._commit_lock.acquire(blocking=False):
            return False
        try:
            with self._lock:
                ok = self.commit_log.commit() and self.consume_queue.commit()
                if ok:
                    self._flush_queue_metadata()
                return ok
        finally:
            self._commit_lock.release()

    def commit_error(self) -> Exception | None:
        return self.commit_log.commit_error() or self.consume_queue.commit_error()

    def _flush_queue_metadata(self) -> None:
        meta = self.queue_metadata
        lo, hi = self.consume_queue.min_queue_offset, self.consume_queue.commit_queue_offset
        if (meta.min_offset, meta.max_offset) != (lo, hi):
            meta.min_offset, meta.max_offset = lo, hi
            self.queue_metadata = self.metadata.update_queue(meta)

    # -- reads ------------------------------------------------------------------------------

    def get_consume_queue(self, queue_offset: int, count: int = 1) -> bytes:
        if count <= 0:
            raise IllegalParam(f"{self}: count must be > 0, got {count}", count=count)
        return self.consume_queue.read(queue_offset * CQ_UNIT_SIZE, count * CQ_UNIT_SIZE)

    def get_commit_log(self, offset: int, length: int) -> bytes:
        return self.commit_log.read(offset, length)

    def get_message(self, queue_offset: int) -> bytes:
        """The encoded message at ``queue_offset`` (unchecked). CorruptData when a damaged
        segment lost it (or its unit)."""
        cq = self.get_consume_queue(queue_offset)
        if len(cq) < CQ_UNIT_SIZE:
            raise self._lost(self.consume_queue, queue_offset * CQ_UNIT_SIZE, queue_offset, CQ_UNIT_SIZE)
        offset, size, _tags = decode_cq_unit(cq, 0)
        data = self.get_commit_log(offset, size)
        if len(data) != size:
            raise self._lost(self.commit_log, offset, queue_offset, size)
        return data

    def get_message_async(self, queue_offset: int) -> "Future[bytes]":
        return self.executor.submit(self.get_message, queue_offset)

    def get_commit_log_async(self, offset: int, length: int) -> "Future[bytes]":
        return self.executor.submit(self.get_commit_log, offset, length)

    def get_consume_queue_async(self, queue_offset: int, count: int = 1) -> "Future[bytes]":
        return self.executor.submit(self.get_consume_queue, queue_offset, count)

    def _store_time(self, queue_offset: int) -> int:
        """:meth:`SegmentReader.store_time <tiered_core.flat.segment_reader.SegmentReader.store_time>`;
        where a damaged segment lost the unit or the message, :meth:`_segment_time`."""
        try:
            return self.reader().store_time(queue_offset)
        except CorruptData as exc:
            reason = exc.context.get("reason")
            if reason in DAMAGE_REASONS:
                file = self.commit_log if exc.context.get("file_type") == "COMMIT_LOG" else self.consume_queue
            elif reason == "truncated":  # no whole unit there
                file = self.consume_queue
            elif reason == "unit_out_of_range":  # the commit log ends inside the message's head
                file = self.commit_log
            else:
                raise
            return self._segment_time(file, exc.context["offset"], queue_offset)

    def _segment_time(self, file, offset: int, queue_offset: int) -> int:
        """The store time of a message a damaged segment of ``file`` lost (at file offset
        ``offset``): the newest time its segment's metadata records. Times stay monotonic
        (the segment's readable messages are older, the next segment's newer), so a time
        search into the lost range lands in it -- where reads answer as damaged -- instead of
        failing for every time."""
        segs = list(file.segments)
        i = bisect.bisect_right([s.base_offset for s in segs], offset) - 1
        stamp = segs[i].max_timestamp if i >= 0 else None
        if stamp is None:
            raise self._lost(file, offset, queue_offset)
        return stamp

    def get_offset_in_consume_queue_by_time(self, timestamp: int, boundary: BoundaryType = BoundaryType.LOWER) -> int:
        """The queue offset of the first message stored at or after ``timestamp`` (LOWER), or
        of the last one stored exactly at it (UPPER); the commit offset if all are older
        (:func:`tiered_core.common.offset_by_time`)."""
        return offset_by_time(self.consume_queue_min_offset(), self.consume_queue_commit_offset() - 1,
                              timestamp, boundary, self._store_time)

    def reader(self, prop_crc: PropCrcPolicy = PropCrcPolicy.IGNORE) -> SegmentReader:
        """The queue's :class:`~tiered_core.flat.segment_reader.SegmentReader` over this flat
        file's segments: its committed bytes only, with the damage accounting of
        :meth:`FlatAppendFile.read <tiered_core.flat.append_file.FlatAppendFile.read>` (a
        damaged segment ends a read at its first lost byte, or raises CorruptData naming it)."""
        return SegmentReader(self.consume_queue, self.commit_log, topic=self.topic, queue_id=self.queue_id,
                             prop_crc=prop_crc)

    def read_batch(self, queue_offset: int, count: int, max_bytes: int, *,
                   prop_crc: PropCrcPolicy = PropCrcPolicy.IGNORE) -> MessageBatch:
        """Up to ``count`` validated messages from ``queue_offset`` (at most up to the commit
        offset; at most ``max_bytes`` of commit log, but at least one message): one
        consume-queue read, one commit-log read, one split + validate pass (:meth:`SegmentReader.read_batch
        <tiered_core.flat.segment_reader.SegmentReader.read_batch>` over :meth:`reader`). The batch ends
        before the first bad message, whose CorruptData is ``batch.error`` -- also when a damaged segment lost it
        or its unit (reason ``segment_missing`` / ``segment_truncated``, naming the segment):
        the read ends at the damage, so every intact message before it is in the batch.
        Other I/O errors raise."""
        count = min(count, self.consume_queue_commit_offset() - queue_offset)
        try:
            batch = self.reader(prop_crc).read_batch(queue_offset, count, max_bytes)
        except CorruptData as exc:  # a damaged segment lost the message at queue_offset
            return MessageBatch(self.topic, self.queue_id, queue_offset, b"", 0, [],
                                self._queue_error(exc, queue_offset))
        if count > 0 and not batch.units and batch.error is None:  # the consume queue ends early
            error = self._damage_error(self.consume_queue, queue_offset * CQ_UNIT_SIZE, queue_offset, CQ_UNIT_SIZE)
            if error is not None:
                return MessageBatch(self.topic, self.queue_id, queue_offset, b"", 0, [], error)
        elif batch.error is not None and batch.error.reason == "unit_out_of_range":
            # The commit-log read ended early: name the damaged segment that cut it short.
            bad = batch.error.context
            lost = self._damage_error(self.commit_log, bad["offset"], bad["queue_offset"], max(1, bad["size"]))
            if lost is not None:
                batch.error = lost
        return batch

    # -- damage ------------------------------------------------------------------------------

    def _queue_error(self, exc: CorruptData, queue_offset: int) -> CorruptData:
        """``exc`` (of a damaged segment), naming the queue offset whose read hit it."""
        ctx = dict(exc.context)
        ctx.update(topic=self.topic, queue_id=self.queue_id, queue_offset=queue_offset)
        return CorruptData(f"{self.topic}/{self.queue_id} queue offset {queue_offset}: {exc.message}", **ctx)

    def _damage_error(self, file, offset: int, queue_offset: int | None, size: int = 1) -> CorruptData | None:
        """The CorruptData of a damaged segment of ``file`` that lost (some of) the ``size``
        bytes at file offset ``offset``; None when no known damage covers them."""
        for damage in list(file.damage.values()):
            if damage.covers(offset, size):
                exc = damage.error(max(offset, damage.lost[0]))
                return exc if queue_offset is None else self._queue_error(exc, queue_offset)
        return None

    def _lost(self, file, offset: int, queue_offset: int | None, size: int = 1) -> CorruptData | IllegalOffset:
        """:meth:`_damage_error`, or IllegalOffset when no damage explains a short read."""
        return self._damage_error(file, offset, queue_offset, size) or IllegalOffset(
            f"{self}: {file.file_type.name} bytes at {offset} (queue offset {queue_offset}) are not committed",
            offset=offset, queue_offset=queue_offset)

    def damaged_segments(self) -> list[SegmentDamage]:
        """The damaged segments reads have found (see :meth:`check_damage`)."""
        return list(self.consume_queue.damage.values()) + list(self.commit_log.damage.values())

    def check_damage(self, listing: dict[str, int], recorded: dict[str, int] | None = None) -> list[SegmentDamage]:
        """The queue's damaged segments per ``listing`` (backend path -> size, see
        :meth:`FlatAppendFile.check_damage`), each with ``queue_offsets``: the queue
        offsets whose units or messages it lost, when the consume queue can tell."""
        found = self.consume_queue.check_damage(listing, recorded) + self.commit_log.check_damage(listing, recorded)
        return [dataclasses.replace(d, queue_offsets=self._lost_queue_offsets(d)) for d in found]

    def first_lost_queue_offset(self) -> int | None:
        """The first queue offset whose tiered copy is known lost (damage found by a read,
        the open or a commit), None when none is; the queue's min offset when the consume
        queue cannot tell."""
        firsts = []
        for damage in self.damaged_segments():
            lost = self._lost_queue_offsets(damage)
            firsts.append(lost[0] if lost is not None else self.consume_queue_min_offset())
        return min(firsts) if firsts else None

    def committed_sizes(self) -> dict[str, int]:
        """Backend path -> committed bytes of every segment (taken before a listing)."""
        return {seg.path: seg.commit_position for file in (self.consume_queue, self.commit_log) for seg in file}

    def _lost_queue_offsets(self, damage: SegmentDamage) -> tuple[int, int] | None:
        lo, hi = damage.lost
        if damage.file_type is FileSegmentType.CONSUME_QUEUE:
            return lo // CQ_UNIT_SIZE, -(-hi // CQ_UNIT_SIZE)
        # Commit log: the units whose messages end past ``lo`` and start before ``hi``.
        try:
            first = self._first_unit(lambda off, size: off + size > lo)
            end = self._first_unit(lambda off, size: off >= hi)
        except TieredStoreError:
            return None  # the consume queue cannot tell
        return (first, end) if first < end else None

    def _first_unit(self, past) -> int:
        """The first queue offset whose unit ``(offset, size)`` satisfies ``past`` (units are
        in commit-log order), by bisection over the consume queue."""
        a, b = self.consume_queue_min_offset(), self.consume_queue_commit_offset()
        while a < b:
            mid = (a + b) // 2
            cq = self.get_consume_queue(mid)
            if len(cq) < CQ_UNIT_SIZE:
                raise self._lost(self.consume_queue, mid * CQ_UNIT_SIZE, mid, CQ_UNIT_SIZE)
            off, size, _tags = decode_cq_unit(cq, 0)
            if past(off, size):
                b = mid
            else:
                a = mid + 1
        return a

    # -- expiry and lifecycle ----------------------------------------------------------------

    def reserved_hours(self) -> int:
        reserve = self.topic_metadata.reserve_time
        return reserve if reserve > 0 else self.config.file_reserved_hours

    def clean_expired_file(self, expire_timestamp: int) -> None:
        with self._lock:
            self.consume_queue.clean_expired(expire_timestamp)  # RocketMQ #9371: queue first
            self.commit_log.clean_expired(expire_timestamp)

    def destroy_expired_file(self, expire_timestamp: int) -> None:
        with self._lock:
            self.consume_queue.destroy_expired(expire_timestamp)
            self.commit_log.destroy_expired(expire_timestamp)
            self._flush_queue_metadata()

    def forget_expired_missing(self, missing: Collection[str], now: int | None = None) -> int:
        """Clean the leading segments the backend no longer holds (backend paths in
        ``missing``) that are older than this topic's reserve time, as expiry would: tiered
        retention deleted them while this metadata was away (a store directory restored
        from a backup). Reads then answer "offset too small" there instead of reporting
        damage. A missing segment that is not expired stays damage. Returns how many."""
        now = now_ms() if now is None else now
        threshold = now - self.reserved_hours() * 3600_000
        with self._lock:
            cleaned = self.consume_queue.clean_expired(threshold, missing)
            cleaned += self.commit_log.clean_expired(threshold, missing)
            if cleaned:
                self._flush_queue_metadata()
        return cleaned

    def expire(self, now: int | None = None) -> None:
        """Destroy what is older than this topic's reserve time."""
        now = now_ms() if now is None else now
        self.destroy_expired_file(now - self.reserved_hours() * 3600_000)

    def shutdown(self) -> None:
        with self._lock:
            self.closed = True
            self.consume_queue.shutdown()
            self.commit_log.shutdown()

    def destroy(self) -> None:
        self.shutdown()
        with self._lock:
            self.consume_queue.destroy()
            self.commit_log.destroy()
            self.metadata.delete_queue(self.topic, self.queue_id)
