"""The local ConsumeQueue of one (topic, queue id): 20-byte units, one per message.

Layout (RocketMQ's): ``consumequeue/{topic}/{queueId}/`` holds files of
``units_per_file * 20`` bytes named by the 20-digit *byte* offset of their first
unit (so unit ``i`` lives at byte ``i * 20``). A unit is ``commitLogOffset (8)``,
``size (4)``, ``tagsCode (8)``. Units that were never written (zeros: a gap filled
when a queue starts past its first file's start) are not valid and are skipped by
readers.

The queue is built by the store's reput step from the commit log, so it can always
be rebuilt: recovery cuts units that point past the recovered commit log, and
retention moves :attr:`ConsumeQueue.min_offset` past units whose commit-log bytes
were deleted.

A queue may also have a *floor* (:meth:`ConsumeQueue.raise_floor`), kept in the file
``floor`` of its directory: the offsets below it belong to another tier (the tiered
store holds them), so this queue neither serves them nor hands them out again. A queue
whose local history is behind the tier (a lost disk, a restored old directory) continues
at the floor. The floor is the one durable fact; the gap units below it are rebuilt from
it at open.
"""

from __future__ import annotations

import json
import logging
import os
import threading

from tiered_core.codec.consume_queue import (
    CQ_UNIT_SIZE,
    ConsumeQueueUnit,
    decode_cq_units,
    encode_cq_unit,
)
from tiered_core.common import fsync_dir, now_ms
from tiered_core.errors import IllegalOffset, IllegalParam, SegmentClosed, StateConflict
from tiered_core.local.io_errors import local_io_error
from tiered_core.local.mapped_file import MappedFile, MappedFileQueue

log = logging.getLogger(__name__)

#: RocketMQ's mappedFileSizeConsumeQueue: 300,000 units (5.72 MiB) per file.
DEFAULT_UNITS_PER_FILE = 300_000
#: The file in a queue's directory recording its floor (see :meth:`ConsumeQueue.raise_floor`).
FLOOR_FILE = "floor"


