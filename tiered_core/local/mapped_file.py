"""Offset-named files of the local store and the ordered list that holds them.

RocketMQ keeps each log (the CommitLog, every ConsumeQueue) as a directory of
files of one fixed size, each named by the 20-digit offset of its first byte.
:class:`MappedFile` is one such file and :class:`MappedFileQueue` the directory.

The files are not memory-mapped here: positional ``pread``/``pwrite`` on one file
descriptor gives the same random access without Python's mmap resizing rules,
and a file is not pre-allocated: its length on disk is its write position, so a
crash can leave at most a torn tail, never a stretch of zeros to tell apart from
data. Reads race safely with deletion through :meth:`MappedFile.hold` /
:meth:`MappedFile.release` (a file is closed only when the last reader let go).
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tiered_core.common import fsync_dir
from tiered_core.errors import IllegalOffset, IllegalParam, SegmentClosed, StateConflict
from tiered_core.local.io_errors import local_io_error

#: (the name of :func:`~tiered_core.local.io_errors.local_io_error` before local disk
#: failures had their own type)
disk_error = local_io_error

log = logging.getLogger(__name__)

OFFSET_NAME_DIGITS = 20


def offset_file_name(offset: int) -> str:
    """The 20-digit, zero-padded file name RocketMQ gives a file starting at ``offset``."""
    if offset < 0:
        raise IllegalParam(f"file offset must be >= 0, got {offset}", offset=offset)
    return f"{offset:0{OFFSET_NAME_DIGITS}d}"


def parse_offset_file_name(name: str) -> int | None:
    """The start offset encoded in ``name``, or None when it is not such a name."""
    if len(name) != OFFSET_NAME_DIGITS or not name.isdigit():
        return None
    return int(name)


class MappedFile:
    """One fixed-capacity file of a log, starting at log offset ``start``.

    Guarantees: appends land at the current write position (the file length);
    ``read`` returns only bytes below the write position; after ``flush`` every
    byte appended before the call is on disk. Raises :class:`SegmentClosed` once
    the file is closed or destroyed, :class:`IllegalParam` for ranges outside
    what was written, and :class:`~tiered_core.errors.LocalIOError` naming the file when
    the disk fails (a failed append or end leaves the write position where it was and
    cuts what it wrote). Not thread-safe for writers: one writer at a time (the owning
    log serialises appends); readers may run concurrently with it.
    """

    def __init__(self, path: str, start: int, capacity: int, *, private: bool = False,
                 fresh: bool = False) -> None:
        """``private``: a view for a reader that writes nothing (a read-only store open): the
        file is read, never written, created or deleted; what the owner changes -- a
        recovery's cut, a replay's appends -- is kept in memory above the first changed
        position. ``fresh`` (with ``private``): a file the owner makes anew, held in memory
        only (whatever lies on disk under its name is not read)."""
        if capacity <= 0:
            raise IllegalParam(f"file capacity must be > 0, got {capacity}", capacity=capacity)
        self.path = path
        self.start = start
        self.capacity = capacity
        self.private = private
        try:
            if not private:
                self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            elif fresh or not os.path.exists(path):
                self._fd = -1
            else:
                self._fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            raise local_io_error("opening", path, exc) from None
        self._write_pos = os.fstat(self._fd).st_size if self._fd >= 0 else 0
        # private: bytes below _mem_from are the file's; from it on, _mem's (then zeros up to
        # the write position, after a fill to capacity)
        self._mem_from = self._write_pos
        self._mem = bytearray()
        self._flushed_pos = -1  # unknown after open: the first flush always fsyncs
        self._refs = 1  # the owner's reference
        self._closing = False
        self._destroy_on_close = False
        self._ref_lock = threading.Lock()

    # ---- positions -----------------------------------------------------------------
    @property
    def write_position(self) -> int:
        """Bytes written into this file (its length)."""
        return self._write_pos

    @property
    def end(self) -> int:
        """Log offset one past the last written byte."""
        return self.start + self._write_pos

    @property
    def limit(self) -> int:
        """Log offset one past the file's capacity (the next file's start)."""
        return self.start + self.capacity

    @property
    def remaining(self) -> int:
        return self.capacity - self._write_pos

    def is_full(self) -> bool:
        return self._write_pos >= self.capacity

    @property
    def closed(self) -> bool:
        return self._closing

    # ---- reference counting --------------------------------------------------------
    def hold(self) -> bool:
        """Take a reader reference; False when the file is being closed."""
        with self._ref_lock:
            if self._closing:
                return False
            self._refs += 1
            return True

    def release(self) -> None:
        with self._ref_lock:
            self._refs -= 1
            last = self._refs == 0
        if last:
            self._really_close()

    def _really_close(self) -> None:
        if self._fd >= 0:
            try:
                os.close(self._fd)
            except OSError:  # pragma: no cover - already closed
                pass
        if self._destroy_on_close and not self.private:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                # Left on disk: its queue retries the delete (MappedFileQueue.delete_head), and
                # an open skips it (a head file before a gap is one retention did not finish).
                log.error("%s; it stays on disk and is deleted at the next retention run",
                          local_io_error("deleting the expired file", self.path, exc).message)

    def close(self, destroy: bool = False) -> None:
        """Drop the owner's reference; the descriptor closes when readers are done.

        With ``destroy`` the file is unlinked as well.
        """
        with self._ref_lock:
            if self._closing:
                return
            self._closing = True
            self._destroy_on_close = destroy
        self.release()

    # ---- I/O -----------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closing:
            raise SegmentClosed(f"{self.path!r} is closed", path=self.path)

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Write ``data`` at the write position; returns the position it was written at."""
        if self._closing:
            raise SegmentClosed(f"{self.path!r} is closed", path=self.path)
        n = len(data)
        if n > self.capacity - self._write_pos:
            raise IllegalParam(
                f"{n} bytes do not fit in {self.path!r} ({self.remaining} bytes left)",
                path=self.path, length=n, remaining=self.remaining,
            )
        pos = self._write_pos
        if self.private:
            self._mem_to(pos)
            self._mem += data
            self._write_pos = pos + n
            return pos
        try:
            done = os.pwrite(self._fd, data, pos)
            if done < n:  # a short write: go on from where it stopped
                view = memoryview(data)
                while done < n:
                    done += os.pwrite(self._fd, view[done:], pos + done)
        except OSError as exc:
            # The write position did not move, so no reader sees the partial bytes; cut them
            # too, so that the file's length stays its write position (and a restart finds no
            # torn tail). Should the cut fail as well, the next append overwrites them, and
            # recovery cuts what a crash leaves.
            self._cut_back(pos)
            raise local_io_error("writing", self.path, exc) from None
        self._write_pos = pos + n
        return pos

    def _mem_to(self, position: int) -> None:
        """(private) Make the memory part reach ``position`` (zeros of a fill made real)."""
        missing = position - self._mem_from - len(self._mem)
        if missing > 0:
            self._mem += bytes(missing)

    def _cut_back(self, position: int) -> None:
        """Best effort: shorten the file to ``position`` after a failed write (shrinking
        needs no space, so it works on a full disk)."""
        try:
            os.ftruncate(self._fd, position)
        except OSError as exc:
            log.warning("%s: cannot cut the bytes of a failed write after %d: %s", self.path, position, exc)

    def seal_with(self, record: bytes) -> None:
        """Write ``record`` at the write position, zero-fill the rest of the file and
        only then move the write position to the capacity, so a reader never sees a
        write position inside the record."""
        self._check_open()
        if len(record) > self.remaining:
            raise IllegalParam(f"{len(record)} bytes do not fit in {self.path!r}", path=self.path)
        if self.private:
            self._mem_to(self._write_pos)
            self._mem += record
            self._write_pos = self.capacity
            return
        try:
            os.ftruncate(self._fd, self.capacity)
            done = 0
            while done < len(record):
                done += os.pwrite(self._fd, record[done:], self._write_pos + done)
        except OSError as exc:
            self._cut_back(self._write_pos)  # the file is as it was: not ended
            raise local_io_error("ending (filling to its size)", self.path, exc) from None
        self._write_pos = self.capacity

    def fill_to_capacity(self) -> None:
        """Extend the file with zeros to its capacity (sparse where the FS allows)."""
        self._check_open()
        if self._write_pos < self.capacity and self.private:
            self._mem_to(self._write_pos)
            self._write_pos = self.capacity  # (zeros, read as such)
        if self._write_pos < self.capacity:
            try:
                os.ftruncate(self._fd, self.capacity)
            except OSError as exc:
                raise local_io_error("filling to its size", self.path, exc) from None
            self._write_pos = self.capacity

    def fileno(self) -> int:
        """The file's descriptor (for a read-only map of a stored range; hold the file while
        mapping)."""
        return self._fd

    def read(self, position: int, length: int) -> bytes:
        """``length`` bytes at ``position``, clamped to the write position."""
        if position < 0 or length < 0:
            raise IllegalParam(
                f"bad read of {self.path!r}: position {position}, length {length}",
                path=self.path, position=position, length=length,
            )
        end = min(position + length, self._write_pos)
        if position > end:
            raise IllegalParam(
                f"read position {position} is past {self.path!r}'s write position {self._write_pos}",
                path=self.path, position=position, length=length,
            )
        if not self.hold():
            raise SegmentClosed(f"{self.path!r} is closed", path=self.path)
        try:
            if self.private and end > self._mem_from:
                lo, hi = max(position, self._mem_from) - self._mem_from, end - self._mem_from
                held = bytes(self._mem[lo:hi])
                tail = held + bytes(hi - lo - len(held))  # zeros of a fill past the memory part
                if position >= self._mem_from:
                    return tail
                return self._pread(position, self._mem_from) + tail
            return self._pread(position, end)
        finally:
            self.release()

    def _pread(self, position: int, end: int) -> bytes:
        """The file's bytes ``[position, end)`` (the caller holds the file)."""
        chunks = []
        pos = position
        while pos < end:
            try:
                chunk = os.pread(self._fd, end - pos, pos)
            except OSError as exc:
                raise local_io_error("reading", self.path, exc) from None
            if not chunk:
                raise StateConflict(
                    f"{self.path!r} is shorter than its write position {self._write_pos}",
                    path=self.path, position=pos,
                )
            chunks.append(chunk)
            pos += len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def flush(self) -> int:
        """fsync; returns the write position that is now durable."""
        pos = self._write_pos
        if pos == self._flushed_pos or self.private:
            return pos  # (a private view writes nothing: nothing to make durable)
        if not self.hold():
            return self._flushed_pos
        try:
            os.fsync(self._fd)
        except OSError as exc:
            raise local_io_error("fsync of", self.path, exc) from None
        finally:
            self.release()
        self._flushed_pos = max(self._flushed_pos, pos)
        return pos

    def truncate(self, position: int) -> None:
        """Cut the file to ``position`` bytes (recovery of a torn tail) and fsync."""
        self._check_open()
        if not 0 <= position <= self._write_pos:
            raise IllegalParam(
                f"truncate {self.path!r} to {position}: outside 0..{self._write_pos}",
                path=self.path, position=position,
            )
        if self.private:
            if position >= self._mem_from:
                del self._mem[position - self._mem_from:]
            else:
                self._mem_from, self._mem = position, bytearray()
            self._write_pos = position
            return
        try:
            os.ftruncate(self._fd, position)
            os.fsync(self._fd)
        except OSError as exc:
            raise local_io_error("cutting", self.path, exc) from None
        self._write_pos = position
        self._flushed_pos = min(self._flushed_pos, position)

    def mtime_ms(self) -> int:
        if self.private and self._fd < 0:
            return int(time.time() * 1000)  # made in memory just now
        return int(os.stat(self.path).st_mtime * 1000)

    def set_mtime_ms(self, ts_ms: int) -> None:
        if self.private:
            return
        try:
            os.utime(self.path, ns=(ts_ms * 1_000_000, ts_ms * 1_000_000))
        except OSError as exc:
            raise local_io_error("setting the time of", self.path, exc) from None

    def __repr__(self) -> str:
        return f"MappedFile({self.path!r}, start={self.start}, written={self._write_pos})"


