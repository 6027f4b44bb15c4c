"""The local CommitLog: every queue's messages, back to back, in offset-named files.

Layout (RocketMQ's, seeds 001/003): files of ``file_size`` bytes named by the
20-digit offset of their first byte. A message never spans two files: when the next
message (plus 8 bytes) does not fit, the tail of the file is filled by a BLANK
record -- ``int totalSize = bytes left``, ``int magic = 0xCBD43194``, then zeros --
and the message goes to the start of the next file. So every full file ends in a
BLANK record, and ``offset - offset % file_size`` names the file of any offset.

Durability: ``append`` writes through to the OS (a killed process loses nothing it
was told was written); ``flush`` fsyncs and advances :attr:`CommitLog.flushed_offset`.
:attr:`CommitLog.confirmed_offset` is the flushed offset: bytes below it survive a
machine crash, so they may be copied to the tiered store.

Recovery (:meth:`CommitLog.recover`) walks the files from a starting file, checks
every record (magic, size, the physical-offset field, body CRC) and cuts the log at
the first record that is not whole and valid: a torn tail is removed, everything
before it stays.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import struct
import threading
from collections.abc import Iterator
from typing import NamedTuple

from tiered_core.codec._impl import peek_physical_offset, peek_store_timestamp, validate_message
from tiered_core.codec.message import (
    BLANK_MAGIC,
    HEAD8,
    MAGIC_END,
    MAGIC_V1,
    MAGIC_V2,
    PHYSICAL_OFFSET_POS,
    QUEUE_OFFSET_POS,
)
from tiered_core.codec.prop_crc import has_prop_crc_slot, write_prop_crc
from tiered_core.errors import CorruptData, IllegalOffset, IllegalParam, SegmentClosed
from tiered_core.local.mapped_file import MappedFile, MappedFileQueue

log = logging.getLogger(__name__)

#: RocketMQ's END_FILE_MIN_BLANK_LENGTH: room always kept for the BLANK record.
END_FILE_MIN_BLANK_LENGTH = 8
DEFAULT_FILE_SIZE = 1 << 30
#: Largest read issued while scanning (a bigger record is read on its own).
SCAN_CHUNK = 4 << 20

_HEAD = HEAD8  # totalSize, magic
_I64 = struct.Struct(">q")
#: queueOffset and physicalOffset, next to each other in every record
_QUEUE_AND_PHYSICAL_OFFSET = struct.Struct(">qq")
assert PHYSICAL_OFFSET_POS == QUEUE_OFFSET_POS + 8
_MESSAGE_MAGICS = (MAGIC_V1, MAGIC_V2)


class AppendMessageResult(NamedTuple):
    """Where :meth:`CommitLog.append` put a message."""

    commitlog_offset: int
    size: int
    store_timestamp: int


class Record(NamedTuple):
    """One message read while scanning: its commit-log offset and its bytes."""

    offset: int
    data: memoryview


class RecoveryResult(NamedTuple):
    """What :meth:`CommitLog.recover` found."""

    max_offset: int  # end of the last valid record
    scanned_from: int  # offset the validation started at
    truncated_bytes: int  # bytes cut off (torn tail, garbage, later files)
    messages: int  # valid messages seen while scanning


class CommitLog:
    """All queues' messages in one log of fixed-size files.

    Guarantees: offsets returned by :meth:`append` are where the message is and stay
    valid until retention deletes the file; the message's physicalOffset field holds
    that offset; a message never spans files; :meth:`read` returns only whole bytes
    that were written. Thread-safe: appends are serialised by a lock, reads run
    concurrently with appends and deletions. Raises :class:`IllegalParam` for a
    message that is not a message or does not fit a file, :class:`IllegalOffset` for
    reads outside ``[min_offset, max_offset)``, :class:`SegmentClosed` after close, and
    :class:`~tiered_core.errors.LocalIOError` naming the file when the disk fails: an append
    that raises it leaves :attr:`max_offset` where it was (its partial bytes are cut).
    """

    def __init__(self, directory: str, file_size: int = DEFAULT_FILE_SIZE, *,
                 append_lock: threading.RLock | None = None, private: bool = False) -> None:
        """``private``: a reader's view that writes nothing (see :class:`MappedFileQueue`)."""
        if file_size < 64 + END_FILE_MIN_BLANK_LENGTH:
            raise IllegalParam(f"commit-log file size {file_size} is too small", file_size=file_size)
        self.directory = directory
        self.file_size = file_size
        self._files = MappedFileQueue(directory, file_size, private=private)
        # Appends and close hold it. An owner that numbers messages as it appends them
        # passes its own reentrant lock and calls append_held under it: one lock per put.
        self._lock = append_lock if append_lock is not None else threading.Lock()
        self._flush_lock = threading.Lock()
        self._last_store_timestamp = 0
        self._closed = False
        self._active: MappedFile | None = None  # the file appends go to (see append)

    # ---- offsets -------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        """First stored byte (start of the oldest file)."""
        return self._files.min_offset

    @property
    def max_offset(self) -> int:
        """One past the last written byte; the next message goes here or to the next file."""
        return self._files.max_offset

    @property
    def flushed_offset(self) -> int:
        """Bytes below this offset are fsynced."""
        return self._files.flushed_offset

    @property
    def confirmed_offset(self) -> int:
        """Bytes below this offset are durable and may be tiered (= :attr:`flushed_offset`)."""
        return self._files.flushed_offset

    @property
    def last_store_timestamp(self) -> int:
        """Store time of the newest message appended or seen by recovery (0 if none)."""
        return self._last_store_timestamp

    @property
    def max_message_size(self) -> int:
        """Largest message a file can take."""
        return self.file_size - END_FILE_MIN_BLANK_LENGTH

    def files(self) -> list[MappedFile]:
        return self._files.files

    def file_start(self, offset: int) -> int:
        return offset - offset % self.file_size

    # ---- writing -------------------------------------------------------------------
    def append(self, message: bytearray, store_timestamp: int, *, prop_crc: bool = False) -> AppendMessageResult:
        """Append one encoded message; its physicalOffset field is set to where it lands.

        ``message`` is modified in place (the physical offset). A message that does
        not fit the rest of the current file makes the file end in a BLANK record and
        goes to the next file. With ``prop_crc`` the message must end with a ``__CRC32#``
        property slot (``encode_message(prop_crc=True)``), which is filled once the
        physical offset is set (RocketMQ ``enabledAppendPropCRC``).
        """
        if not isinstance(message, bytearray):
            message = bytearray(message)
        size = len(message)
        total, magic = _HEAD.unpack_from(message, 0) if size >= MAGIC_END else (-1, 0)
        if total != size or magic not in _MESSAGE_MAGICS:
            raise IllegalParam("append needs one whole encoded message (its totalSize and magic "
                               f"do not match: totalSize {total}, {size} bytes given)", size=size)
        if size > self.file_size - END_FILE_MIN_BLANK_LENGTH:
            raise IllegalParam(
                f"message of {size} bytes does not fit a commit-log file of {self.file_size} bytes",
                size=size, file_size=self.file_size,
            )
        if prop_crc and not has_prop_crc_slot(message, 0, size):
            raise IllegalParam("append with prop_crc needs a message ending with a __CRC32# property "
                               "slot (encode_message(prop_crc=True))", size=size)
        return self.append_encoded(message, store_timestamp, prop_crc=prop_crc)

    def append_encoded(self, message: bytearray, store_timestamp: int, *,
                       prop_crc: bool = False) -> AppendMessageResult:
        """:meth:`append` for a message the store encoded itself, so known to be whole, to fit
        a file (``LocalStoreConfig.max_message_size``) and to hold a ``__CRC32#`` slot when
        ``prop_crc``: the same write, without checking all that again."""
        with self._lock:
            offset = self.append_held(message, store_timestamp, prop_crc)
        return AppendMessageResult(offset, len(message), store_timestamp)

    def append_held(self, message: bytearray, store_timestamp: int, prop_crc: bool = False,
                    queue_offset: int | None = None) -> int:
        """:meth:`append_encoded` for a caller that holds the append lock it gave the
        constructor (the local store's put lock); returns the message's offset. The bytes
        are written (``pwrite``) before it returns. A ``queue_offset`` is set in the
        message too (with the physical offset, which it precedes)."""
        if self._closed:
            raise SegmentClosed(f"commit log {self.directory!r} is closed", path=self.directory)
        size = len(message)
        mf = self._active
        # (the writer's hot path reads the file's state directly: closed, write position)
        if mf is None or mf._closing or mf._write_pos >= mf.capacity:
            # only appends add files, so the file appended to last stays the last one
            # until it is full (or recovery or close drop it)
            mf = self._active = self._files.last_for_append(0)
        pos = mf._write_pos
        if size + END_FILE_MIN_BLANK_LENGTH > mf.capacity - pos:
            self._end_file(mf)
            mf = self._active = self._files.last_for_append(0)
            pos = mf._write_pos
        offset = mf.start + pos
        if queue_offset is None:
            _I64.pack_into(message, PHYSICAL_OFFSET_POS, offset)
        else:
            _QUEUE_AND_PHYSICAL_OFFSET.pack_into(message, QUEUE_OFFSET_POS, queue_offset, offset)
        if prop_crc:
            write_prop_crc(message, 0, size)
        mf.append(message)
        self._last_store_timestamp = store_timestamp
        return offset

    def _end_file(self, mf: MappedFile) -> None:
        """Fill the rest of ``mf`` with a BLANK record and stamp its mtime."""
        mf.seal_with(_HEAD.pack(mf.remaining, BLANK_MAGIC))
        if self._last_store_timestamp > 0:
            # Retention compares a file's mtime with the retention period: make it the
            # store time of the file's last message, which also survives restarts.
            mf.set_mtime_ms(self._last_store_timestamp)

    def flush(self) -> int:
        """fsync everything written so far; returns the new :attr:`flushed_offset`.

        Concurrent callers coalesce: one whose bytes another call already flushed
        returns at once (group commit for the sync flush mode).
        """
        return self.flush_to(self.max_offset)

    def flush_to(self, offset: int) -> int:
        """Make sure every byte below ``offset`` is fsynced."""
        if self._files.flushed_offset >= offset:
            return self._files.flushed_offset
        with self._flush_lock:
            if self._files.flushed_offset >= offset:
                return self._files.flushed_offset
            return self._files.flush()

    # ---- reading -------------------------------------------------------------------
    @contextlib.contextmanager
    def _stored(self, offset: int, length: int) -> Iterator[tuple[MappedFile, int]]:
        """The file holding all of ``[offset, offset + length)``, held for reading, and where
        ``offset`` lies in it. IllegalOffset when the range is not all stored (expired,
        beyond the end, or crossing a file end)."""
        if length <= 0:
            raise IllegalParam(f"read length must be > 0, got {length}", offset=offset, length=length)
        with self._files.reading(offset) as mf:
            pos = offset - mf.start
            if pos + length > mf.write_position:
                raise IllegalOffset(
                    f"commit-log range {offset}+{length} is not stored (the file ends at {mf.end})",
                    offset=offset, length=length,
                )
            yield mf, pos

    def read(self, offset: int, length: int) -> bytes:
        """Exactly ``length`` bytes at ``offset``, inside one file. IllegalOffset when they
        are not all stored (expired, beyond the end, or crossing a file end)."""
        with self._stored(offset, length) as (mf, pos):
            try:
                return mf.read(pos, length)
            except SegmentClosed:
                raise IllegalOffset(f"commit-log offset {offset} was deleted", offset=offset) from None

    def map_range(self, offset: int, length: int) -> tuple[mmap.mmap, int]:
        """A read-only map of the stored bytes ``[offset, offset + length)`` (inside one file)
        and where ``offset`` lies in it: ``(map, position)``. Nothing is copied until read;
        the map stays valid after the file is deleted (it holds its own descriptor). The
        caller closes it. IllegalOffset as :meth:`read`."""
        with self._stored(offset, length) as (mf, pos):
            start = pos - pos % mmap.ALLOCATIONGRANULARITY
            try:
                view = mmap.mmap(mf.fileno(), pos + length - start, access=mmap.ACCESS_READ, offset=start)
            except (OSError, ValueError) as exc:
                raise IllegalOffset(f"commit-log range {offset}+{length} cannot be mapped: {exc}",
                                    offset=offset, length=length) from None
            return view, pos - start

    def read_message(self, offset: int) -> bytes:
        """The whole record of the message at ``offset`` (not validated beyond its head)."""
        head = self.read(offset, 8)
        size, magic = _HEAD.unpack(head)
        if magic not in _MESSAGE_MAGICS or size < 8:
            raise CorruptData(f"no message at commit-log offset {offset} (magic 0x{magic:08X})",
                              offset=offset, reason="bad_magic" if magic != BLANK_MAGIC else "blank")
        return self.read(offset, size)

    def _walk(self, mf: MappedFile, pos: int, stop: int) -> Iterator[tuple[str, int, object]]:
        """Records of ``mf`` from file position ``pos`` to ``stop`` (a file position).

        Yields ``("msg", offset, view)`` for each record that looks like a message (head
        checked, body not yet), ``("blank", offset, size)`` for a BLANK record (then
        stops), or ``("bad", offset, reason)`` for bytes that are no whole record (then
        stops). Reads in chunks of up to :data:`SCAN_CHUNK`.
        """
        while pos < stop:
            chunk = memoryview(mf.read(pos, min(SCAN_CHUNK, stop - pos)))
            i = 0
            while i + 8 <= len(chunk):
                size, magic = _HEAD.unpack_from(chunk, i)
                at = mf.start + pos + i
                if magic == BLANK_MAGIC:
                    yield "blank", at, size
                    return
                if magic not in _MESSAGE_MAGICS or size < 8:
                    yield "bad", at, f"bad record head (size {size}, magic 0x{magic:08X})"
                    return
                if i + size > len(chunk):
                    if pos + i + size > stop:
                        yield "bad", at, f"record of {size} bytes is not wholly written"
                        return
                    if i:
                        break  # read on from this record
                    chunk = memoryview(mf.read(pos, size))  # one record larger than a chunk
                yield "msg", at, chunk[i:i + size]
                i += size
            if i == 0:
                yield "bad", mf.start + pos, f"{len(chunk)} stray bytes"
                return
            pos += i

    def read_chunk(self, offset: int, end: int) -> bytes | None:
        """The stored bytes from ``offset`` up to ``end``, inside the file holding
        ``offset``, at most :data:`SCAN_CHUNK` of them (the batch form of
        :meth:`iter_records`: the caller splits them into records).

        None when that file holds nothing more below ``end`` (the caller goes on at the
        next file's start after a BLANK record, and stops at a file that is not full);
        IllegalOffset when ``offset`` is not stored.
        """
        mf = self._files.find(offset)
        if mf is None:
            raise IllegalOffset(f"commit-log offset {offset} is not stored", offset=offset)
        pos = offset - mf.start
        stop = min(mf.end, end) - mf.start
        if pos >= stop:
            return None
        try:
            return mf.read(pos, min(SCAN_CHUNK, stop - pos))
        except SegmentClosed:
            raise IllegalOffset(f"commit-log offset {offset} was deleted", offset=offset) from None

    def iter_records(self, start: int, end: int | None = None, *,
                     verify_crc: bool = False, validate: bool = True) -> Iterator[Record]:
        """Every message record from ``start`` (a record boundary) up to ``end``
        (default: :attr:`max_offset`), in order; BLANK records are stepped over.

        Each record is validated (the body CRC only with ``verify_crc``; only its
        head without ``validate``, for callers that decode it anyway); CorruptData
        names the first bad one. IllegalOffset when ``start`` is not stored.
        """
        end = self.max_offset if end is None else end
        offset = start
        while offset < end:
            mf = self._files.find(offset)
            if mf is None:
                raise IllegalOffset(f"commit-log offset {offset} is not stored", offset=offset)
            stop = min(mf.end, end) - mf.start
            if offset - mf.start >= stop:
                return
            next_offset = mf.start + stop
            try:
                for kind, at, value in self._walk(mf, offset - mf.start, stop):
                    if kind == "msg":
                        if validate:
                            validate_message(value, verify_crc=verify_crc, base_offset=at)
                        yield Record(at, value)
                    elif kind == "blank":
                        if value < 8 or at + value != mf.limit:
                            raise CorruptData(f"BLANK record at commit-log offset {at} of size "
                                              f"{value} does not end its file", offset=at, reason="blank")
                        next_offset = mf.limit
                    else:
                        raise CorruptData(f"commit-log offset {at}: {value}", offset=at, reason="truncated")
            except SegmentClosed:
                raise IllegalOffset(f"commit-log offset {offset} was deleted", offset=offset) from None
            if next_offset < mf.limit and next_offset < end:
                return  # a file that is not full: nothing can follow it
            offset = next_offset

    # ---- recovery ------------------------------------------------------------------
    def recover(self, start_hint: int | None = None) -> RecoveryResult:
        """Validate records from the file holding ``start_hint`` (all files without it)
        and cut the log after the last valid one. Must run before any append.

        Bytes before the starting file are trusted (a checkpoint said they were
        flushed). Returns the recovered end, where scanning began and how much was cut.
        """
        files = self._files.files
        if not files:
            return RecoveryResult(0, 0, 0, 0)
        start_index = 0
        if start_hint is not None:
            for i, mf in enumerate(files):
                if mf.start <= start_hint < mf.limit:
                    start_index = i
                    break
            else:
                start_index = len(files) - 1 if start_hint >= files[-1].limit else 0
        # an earlier file that is not full cannot be followed by anything: scan from it
        for i, mf in enumerate(files[:start_index]):
            if not mf.is_full():
                start_index = i
                break
        before = self._files.max_offset
        scanned_from = files[start_index].start
        good_end = scanned_from
        messages = 0
        for mf in files[start_index:]:
            if mf.start != good_end:
                break  # the previous file did not end in a complete BLANK record
            good_end, n, full = self._scan_file(mf)
            messages += n
            if not full:
                break
        self._files.truncate(good_end)
        self._active = None
        cut = before - self._files.max_offset
        if cut:
            log.warning("commit log %s: recovery cut %d bytes at offset %d",
                        self.directory, cut, good_end)
        return RecoveryResult(self._files.max_offset, scanned_from, cut, messages)

    def _scan_file(self, mf: MappedFile) -> tuple[int, int, bool]:
        """Validate one file. Returns (end of valid data, messages, file complete)."""
        good = mf.start
        count = 0
        for kind, at, value in self._walk(mf, 0, mf.write_position):
            if kind == "blank":
                if value >= 8 and at + value == mf.limit:
                    if mf.write_position < mf.capacity:
                        mf.fill_to_capacity()  # killed between the BLANK head and the fill
                    return mf.limit, count, True
                log.warning("commit log %s: BLANK record at %d does not end its file", self.directory, at)
                return at, count, False
            if kind == "bad":
                log.warning("commit log %s: %s at %d", self.directory, value, at)
                return at, count, False
            try:
                validate_message(value, verify_crc=True, base_offset=at)
                if peek_physical_offset(value) != at:
                    raise CorruptData(f"its physical-offset field is {peek_physical_offset(value)}",
                                      offset=at, reason="length_mismatch")
                if at + len(value) + END_FILE_MIN_BLANK_LENGTH > mf.limit:
                    raise CorruptData("it leaves no room for the end-of-file record", offset=at,
                                      reason="length_mismatch")
            except CorruptData as exc:
                log.warning("commit log %s: invalid message at %d: %s", self.directory, at, exc)
                return at, count, False
            self._last_store_timestamp = max(self._last_store_timestamp, peek_store_timestamp(value))
            count += 1
            good = at + len(value)
        return good, count, False

    # ---- retention -----------------------------------------------------------------
    def expired_files(self, now_ms: int, reserved_ms: int, keep_from: int) -> list[MappedFile]:
        """Leading files whose mtime is at least ``reserved_ms`` old and that end at or
        before ``keep_from``; never the last (active) file."""
        out = []
        files = self._files.files
        for mf in files[:-1]:
            if mf.limit > keep_from or mf.mtime_ms() + reserved_ms > now_ms:
                break
            out.append(mf)
        return out

    def delete_files_before(self, offset: int) -> int:
        """Delete the leading files that end at or before ``offset`` (never the last);
        returns how many were deleted."""
        return len(self._files.delete_head(lambda mf: mf.limit <= offset))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._files.close()


__all__ = [
    "CommitLog",
    "AppendMessageResult",
    "Record",
    "RecoveryResult",
    "END_FILE_MIN_BLANK_LENGTH",
    "DEFAULT_FILE_SIZE",
]
