"""One file of the tiered key index: a local hash file while open, compacted when sealed.

Local (unsealed) layout, all integers big-endian, size ``28 + slots*8 + max_items*32``::

    header   0 magic (BEGIN while open, END when full)   4 begin ts (long)
             12 end ts (long)   20 used slot count (int)   24 item count (int)
    slots    slot i at 28 + i*8; its first int is the newest item of the slot (0 = empty)
    items    item k at 28 + slots*8 + k*32 (k >= 1); each links to the previous item
             of its slot, so a slot's items form a chain, newest first

Two words RocketMQ leaves unused carry what a reader needs to reopen the file without
trusting the configuration: the second int of slot 0 holds the total slot count, and
the time-diff field of item 0 (never a real item) holds the smallest time diff written
(messages older than the file's begin have negative diffs).

Compacted (sealed) layout, size ``28 + slots*8 + items*28``: the same header with END
magic, then slot i = ``(start position, length in bytes)`` of its items, which lie
contiguous in chain order (newest first) in the 28-byte form. One ranged read of a
slot's run answers a key. When the local file held messages older than its begin,
compaction moves the begin back to the oldest whole second and shifts every time diff
so that none is negative (the absolute times are unchanged). The total slot count is
``(size - 28 - 28*item count) / 8``: it is read from the file, never from configuration.
"""

from __future__ import annotations

import enum
import errno
import io
import logging
import mmap
import os
import struct
import threading
from array import array
from dataclasses import dataclass
from itertools import compress
from typing import BinaryIO, Callable, Iterable, Sequence

from tiered_core.codec.hashing import index_key_hash
from tiered_core.codec._impl import link_items
from tiered_core.errors import CorruptData, IllegalParam, LocalIOError, TieredStoreError
from tiered_core.common import INT_MAX, INT_MIN, LONG_MAX, AppendResult, unlink_if_exists
from tiered_core.codec.tiered_index import (
    BEGIN_MAGIC,
    BEGIN_TIMESTAMP_POSITION,
    COMPACT_ITEM_SIZE,
    END_MAGIC,
    HEADER_SIZE,
    INT32_CODE,
    ITEM_SIZE,
    MAGIC_POSITION,
    SLOT_COUNT_POSITION,
    SLOT_SIZE,
    IndexEntry,
    IndexHeader,
    compacted_file_size,
    compacted_slot_count,
    index_file_size,
    slot_table,
)
from tiered_core.codec.tiered_index import COMPACT_ITEM as _COMPACT_ITEM
from tiered_core.codec.tiered_index import INT as _INT
from tiered_core.codec.tiered_index import ITEM as _ITEM
from tiered_core.codec.tiered_index import ITEM_INDEX_POSITION as _PREV_IN_ITEM
from tiered_core.codec.tiered_index import SLOT as _SLOT
from tiered_core.codec.tiered_index import TIME_DIFF_POSITION as _TIME_DIFF_IN_ITEM
from tiered_core.segment import FileSegment

log = logging.getLogger(__name__)

_WRITE_CHUNK = 1 << 20

#: RocketMQ caps one slot's run read from an uploaded file at 1024 items; the default here.
DEFAULT_MAX_SCAN_ITEMS = 1024
#: Compacted positions are ints: a compacted file must stay below 2 GiB.
MAX_COMPACTED_SIZE = INT_MAX


class IndexFileStatus(enum.Enum):
    """RocketMQ ``IndexStatusEnum``: where a file is in its life."""

    UNSEALED = "UNSEALED"  # local, takes keys
    SEALED = "SEALED"  # local, full: waits for compaction and upload
    UPLOAD = "UPLOAD"  # compacted and uploaded: read through its segment
    SHUTDOWN = "SHUTDOWN"  # closed


@dataclass(frozen=True)
class CompactionResult:
    """What :meth:`IndexStoreFile.compact_into` wrote."""

    begin_timestamp: int  # of the compacted file (moved back if items were older)
    end_timestamp: int
    used_slot_count: int
    item_count: int
    size: int


def check_layout(slot_count: int, max_items: int) -> None:
    """IllegalParam unless ``slot_count``/``max_items`` make a usable file."""
    for name, value, lo in (("slot_count", slot_count, 1), ("max_items", max_items, 2)):
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= INT_MAX:
            raise IllegalParam(f"index {name} must be an int in {lo}..{INT_MAX}, got {value!r}",
                               **{name: value})
    if compacted_file_size(slot_count, max_items) > MAX_COMPACTED_SIZE:
        raise IllegalParam(
            f"index files of {slot_count} slots and {max_items} items would compact past 2 GiB "
            "(positions are 32-bit); lower max_items or slot_count",
            slot_count=slot_count, max_items=max_items)