class MappedFileQueue:
    """The ordered, offset-named files of one log directory.

    Files are contiguous: file ``i+1`` starts where file ``i``'s capacity ends.
    Guarantees: ``find`` maps a log offset to the one file holding it; only the last
    file takes appends; ``delete_head`` never removes the last file. Thread-safe:
    the file list is guarded by a lock; readers take a reference on the file they
    read (see :meth:`reading`).
    """

    def __init__(self, directory: str, file_size: int, *, private: bool = False) -> None:
        """``private``: every file is a private view (see :class:`MappedFile`): nothing in the
        directory is created, written or deleted, not even the directory."""
        if file_size <= 0:
            raise IllegalParam(f"file size must be > 0, got {file_size}", file_size=file_size)
        self.directory = directory
        self.file_size = file_size
        self.private = private
        self._lock = threading.RLock()
        self._files: list[MappedFile] = []
        self._starts: list[int] = []
        # Expired head files whose delete failed (or was deferred to a reader): retried.
        self._leftovers: list[str] = []
        self._flushed = 0
        try:
            if not private:
                os.makedirs(directory, exist_ok=True)
        except OSError as exc:
            raise local_io_error("creating the directory", directory, exc) from None
        self._load()

    def _load(self) -> None:
        found = []
        for name in (os.listdir(self.directory) if os.path.isdir(self.directory) or not self.private else ()):
            start = parse_offset_file_name(name)
            if start is None:
                continue
            found.append((start, name))
        found.sort()
        for start, name in found:
            path = os.path.join(self.directory, name)
            if start % self.file_size:
                raise StateConflict(
                    f"{path!r} starts at {start}, not a multiple of the file size {self.file_size}"
                    " (was the store created with another file size?)",
                    path=path, file_size=self.file_size,
                )
            if self._files and start != self._files[-1].limit:
                # Retention deletes head files oldest first, so the files before a gap are ones
                # whose delete failed, never the newest, which hold what was acknowledged last:
                # those before it are not loaded. Nothing is deleted here (a gap made otherwise
                # may leave messages before it that are not tiered): the operator removes them.
                stale = [f.path for f in self._files]
                log.warning("gap in %s before %s: %d older file(s) before it are not loaded, and kept on disk "
                            "(most likely a local retention delete of them failed: remove them once `tiered "
                            "verify` is clean): %s", self.directory, name, len(stale),
                            ", ".join(os.path.basename(p) for p in stale))
                for mf in self._files:
                    mf.close()
                self._files, self._starts = [], []
            mf = MappedFile(path, start, self.file_size, private=self.private)
            if mf.write_position > self.file_size:
                mf.close()
                raise StateConflict(
                    f"{path!r} holds {mf.write_position} bytes, more than the file size {self.file_size}",
                    path=path, file_size=self.file_size,
                )
            self._files.append(mf)
            self._starts.append(start)
        # Unknown after a restart: the first flush fsyncs every file.
        self._flushed = self.min_offset

    # ---- listing -------------------------------------------------------------------
    @property
    def files(self) -> list[MappedFile]:
        with self._lock:
            return list(self._files)

    def is_empty(self) -> bool:
        with self._lock:
            return not self._files

    def first(self) -> MappedFile | None:
        with self._lock:
            return self._files[0] if self._files else None

    def last(self) -> MappedFile | None:
        with self._lock:
            return self._files[-1] if self._files else None

    @property
    def min_offset(self) -> int:
        """Start of the first file (0 when there is none)."""
        with self._lock:
            return self._files[0].start if self._files else 0

    @property
    def max_offset(self) -> int:
        """One past the last written byte (0 when there is no file)."""
        with self._lock:
            return self._files[-1].end if self._files else 0

    @property
    def flushed_offset(self) -> int:
        return self._flushed

    def find(self, offset: int) -> MappedFile | None:
        """The file whose range holds ``offset``, or None."""
        with self._lock:
            i = bisect.bisect_right(self._starts, offset) - 1
            if i < 0:
                return None
            mf = self._files[i]
            return mf if offset < mf.limit else None

    @contextmanager
    def reading(self, offset: int) -> Iterator[MappedFile]:
        """The file holding ``offset``, held open for the block; IllegalOffset if none."""
        with self._lock:
            mf = self.find(offset)
            if mf is None or not mf.hold():
                raise IllegalOffset(
                    f"offset {offset} is not stored in {self.directory!r}"
                    f" (stored: {self.min_offset}..{self.max_offset})",
                    offset=offset, directory=self.directory,
                )
        try:
            yield mf
        finally:
            mf.release()

    # ---- writing -------------------------------------------------------------------
    def create_file(self, start: int) -> MappedFile:
        """Create (or open) the file starting at ``start`` and add it to the end of the list."""
        if start % self.file_size:
            raise IllegalParam(
                f"file start {start} is not a multiple of the file size {self.file_size}",
                start=start, file_size=self.file_size,
            )
        with self._lock:
            if self._files and start != self._files[-1].limit:
                raise IllegalParam(
                    f"file start {start} does not follow the last file (next start {self._files[-1].limit})",
                    start=start,
                )
            path = os.path.join(self.directory, offset_file_name(start))
            # (a private queue's new file is its own, whatever a cut left on disk under the name)
            mf = MappedFile(path, start, self.file_size, private=self.private, fresh=self.private)
            self._files.append(mf)
            self._starts.append(start)
            if not self._files[:-1]:
                self._flushed = max(self._flushed, start)
        self._sync_dir()
        return mf

    def _sync_dir(self) -> None:
        if self.private:
            return
        try:
            fsync_dir(self.directory)
        except OSError as exc:
            raise local_io_error("fsync of the directory", self.directory, exc) from None

    def last_for_append(self, start_if_empty: int = 0) -> MappedFile:
        """The last file if it has room, else a new one after it."""
        with self._lock:
            mf = self._files[-1] if self._files else None
            if mf is None:
                return self.create_file(start_if_empty - start_if_empty % self.file_size)
            if mf.is_full():
                return self.create_file(mf.limit)
            return mf

    def flush(self) -> int:
        """fsync every file holding unflushed bytes; returns the new flushed offset."""
        with self._lock:
            target = self.max_offset
            pending = [mf for mf in self._files if mf.end > self._flushed]
        for mf in pending:
            try:
                mf.flush()
            except SegmentClosed:
                pass
        with self._lock:
            self._flushed = max(self._flushed, target)
            return self._flushed

    def truncate(self, offset: int) -> None:
        """Drop everything at and after ``offset`` (recovery): later files are deleted."""
        with self._lock:
            keep: list[MappedFile] = []
            for mf in self._files:
                if mf.start >= offset and not (mf.start == offset and mf is self._files[0]):
                    log.warning("recovery: deleting %s (starts at/after %d)", mf.path, offset)
                    mf.close(destroy=True)
                    continue
                if mf.end > offset:
                    log.warning("recovery: truncating %s from %d to %d bytes",
                                mf.path, mf.write_position, offset - mf.start)
                    mf.truncate(offset - mf.start)
                keep.append(mf)
            self._files = keep
            self._starts = [mf.start for mf in keep]
            self._flushed = min(self._flushed, self.max_offset)
        self._sync_dir()

    def delete_head(self, predicate: Callable[[MappedFile], bool]) -> list[MappedFile]:
        """Delete leading files while ``predicate(file)`` holds; never the last file."""
        removed: list[MappedFile] = []
        with self._lock:
            while len(self._files) > 1 and predicate(self._files[0]):
                mf = self._files.pop(0)
                self._starts.pop(0)
                removed.append(mf)
            leftovers, self._leftovers = self._leftovers, []
        if not self.private:
            still = [path for path in leftovers if not _unlinked(path)]
        else:
            still = leftovers
        for mf in removed:
            log.info("deleting expired file %s", mf.path)
            mf.close(destroy=True)
            if not self.private and os.path.exists(mf.path):
                still.append(mf.path)  # its delete failed, or waits for a reader: retried next time
        with self._lock:
            self._leftovers.extend(still)
        if removed or len(still) < len(leftovers):
            self._sync_dir()
        return removed

    def close(self) -> None:
        with self._lock:
            files, self._files, self._starts = self._files, [], []
        for mf in files:
            mf.close()


def _unlinked(path: str) -> bool:
    """Delete ``path`` (a file retention already took off its queue); whether it is gone."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return True
    except OSError as exc:
        log.error("%s; retried at the next retention run", local_io_error("deleting the expired file", path, exc).message)
        return False
    return True


__all__ = [
    "MappedFile",
    "MappedFileQueue",
    "offset_file_name",
    "parse_offset_file_name",
    "fsync_dir",
    "disk_error",
]
