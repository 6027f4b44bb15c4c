"""The local IndexFile: a hash index from message keys to commit-log offsets.

The layout and the file names are :mod:`tiered_core.codec.local_index`. Item numbers
start at 1 (``indexCount`` starts at 1 and is the next number), so a file holds
``max_items - 1`` items. A key goes to slot ``hash % hash_slots``; the slot points at
the newest item, each item at the previous item of the same slot, so collisions form a
chain read newest first. ``timeDiff`` is seconds since the file's ``beginTimestamp``.
``hashSlotCount`` counts puts, as RocketMQ's does. Files are pre-sized and
memory-mapped like RocketMQ's (sparse: blocks are allocated as they are written), and
every block a write through the map touches is allocated first (``posix_fallocate``: a
slot-table page when it is first written, the items a chunk ahead), so a full disk is a
:class:`~tiered_core.errors.LocalIOError` naming the file rather than a SIGBUS that kills
the process. For the same reason a lookup reads a slot-table page this process did not
allocate through the file, not the map (on tmpfs even a read of a hole through the map needs
a block).

The index only narrows a lookup: a hit means "the key's hash matched and the time
is about right". Callers read the message and check its topic, keys and time.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import threading
import time
from collections.abc import Callable, Iterable

from tiered_core.codec.hashing import index_key_hash
from tiered_core.codec.local_index import (
    HEADER,
    HEADER_SIZE,
    INVALID_INDEX,
    ITEM,
    ITEM_SIZE,
    SLOT,
    SLOT_SIZE,
    index_file_name,
    parse_index_file_name,
)
from tiered_core.errors import IllegalParam, LocalIOError, SegmentClosed, StateConflict
from tiered_core.common import INT_MAX, fsync_dir, unlink_if_exists
from tiered_core.local.io_errors import local_io_error

log = logging.getLogger(__name__)

#: RocketMQ defaults: maxHashSlotNum and maxIndexNum.
DEFAULT_HASH_SLOTS = 5_000_000
DEFAULT_MAX_ITEMS = 5_000_000 * 4
#: Bytes of items allocated at a time ahead of the writes (about 3,300 items).
ALLOCATE_AHEAD = 64 << 10
#: The unit in which header and slot-table blocks are allocated before a write through the map.
_PAGE = mmap.PAGESIZE
#: posix_fallocate errors that mean "this file system cannot preallocate" (the map is then
#: written without it, as before); any other error is a disk failure.
_NO_PREALLOCATION = {errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


class IndexFile:
    """One index file (see the module docstring for the layout).

    Guarantees: :meth:`put` returns False (and writes nothing) when the file is
    full; the item is written before the slot and the header, so a process killed
    in the middle leaves a file whose every reachable item is whole. Thread-safe.
    Raises :class:`StateConflict` when an existing file does not match the
    configured slot and item counts (they must not change across restarts),
    :class:`SegmentClosed` after close, :class:`~tiered_core.errors.LocalIOError` naming
    the file when the disk fails (full, a file too large, read-only): a put that raises
    it wrote nothing, and a file whose creation failed is removed again.
    """

    def __init__(self, path: str, hash_slots: int = DEFAULT_HASH_SLOTS,
                 max_items: int = DEFAULT_MAX_ITEMS, *, create: bool = False, read_only: bool = False) -> None:
        """``read_only``: a reader's private view: the file is mapped copy-on-write, so puts and
        cuts (a replay after a crash) change the map only, never the file (nor its times);
        with ``create`` the new file lives in memory only."""
        if hash_slots <= 0 or max_items <= 1:
            raise IllegalParam(f"index file needs hash_slots > 0 and max_items > 1, got "
                               f"{hash_slots} and {max_items}", hash_slots=hash_slots, max_items=max_items)
        self.path = path
        self.hash_slots = hash_slots
        self.max_items = max_items
        self.file_size = HEADER_SIZE + hash_slots * SLOT_SIZE + max_items * ITEM_SIZE
        self._items_base = HEADER_SIZE + hash_slots * SLOT_SIZE
        self._lock = threading.Lock()
        self._mm: mmap.mmap | None = None
        # read_only: opened for reading only; changes stay in the private map
        self.read_only = read_only
        flags = os.O_RDONLY if read_only else os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        try:
            fd = -1 if read_only and create else os.open(path, flags, 0o644)
        except OSError as exc:
            raise local_io_error("creating" if create else "opening", path, exc) from None
        self._fd = fd
        try:
            size = os.fstat(fd).st_size if fd >= 0 else self.file_size
            if (create or size == 0) and not read_only:
                # Creating and sizing are two steps: a kill between them leaves a 0-byte file,
                # which holds nothing, so it is sized now rather than refused at every restart.
                os.ftruncate(fd, self.file_size)
                size = self.file_size
            if size != self.file_size:
                raise StateConflict(
                    f"index file {path!r} is {size} bytes but {hash_slots} slots and {max_items} items "
                    f"need {self.file_size}: the index slot and item counts must not change",
                    path=path, size=size, expected=self.file_size)
            # header and slot-table pages allocated (1) so far; the items up to _items_allocated
            self._pages = bytearray(-(-self._items_base // _PAGE))
            # slot-table pages a reader's private map holds changes in (its replay's puts)
            self._mapped = bytearray(len(self._pages))
            self._items_allocated = self._items_base
            if read_only:
                self._mm = mmap.mmap(fd, self.file_size, access=mmap.ACCESS_COPY)
                self._pages = bytearray(b"\x01") * len(self._pages)  # nothing to allocate on disk
                self._items_allocated = self.file_size
            else:
                self._allocate_page(0)  # the header
                self._mm = mmap.mmap(fd, self.file_size)
        except BaseException as exc:
            if fd >= 0:
                os.close(fd)
            if create and not read_only:
                unlink_if_exists(path)  # ours (O_EXCL) and empty: no file is left half made
            if isinstance(exc, OSError):
                raise local_io_error("creating" if create else "opening", path, exc) from None
            raise
        (self.begin_timestamp, self.end_timestamp, self.begin_phy_offset, self.end_phy_offset,
         self.hash_slot_count, self.index_count) = HEADER.unpack_from(self._mm, 0)
        if self.index_count <= 0:
            self.index_count = 1
        if self.index_count > max_items:
            self.close()
            raise StateConflict(f"index file {path!r} claims {self.index_count} items, more than "
                                f"{max_items}", path=path)
        # The header is rewritten on every put: a field that cannot be written back (a slot
        # count that overflows an int at the next put, a negative time or offset) is corrupt.
        for name, value, limit in (("hashSlotCount", self.hash_slot_count, max_items),
                                   ("beginTimestamp", self.begin_timestamp, None),
                                   ("endTimestamp", self.end_timestamp, None),
                                   ("beginPhyOffset", self.begin_phy_offset, None),
                                   ("endPhyOffset", self.end_phy_offset, None)):
            if value < 0 or (limit is not None and value > limit):
                self.close()
                bound = f"0..{limit}" if limit is not None else ">= 0"
                raise StateConflict(f"index file {path!r} header field {name} is {value}, not {bound}: "
                                    "the header is corrupt", path=path, field=name, value=value)
        if create:
            self._write_header()

    # A write through the map into a hole of the file needs a block; on a full disk the kernel
    # answers with SIGBUS, which kills the process. So every block is allocated before the
    # map writes it: a full disk is then an OSError here, before anything was written.
    def _fallocate(self, start: int, end: int) -> bool:
        """Allocate bytes ``[start, end)``; False when the file system cannot preallocate
        (then it is written as RocketMQ writes it). LocalIOError when the disk is full."""
        try:
            os.posix_fallocate(self._fd, start, end - start)
        except OSError as exc:
            if exc.errno not in _NO_PREALLOCATION:
                raise local_io_error("allocating space in", self.path, exc) from None
            self._pages = bytearray(b"\x01") * len(self._pages)
            self._items_allocated = self.file_size
            return False
        return True

    def _allocate_page(self, page: int) -> None:
        """Allocate the header/slot-table page ``page`` (before a write through the map)."""
        if self._fallocate(page * _PAGE, min((page + 1) * _PAGE, self._items_base)):
            self._pages[page] = 1

    def _allocate_items(self, count: int) -> None:
        """Allocate the items up to item number ``count`` (exclusive), a chunk ahead."""
        end = self._items_base + count * ITEM_SIZE
        if end > self._items_allocated:
            end = min(self.file_size, max(end, self._items_allocated + ALLOCATE_AHEAD))
            if self._fallocate(self._items_allocated, end):
                self._items_allocated = end

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def item_count(self) -> int:
        return self.index_count - 1

    def is_full(self) -> bool:
        return self.index_count >= self.max_items

    def _mmap(self) -> mmap.mmap:
        if self._mm is None:
            raise SegmentClosed(f"index file {self.path!r} is closed", path=self.path)
        return self._mm

    def _write_header(self) -> None:
        HEADER.pack_into(self._mmap(), 0, self.begin_timestamp, self.end_timestamp,
                          self.begin_phy_offset, self.end_phy_offset,
                          self.hash_slot_count, self.index_count)

    def _slot_head(self, mm: mmap.mmap, slot_pos: int) -> int:
        """The newest counted item of a slot, or 0.

        A slot pointing at or past ``index_count`` names items written but never
        counted (the process died between the item and the header): they are
        stepped over through their ``prev`` links, which must strictly decrease, so
        the older, counted chain is kept.
        """
        value = self._slot_value(mm, slot_pos)
        while value >= self.index_count and value < self.max_items:
            prev = ITEM.unpack_from(mm, self._items_base + value * ITEM_SIZE)[3]
            if prev >= value:
                return INVALID_INDEX
            value = prev
        if value <= INVALID_INDEX or value >= self.index_count:
            return INVALID_INDEX
        return value

    def _slot_value(self, mm: mmap.mmap, slot_pos: int) -> int:
        """The slot at ``slot_pos``. Read through the map only from a page this process
        allocated (or wrote into its private map); any other page may be a hole of the sparse
        file, and on tmpfs even a *read* through a shared map of a hole needs a block: on a
        full disk the kernel answers with SIGBUS, which kills the process. A read of the file
        returns a hole's zeros without one."""
        page = slot_pos // _PAGE
        if self._fd < 0 or self._mapped[page] or (self._pages[page] and not self.read_only):
            return SLOT.unpack_from(mm, slot_pos)[0]
        try:
            raw = os.pread(self._fd, SLOT_SIZE, slot_pos)
        except OSError as exc:
            raise local_io_error("reading", self.path, exc) from None
        return SLOT.unpack(raw)[0] if len(raw) == SLOT_SIZE else INVALID_INDEX

    def truncate_from(self, phy_offset: int) -> int:
        """Remove the newest items whose offset is ``>= phy_offset`` (recovery: the
        store replays the commit log from there). Items are undone newest first,
        each slot going back to the item's ``prev``, so the file is exactly as if
        they had never been put (the header's end time becomes the last kept item's
        second, rounded up). Returns the number of items removed."""
        with self._lock:
            mm = self._mmap()
            removed = 0
            n = self.index_count
            if n < self.max_items:
                n_first = n  # an uncounted item may sit at index_count
            else:
                n_first = n - 1
            for number in range(n_first, 0, -1):
                h, phy, diff, prev = ITEM.unpack_from(mm, self._items_base + number * ITEM_SIZE)
                counted = number < self.index_count
                if counted and phy < phy_offset:
                    break
                slot_pos = HEADER_SIZE + (h % self.hash_slots) * SLOT_SIZE if 0 <= h else None
                if slot_pos is not None and self._slot_value(mm, slot_pos) >= number:
                    SLOT.pack_into(mm, slot_pos, prev if 0 <= prev < number else INVALID_INDEX)
                    self._mapped[slot_pos // _PAGE] = 1
                if counted:
                    removed += 1
                    self.index_count = number
            if removed:
                self.hash_slot_count = max(self.hash_slot_count - removed, 0)
                if self.index_count <= 1:
                    self.begin_timestamp = self.end_timestamp = 0
                    self.begin_phy_offset = self.end_phy_offset = 0
                    self.hash_slot_count = 0
                else:
                    _h, phy, diff, _p = ITEM.unpack_from(
                        mm, self._items_base + (self.index_count - 1) * ITEM_SIZE)
                    self.end_phy_offset = phy
                    self.end_timestamp = min(self.end_timestamp, self.begin_timestamp + diff * 1000 + 999)
                self._write_header()
            return removed

    def put(self, key_hash: int, phy_offset: int, store_timestamp: int) -> bool:
        """Add an item for ``key_hash`` (0..2^31-1); False when the file is full."""
        if not 0 <= key_hash <= INT_MAX:
            raise IllegalParam(f"key hash {key_hash} must be in 0..2^31-1", key_hash=key_hash)
        with self._lock:
            mm = self._mmap()
            if self.is_full():
                return False
            slot_pos = HEADER_SIZE + (key_hash % self.hash_slots) * SLOT_SIZE
            self._allocate_items(self.index_count + 1)
            if not self._pages[slot_pos // _PAGE]:
                self._allocate_page(slot_pos // _PAGE)
            prev = self._slot_head(mm, slot_pos)
            if self.begin_timestamp <= 0:
                diff = 0
            else:
                diff = min(max((store_timestamp - self.begin_timestamp) // 1000, 0), INT_MAX)
            number = self.index_count
            ITEM.pack_into(mm, self._items_base + number * ITEM_SIZE, key_hash, phy_offset, diff, prev)
            SLOT.pack_into(mm, slot_pos, number)
            self._mapped[slot_pos // _PAGE] = 1
            if number <= 1:
                self.begin_phy_offset = phy_offset
                self.begin_timestamp = store_timestamp
            self.hash_slot_count += 1
            self.index_count += 1
            self.end_phy_offset = max(self.end_phy_offset, phy_offset)
            self.end_timestamp = max(self.end_timestamp, store_timestamp)
            self._write_header()
            return True

    def put_items(self, items: list[tuple[int, int, int]], start: int = 0) -> int:
        """:meth:`put` of ``items[start:]`` (``(key_hash, phy_offset, store_timestamp)``
        each) in turn, under one lock; stops when the file is full. Returns the index of
        the first item not put (``len(items)`` when all were). Each item is written as
        :meth:`put` writes it (item, slot, then header), so a kill at any point leaves
        what a kill between two puts leaves. A full disk raises LocalIOError with
        ``stopped_at``, the index of the first item not put."""
        n = len(items)
        with self._lock:
            mm = self._mmap()
            slots = self.hash_slots
            items_base = self._items_base
            max_items = self.max_items
            item_pack = ITEM.pack_into
            slot_pack = SLOT.pack_into
            slot_unpack = SLOT.unpack_from
            header_pack = HEADER.pack_into
            mapped = self._mapped
            through_map = not self.read_only  # (a writer reads the pages it allocated through the map)
            # the header fields live in locals during the loop (the file's header is written
            # for every item) and go back to the attributes when it ends, however it ends
            count = self.index_count
            slot_count = self.hash_slot_count
            begin_ts, end_ts = self.begin_timestamp, self.end_timestamp
            begin_phy, end_phy = self.begin_phy_offset, self.end_phy_offset
            i = start
            # the items this call may write, allocated before the first (a full disk: none)
            try:
                self._allocate_items(min(count + n - start, max_items))
            except LocalIOError as exc:
                exc.stopped_at = start
                raise
            pages = self._pages
            try:
                while i < n and count < max_items:
                    key_hash, phy_offset, store_timestamp = items[i]
                    if not 0 <= key_hash <= INT_MAX:
                        raise IllegalParam(f"key hash {key_hash} must be in 0..2^31-1", key_hash=key_hash)
                    slot_pos = HEADER_SIZE + (key_hash % slots) * SLOT_SIZE
                    if not pages[slot_pos // _PAGE]:
                        try:
                            self._allocate_page(slot_pos // _PAGE)
                        except LocalIOError as exc:
                            exc.stopped_at = i  # the items before it are put
                            raise
                        pages = self._pages
                    prev = slot_unpack(mm, slot_pos)[0] if through_map or mapped[slot_pos // _PAGE] \
                        else self._slot_value(mm, slot_pos)
                    if prev >= count:  # items written but never counted: step over them
                        self.index_count = count
                        prev = self._slot_head(mm, slot_pos)
                    elif prev < INVALID_INDEX:
                        prev = INVALID_INDEX
                    if begin_ts <= 0:
                        diff = 0
                    else:
                        diff = (store_timestamp - begin_ts) // 1000
                        diff = 0 if diff < 0 else (diff if diff < INT_MAX else INT_MAX)
                    item_pack(mm, items_base + count * ITEM_SIZE, key_hash, phy_offset, diff, prev)
                    slot_pack(mm, slot_pos, count)
                    mapped[slot_pos // _PAGE] = 1
                    if count <= 1:
                        begin_phy = phy_offset
                        begin_ts = store_timestamp
                    slot_count += 1
                    count += 1
                    if phy_offset > end_phy:
                        end_phy = phy_offset
                    if store_timestamp > end_ts:
                        end_ts = store_timestamp
                    header_pack(mm, 0, begin_ts, end_ts, begin_phy, end_phy, slot_count, count)
                    i += 1
            finally:
                self.index_count = count
                self.hash_slot_count = slot_count
                self.begin_timestamp, self.end_timestamp = begin_ts, end_ts
                self.begin_phy_offset, self.end_phy_offset = begin_phy, end_phy
            return i

    def is_time_matched(self, begin: int, end: int) -> bool:
        """The file's items may lie in ``[begin, end]`` (ms)."""
        if self.item_count <= 0:
            return False
        return self.begin_timestamp <= end and self.end_timestamp >= begin

    def select(self, key_hash: int, begin: int, end: int, max_count: int,
               accept: Callable[[int], bool] | None = None) -> list[int]:
        """Commit-log offsets of items with ``key_hash`` stored in about ``[begin, end]``,
        newest first, at most ``max_count`` accepted ones.

        Item times have second precision, so an item is a candidate when its second
        overlaps the range; ``accept(phy_offset)`` (e.g. read and check the message)
        filters candidates before they count.
        """
        out: list[int] = []
        if max_count <= 0:
            return out
        with self._lock:
            mm = self._mmap()
            if self.item_count <= 0:
                return out
            slot_pos = HEADER_SIZE + (key_hash % self.hash_slots) * SLOT_SIZE
            number = self._slot_head(mm, slot_pos)
            while number > INVALID_INDEX and len(out) < max_count:
                h, phy, diff, prev = ITEM.unpack_from(mm, self._items_base + number * ITEM_SIZE)
                if diff < 0:
                    break
                time_read = self.begin_timestamp + diff * 1000
                if h == key_hash and time_read <= end and time_read + 999 >= begin:
                    if accept is None or accept(phy):
                        out.append(phy)
                if time_read + 999 < begin:
                    break  # older items of the chain are older still
                if prev <= INVALID_INDEX or prev >= number:
                    break  # chain end (items only point back)
                number = prev
        return out

    def flush(self) -> None:
        with self._lock:
            if self._mm is not None:
                try:
                    self._mm.flush()
                except OSError as exc:
                    raise local_io_error("flushing", self.path, exc) from None

    def close(self) -> None:
        with self._lock:
            if self._mm is not None:
                self._mm.close()
                self._mm = None
                if self._fd >= 0:
                    os.close(self._fd)

    def destroy(self) -> None:
        self.close()
        if self.read_only:
            return  # a private view deletes nothing
        try:
            unlink_if_exists(self.path)
        except OSError as exc:
            raise local_io_error("deleting", self.path, exc) from None

    def __repr__(self) -> str:
        return f"IndexFile({self.name}, items={self.item_count}, phy={self.begin_phy_offset}..{self.end_phy_offset})"


def _complete_upto(items: list[tuple[int, int, int]], written: int) -> int:
    """The commit-log offset of the last message all of whose items are among the first
    ``written`` of ``items`` (a message's items are adjacent); -1 when there is none."""
    if written <= 0:
        return -1
    last = items[written - 1][1]
    if written < len(items) and items[written][1] == last:  # that message is cut short
        k = written - 1
        while k >= 0 and items[k][1] == last:
            k -= 1
        return items[k][1] if k >= 0 else -1
    return last


class IndexService:
    """The index files of a store: puts go to the newest file, a full file rolls.

    Keys are indexed as ``topic#key`` (:func:`tiered_core.codec.index_key_hash`).
    Guarantees: queries look at every file whose time range meets the query's,
    newest first; :meth:`delete_expired` never deletes the newest file. Thread-safe.
    """

    def __init__(self, directory: str, hash_slots: int = DEFAULT_HASH_SLOTS,
                 max_items: int = DEFAULT_MAX_ITEMS, *, clock: Callable[[], int] | None = None,
                 read_only: bool = False) -> None:
        self.directory = directory
        self.hash_slots = hash_slots
        self.max_items = max_items
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)
        self._lock = threading.RLock()
        self.read_only = read_only
        try:
            if not read_only:
                os.makedirs(directory, exist_ok=True)
        except OSError as exc:
            raise local_io_error("creating the directory", directory, exc) from None
        self._files: list[IndexFile] = []
        for name in sorted(os.listdir(directory) if os.path.isdir(directory) or not read_only else ()):
            if parse_index_file_name(name) is None:
                continue
            path = os.path.join(directory, name)
            if read_only and os.path.getsize(path) == 0:
                continue  # a kill between create and size: it holds nothing (a writer sizes it)
            self._files.append(IndexFile(path, hash_slots, max_items, read_only=read_only))
        self._indexed_upto = self.max_phy_offset

    @property
    def files(self) -> list[IndexFile]:
        with self._lock:
            return list(self._files)

    @property
    def max_phy_offset(self) -> int:
        """Commit-log offset of the newest indexed message (-1 when none)."""
        with self._lock:
            for f in reversed(self._files):
                if f.item_count > 0:
                    return f.end_phy_offset
            return -1

    def _new_file(self) -> IndexFile:
        ts = self._clock()
        if self._files:
            self._files[-1].flush()  # only the newest file is flushed from now on
            last = parse_index_file_name(self._files[-1].name) or 0
            ts = max(ts, last + 1)
        while True:
            path = os.path.join(self.directory, index_file_name(ts))
            if not os.path.exists(path):
                break
            ts += 1
        f = IndexFile(path, self.hash_slots, self.max_items, create=True, read_only=self.read_only)
        self._files.append(f)
        self._sync_dir()
        return f

    def _sync_dir(self) -> None:
        if self.read_only:
            return
        try:
            fsync_dir(self.directory)
        except OSError as exc:
            raise local_io_error("fsync of the directory", self.directory, exc) from None

    def put_keys(self, topic: str, keys: Iterable[str], phy_offset: int, store_timestamp: int) -> int:
        """Index each key of a message as ``topic#key``; returns items written.

        A message at or before the newest indexed offset is skipped (recovery
        replays the commit log from a checkpoint, so this keeps replays from
        duplicating items); see :meth:`truncate_from`.
        """
        keys = [k for k in keys if k]
        if not keys:
            return 0
        with self._lock:
            if phy_offset <= self._indexed_upto:
                return 0
            n = 0
            for key in keys:
                h = index_key_hash(topic, key)
                f = self._files[-1] if self._files else self._new_file()
                if not f.put(h, phy_offset, store_timestamp):
                    f = self._new_file()
                    if not f.put(h, phy_offset, store_timestamp):  # pragma: no cover - fresh file
                        raise StateConflict(f"fresh index file {f.path!r} refused a key", path=f.path)
                n += 1
            self._indexed_upto = phy_offset
            return n

    def put_batch(self, entries: Iterable[tuple[str, list[str], int, int]]) -> int:
        """:meth:`put_keys` of each ``(topic, keys, phy_offset, store_timestamp)`` in turn,
        with the hashes computed first and the items written file by file
        (:meth:`IndexFile.put_items`). Returns items written."""
        with self._lock:
            items: list[tuple[int, int, int]] = []
            upto = self._indexed_upto
            for topic, keys, phy_offset, store_timestamp in entries:
                if phy_offset <= upto:
                    continue
                added = False
                for key in keys:
                    if key:
                        items.append((index_key_hash(topic, key), phy_offset, store_timestamp))
                        added = True
                if added:
                    upto = phy_offset
            if not items:
                return 0
            i = 0
            try:
                fresh = not self._files
                f = self._files[-1] if self._files else self._new_file()
                while True:
                    j = f.put_items(items, i)
                    if j >= len(items):
                        break
                    if j == i and fresh:  # pragma: no cover - a fresh file always takes one
                        raise StateConflict(f"fresh index file {f.path!r} refused a key", path=f.path)
                    i = j
                    f = self._new_file()
                    fresh = True
            except LocalIOError as exc:
                # the messages whose keys are all in are indexed: a retry skips them
                written = getattr(exc, "stopped_at", i)
                self._indexed_upto = max(self._indexed_upto, _complete_upto(items, written))
                raise
            self._indexed_upto = upto
            return len(items)

    def truncate_from(self, commitlog_offset: int) -> int:
        """Undo every item of a message at or after ``commitlog_offset`` (the store
        replays the commit log from there after a restart, so the index holds each
        message once and nothing of bytes a recovery cut). Files left empty are
        deleted, except the oldest. Returns the number of items removed."""
        removed = 0
        with self._lock:
            while self._files:
                f = self._files[-1]
                removed += f.truncate_from(commitlog_offset)
                if f.item_count == 0 and len(self._files) > 1:
                    self._files.pop()
                    f.destroy()
                    continue
                break
            self._indexed_upto = min(self._indexed_upto, commitlog_offset - 1, self.max_phy_offset)
        if removed:
            log.warning("index %s: removed %d items at or after commit-log offset %d before replay",
                        self.directory, removed, commitlog_offset)
        return removed

    def query(self, topic: str, key: str, max_count: int, begin: int = 0, end: int = (1 << 63) - 1,
              accept: Callable[[int], bool] | None = None) -> list[int]:
        """Commit-log offsets of messages that may carry ``key`` in ``topic``, stored in
        ``[begin, end]`` ms, newest first, at most ``max_count``, without duplicates.

        ``accept(offset)`` filters candidates (the store reads the message and checks
        it); without it hash collisions can yield other keys' messages.
        """
        if max_count <= 0:
            return []
        h = index_key_hash(topic, key)
        seen: set[int] = set()

        def check(phy: int) -> bool:
            if phy in seen:
                return False
            if accept is not None and not accept(phy):
                return False
            seen.add(phy)
            return True

        out: list[int] = []
        for f in reversed(self.files):
            if len(out) >= max_count:
                break
            if f.item_count > 0 and f.end_timestamp < begin:
                break  # files are in time order: the rest are older
            if not f.is_time_matched(begin, end):
                continue
            try:
                out.extend(f.select(h, begin, end, max_count - len(out), check))
            except SegmentClosed:
                continue  # deleted by retention meanwhile
        return out

    def delete_expired(self, commitlog_min_offset: int) -> int:
        """Delete leading files whose every message lies before ``commitlog_min_offset``
        (never the newest file); returns files deleted."""
        removed = []
        with self._lock:
            while len(self._files) > 1 and self._files[0].end_phy_offset < commitlog_min_offset:
                removed.append(self._files.pop(0))
        for f in removed:
            log.info("deleting expired index file %s", f.path)
            f.destroy()
        if removed:
            self._sync_dir()
        return len(removed)

    def flush(self) -> None:
        """msync the newest file (older ones were flushed when the index rolled)."""
        files = self.files
        if files:
            files[-1].flush()

    def close(self) -> None:
        with self._lock:
            files, self._files = self._files, []
        for f in files:
            f.close()


__all__ = [
    "IndexFile",
    "IndexService",
    "DEFAULT_HASH_SLOTS",
    "DEFAULT_MAX_ITEMS",
]