def check_query(topic: str, key: str, max_count: int, begin: int = 0, end: int = 0) -> None:
    """IllegalParam naming the first bad query argument."""
    if not isinstance(topic, str) or not topic:
        raise IllegalParam(f"index query topic must be a non-empty string, got {topic!r}", topic=topic)
    if not isinstance(key, str) or not key:
        raise IllegalParam(f"index query key must be a non-empty string, got {key!r}", key=key)
    if isinstance(max_count, bool) or not isinstance(max_count, int) or max_count < 0:
        raise IllegalParam(f"index query max_count must be an int >= 0, got {max_count!r}",
                           max_count=max_count)
    for name, value in (("begin", begin), ("end", end)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise IllegalParam(f"index query {name} must be an int (ms), got {value!r}", **{name: value})


def _in_window(store_ts: int, begin: int, end: int) -> bool:
    # The index keeps whole seconds (RocketMQ #9358: compare in ms, diff * 1000): the
    # message was stored somewhere in [store_ts, store_ts + 999]. Keep it when that
    # second touches the window, so no message inside the window is ever missed.
    return store_ts <= end and store_ts + 999 >= begin


def _os_error(exc: OSError, op: str, path: str) -> LocalIOError:
    name = errno.errorcode.get(exc.errno or 0, "EUNKNOWN")
    return LocalIOError(f"local disk: {op} of index file {path!r} failed: {exc.strerror or exc} ({name})",
                        path=path, op=op, errno=exc.errno, reason=name, stored=None)


class IndexStoreFile:
    """A local index file at ``{directory}/{begin_timestamp}`` (positional I/O; :meth:`put_keys`
    writes the slot table through a shared map of it).

    Guarantees: :meth:`put_key` either writes every key of the call and returns
    SUCCESS, or writes none and returns FILE_FULL (the file is then sealed: END magic),
    FILE_CLOSED, or UNKNOWN_ERROR (an I/O failure, logged); on disk each key's item and
    the header are written before the slot that makes it reachable, so a crash leaves at
    most unreachable items. A file holds at most ``max_items - 1`` items (item 0 is
    never used). :meth:`query` returns matches newest first. Thread-safe.

    Raises :class:`~tiered_core.errors.IllegalParam` for bad arguments,
    :class:`~tiered_core.errors.CorruptData` when :meth:`open` finds a file that is not
    an index file, :class:`~tiered_core.errors.LocalIOError` naming the file when it cannot
    be created (nothing is left of it then) or opened.
    """

    def __init__(self, path: str, fd: int, begin_timestamp: int, slot_count: int, max_items: int,
                 header: IndexHeader, min_time_diff: int) -> None:
        self.path = path
        self._fd = fd
        self.begin_timestamp = begin_timestamp
        self.slot_count = slot_count
        self.max_items = max_items
        self._end = header.end_timestamp
        self._used = header.used_slot_count
        self._count = header.item_count
        self._sealed = header.magic == END_MAGIC
        self._min_diff = min(min_time_diff, 0)
        self._closed = False
        self._lock = threading.Lock()
        self._map: mmap.mmap | None = None  # header + slot table, mapped by the first put_keys
        #: The uploaded file that replaced this one; queries that raced with the swap go there.
        self.replacement: "UploadedIndexFile | None" = None
        #: Why the last put answered UNKNOWN_ERROR (a LocalIOError naming this file).
        self.last_error: TieredStoreError | None = None

    # -- create / open ---------------------------------------------------------------

    @classmethod
    def create(cls, directory: str, begin_timestamp: int, *, slot_count: int,
               max_items: int) -> "IndexStoreFile":
        """A new empty file ``{directory}/{begin_timestamp}`` (sparse, pre-sized)."""
        check_layout(slot_count, max_items)
        if isinstance(begin_timestamp, bool) or not isinstance(begin_timestamp, int) \
                or not 0 <= begin_timestamp <= LONG_MAX:
            raise IllegalParam(f"index file begin timestamp must be an int >= 0, got {begin_timestamp!r}",
                               begin_timestamp=begin_timestamp)
        path = os.path.join(directory, str(begin_timestamp))
        header = IndexHeader(BEGIN_MAGIC, begin_timestamp, 0, 0, 0)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise _os_error(exc, "create", path) from exc
        try:
            os.ftruncate(fd, index_file_size(slot_count, max_items))
            os.pwrite(fd, _INT.pack(slot_count), HEADER_SIZE + 4)  # slot 0, second word
            os.pwrite(fd, header.encode(), 0)
        except OSError as exc:
            os.close(fd)
            # ours (O_EXCL) and holding nothing: a full disk or a file size limit must not
            # leave a file that the next open takes for a corrupt one
            unlink_if_exists(path)
            raise _os_error(exc, "create", path) from exc
        return cls(path, fd, begin_timestamp, slot_count, max_items, header, 0)

    @staticmethod
    def never_written(path: str) -> bool:
        """True for an empty file: its creation was cut short before it was even sized (a
        kill, or a full disk before :meth:`create` could remove it), so it holds no key."""
        try:
            return os.path.getsize(path) == 0
        except OSError:
            return False

    @classmethod
    def open(cls, path: str, *, default_slot_count: int) -> "IndexStoreFile":
        """Reopen a file written earlier; its layout comes from the file itself.

        ``default_slot_count`` is used only for a file that does not record its slot
        count (one written by RocketMQ); such a file must match it in size.
        """
        name = os.path.basename(path)
        if not (name.isascii() and name.isdigit()):  # "²".isdigit() is true, but int() refuses it
            raise IllegalParam(f"{path!r} is not an index file name (digits of its begin timestamp)",
                               path=path)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as exc:
            raise _os_error(exc, "open", path) from exc
        try:
            return cls._load(path, fd, int(name), default_slot_count)
        except BaseException:
            os.close(fd)
            raise

    @classmethod
    def _load(cls, path: str, fd: int, name_ts: int, default_slot_count: int) -> "IndexStoreFile":
        try:
            size = os.fstat(fd).st_size
            head = os.pread(fd, HEADER_SIZE + SLOT_SIZE, 0)
        except OSError as exc:
            raise _os_error(exc, "read", path) from exc
        if len(head) < HEADER_SIZE + SLOT_SIZE:
            raise CorruptData(f"index file {path!r} is {size} bytes: too short for a header and a slot",
                              path=path, offset=0)
        header = IndexHeader.decode(head, path)
        if header.magic not in (BEGIN_MAGIC, END_MAGIC):
            raise CorruptData(f"index file {path!r} has magic {header.magic:#010x}, expected "
                              f"{BEGIN_MAGIC:#010x} or {END_MAGIC:#010x}", path=path, offset=0)
        if header.begin_timestamp != name_ts:
            raise CorruptData(f"index file {path!r} says it begins at {header.begin_timestamp}, "
                              f"its name says {name_ts}", path=path, offset=BEGIN_TIMESTAMP_POSITION)
        (slots,) = _INT.unpack_from(head, HEADER_SIZE + 4)
        if slots <= 0:
            slots = default_slot_count
        rest = size - HEADER_SIZE - slots * SLOT_SIZE
        if rest <= 0 or rest % ITEM_SIZE:
            raise CorruptData(f"index file {path!r} is {size} bytes, which is not 28 + {slots}*8 + "
                              "n*32 (slot count changed, or the file was cut)", path=path, offset=size)
        max_items = rest // ITEM_SIZE
        if not 0 <= header.item_count < max_items or not 0 <= header.used_slot_count <= slots:
            raise CorruptData(f"index file {path!r} header counts ({header.used_slot_count} slots, "
                              f"{header.item_count} items) do not fit {slots} slots and {max_items} items",
                              path=path, offset=SLOT_COUNT_POSITION)
        try:
            item0 = os.pread(fd, 4, HEADER_SIZE + slots * SLOT_SIZE + _TIME_DIFF_IN_ITEM)
        except OSError as exc:
            raise _os_error(exc, "read", path) from exc
        (min_diff,) = _INT.unpack(item0)
        return cls(path, fd, name_ts, slots, max_items, header, min_diff)

    # -- state -----------------------------------------------------------------------

    @property
    def status(self) -> IndexFileStatus:
        if self._closed:
            return IndexFileStatus.SHUTDOWN
        return IndexFileStatus.SEALED if self._sealed else IndexFileStatus.UNSEALED

    @property
    def sealed(self) -> bool:
        return self._sealed

    @property
    def item_count(self) -> int:
        return self._count

    @property
    def used_slot_count(self) -> int:
        return self._used

    @property
    def end_timestamp(self) -> int:
        """Newest store timestamp written (0 while empty, as in RocketMQ)."""
        return self._end

    @property
    def min_timestamp(self) -> int:
        """Oldest store time the file can hold entries for (whole second, <= every entry)."""
        return self.begin_timestamp + self._min_diff * 1000

    def slot_position(self, slot: int) -> int:
        return HEADER_SIZE + slot * SLOT_SIZE

    def item_position(self, index: int) -> int:
        return HEADER_SIZE + self.slot_count * SLOT_SIZE + index * ITEM_SIZE

    def header(self) -> IndexHeader:
        return IndexHeader(END_MAGIC if self._sealed else BEGIN_MAGIC, self.begin_timestamp,
                           self._end, self._used, self._count)

    def __repr__(self) -> str:
        return (f"IndexStoreFile({self.path!r}, {self.status.name}, items={self._count}/"
                f"{self.max_items - 1}, slots={self.slot_count})")

    # -- writing ---------------------------------------------------------------------

    def put_key(self, topic: str, topic_id: int, queue_id: int, keys: Iterable[str], offset: int,
                size: int, timestamp: int) -> AppendResult:
        """Index ``keys`` (each hashed as ``topic#key``) of the message at ``offset``.

        Blank keys are skipped and duplicates indexed once; no key at all is SUCCESS.
        """
        key_list = check_put(topic, topic_id, queue_id, keys, offset, size, timestamp)
        if not key_list:
            return AppendResult.SUCCESS
        diff = (timestamp - self.begin_timestamp) // 1000
        if not INT_MIN <= diff <= INT_MAX:
            raise IllegalParam(f"store timestamp {timestamp} is too far from index file begin "
                               f"{self.begin_timestamp} (time diff {diff} s is not an int)",
                               timestamp=timestamp)
        with self._lock:
            if self._closed:
                return AppendResult.FILE_CLOSED
            if self._sealed:
                return AppendResult.FILE_FULL
            if self._count + len(key_list) >= self.max_items:
                self._seal_locked()
                return AppendResult.FILE_FULL
            try:
                self._write_keys(topic, topic_id, queue_id, key_list, offset, size, timestamp, diff)
            except OSError as exc:
                log.error("index file %s: writing %d key(s) of %s@%d failed: %s", self.path,
                          len(key_list), topic, offset, exc)
                self.last_error = _os_error(exc, "write", self.path)
                return AppendResult.UNKNOWN_ERROR
            if self._count + 1 >= self.max_items:
                self._seal_locked()
            return AppendResult.SUCCESS

    def _write_keys(self, topic: str, topic_id: int, queue_id: int, keys: list[str], offset: int,
                    size: int, timestamp: int, diff: int) -> None:
        fd = self._fd
        heads: dict[int, int] = {}
        count, used = self._count, self._used
        for key in keys:
            hash_code = index_key_hash(topic, key)
            slot = hash_code % self.slot_count
            if slot in heads:
                prev = heads[slot]
            else:
                (prev,) = _INT.unpack(os.pread(fd, 4, self.slot_position(slot)))
                if not 0 <= prev <= count:
                    prev = 0  # a link past the item count is garbage from a torn write
                if prev == 0:
                    used += 1
            count += 1
            os.pwrite(fd, _ITEM.pack(hash_code, topic_id, queue_id, offset, size, diff, prev),
                      self.item_position(count))
            heads[slot] = count
        min_diff = self._min_diff
        if diff < min_diff:
            os.pwrite(fd, _INT.pack(diff), self.item_position(0) + _TIME_DIFF_IN_ITEM)
            min_diff = diff
        end = max(self._end, timestamp)
        os.pwrite(fd, IndexHeader(BEGIN_MAGIC, self.begin_timestamp, end, used, count).encode(), 0)
        for slot, head in heads.items():
            os.pwrite(fd, _INT.pack(head), self.slot_position(slot))
        self._count, self._used, self._end, self._min_diff = count, used, end, min_diff

    def put_keys(self, topic: str, topic_id: int, queue_id: int, keys: Sequence[Sequence[str]],
                 offsets: Sequence[int], sizes: Sequence[int], timestamps: Sequence[int]) -> tuple[AppendResult, int]:
        """:meth:`put_key` for a batch of messages of one queue: message ``m`` has ``keys[m]``,
        lies at ``offsets[m]`` (``sizes[m]`` bytes) and was stored at ``timestamps[m]``.

        Writes exactly the bytes one :meth:`put_key` per message writes, validated once per
        batch, through the mapped slot table: the items (one write), the header, then the
        slots that make them reachable. Returns ``(status, done)``: SUCCESS with every
        message done, or FILE_FULL (the file is sealed) / FILE_CLOSED / UNKNOWN_ERROR (I/O,
        logged) after the first ``done`` messages. IllegalParam as :meth:`put_key` (the
        messages before the bad one are written).
        """
        n = len(keys)
        if not (len(offsets) == len(sizes) == len(timestamps) == n):
            raise IllegalParam(f"put_keys: {n} key lists but {len(offsets)} offsets, {len(sizes)} sizes "
                               f"and {len(timestamps)} timestamps", count=n)
        if not n:
            return AppendResult.SUCCESS, 0
        check_put(topic, topic_id, queue_id, (), 0, 1, 0)
        for name, values, hi in (("offset", offsets, LONG_MAX), ("size", sizes, INT_MAX),
                                 ("timestamp", timestamps, LONG_MAX)):
            if not all(type(v) is int for v in values) or min(values) < 0 or max(values) > hi:
                bad = next(v for v in values if type(v) is not int or not 0 <= v <= hi)
                raise IllegalParam(f"index {name} must be an int in 0..{hi}, got {bad!r}", **{name: bad})
        begin = self.begin_timestamp
        with self._lock:
            if self._closed:
                return AppendResult.FILE_CLOSED, 0
            if not self._sealed and _plain_keys(keys) \
                    and self._count + sum(map(len, keys)) + 1 < self.max_items:
                # The usual batch: every message has plain keys (what the dispatcher hands
                # over), all fit, and no time diff overflows. One write, no per-message plan.
                diffs = [(t - begin) // 1000 for t in timestamps]
                if INT_MIN <= min(diffs) and max(diffs) <= INT_MAX:
                    try:
                        self._write_batch(topic, topic_id, queue_id, keys, diffs, offsets, sizes, max(timestamps))
                    except OSError as exc:
                        self.last_error = _os_error(exc, "write", self.path)
                        log.error("index file %s: writing the keys of %d message(s) of %s failed: %s",
                                  self.path, n, topic, self.last_error)
                        return AppendResult.UNKNOWN_ERROR, 0
                    return AppendResult.SUCCESS, n
            # Plan: the messages that fit, as put_key would take them one by one.
            lists: list[Sequence[str]] = []
            diffs: list[int] = []
            picked: list[int] = []
            count = self._count
            result = AppendResult.SUCCESS
            error: IllegalParam | None = None
            seal = False
            taken = 0
            for m in range(n):
                ks = keys[m]
                if not (type(ks) is tuple and len(ks) == 1 and type(ks[0]) is str and ks[0].strip()):
                    ks = check_put(topic, topic_id, queue_id, ks, 0, 1, 0)
                if not ks:
                    taken = m + 1  # nothing to index: done, even on a full file
                    continue
                if self._sealed or seal:
                    result = AppendResult.FILE_FULL
                    break
                diff = (timestamps[m] - begin) // 1000
                if not INT_MIN <= diff <= INT_MAX:
                    error = IllegalParam(f"store timestamp {timestamps[m]} is too far from index file begin "
                                         f"{begin} (time diff {diff} s is not an int)", timestamp=timestamps[m])
                    break
                if count + len(ks) >= self.max_items:
                    seal = True
                    result = AppendResult.FILE_FULL
                    break
                count += len(ks)
                if count + 1 >= self.max_items:
                    seal = True  # put_key seals after the message that leaves no room
                lists.append(ks)
                diffs.append(diff)
                picked.append(m)
                taken = m + 1
            if picked:
                try:
                    self._write_batch(topic, topic_id, queue_id, lists, diffs, [offsets[m] for m in picked],
                                      [sizes[m] for m in picked], max(timestamps[m] for m in picked))
                except OSError as exc:
                    self.last_error = _os_error(exc, "write", self.path)
                    log.error("index file %s: writing the keys of %d message(s) of %s failed: %s", self.path,
                              len(picked), topic, self.last_error)
                    return AppendResult.UNKNOWN_ERROR, 0
            if seal:
                self._seal_locked()
        if error is not None:
            raise error
        return result, taken

    def _slot_map(self) -> mmap.mmap:
        """The header and slot table, mapped shared (allocated first, so a full disk is an
        OSError here rather than a SIGBUS on a write into a hole)."""
        if self._map is None:
            length = self.item_position(0)
            if hasattr(os, "posix_fallocate"):
                try:
                    os.posix_fallocate(self._fd, 0, length)
                except OSError as exc:
                    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                        raise
                    # a file system that cannot preallocate: the map is written all the same
            self._map = mmap.mmap(self._fd, length)
        return self._map

    def _write_batch(self, topic: str, topic_id: int, queue_id: int, lists: list[Sequence[str]],
                     diffs: list[int], offsets: list[int], sizes: list[int], newest: int) -> None:
        mm = self._slot_map()
        items, heads, new_slots = link_items(mm, self.slot_count, self._count, topic, topic_id, queue_id,
                                             lists, offsets, sizes, diffs)
        count = self._count + len(items) // ITEM_SIZE
        used = self._used + new_slots
        end = max(self._end, newest)
        # As put_key: the items and the header before the slots that make the items reachable.
        os.pwrite(self._fd, items, self.item_position(self._count + 1))
        min_diff = min(self._min_diff, min(diffs))
        if min_diff < self._min_diff:
            os.pwrite(self._fd, _INT.pack(min_diff), self.item_position(0) + _TIME_DIFF_IN_ITEM)
        mm[0:HEADER_SIZE] = IndexHeader(BEGIN_MAGIC, self.begin_timestamp, end, used, count).encode()
        pack = _INT.pack_into
        for slot, head in heads.items():
            pack(mm, HEADER_SIZE + slot * SLOT_SIZE, head)
        self._count, self._used, self._end, self._min_diff = count, used, end, min_diff

    def _seal_locked(self) -> None:
        self._sealed = True
        try:
            os.pwrite(self._fd, _INT.pack(END_MAGIC - (1 << 32)), MAGIC_POSITION)
        except OSError as exc:  # the in-memory state is what counts until restart
            log.warning("index file %s: cannot write the END magic: %s", self.path, exc)
        if self._map is not None:  # no more keys: the slot table need not stay mapped
            self._map.close()  # (its written pages stay dirty in the page cache; fsync sees them)
            self._map = None

    def seal(self) -> None:
        """Stop taking keys (END magic). Idempotent."""
        with self._lock:
            if not self._closed and not self._sealed:
                self._seal_locked()

    # -- reading ---------------------------------------------------------------------

    def query(self, topic: str, key: str, max_count: int, begin: int, end: int, *,
              topic_id: int | None = None,
              max_scan_items: int = DEFAULT_MAX_SCAN_ITEMS) -> list[IndexEntry]:
        """Entries of ``topic#key`` stored in ``[begin, end]`` (ms), newest first, at most
        ``max_count``; at most ``max_scan_items`` chain links are followed."""
        check_query(topic, key, max_count, begin, end)
        hash_code = index_key_hash(topic, key)
        with self._lock:
            if not self._closed:
                return self._query_locked(hash_code, max_count, begin, end, topic_id, max_scan_items)
            replacement = self.replacement
        if replacement is None:
            return []
        return replacement.query(topic, key, max_count, begin, end, topic_id=topic_id,
                                 max_scan_items=max_scan_items)

    def _query_locked(self, hash_code: int, max_count: int, begin: int, end: int,
                      topic_id: int | None, max_scan_items: int) -> list[IndexEntry]:
        out: list[IndexEntry] = []
        if max_count <= 0 or begin > end or not self._count:
            return out
        fd = self._fd
        try:
            (idx,) = _INT.unpack(os.pread(fd, 4, self.slot_position(hash_code % self.slot_count)))
            bound, hops = self._count + 1, 0
            # Links always point to older (smaller) items: a chain cannot loop.
            while 0 < idx < bound and hops < max_scan_items and len(out) < max_count:
                raw = os.pread(fd, ITEM_SIZE, self.item_position(idx))
                h, tid, qid, off, size, diff, prev = _ITEM.unpack(raw)
                if h == hash_code and (topic_id is None or tid == topic_id):
                    ts = self.begin_timestamp + diff * 1000
                    if _in_window(ts, begin, end):
                        out.append(IndexEntry(tid, qid, off, size, ts))
                bound, idx, hops = idx, prev, hops + 1
        except OSError as exc:
            raise _os_error(exc, "read", self.path) from exc
        return out

    # -- compaction ------------------------------------------------------------------

    def compact_into(self, out: BinaryIO) -> CompactionResult:
        """Write the compacted form to the seekable binary stream ``out`` (from position 0).

        Reads through its own read-only map, so queries and compaction do not wait on
        each other; the file must be sealed (no more keys).
        """
        with self._lock:
            if self._closed:
                raise TieredStoreError(f"index file {self.path!r} is closed", path=self.path)
            if not self._sealed:
                raise IllegalParam(f"index file {self.path!r} must be sealed before compaction",
                                   path=self.path)
            count, end, slots = self._count, self._end, self.slot_count
            shift = self._min_diff  # <= 0
        data_start = HEADER_SIZE + slots * SLOT_SIZE
        # Each slot of the compacted table is (start, length) of its run; an empty slot (most
        # of them) gets the position the next run starts at. Only slots with a chain are
        # visited; the empty ones between them are filled in bulk.
        positions = array(INT32_CODE, [data_start]) * slots
        lengths = array(INT32_CODE, [0]) * slots
        filled = 0
        buf = bytearray()
        pos, used, unfit = data_start, 0, 0
        try:
            with open(self.path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                heads = struct.unpack_from(f">{2 * slots}i", mm, HEADER_SIZE)[0::2]
                out.seek(data_start)
                for slot in compress(range(slots), heads):
                    idx = heads[slot]
                    if filled < slot:
                        positions[filled:slot] = array(INT32_CODE, [pos]) * (slot - filled)
                    start = pos
                    bound = count + 1
                    while 0 < idx < bound:
                        p = data_start + idx * ITEM_SIZE
                        bound = idx
                        (idx,) = _INT.unpack_from(mm, p + _PREV_IN_ITEM)
                        if shift:
                            (diff,) = _INT.unpack_from(mm, p + _TIME_DIFF_IN_ITEM)
                            if diff - shift > INT_MAX:
                                # More than 2**31 s after the oldest item (a corrupt time diff, or the
                                # item 0 word that records the oldest): no int holds it. Left out.
                                unfit += 1
                                continue
                            buf += mm[p:p + _TIME_DIFF_IN_ITEM]
                            buf += _INT.pack(diff - shift)
                        else:
                            buf += mm[p:p + COMPACT_ITEM_SIZE]
                        pos += COMPACT_ITEM_SIZE
                    if pos != start:
                        used += 1
                    positions[slot], lengths[slot] = start, pos - start
                    filled = slot + 1
                    if len(buf) >= _WRITE_CHUNK:
                        out.write(buf)
                        buf.clear()
                if filled < slots:
                    positions[filled:] = array(INT32_CODE, [pos]) * (slots - filled)
        except OSError as exc:
            raise _os_error(exc, "compaction read", self.path) from exc
        out.write(buf)
        written = (pos - data_start) // COMPACT_ITEM_SIZE
        if written != count:
            log.warning("index file %s: %d of %d items are reachable%s; compacting those", self.path,
                        written, count, f" ({unfit} with a time diff out of range)" if unfit else "")
        begin = self.begin_timestamp + shift * 1000
        out.seek(HEADER_SIZE)
        out.write(slot_table(positions, lengths))
        out.seek(0)
        out.write(IndexHeader(END_MAGIC, begin, end, used, written).encode())
        return CompactionResult(begin, end, used, written, pos)

    def compacted_bytes(self) -> bytes:
        """The compacted form in memory (small files, tools and tests)."""
        bio = io.BytesIO()
        self.compact_into(bio)
        return bio.getvalue()

    # -- lifecycle -------------------------------------------------------------------

    def flush(self) -> None:
        """fsync the file."""
        with self._lock:
            if not self._closed:
                try:
                    if self._map is not None:
                        self._map.flush()  # the slots written through the map
                    os.fsync(self._fd)
                except OSError as exc:
                    raise _os_error(exc, "fsync", self.path) from exc

    def close(self) -> None:
        """Close the file (idempotent); later queries go to :attr:`replacement` or find nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._map is not None:
                self._map.close()
                self._map = None
            try:
                os.close(self._fd)
            except OSError as exc:
                log.warning("closing index file %s: %s", self.path, exc)

    def destroy(self) -> None:
        """Close and delete the file."""
        self.close()
        try:
            unlink_if_exists(self.path)
        except OSError as exc:
            raise _os_error(exc, "delete", self.path) from exc


def check_put(topic: str, topic_id: int, queue_id: int, keys: Iterable[str], offset: int, size: int,
              timestamp: int) -> list[str]:
    """Validate :meth:`IndexStoreFile.put_key` arguments; the distinct non-blank keys in order."""
    if not isinstance(topic, str) or not topic.strip():
        raise IllegalParam(f"index topic must be a non-blank string, got {topic!r}", topic=topic)
    for name, value, hi in (("topic_id", topic_id, INT_MAX), ("queue_id", queue_id, INT_MAX),
                            ("offset", offset, LONG_MAX), ("size", size, INT_MAX),
                            ("timestamp", timestamp, LONG_MAX)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= hi:
            raise IllegalParam(f"index {name} must be an int in 0..{hi}, got {value!r}", **{name: value})
    if keys is None:
        return []
    if isinstance(keys, str):
        raise IllegalParam(f"index keys must be a collection of strings, not the string {keys!r}",
                           keys=keys)
    out: dict[str, None] = {}
    for key in keys:
        if not isinstance(key, str):
            raise IllegalParam(f"index key {key!r} must be a string", key=key)
        if key.strip():
            out[key] = None
    return list(out)


def _plain_keys(keys: Sequence[Sequence[str]]) -> bool:
    """True when each entry of ``keys`` is a non-empty tuple of distinct non-blank strings,
    i.e. what :func:`check_put` would return for it unchanged."""
    for ks in keys:
        if type(ks) is not tuple or not ks:
            return False
        for k in ks:
            if type(k) is not str or not k.strip():
                return False
        if len(ks) > 1 and len(set(ks)) != len(ks):
            return False
    return True


class UploadedIndexFile:
    """A compacted index file read through its tiered segment (status UPLOAD).

    Its time range is the segment's min/max timestamp (recorded in metadata at upload).
    The header is read once and cached; a query then costs two ranged reads: the slot
    (8 bytes) and the slot's run of items. Raises
    :class:`~tiered_core.errors.CorruptData` naming the segment when the bytes are not a
    compacted index file, and the driver's errors when reads fail.
    """

    status = IndexFileStatus.UPLOAD
    #: Set when expiry deleted the segment (a query racing with it finds nothing).
    expired = False

    def __init__(self, segment: FileSegment, *, header: IndexHeader | None = None,
                 read: Callable[[int, int], bytes] | None = None, size: int | None = None) -> None:
        self.segment = segment
        self._read = read or segment.read
        self._size = segment.commit_position if size is None else size
        self._header = header
        self._slots: int | None = None if header is None else self._slot_count(header)

    @property
    def path(self) -> str:
        return self.segment.path

    @property
    def size(self) -> int:
        return self._size

    @property
    def min_timestamp(self) -> int | None:
        return self.segment.min_timestamp

    @property
    def end_timestamp(self) -> int | None:
        return self.segment.max_timestamp

    def __repr__(self) -> str:
        return (f"UploadedIndexFile({self.path!r}, size={self._size}, "
                f"range=[{self.min_timestamp}, {self.end_timestamp}])")

    def _slot_count(self, header: IndexHeader) -> int:
        slots = compacted_slot_count(header, self._size)
        if slots is None:
            raise CorruptData(
                f"uploaded index segment {self.path!r} ({self._size} bytes, magic {header.magic:#010x}, "
                f"{header.item_count} items) is not a compacted index file", path=self.path, offset=0)
        return slots

    def header(self) -> IndexHeader:
        """The file's header (one read the first time)."""
        if self._header is None:
            if self._size < HEADER_SIZE + SLOT_SIZE:
                raise CorruptData(f"uploaded index segment {self.path!r} is only {self._size} bytes",
                                  path=self.path, offset=0)
            header = IndexHeader.decode(self._read(0, HEADER_SIZE), self.path)
            self._slots = self._slot_count(header)
            self._header = header
        return self._header

    @property
    def slot_count(self) -> int:
        self.header()
        assert self._slots is not None
        return self._slots

    def query(self, topic: str, key: str, max_count: int, begin: int, end: int, *,
              topic_id: int | None = None,
              max_scan_items: int = DEFAULT_MAX_SCAN_ITEMS) -> list[IndexEntry]:
        """Entries of ``topic#key`` stored in ``[begin, end]``, newest first, at most ``max_count``;
        at most ``max_scan_items`` items of the slot are read."""
        check_query(topic, key, max_count, begin, end)
        if max_count <= 0 or begin > end:
            return []
        header = self.header()
        if not header.item_count:
            return []
        hash_code = index_key_hash(topic, key)
        slot_pos = HEADER_SIZE + (hash_code % self.slot_count) * SLOT_SIZE
        pos, length = _SLOT.unpack(self._read(slot_pos, SLOT_SIZE))
        if length <= 0:
            return []
        data_start = HEADER_SIZE + self.slot_count * SLOT_SIZE
        if pos < data_start or length % COMPACT_ITEM_SIZE or pos + length > self._size:
            raise CorruptData(f"uploaded index segment {self.path!r}: slot at {slot_pos} holds run "
                              f"({pos}, {length}) outside the item area [{data_start}, {self._size})",
                              path=self.path, offset=slot_pos)
        length = min(length, max_scan_items * COMPACT_ITEM_SIZE)
        data = self._read(pos, length)
        out: list[IndexEntry] = []
        base = header.begin_timestamp
        whole = len(data) - len(data) % COMPACT_ITEM_SIZE
        for h, tid, qid, off, size, diff in _COMPACT_ITEM.iter_unpack(data[:whole]):
            if h == hash_code and (topic_id is None or tid == topic_id):
                ts = base + diff * 1000
                if _in_window(ts, begin, end):
                    out.append(IndexEntry(tid, qid, off, size, ts))
                    if len(out) >= max_count:
                        break
        return out


__all__ = [
    "DEFAULT_MAX_SCAN_ITEMS",
    "IndexFileStatus",
    "CompactionResult",
    "IndexStoreFile",
    "UploadedIndexFile",
    "check_layout",
    "check_put",
    "check_query",
]
