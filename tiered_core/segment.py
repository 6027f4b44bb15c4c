"""FileSegment: one file of a flat file, as an append buffer -> commit state machine.

A segment wraps ``(driver, path)``. ``append`` only buffers; ``commit`` uploads the
buffered bytes at the commit position. The driver stays small because all the
bookkeeping lives here:

* at most one commit is in flight per segment;
* a batch that failed is retried before any newer bytes, and what it has to resend is
  decided by the size the backend reports (the truth): a write that landed but whose
  answer was lost is not written twice, and a write that landed partly resumes where it
  stopped (RocketMQ resends the whole batch there and duplicates bytes: not here);
* reads see committed bytes only.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

from tiered_core.errors import (
    DriverError,
    IllegalParam,
    PositionMismatch,
    SegmentSealed,
    StateConflict,
    TieredStoreError,
)
from tiered_core.codec._impl import crc32
from tiered_core.common import LONG_MAX, AppendResult, FileSegmentType, now_ms
from tiered_core.configdef import KEYS
from tiered_core.spi.driver import SegmentDriver

log = logging.getLogger(__name__)


#: A segment's size when none is given: the declared defaults (an index segment is unbounded).
DEFAULT_MAX_SIZE = {
    FileSegmentType.COMMIT_LOG: KEYS.commit_log_max_size.default,
    FileSegmentType.CONSUME_QUEUE: KEYS.consume_queue_max_size.default,
    FileSegmentType.INDEX: LONG_MAX,
}
DEFAULT_MAX_BUFFER_COUNT = KEYS.max_group_commit_count.default
_SEAL_COMMIT_ATTEMPTS = 5

_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def default_executor() -> ThreadPoolExecutor:
    """The shared pool for ``*_async`` calls when a segment is given none."""
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=max(16, (os.cpu_count() or 1) * 4),
                                           thread_name_prefix="tiered-segment")
    return _executor


def _done(value: bool) -> "Future[bool]":
    fut: Future[bool] = Future()
    fut.set_result(value)
    return fut


class FileSegment:
    """One segment object ``path`` of ``driver``, covering offsets from ``base_offset``.

    Guarantees: appended bytes become durable only through :meth:`commit`, in append
    order, each exactly once; :meth:`read` returns committed bytes only. The position
    is recovered from ``driver.size(path)`` unless ``initial_position`` is given.
    :attr:`checksum` follows every committed byte (the CRC-32 of ``[0, commit_position)``)
    from an empty segment, or from a checksum the caller knows for its initial position.

    Raises: :class:`~tiered_core.errors.IllegalParam` for bad reads;
    :class:`~tiered_core.errors.StateConflict` when the backend holds fewer bytes than
    were committed, or more than were ever sent; non-retryable
    :class:`~tiered_core.errors.DriverError` and :class:`~tiered_core.errors.SegmentSealed`
    from :meth:`commit`. A retryable failure makes :meth:`commit` return False instead.
    """

    def __init__(
        self,
        driver: SegmentDriver,
        path: str,
        file_type: FileSegmentType = FileSegmentType.COMMIT_LOG,
        base_offset: int = 0,
        max_size: int | None = None,
        *,
        max_buffer_count: int = DEFAULT_MAX_BUFFER_COUNT,
        executor: ThreadPoolExecutor | None = None,
        initial_position: int | None = None,
        sealed: bool | None = None,
    ) -> None:
        if base_offset < 0:
            raise IllegalParam(f"base_offset must be >= 0, got {base_offset} for {path!r}",
                               path=path, base_offset=base_offset)
        self.driver = driver
        self.path = driver.check_path(path)
        self.file_type = FileSegmentType(file_type)
        self.base_offset = base_offset
        self.max_size = max_size if max_size is not None else DEFAULT_MAX_SIZE[self.file_type]
        if self.max_size <= 0:
            raise IllegalParam(f"max_size must be > 0, got {self.max_size} for {path!r}", path=path)
        self.max_buffer_count = max_buffer_count
        self._executor = executor
        position = driver.size(self.path) if initial_position is None else initial_position
        if position < 0:
            raise IllegalParam(f"initial_position must be >= 0, got {position} for {path!r}", path=path)
        self._commit_position = position
        self._append_position = position
        self._buffers: list[bytes] = []
        # The batch being uploaded, or the not-yet-landed rest of one that failed.
        self._pending: memoryview | None = None
        #: Why the last commit attempt left bytes unuploaded (a retryable backend error);
        #: None after a commit that uploaded everything.
        self.last_error: TieredStoreError | None = None
        self._lock = threading.Lock()  # guards buffers, positions, flags
        self._commit_lock = threading.Lock()  # one commit in flight
        self._closed = False
        self._sealing = False
        self._sealed = driver.is_sealed(self.path) if sealed is None else sealed
        self.seal_timestamp: int | None = None
        self.min_timestamp: int | None = None
        self.max_timestamp: int | None = None
        #: zlib's CRC-32 of the committed bytes ``[0, commit_position)``, or None when not
        #: known (a segment opened part-way whose checksum the caller did not give).
        self.checksum: int | None = 0 if position == 0 else None

    # -- positions ------------------------------------------------------------------

    @property
    def commit_position(self) -> int:
        """Bytes durably stored in this segment."""
        return self._commit_position

    @property
    def append_position(self) -> int:
        """Bytes appended so far (committed or buffered)."""
        return self._append_position

    @property
    def commit_offset(self) -> int:
        return self.base_offset + self._commit_position

    @property
    def append_offset(self) -> int:
        return self.base_offset + self._append_position

    @property
    def sealed(self) -> bool:
        return self._sealed

    @property
    def closed(self) -> bool:
        return self._closed

    def committed_checksum(self) -> tuple[int | None, int]:
        """``(checksum, commit_position)`` taken together (see :attr:`checksum`)."""
        with self._lock:
            return self.checksum, self._commit_position

    def needs_commit(self) -> bool:
        return self._append_position > self._commit_position

    # -- append -------------------------------------------------------------------

    def append(self, data: bytes | bytearray | memoryview, timestamp: int | None = None,
               max_timestamp: int | None = None) -> AppendResult:
        """Buffer ``data`` (copied). Not durable until :meth:`commit`.

        ``timestamp`` is the store time of what ``data`` holds; for a batch of records,
        ``timestamp`` is the oldest and ``max_timestamp`` the newest."""
        size = len(data)
        with self._lock:
            if self._closed:
                return AppendResult.FILE_CLOSED
            if self._sealed or self._sealing:
                return AppendResult.SEGMENT_SEALED
            if self._append_position + size > self.max_size:
                return AppendResult.FILE_FULL
            if len(self._buffers) >= self.max_buffer_count:
                return AppendResult.BUFFER_FULL
            self._buffers.append(bytes(data))
            self._append_position += size
            if timestamp is not None:
                newest = timestamp if max_timestamp is None else max_timestamp
                if self.min_timestamp is None or timestamp < self.min_timestamp:
                    self.min_timestamp = timestamp
                if self.max_timestamp is None or newest > self.max_timestamp:
                    self.max_timestamp = newest
            return AppendResult.SUCCESS

    # -- commit -------------------------------------------------------------------

    def commit(self) -> bool:
        """Upload buffered bytes; one attempt.

        True when everything appended before the call is durable. False when the
        attempt failed with a retryable error (the same bytes go first next time) or
        another commit is in flight.
        """
        return self._commit(blocking=False)

    def commit_async(self) -> "Future[bool]":
        """:meth:`commit` on the executor; completes False at once if one is in flight."""
        if self._closed or not self.needs_commit():
            return _done(not self._closed)
        if self._commit_lock.locked():
            return _done(False)
        return (self._executor or default_executor()).submit(self.commit)

    def _commit(self, *, blocking: bool) -> bool:
        if self._closed:
            return False
        if not self._commit_lock.acquire(blocking=blocking):
            return False
        try:
            if self._pending is not None:
                # A previous attempt failed; the backend's size says how much landed,
                # and the rest of that batch goes before anything newer.
                if not self._reconcile():
                    return False
                if self._pending is not None and not self._upload():
                    return False
            with self._lock:
                if not self._buffers:
                    return True
                batch = self._buffers[0] if len(self._buffers) == 1 else b"".join(self._buffers)
                self._buffers = []
            if not batch:  # only empty appends were buffered; an empty write would never advance
                return True
            self._pending = memoryview(batch)
            return self._upload()
        finally:
            self._commit_lock.release()

    def _upload(self) -> bool:
        limit = self.driver.capabilities.max_write_size
        while self._pending is not None:
            piece = self._pending if not limit else self._pending[:limit]
            try:
                self.driver.write(self.path, self._commit_position, piece)
            except PositionMismatch as exc:
                # Part of the batch is already there (an earlier attempt landed).
                self._apply_size(exc.actual_size)
                continue
            except SegmentSealed:
                self._sealed = True
                raise
            except DriverError as exc:
                if not exc.retryable:
                    raise
                log.info("commit of %s at %d failed (%s); will retry", self.path, self._commit_position, exc)
                self.last_error = exc
                # A lost ack or a partial write: the size tells. If everything landed,
                # the commit succeeded after all.
                return self._reconcile() and self._pending is None
            self._advance(len(piece))
        self.last_error = None
        return True

    def _reconcile(self) -> bool:
        try:
            size = self.driver.size(self.path)
        except TieredStoreError as exc:
            if isinstance(exc, DriverError) and not exc.retryable:
                raise
            self.last_error = exc
            return False
        self._apply_size(size)
        return True

    def _apply_size(self, size: int) -> None:
        start = self._commit_position
        end = start + (len(self._pending) if self._pending is not None else 0)
        if size < start or size > end:
            raise StateConflict(
                f"{self.path!r} holds {size} bytes but {start} were committed and "
                f"{end - start} more were in flight; the object was changed by someone else",
                path=self.path, size=size, commit_position=start,
            )
        landed = size - start
        if landed:
            # Adopt the bytes only if they are the ones we sent: another writer appending
            # at our commit position would otherwise pass for a lost acknowledgement.
            assert self._pending is not None
            found = self.driver.read(self.path, start, landed)
            if found != self._pending[:landed]:
                raise StateConflict(
                    f"{self.path!r} holds {landed} bytes at {start} that this store did not write; "
                    "another writer appended to it", path=self.path, size=size, commit_position=start)
        self._advance(landed)

    def _advance(self, landed: int) -> None:
        if not landed:
            return
        assert self._pending is not None
        checksum = self.checksum
        if checksum is not None:  # outside the lock: appends go on meanwhile
            checksum = crc32(self._pending[:landed], checksum)
        with self._lock:
            self._commit_position += landed
            self.checksum = checksum
            rest = self._pending[landed:]
            self._pending = rest if len(rest) else None

    # -- read -----------------------------------------------------------------------

    def read(self, position: int, length: int) -> bytes:
        """Committed bytes ``[position, position + length)``, ``length`` clamped to what is committed."""
        committed = self._commit_position
        if not isinstance(position, int) or position < 0 or position >= committed:
            raise IllegalParam(
                f"read of {self.path!r} at position {position}: committed range is [0, {committed})",
                path=self.path, position=position,
            )
        if not isinstance(length, int) or length <= 0:
            raise IllegalParam(f"read of {self.path!r}: length must be > 0, got {length}",
                               path=self.path, length=length)
        return self.driver.read(self.path, position, min(length, committed - position))

    # -- lifecycle ------------------------------------------------------------------

    def seal(self) -> None:
        """Commit what is buffered, then seal the backend object. Idempotent.

        Raises :class:`~tiered_core.errors.DriverError` if the buffered bytes cannot
        be committed; the segment then stays writable for a later attempt.
        """
        with self._lock:
            if self._sealed:
                return
            self._sealing = True  # no appends from here on
        try:
            for attempt in range(_SEAL_COMMIT_ATTEMPTS):
                if self._commit(blocking=True) and not self.needs_commit():
                    break
                time.sleep(min(0.05 * 2 ** attempt, 1.0))
            else:
                raise DriverError(
                    f"cannot seal {self.path!r}: {self._append_position - self._commit_position} "
                    f"buffered bytes failed to commit after {_SEAL_COMMIT_ATTEMPTS} attempts",
                    retryable=True, path=self.path,
                )
            if self._commit_position == 0:
                self.driver.create(self.path)  # an empty segment may never have been written
            self.driver.seal(self.path)
            self._sealed = True
            self.seal_timestamp = now_ms()
        finally:
            self._sealing = False

    def close(self) -> None:
        """Refuse further appends and commits; buffered bytes are dropped."""
        self._closed = True

    def destroy(self) -> None:
        """Close and delete the backend object."""
        self.close()
        self.driver.delete(self.path)

    def __repr__(self) -> str:
        return (f"FileSegment({self.path!r}, {self.file_type.name}, base={self.base_offset}, "
                f"commit={self._commit_position}, append={self._append_position}, sealed={self._sealed})")