class ConsumeQueue:
    """The units of one queue, addressed by queue offset.

    Guarantees: units are contiguous from :attr:`min_offset` to :attr:`max_offset`
    (exclusive); :meth:`put` is idempotent for offsets already stored and never
    overwrites; ``delete_expired`` never removes the last file, so
    :attr:`max_offset` survives retention. Thread-safe. Raises
    :class:`IllegalParam` for bad arguments and :class:`IllegalOffset` for reads
    outside the stored range.
    """

    def __init__(self, directory: str, topic: str, queue_id: int,
                 units_per_file: int = DEFAULT_UNITS_PER_FILE, *, private: bool = False) -> None:
        """``private``: a reader's view that writes nothing; its changes (a recovery's cut, a
        replay's units, a new floor) are kept in memory (see :class:`MappedFileQueue`)."""
        if units_per_file <= 0:
            raise IllegalParam(f"units per consume-queue file must be > 0, got {units_per_file}",
                               units_per_file=units_per_file)
        self.directory = directory
        self.topic = topic
        self.queue_id = queue_id
        self.units_per_file = units_per_file
        self.private = private
        self._files = MappedFileQueue(directory, units_per_file * CQ_UNIT_SIZE, private=private)
        self._lock = threading.RLock()
        self._floor, self._floor_until_ms = self._read_floor()
        self._min_offset = max(self._files.min_offset // CQ_UNIT_SIZE, self._floor)
        self._dirty = False
        if self.max_offset < self._floor:  # the floor was recorded, its gap not yet written
            self._fill_gap(self.max_offset, self._floor)

    # ---- offsets -------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        """First queue offset whose unit is readable."""
        return self._min_offset

    @property
    def max_offset(self) -> int:
        """Next queue offset to be written (one past the last unit)."""
        return self._files.max_offset // CQ_UNIT_SIZE

    @property
    def floor(self) -> int:
        """Offsets below this belong to another tier: never served nor handed out here (0: none)."""
        return self._floor

    @property
    def floor_until_ms(self) -> int:
        """Store time up to which the other tier holds this queue's messages (-1: no floor)."""
        return self._floor_until_ms

    @property
    def dirty(self) -> bool:
        """Units were added since the last :meth:`flush`."""
        return self._dirty

    def __len__(self) -> int:
        return self.max_offset - self.min_offset

    # ---- writing -------------------------------------------------------------------
    def put(self, queue_offset: int, commitlog_offset: int, size: int, tags_code: int) -> bool:
        """Store the unit of ``queue_offset``; False when it is already stored.

        A ``queue_offset`` past :attr:`max_offset` leaves a gap of invalid (zero)
        units before it, with a warning (the queue's files were lost or the queue
        starts late).
        """
        unit = encode_cq_unit(commitlog_offset, size, tags_code)
        if queue_offset < 0:
            raise IllegalParam(f"queue offset {queue_offset} must be >= 0", queue_offset=queue_offset)
        with self._lock:
            expected = self.max_offset
            if queue_offset < expected:
                return False
            if queue_offset > expected:
                self._fill_gap(expected, queue_offset)
            mf = self._files.last_for_append(queue_offset * CQ_UNIT_SIZE)
            if mf.end != queue_offset * CQ_UNIT_SIZE:  # pragma: no cover - guarded by _fill_gap
                raise IllegalOffset(f"consume queue {self.topic}/{self.queue_id}: unit {queue_offset} "
                                    f"would land at byte {mf.end}", offset=queue_offset)
            mf.append(unit)
            self._dirty = True
            return True

    def put_units(self, queue_offset: int, units: bytes | bytearray) -> int:
        """Store a run of whole units (:func:`~tiered_core.codec.consume_queue.encode_cq_unit`
        bytes, concatenated) for ``queue_offset``, ``queue_offset + 1``, ...; returns how
        many were new.

        The same as :meth:`put` for each unit in turn (units already stored are skipped,
        a gap before the first is filled), in one write per file.
        """
        n = len(units) // CQ_UNIT_SIZE
        if n * CQ_UNIT_SIZE != len(units) or queue_offset < 0:
            raise IllegalParam(f"put_units needs whole units at an offset >= 0 ({len(units)} bytes at "
                               f"{queue_offset})", queue_offset=queue_offset, length=len(units))
        with self._lock:
            expected = self.max_offset
            if queue_offset + n <= expected:
                return 0
            view = memoryview(units)
            if queue_offset < expected:
                view = view[(expected - queue_offset) * CQ_UNIT_SIZE:]
                queue_offset = expected
            elif queue_offset > expected:
                self._fill_gap(expected, queue_offset)
            pos = queue_offset * CQ_UNIT_SIZE
            done = 0
            total = len(view)
            while done < total:
                mf = self._files.last_for_append(pos)
                if mf.end != pos:  # pragma: no cover - guarded by _fill_gap
                    raise IllegalOffset(f"consume queue {self.topic}/{self.queue_id}: unit "
                                        f"{pos // CQ_UNIT_SIZE} would land at byte {mf.end}",
                                        offset=pos // CQ_UNIT_SIZE)
                k = min(total - done, mf.limit - pos)
                mf.append(view[done:done + k])
                done += k
                pos += k
            self._dirty = True
            return total // CQ_UNIT_SIZE

    def raise_floor(self, offset: int, until_ms: int = -1) -> bool:
        """Continue this queue at ``offset`` when it ends below it: offsets below ``offset``
        are held by another tier, so they are neither served here nor handed out again.

        ``until_ms`` is the newest store time the other tier holds (kept for key lookups).
        Returns False, changing nothing, when the queue already reaches ``offset``
        (:attr:`max_offset` >= ``offset``: its units are the other tier's messages too).
        Otherwise the floor is written durably first, then the gap units up to it; then
        :attr:`min_offset` and :attr:`max_offset` are ``offset``. A crash in between leaves
        the floor, whose gap the next open fills.
        """
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise IllegalParam(f"consume queue {self.topic}/{self.queue_id}: floor must be an int >= 0, "
                               f"got {offset!r}", offset=offset)
        with self._lock:
            if self.max_offset >= offset:
                return False
            self._write_floor(offset, until_ms)
            self._fill_gap(self.max_offset, offset, log_missing=False)
            self._min_offset = offset
            self._dirty = True
            return True

    def _floor_path(self) -> str:
        return os.path.join(self.directory, FLOOR_FILE)

    def _read_floor(self) -> tuple[int, int]:
        path = self._floor_path()
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
            offset, until = doc["offset"], doc.get("until_ms", -1)
            if (isinstance(offset, bool) or not isinstance(offset, int) or offset < 0
                    or isinstance(until, bool) or not isinstance(until, int)):
                raise ValueError(f"offset {offset!r}, until_ms {until!r}")
            return offset, until
        except FileNotFoundError:
            return 0, -1
        except (OSError, ValueError, KeyError, TypeError) as exc:
            # Guessing 0 could hand out offsets another tier holds: stop instead.
            raise StateConflict(f"consume queue {self.topic}/{self.queue_id}: its floor file {path!r} is "
                                f"unreadable ({exc}); the store that owns the tier re-creates it: move the "
                                "file aside and reopen the tiered store", path=path) from None

    def _write_floor(self, offset: int, until_ms: int) -> None:
        path = self._floor_path()
        tmp = path + ".tmp"
        if self.private:
            self._floor, self._floor_until_ms = offset, until_ms
            return
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump({"offset": offset, "until_ms": until_ms, "written_at": now_ms()}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            fsync_dir(self.directory)
        except OSError as exc:
            raise local_io_error("writing the consume-queue floor", path, exc) from exc
        self._floor, self._floor_until_ms = offset, until_ms

    def _fill_gap(self, expected: int, queue_offset: int, log_missing: bool = True) -> None:
        empty = self._files.is_empty()
        nothing_readable = self._min_offset >= expected  # (its units expired, or none)
        if not empty and log_missing:
            log.warning("consume queue %s/%d: units %d..%d are missing; filled with invalid units",
                        self.topic, self.queue_id, expected, queue_offset - 1)
        pos = expected * CQ_UNIT_SIZE
        target = queue_offset * CQ_UNIT_SIZE
        file_size = self._files.file_size
        if empty:
            pos = target - target % file_size
        while pos < target:
            mf = self._files.last_for_append(pos)
            n = min(target - pos, mf.limit - mf.end)
            mf.append(bytes(n))
            pos += n
        if empty or nothing_readable:
            self._min_offset = queue_offset  # (gap units are never readable)

    # ---- reading -------------------------------------------------------------------
    def get_unit(self, queue_offset: int) -> ConsumeQueueUnit:
        """The unit at ``queue_offset``; IllegalOffset outside ``[min_offset, max_offset)``."""
        units = self.get_units(queue_offset, 1)
        if not units:
            raise IllegalOffset(
                f"queue offset {queue_offset} of {self.topic}/{self.queue_id} is not stored "
                f"({self.min_offset}..{self.max_offset})", offset=queue_offset)
        return units[0]

    def get_units(self, queue_offset: int, max_count: int) -> list[ConsumeQueueUnit]:
        """Up to ``max_count`` units from ``queue_offset`` on (fewer at the end).

        IllegalOffset when ``queue_offset`` is below :attr:`min_offset` or above
        :attr:`max_offset`; an empty list at :attr:`max_offset`. Invalid (gap) units
        are included; check ``unit.is_valid``.
        """
        if max_count <= 0:
            raise IllegalParam(f"max_count must be > 0, got {max_count}", max_count=max_count)
        lo, hi = self.min_offset, self.max_offset
        if not lo <= queue_offset <= hi:
            raise IllegalOffset(
                f"queue offset {queue_offset} of {self.topic}/{self.queue_id} is not stored "
                f"({lo}..{hi})", offset=queue_offset, min_offset=lo, max_offset=hi)
        end = min(queue_offset + max_count, hi)
        out: list[ConsumeQueueUnit] = []
        pos = queue_offset * CQ_UNIT_SIZE
        stop = end * CQ_UNIT_SIZE
        while pos < stop:
            try:
                with self._files.reading(pos) as mf:
                    n = min(stop, mf.end) - pos
                    if n <= 0:
                        break
                    data = mf.read(pos - mf.start, n)
            except (IllegalOffset, SegmentClosed):
                if pos // CQ_UNIT_SIZE < self.min_offset:
                    raise IllegalOffset(
                        f"queue offset {pos // CQ_UNIT_SIZE} of {self.topic}/{self.queue_id} "
                        "was deleted", offset=pos // CQ_UNIT_SIZE) from None
                raise
            data = data[: len(data) - len(data) % CQ_UNIT_SIZE]
            if not data:
                break
            out.extend(decode_cq_units(data, base_offset=pos))
            pos += len(data)
        return out

    def first_offset_at_or_after(self, commitlog_offset: int) -> int:
        """The first queue offset whose valid unit points at or after ``commitlog_offset``
        (:attr:`max_offset` when none does). Binary search: units grow with the offset."""
        lo, hi = self.min_offset, self.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            unit = self.get_unit(mid)
            if unit.is_valid and unit.commitlog_offset >= commitlog_offset:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def last_unit_end(self) -> int:
        """Commit-log offset one past the message of the last valid unit (-1 when none)."""
        with self._lock:
            hi = self.max_offset
            lo = self._files.min_offset // CQ_UNIT_SIZE  # expired units still tell progress
            start = max(lo, hi - 1024)
            if start >= hi:
                return -1
            pos = start * CQ_UNIT_SIZE
            data = b""
            while pos < hi * CQ_UNIT_SIZE:
                with self._files.reading(pos) as mf:
                    chunk = mf.read(pos - mf.start, min(hi * CQ_UNIT_SIZE, mf.end) - pos)
                data += chunk
                pos += len(chunk)
            for unit in reversed(decode_cq_units(data, base_offset=start * CQ_UNIT_SIZE)):
                if unit.is_valid:
                    return unit.commitlog_offset + unit.size
            return -1

    # ---- recovery and retention --------------------------------------------------------
    def recover(self, commitlog_max_offset: int) -> int:
        """Cut a partial trailing unit and every unit whose message ends past
        ``commitlog_max_offset`` (the recovered commit log). Returns units removed."""
        with self._lock:
            before = self._files.max_offset
            end = before - before % CQ_UNIT_SIZE
            files = self._files.files
            # Units grow with the commit-log offset: walk back from the end over files.
            cut_at = end
            for mf in reversed(files):
                first = max(mf.start, self._min_offset * CQ_UNIT_SIZE)
                if cut_at <= first:
                    continue
                data = mf.read(first - mf.start, cut_at - first)
                units = decode_cq_units(data[: len(data) - len(data) % CQ_UNIT_SIZE], base_offset=first)
                keep = len(units)
                while keep and (units[keep - 1].commitlog_offset + units[keep - 1].size > commitlog_max_offset
                                or not units[keep - 1].is_valid):
                    keep -= 1
                cut_at = first + keep * CQ_UNIT_SIZE
                if keep:
                    break
            if cut_at < before:
                if cut_at < self._min_offset * CQ_UNIT_SIZE:
                    cut_at = self._min_offset * CQ_UNIT_SIZE
                self._files.truncate(cut_at)
                if self._files.is_empty():
                    self._min_offset = self._floor
                log.warning("consume queue %s/%d: recovery removed %d bytes (%d units) after unit %d",
                            self.topic, self.queue_id, before - cut_at, (before - cut_at) // CQ_UNIT_SIZE,
                            cut_at // CQ_UNIT_SIZE)
            return (before - self._files.max_offset) // CQ_UNIT_SIZE

    def correct_min_offset(self, commitlog_min_offset: int) -> int:
        """Move :attr:`min_offset` past units whose messages start before
        ``commitlog_min_offset`` (deleted by retention) or are invalid; returns it."""
        with self._lock:
            new_min = self.first_offset_at_or_after(commitlog_min_offset)
            if new_min > self._min_offset:
                self._min_offset = new_min
            return self._min_offset

    def delete_expired(self, commitlog_min_offset: int) -> int:
        """Correct :attr:`min_offset`, then delete the leading files all of whose
        units are below it (never the last file). Returns files deleted."""
        with self._lock:
            self.correct_min_offset(commitlog_min_offset)
            limit = self._min_offset * CQ_UNIT_SIZE
            return len(self._files.delete_head(lambda mf: mf.limit <= limit))

    def flush(self) -> None:
        with self._lock:
            self._dirty = False
        try:
            self._files.flush()
        except BaseException:
            self._dirty = True  # flushed again next time
            raise

    def files(self) -> list[MappedFile]:
        return self._files.files

    def close(self) -> None:
        self._files.close()

    def destroy(self) -> None:
        """Close and delete every file and the queue directory (a private one: close only)."""
        files = self._files.files
        self._files.close()
        if self.private:
            return
        for path in [mf.path for mf in files] + [self._floor_path()]:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        try:
            os.rmdir(self.directory)
        except OSError:
            pass


__all__ = ["ConsumeQueue", "DEFAULT_UNITS_PER_FILE"]
