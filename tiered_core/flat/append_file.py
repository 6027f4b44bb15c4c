"""FlatAppendFile: one logical append-only file made of FileSegments.

Segments are named by base offset and kept sorted; only the last one is writable. A
full segment is committed and sealed, then a new one is rolled at the append offset.
Everything is rebuilt from the metadata store at start, and the last segment's size
is re-checked against the backend (bytes that landed after the last metadata update
are adopted: the backend is the truth). Nothing here deletes or appends to an object
the metadata does not list: a roll onto existing bytes is refused.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import threading
import time
from itertools import accumulate
from typing import Callable, Collection, Iterator, Sequence

from tiered_core.errors import CorruptData, DriverError, IllegalOffset, IllegalParam, StateConflict, TieredStoreError
from tiered_core.codec._impl import crc32
from tiered_core.flat.segment_ref import SegmentRef
from tiered_core.flat.damage import SEGMENT_TRUNCATED, SegmentDamage, check_segment
from tiered_core.segment import FileSegment
from tiered_core.common import NO_TIMESTAMP, AppendResult, FileSegmentType, SegmentStatus, now_ms
from tiered_core.spi.driver import SegmentDriver
from tiered_core.spi.metadata import FileSegmentMetadata, TieredMetadataStore

log = logging.getLogger(__name__)

_SIZE_RETRIES = 20


class FlatAppendFile:
    """An ordered list of segments of one type under one flat-file path.

    ``file_path`` is the logical path recorded in metadata (``broker/topic/queue``);
    ``segment_path(base_offset)`` names the backend object of each segment.

    Guarantees: offsets are contiguous across segments; a segment is only rolled
    after the previous one is fully committed; metadata records every segment before
    it receives bytes. Raises :class:`~tiered_core.errors.IllegalOffset` for reads
    outside the committed range.

    Damage stays local: a segment whose backend object is gone or shorter than its
    committed size (:class:`~tiered_core.flat.damage.SegmentDamage`, kept in ``damage``
    by base offset until the file is opened again) ends a read at its first lost byte;
    a read that starts there raises its :class:`~tiered_core.errors.CorruptData`.
    """

    #: Bytes salvaged from a damaged segment end on a whole record of this size (the
    #: consume queue's 20-byte unit), at an absolute offset that is a multiple of it.
    record_size = 1

    def __init__(
        self,
        driver: SegmentDriver,
        metadata: TieredMetadataStore,
        file_path: str,
        file_type: FileSegmentType,
        segment_path: Callable[[int], str],
        *,
        max_size: int | None = None,
        max_buffer_count: int | None = None,
    ) -> None:
        self.driver = driver
        self.metadata = metadata
        self.file_path = file_path
        self.file_type = FileSegmentType(file_type)
        self.segment_path = segment_path
        self.max_size = max_size
        self._segment_kwargs = {} if max_buffer_count is None else {"max_buffer_count": max_buffer_count}
        self.segments: list[FileSegment] = []
        self.adopted = False  # see _recover_last_size
        #: Why this file refuses every write (its newest segment lost committed bytes), or None.
        self.refused: StateConflict | None = None
        #: Damaged segments found so far, by base offset (reads end at their lost bytes).
        self.damage: dict[int, SegmentDamage] = {}
        self._lock = threading.RLock()
        self._recover()

    # -- recovery ---------------------------------------------------------------------

    def _new_segment(self, base: int, **kwargs) -> FileSegment:
        return FileSegment(self.driver, self.segment_path(base), self.file_type, base,
                           self.max_size, **self._segment_kwargs, **kwargs)

    def _recover(self) -> None:
        metas = sorted(
            (m for m in self.metadata.iterate_file_segments(int(self.file_type), self.file_path)
             if m.status != SegmentStatus.DELETED),
            key=lambda m: m.base_offset,
        )
        for meta in metas:
            seg = self._new_segment(meta.base_offset, initial_position=meta.size,
                                    sealed=meta.status == SegmentStatus.SEALED)
            if meta.begin_timestamp != NO_TIMESTAMP:
                seg.min_timestamp = meta.begin_timestamp
            if meta.end_timestamp != NO_TIMESTAMP:
                seg.max_timestamp = meta.end_timestamp
            if meta.seal_timestamp:
                seg.seal_timestamp = meta.seal_timestamp
            if meta.checksum is not None and meta.checksum_size == meta.size:
                seg.checksum = meta.checksum
            self.segments.append(seg)
        if self.segments:
            self._recover_last_size()

    def _recover_last_size(self) -> None:
        """Re-check the last segment against the backend: bytes that landed after the last
        metadata update are adopted, and a seal the metadata missed (a take-over by another
        store seals our tails) is seen before anything is appended. A backend holding fewer
        bytes than were committed is not ours to paper over: the segment is recorded as
        damaged and :attr:`refused` makes every later write raise that StateConflict."""
        last = self.segments[-1]
        size = self._backend_size(last.path)
        if size < last.commit_position:
            # Appending after lost bytes would hand out their offsets again: the file refuses
            # every write. Its bytes before the damage still read (damage stays local).
            gone = size == 0 and not self.driver.exists(last.path)
            damage = check_segment(self.file_path, self.file_type, last.path, last.base_offset,
                                   last.commit_position, None if gone else size)
            if damage is not None:
                self.damage[last.base_offset] = damage
            self.refused = StateConflict(
                f"{last.path!r} holds {size} bytes but the metadata records {last.commit_position} committed "
                "bytes: the backend lost or truncated them; refusing to write over the gap",
                path=last.path, size=size, committed=last.commit_position)
            return
        if size > last.commit_position:
            why = self._tail_fails_read_back(last, size)
            if why is not None:
                # Not bytes this store sent (someone's object in the segment's name, or
                # damage): adopted, they would be served as messages and their offsets taken.
                # The committed bytes still read; writes wait for `tiered repair --apply`.
                self.refused = StateConflict(
                    f"{last.path!r} holds {size - last.commit_position} bytes past its committed end "
                    f"({last.commit_position} bytes) that fail the read-back check ({why}): they are not this "
                    "store's, so they are not adopted and nothing is written to this file; `tiered repair --apply` "
                    "copies the object into the quarantine and rewrites it with its committed bytes (`tiered "
                    "verify` lists it as bad_tail)", path=last.path, size=size, committed=last.commit_position)
                log.error("%s", self.refused.message)
                return
        sealed = last.sealed or self.driver.is_sealed(last.path)
        #: Bytes the backend held past the metadata's commit point were adopted at open (the
        #: segment's recorded times predate them).
        self.adopted = size > last.commit_position
        if size != last.commit_position or sealed != last.sealed:
            fixed = self._new_segment(last.base_offset, initial_position=size, sealed=sealed)
            fixed.min_timestamp, fixed.max_timestamp = last.min_timestamp, last.max_timestamp
            fixed.seal_timestamp = last.seal_timestamp
            fixed.checksum = self._adopted_checksum(last, size)
            self.segments[-1] = fixed
            self.flush_metadata(fixed)

    def _adopted_checksum(self, last: FileSegment, size: int) -> int | None:
        """``last``'s checksum carried over the bytes ``[commit_position, size)`` adopted at
        open, or None when it is not known or those bytes cannot be read now."""
        if last.checksum is None or size == last.commit_position:
            return last.checksum
        try:
            tail = self.driver.read(last.path, last.commit_position, size - last.commit_position)
        except TieredStoreError as exc:
            log.info("%s: the checksum of %s is not kept past its adopted tail: %s", self.file_path, last.path, exc)
            return None
        if len(tail) != size - last.commit_position:
            return None
        return crc32(tail, last.checksum)

    def _tail_fails_read_back(self, last: FileSegment, size: int) -> str | None:
        """Why the bytes ``[commit_position, size)`` of the last segment are not this store's
        records (see :mod:`tiered_core.flat.read_back`), or None when they are (maybe ending
        in a record a crash cut short)."""
        return None

    def _backend_size(self, path: str) -> int:
        # RocketMQ bug #9544: a failed size lookup must never become a size. Retry, then fail.
        delay = 0.05
        for attempt in range(_SIZE_RETRIES):
            try:
                return self.driver.size(path)
            except DriverError as exc:
                if not exc.retryable or attempt == _SIZE_RETRIES - 1:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
        raise AssertionError("unreachable")

    # -- metadata -----------------------------------------------------------------------

    def flush_metadata(self, seg: FileSegment) -> None:
        """Record ``seg``'s committed size, timestamps and status."""
        meta = self.metadata.get_file_segment(int(self.file_type), self.file_path, seg.base_offset)
        if meta is None:
            meta = FileSegmentMetadata(self.file_path, int(self.file_type), seg.base_offset,
                                       create_timestamp=now_ms())
        checksum, covered = seg.committed_checksum()
        meta.size = covered
        if checksum is not None:
            meta.checksum, meta.checksum_size = checksum, covered
        meta.begin_timestamp = NO_TIMESTAMP if seg.min_timestamp is None else seg.min_timestamp
        meta.end_timestamp = NO_TIMESTAMP if seg.max_timestamp is None else seg.max_timestamp
        if seg.sealed:
            meta.status = SegmentStatus.SEALED
            meta.seal_timestamp = seg.seal_timestamp or meta.seal_timestamp or now_ms()
        self.metadata.update_file_segment(meta)

    # -- offsets --------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        segs = self.segments
        return segs[0].base_offset if segs else 0

    @property
    def commit_offset(self) -> int:
        segs = self.segments
        return segs[-1].commit_offset if segs else 0

    @property
    def append_offset(self) -> int:
        segs = self.segments
        return segs[-1].append_offset if segs else 0

    @property
    def min_timestamp(self) -> int | None:
        segs = self.segments
        return segs[0].min_timestamp if segs else None

    @property
    def max_timestamp(self) -> int | None:
        segs = self.segments
        return segs[-1].max_timestamp if segs else None

    def __iter__(self) -> Iterator[FileSegment]:
        return iter(list(self.segments))

    def segment_bases(self) -> list[int]:
        """The segments' base offsets, ascending (the :class:`~tiered_core.flat.segment_ref.SegmentedLog` view)."""
        return [s.base_offset for s in list(self.segments)]

    def segment_path(self, offset: int) -> str:
        """The backend path of the segment holding ``offset`` (the first one below it all)."""
        segs = list(self.segments)
        if not segs:
            return self.file_path
        i = bisect.bisect_right([s.base_offset for s in segs], offset) - 1
        return segs[max(0, i)].path

    def segment_refs(self) -> tuple[SegmentRef, ...]:
        """The segments as references (path, base offset, committed size): what a reader
        without this store's metadata database needs to read them."""
        return tuple(SegmentRef(s.path, s.base_offset, s.commit_position) for s in list(self.segments))

    # -- writing --------------------------------------------------------------------------

    def init_offset(self, offset: int) -> None:
        """Create the first segment at ``offset`` if there is none."""
        with self._lock:
            if not self.segments:
                self.roll(offset)

    def roll(self, offset: int) -> FileSegment:
        """Start a new last segment at ``offset``; its metadata is recorded first (the object
        is created by its first commit).

        Raises :class:`~tiered_core.errors.StateConflict` when the backend already holds
        bytes at that path: no metadata lists them as this store's, so they are not ours
        to delete or to append to (lost metadata, or another store's data).
        """
        if offset < 0:
            raise IllegalParam(f"cannot roll {self.file_path!r} at negative offset {offset}", offset=offset)
        with self._lock:
            if self.refused is not None:
                raise self.refused
            seg = self._new_segment(offset, initial_position=0, sealed=False)
            if self._replaces_an_empty_sealed_last(seg):
                # a new row in place of the sealed one (flush_metadata keeps a recorded seal)
                self.metadata.update_file_segment(FileSegmentMetadata(
                    self.file_path, int(self.file_type), seg.base_offset, create_timestamp=now_ms()))
                self.segments[-1] = seg
                return seg
            found = self.driver.size(seg.path)
            if found:
                raise StateConflict(
                    f"{seg.path!r} already holds {found} bytes that the metadata does not list as this "
                    "store's; refusing to roll over them (rebuild the metadata from the backend: "
                    "`tiered metadata rebuild --config FILE --force`)", path=seg.path, size=found)
            self.flush_metadata(seg)
            self.segments.append(seg)
            return seg

    def _replaces_an_empty_sealed_last(self, seg: FileSegment) -> bool:
        """Whether ``seg`` takes the place of the last segment, a sealed one that holds
        nothing at the same base: a take-over seals the previous owner's tails, and one killed
        after creating its next segment leaves that segment empty. It names this base, so no
        other segment can follow it: it is deleted (it is this store's and holds no byte) and
        made again. Anything else at the path is left to :meth:`roll`'s checks."""
        last = self.segments[-1] if self.segments else None
        if last is None or last.base_offset != seg.base_offset or last.commit_position or last.path != seg.path:
            return False
        if not (last.sealed or self.driver.is_sealed(last.path)) or self._backend_size(last.path):
            return False
        log.warning("%s: its last segment %s is sealed and empty (a take-over sealed it, or its writer stopped "
                    "before its first byte); made again in its place", self.file_path, last.path)
        self.driver.delete(last.path)
        return True

    def writable(self) -> FileSegment:
        if self.refused is not None:
            raise self.refused
        if not self.segments:
            raise IllegalOffset(f"{self.file_path!r} ({self.file_type.name}) has no segment: "
                                "set its base offset first (init_offset)", path=self.file_path)
        return self.segments[-1]

    def append(self, data: bytes | bytearray, timestamp: int | None = None) -> AppendResult:
        """Buffer ``data`` in the last segment, rolling when it is full."""
        with self._lock:
            last = self.writable()
            result = last.append(data, timestamp)
            if result is not AppendResult.FILE_FULL and result is not AppendResult.SEGMENT_SEALED:
                return result
            # Full: commit everything, seal, then roll (RocketMQ #8409: never roll over
            # uncommitted bytes, or they are lost).
            try:
                if not last.sealed:
                    last.seal()
            except TieredStoreError as exc:
                log.warning("cannot seal full segment %s: %s", last.path, exc)
                return AppendResult.UNKNOWN_ERROR
            self.flush_metadata(last)
            if len(data) > (self.max_size or last.max_size):
                return AppendResult.FILE_FULL  # can never fit; the caller must split
            return self.roll(last.append_offset).append(data, timestamp)

    def append_records(self, data: bytes | bytearray | memoryview, sizes: Sequence[int],
                       timestamps: Sequence[int],
                       before_roll: Callable[[], bool] | None = None) -> tuple[AppendResult, int]:
        """Append records back to back -- record ``i`` is the next ``sizes[i]`` bytes of
        ``data``, stored at ``timestamps[i]`` -- as one buffer per segment they land in.

        The bytes, the segment boundaries and the segments' timestamps are those of one
        :meth:`append` per record: a record that does not fit the last segment rolls it
        (``before_roll()`` is asked first; False stops with UNKNOWN_ERROR). Returns
        ``(result, appended)``: SUCCESS and every record, or the first failure and how many
        records were appended before it.
        """
        n = len(sizes)
        if len(timestamps) != n:
            raise IllegalParam(f"{n} record sizes but {len(timestamps)} timestamps", count=n)
        ends = list(accumulate(sizes, initial=0))
        if ends[-1] != len(data):
            raise IllegalParam(f"record sizes add up to {ends[-1]} bytes, the data holds {len(data)}",
                               size=len(data))
        with memoryview(data) as mv, self._lock:
            i = 0
            while i < n:
                last = self.writable()
                room = last.max_size - last.append_position
                j = bisect.bisect_right(ends, ends[i] + room, i + 1) - 1  # records i..j-1 fit
                if j > i:
                    stamps = timestamps[i:j]
                    result = last.append(mv[ends[i]:ends[j]], min(stamps), max(stamps))
                    if result is AppendResult.SUCCESS:
                        i = j
                        continue
                    if result is not AppendResult.FILE_FULL and result is not AppendResult.SEGMENT_SEALED:
                        return result, i
                # One record, the way append() takes it (sealing and rolling the last segment).
                if before_roll is not None and last.append_position + sizes[i] > last.max_size \
                        and not before_roll():
                    return AppendResult.UNKNOWN_ERROR, i
                result = self.append(mv[ends[i]:ends[i + 1]], timestamps[i])
                if result is not AppendResult.SUCCESS:
                    return result, i
                i += 1
        return AppendResult.SUCCESS, n

    def commit(self) -> bool:
        """Commit the last segment and record its new size. True when nothing is left buffered."""
        with self._lock:
            if not self.segments:
                return True
            last = self.segments[-1]
        if not last.needs_commit():
            return True
        try:
            ok = last.commit()
        except StateConflict as exc:
            self._lost_under(last, exc)
            raise
        if last.commit_position:
            self.flush_metadata(last)
        return ok and not last.needs_commit()

    def _lost_under(self, seg: FileSegment, exc: StateConflict) -> None:
        """A commit found the backend holding fewer bytes than were committed (``exc`` names
        the size): the segment is damaged, as an open would find it, and the file refuses
        writes. So a reader, ``tiered stat`` and local retention know those bytes are not
        in the tier (retention would otherwise delete their last copy)."""
        size = exc.context.get("size")
        if not isinstance(size, int) or size >= seg.commit_position:
            return
        damage = check_segment(self.file_path, self.file_type, seg.path, seg.base_offset, seg.commit_position, size)
        if damage is not None:
            self.damage[seg.base_offset] = damage
        self.refused = exc

    def commit_error(self) -> Exception | None:
        """Why the last segment's last commit left bytes unuploaded, or None."""
        with self._lock:
            last = self.segments[-1] if self.segments else None
        return None if last is None else last.last_error

    # -- reading --------------------------------------------------------------------------

    def read(self, offset: int, length: int) -> bytes:
        """Committed bytes from ``offset``, across as many segments as the range spans;
        clamped to what is committed.

        A damaged segment (gone, or shorter than committed) ends the bytes returned at its
        first lost byte; when that is ``offset`` itself, CorruptData (reason
        ``segment_missing`` or ``segment_truncated``) names the segment and what is wrong.
        So does a hole between two segments (the metadata rebuilt from an object cut short
        records it at that size): a read ends at it, and one at it is CorruptData."""
        if length <= 0:
            raise IllegalParam(f"read of {self.file_path!r}: length must be > 0, got {length}", length=length)
        segs = list(self.segments)
        bases = [s.base_offset for s in segs]
        idx = bisect.bisect_right(bases, offset) - 1
        if 0 <= idx < len(segs) - 1 and segs[idx].commit_offset <= offset:
            seg, after = segs[idx], segs[idx + 1]
            raise CorruptData(
                f"{self.file_path} {self.file_type.name} offset {offset} cannot be read: {self.file_type.name} "
                f"segment {seg.path!r} ends at {seg.commit_offset} and the next one starts at {after.base_offset}: "
                "the bytes between them are lost", reason=SEGMENT_TRUNCATED, path=seg.path, offset=offset,
                file_type=self.file_type.name, base_offset=seg.base_offset, hole=(seg.commit_offset, after.base_offset))
        if idx < 0 or offset >= segs[idx].commit_offset:
            lo = segs[0].base_offset if segs else 0
            hi = segs[-1].commit_offset if segs else 0
            raise IllegalOffset(
                f"{self.file_path!r} ({self.file_type.name}): offset {offset} is outside the "
                f"committed range [{lo}, {hi})", path=self.file_path, offset=offset)
        damage = self.damage
        pieces: list[bytes] = []
        pos, end = offset, offset + length
        while pos < end and idx < len(segs):
            seg = segs[idx]
            if pos < seg.base_offset:
                break  # a hole before this segment (metadata rebuilt from a short object): the bytes end here
            # A later segment may start before this one's end (a realigned torn tail): it wins.
            stop = seg.commit_offset if idx + 1 == len(segs) else min(seg.commit_offset, segs[idx + 1].base_offset)
            cut = False
            known = damage.get(seg.base_offset) if damage else None
            if known is not None:
                limit = seg.base_offset + known.readable
                limit -= limit % self.record_size
                if limit < stop:
                    stop, cut = limit, True
                    if pos >= stop and not pieces:
                        raise known.error(pos)
            if pos >= stop:
                break  # a hole or damage: the readable bytes end here
            want = min(end, stop) - pos
            try:
                piece = seg.read(pos - seg.base_offset, want)
            except TieredStoreError as exc:
                piece = self._salvage(seg, pos, want, exc)
                if not piece:
                    if pieces:
                        break
                    raise self.damage[seg.base_offset].error(pos) from exc
            pieces.append(piece)
            pos += len(piece)
            if pos < stop or cut:
                break  # short read, or damage right after: return what is there
            idx += 1
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def _salvage(self, seg: FileSegment, pos: int, want: int, exc: TieredStoreError) -> bytes:
        """After the read of ``want`` bytes at file offset ``pos`` of ``seg`` failed with
        ``exc``: when the backend's size (the truth) says the bytes are not all there, record
        the segment's damage and return the whole records it still holds from ``pos`` (maybe
        none); otherwise the failure was not damage, and ``exc`` is raised again."""
        rel = pos - seg.base_offset
        try:
            # One lookup (the driver's retry layer retries it): a backend that failed the read
            # is likely down, and a reader must hear so within the driver's own timeouts.
            found = self.driver.size(seg.path)
        except TieredStoreError:
            raise exc from None
        if found >= rel + want or seg not in self.segments:
            raise exc  # the bytes are there (the read itself failed), or expiry removed the segment
        try:
            gone = found == 0 and not self.driver.exists(seg.path)
        except TieredStoreError:
            gone = False
        damage = check_segment(self.file_path, self.file_type, seg.path, seg.base_offset, seg.commit_position,
                               None if gone else found)
        if damage is None:  # (cannot be: found < rel + want <= the committed size)
            raise exc
        if self.damage.get(seg.base_offset) != damage:
            self.damage[seg.base_offset] = damage
            log.error("damaged tiered segment of %s: %s", self.file_path, damage.describe())
        n = min(found, seg.commit_position) - rel
        n -= (pos + n) % self.record_size if n > 0 else 0
        if n <= 0:
            return b""
        return seg.read(rel, n)

    def check_damage(self, listing: dict[str, int], recorded: dict[str, int] | None = None) -> list[SegmentDamage]:
        """Damaged segments per ``listing`` (backend path -> size, one listing of the
        store's prefix), plus those reads found; recorded in ``damage``. ``recorded``
        (path -> committed size) is what was committed before the listing was taken
        (default: now), so a commit racing the listing is not taken for damage. A segment
        that ends before the next one starts (a hole, see :meth:`read`) is reported with
        ``gap`` set, its lost range reaching the next segment."""
        found: list[SegmentDamage] = []
        segs = list(self.segments)
        for i, seg in enumerate(segs):
            committed = seg.commit_position if recorded is None else recorded.get(seg.path)
            if committed is None:  # rolled after the listing
                continue
            damage = check_segment(self.file_path, self.file_type, seg.path, seg.base_offset, committed,
                                   listing.get(seg.path))
            known = self.damage.get(seg.base_offset)
            if damage is None:
                damage = known
            elif known is None or known.readable > damage.readable:
                self.damage[seg.base_offset] = damage
            # (a next segment rolled after the listing says nothing of this one's committed snapshot)
            span = segs[i + 1].base_offset - seg.base_offset \
                if i + 1 < len(segs) and (recorded is None or segs[i + 1].path in recorded) else 0
            if damage is None and committed < span:
                damage = SegmentDamage(self.file_path, self.file_type, seg.path, seg.base_offset, span,
                                       committed, False, gap=True)
            elif damage is not None and damage.recorded < span:
                damage = dataclasses.replace(damage, recorded=span, gap=True)
            if damage is not None:
                found.append(damage)
        return found

    # -- expiry and lifecycle -------------------------------------------------------------

    def clean_expired(self, expire_timestamp: int, only: Collection[str] | None = None) -> int:
        """Phase 1 of expiry: stop serving head segments whose newest message is older than
        ``expire_timestamp`` and mark them DELETED in metadata (no backend I/O); with
        ``only`` (backend paths of segments the backend no longer holds), just the leading
        ones it names, whose records are removed: there is nothing left to delete.

        The last (writable) segment is kept. Returns how many were cleaned.
        """
        cleaned = 0
        with self._lock:
            while len(self.segments) > 1:
                head = self.segments[0]
                if head.max_timestamp is not None and head.max_timestamp >= expire_timestamp:
                    break
                if only is not None and head.path not in only:
                    break
                meta = self.metadata.get_file_segment(int(self.file_type), self.file_path, head.base_offset)
                if meta is not None and only is not None:
                    self.metadata.delete_file_segment(int(self.file_type), self.file_path, head.base_offset)
                elif meta is not None:
                    meta.status = SegmentStatus.DELETED
                    self.metadata.update_file_segment(meta)
                self.segments.pop(0)
                self.damage.pop(head.base_offset, None)
                head.close()
                cleaned += 1
        return cleaned

    def destroy_expired(self, expire_timestamp: int) -> int:
        """Phase 2: clean, then delete every DELETED-marked segment from the backend and the
        metadata (also those a crash left marked). Returns how many were deleted."""
        self.clean_expired(expire_timestamp)
        deleted = 0
        for meta in list(self.metadata.iterate_file_segments(int(self.file_type), self.file_path)):
            if meta.status == SegmentStatus.DELETED:
                self.driver.delete(self.segment_path(meta.base_offset))
                self.metadata.delete_file_segment(int(self.file_type), self.file_path, meta.base_offset)
                deleted += 1
        return deleted

    def _destroy_segment(self, seg: FileSegment) -> None:
        self.damage.pop(seg.base_offset, None)
        seg.destroy()
        self.metadata.delete_file_segment(int(self.file_type), self.file_path, seg.base_offset)

    def shutdown(self) -> None:
        with self._lock:
            for seg in self.segments:
                seg.close()

    def destroy(self) -> None:
        """Delete every segment from the backend and the metadata."""
        with self._lock:
            for seg in self.segments:
                self._destroy_segment(seg)
            self.segments.clear()
