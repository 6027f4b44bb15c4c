"""IndexStoreService: the tiered key index as a set of index files.

One local file takes keys (the current file); when it is full a new one is rolled. A
background step compacts every older, sealed local file and uploads it as one segment
of the INDEX flat file at ``{broker}/rmq_sys_INDEX/0`` (base offsets are cumulative
bytes; the segment's min/max timestamps, kept in metadata, are the file's time range),
then deletes the local copy. Queries look at every file whose time range overlaps the
query window, local or uploaded.

Layout on the local disk: ``{store_path}/tiered_index_file/{begin_ts}`` and the
scratch directory ``.../compacting/`` (emptied at start).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, fields
from typing import Any, Callable, Iterable, Sequence, Union

from tiered_core.codec.naming import index_path, index_queue_path
from tiered_core.errors import (
    CorruptData,
    DriverError,
    Fenced,
    IllegalParam,
    NotFound,
    SegmentClosed,
    TieredStoreError,
)
from tiered_core.flat.append_file import FlatAppendFile
from tiered_core.codec.tiered_index import (
    COMPACT_ITEM_SIZE,
    END_MAGIC,
    HEADER_SIZE,
    SLOT_SIZE,
    IndexEntry,
    IndexHeader,
    compacted_size_from_head,
    cut_short_size,
)
from tiered_core.index.coverage import KeyCoverage
from tiered_core.index.store_file import (
    IndexFileStatus,
    IndexStoreFile,
    UploadedIndexFile,
    check_query,
    check_layout,
    check_put,
)
from tiered_core.segment import FileSegment
from tiered_core.common import AppendResult, FileSegmentType, SegmentStatus, now_ms, unlink_if_exists
from tiered_core.configdef import KEYS, section
from tiered_core.spi.driver import SegmentDriver
from tiered_core.spi.metadata import TieredMetadataStore

log = logging.getLogger(__name__)

INDEX_DIR_NAME = "tiered_index_file"
COMPACTING_DIR_NAME = "compacting"

IndexFile = Union[IndexStoreFile, UploadedIndexFile]


@dataclass(frozen=True)
class IndexConfig:
    """Settings of the tiered key index.

    ``max_hash_slots`` / ``max_items`` size new local files (RocketMQ
    ``tieredStoreIndexFileMaxHashSlotNum`` / ``MaxIndexNum``, 5M / 20M there; smaller
    here by default). Existing files keep the layout they were written with, so changing
    them is safe. ``max_scan_items`` bounds the chain links followed (local) and the
    items read per slot (uploaded) in one file per query. ``reserved_hours``: uploaded
    index files whose newest entry is older are deleted (the store's ``file_reserved_hours``
    key; ``StoreConfig.section(IndexConfig)`` fills it). IllegalParam names a bad value.
    """

    max_hash_slots: int = 1_000_000
    max_items: int = 4_000_000
    reserved_hours: int = KEYS.file_reserved_hours.field()
    max_scan_items: int = 1024
    put_attempts: int = 3
    commit_attempts: int = 5
    service_interval_s: float = 10.0
    query_threads: int = 4
    upload_chunk_size: int = 4 << 20

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            kinds = (int, float) if f.name == "service_interval_s" else (int,)
            if isinstance(value, bool) or not isinstance(value, kinds) or value <= 0:
                raise IllegalParam(f"index option {f.name} must be a positive number, got {value!r}",
                                   option=f.name, value=value)
        check_layout(self.max_hash_slots, self.max_items)


class IndexStoreService:
    """The tiered key index of one broker.

    Guarantees:

    - :meth:`put_key` returns SUCCESS only when every key was written to a local file;
      otherwise a failure status (RocketMQ #10859 reported SUCCESS after failing).
    - :meth:`query` searches every file whose time range overlaps ``[begin, end]``
      (RocketMQ #9233/#10268 looked only at files that *began* inside it), newest
      first, without duplicates, at most ``max_count`` entries. Results are assembled
      once all per-file lookups finished (RocketMQ #7872).
    - An uploaded file is answered with ranged reads of its segment (header once, then
      the slot and its items); its slot count comes from the file, not configuration.
    - After a crash: a half-uploaded segment is removed and its local file uploaded
      again, also when a take-over sealed it first (its header and slot table show a longer
      file whose first part it is); a local file whose upload completed is removed; a local
      file that cannot be read is renamed ``*.corrupt`` (never deleted) and reported.

    Thread-safe. Raises :class:`~tiered_core.errors.IllegalParam` for bad arguments,
    :class:`~tiered_core.errors.SegmentClosed` for queries after :meth:`shutdown`, and
    the driver's typed errors when an uploaded file cannot be read.
    """

    def __init__(self, driver: SegmentDriver, metadata: TieredMetadataStore, store_path: str, *,
                 cluster: str = KEYS.cluster.default, broker: str = KEYS.broker.default,
                 config: IndexConfig | None = None, clock: Callable[[], int] = now_ms,
                 read_only: bool = False) -> None:
        self.driver = driver
        #: Opened to answer queries only: recovery repairs nothing (tier, metadata, local files).
        self.read_only = read_only
        self.metadata = metadata
        self.config = config or IndexConfig()
        self.cluster = cluster
        self.broker = broker
        self._clock = clock
        self.directory = os.path.join(os.fspath(store_path), INDEX_DIR_NAME)
        self._compacting = os.path.join(self.directory, COMPACTING_DIR_NAME)
        self._lock = threading.RLock()  # the file table and the current file
        self._upload_lock = threading.Lock()  # one compaction/upload/expiry at a time
        self._local: dict[int, IndexStoreFile] = {}
        self._uploaded: list[UploadedIndexFile] = []
        self._current: IndexStoreFile | None = None
        self._closed = False
        #: Why the last put_keys failed, when a typed error says it (e.g. a LocalIOError).
        self.last_error: TieredStoreError | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._executor = ThreadPoolExecutor(max_workers=self.config.query_threads,
                                            thread_name_prefix="tiered-index-query")
        index_path(cluster, broker, 0)  # validates the names before anything is created
        self.flat_file = FlatAppendFile(
            driver, metadata, index_queue_path(broker), FileSegmentType.INDEX,
            lambda base: index_path(cluster, broker, base))
        self._next_base = 0
        #: Per queue, which tiered messages have their keys in this index (see index.coverage).
        self.coverage = KeyCoverage(self.directory, read_only=read_only)
        self._recover()

    @classmethod
    def from_store_config(cls, store_config: Any, driver: SegmentDriver, metadata: TieredMetadataStore,
                          clock: Callable[[], int] = now_ms, read_only: bool = False,
                          **index_options: Any) -> "IndexStoreService":
        """A service laid out by a :class:`~tiered_core.config.StoreConfig` (store path, cluster,
        broker, reserved hours); ``index_options`` are :class:`IndexConfig` fields; ``clock``
        (ms since the epoch) names new index files."""
        return cls(driver, metadata, store_config.store_path, cluster=store_config.cluster,
                   broker=store_config.broker, config=section(IndexConfig, store_config, **index_options),
                   clock=clock, read_only=read_only)

    # -- recovery ---------------------------------------------------------------------

    def _recover(self) -> None:
        if self.read_only:
            self._recover_read_only()
            return
        try:
            os.makedirs(self.directory, exist_ok=True)
            shutil.rmtree(self._compacting, ignore_errors=True)
            os.makedirs(self._compacting, exist_ok=True)
        except OSError as exc:
            raise DriverError(f"cannot prepare index directory {self.directory!r}: {exc}",
                              retryable=False, path=self.directory) from exc
        self._purge_deleted()
        segments = list(self.flat_file.segments)
        for seg in segments:
            try:
                uploaded = self._recover_segment(seg, last=seg is segments[-1])
            except CorruptData as exc:
                log.error("index segment %s is unreadable and is left out of queries: %s", seg.path, exc)
                continue
            if uploaded is not None:
                self._uploaded.append(uploaded)
        self._next_base = self._highest_offset()
        self._load_local_files()

    def _recover_read_only(self) -> None:
        """Recovery that writes nothing: uploaded files that are complete, and the local files
        as they are (an incomplete upload, a corrupt or already uploaded local file is left
        for the next writable open)."""
        for seg in list(self.flat_file.segments):
            if not seg.sealed and not (seg.commit_position > 0 and self.driver.is_sealed(seg.path)):
                continue
            uploaded = UploadedIndexFile(seg)
            try:
                if seg.min_timestamp is None or seg.max_timestamp is None:
                    header = uploaded.header()
                    seg.min_timestamp, seg.max_timestamp = header.begin_timestamp, header.end_timestamp
            except CorruptData as exc:
                log.error("index segment %s is unreadable and is left out of queries: %s", seg.path, exc)
                continue
            self._uploaded.append(uploaded)
        if not os.path.isdir(self.directory):
            return
        for name in sorted((n for n in os.listdir(self.directory) if n.isascii() and n.isdigit()), key=int):
            path = os.path.join(self.directory, name)
            if not os.path.isfile(path):
                continue
            try:
                f = IndexStoreFile.open(path, default_slot_count=self.config.max_hash_slots)
            except CorruptData as exc:
                log.error("index file %s is corrupt and is left out of queries: %s", path, exc)
                continue
            if self._already_uploaded(f):
                f.close()
                continue
            self._local[f.begin_timestamp] = f

    def _cut_short(self, seg: FileSegment) -> str | None:
        """Why the sealed last segment ``seg`` is provably only the beginning of a compacted
        file, or None (whole, damaged or missing: those stay, for queries to skip and verify
        to report). A take-over seals the previous owner's last segment of every file, an
        index upload its crash stopped between two chunks included
        (``tiered_core/flat/ownership.py``). One ranged read of the header and slot 0; the
        slot table the segment holds is read only when those name a longer file."""
        size = seg.commit_position
        try:
            head = self.driver.read(seg.path, 0, min(size, HEADER_SIZE + SLOT_SIZE))
            whole = compacted_size_from_head(head)
            if whole is None or size >= whole:
                return None
            items_start = whole - IndexHeader.decode(head, seg.path).item_count * COMPACT_ITEM_SIZE
            whole = cut_short_size(self.driver.read(seg.path, 0, min(size, items_start)), size)
        except NotFound:
            return None  # a missing object is the listing's finding
        return None if whole is None else f"{size} of the {whole} bytes its header and slot table name"

    def _highest_offset(self) -> int:
        top = self.flat_file.append_offset
        for meta in self.metadata.iterate_file_segments(int(FileSegmentType.INDEX), self.flat_file.file_path):
            top = max(top, meta.base_offset + meta.size)
        return top

    def _recover_segment(self, seg: FileSegment, *, last: bool) -> UploadedIndexFile | None:
        # An upload is whole once sealed (in the backend, if the crash came before the
        # metadata said so), unless a take-over sealed it half way: see _cut_short.
        sealed = seg.sealed or (seg.commit_position > 0 and self.driver.is_sealed(seg.path))
        why = "never sealed" if not sealed else self._cut_short(seg) if last else None
        if why is not None:
            log.warning("index segment %s was not completely uploaded (%s); removing it (its keys are indexed "
                        "again: from its local file when this store has it, else by the key-index repair "
                        "from the tier)", seg.path, why)
            self._drop_segment(seg)
            return None
        if not seg.sealed:
            seg.seal()
            self.flat_file.flush_metadata(seg)
        uploaded = UploadedIndexFile(seg)
        if seg.min_timestamp is None or seg.max_timestamp is None:
            header = uploaded.header()
            seg.min_timestamp, seg.max_timestamp = header.begin_timestamp, header.end_timestamp
            self.flat_file.flush_metadata(seg)
        return uploaded

    def _load_local_files(self) -> None:
        names = sorted((n for n in os.listdir(self.directory) if n.isascii() and n.isdigit()), key=int)
        for name in names:
            path = os.path.join(self.directory, name)
            if not os.path.isfile(path):
                continue
            if IndexStoreFile.never_written(path):
                log.warning("index file %s is empty (its creation was cut short); removing it", path)
                unlink_if_exists(path)
                continue
            try:
                f = IndexStoreFile.open(path, default_slot_count=self.config.max_hash_slots)
            except CorruptData as exc:
                log.error("index file %s is corrupt; renamed to %s.corrupt: %s", path, path, exc)
                os.replace(path, path + ".corrupt")
                self.coverage.invalidate()  # its keys are gone: which ones, the coverage cannot say
                continue
            if self._already_uploaded(f):
                log.info("index file %s was uploaded before the restart; removing the local copy", path)
                f.destroy()
                continue
            self._local[f.begin_timestamp] = f
        if self._local:
            keys = sorted(self._local)
            for k in keys[:-1]:
                self._local[k].seal()  # only the newest file takes keys
            newest = self._local[keys[-1]]
            self._current = None if newest.sealed else newest

    def _already_uploaded(self, f: IndexStoreFile) -> bool:
        if not f.item_count:
            return False
        for up in reversed(self._uploaded):
            if up.min_timestamp == f.min_timestamp and up.end_timestamp == f.end_timestamp:
                try:
                    return up.header().item_count == f.item_count
                except TieredStoreError as exc:
                    log.warning("cannot read the header of %s: %s", up.path, exc)
        return False

    # -- writing ----------------------------------------------------------------------

    def put_key(self, topic: str, topic_id: int, queue_id: int, keys: Iterable[str], offset: int,
                size: int, store_timestamp: int) -> AppendResult:
        """Index the message at tiered commit-log ``offset`` (``size`` bytes) of ``queue_id``
        under each key of ``keys`` (UNIQ_KEY and every KEYS entry), hashed as ``topic#key``.

        A full file is sealed and a new one rolled (up to ``put_attempts`` files).
        Returns SUCCESS when every key was written (also when there is none),
        FILE_CLOSED after shutdown, FILE_FULL or UNKNOWN_ERROR (logged) when it failed.
        Raises IllegalParam for bad arguments, or more keys than one file can hold.
        """
        key_list = check_put(topic, topic_id, queue_id, keys, offset, size, store_timestamp)
        if not key_list:
            return AppendResult.SUCCESS
        return self.put_keys(topic, topic_id, queue_id, [key_list], [offset], [size], [store_timestamp])

    def put_keys(self, topic: str, topic_id: int, queue_id: int, keys: Sequence[Sequence[str]],
                 offsets: Sequence[int], sizes: Sequence[int], timestamps: Sequence[int]) -> AppendResult:
        """:meth:`put_key` for a batch of messages of one queue (message ``m``: ``keys[m]`` at
        ``offsets[m]``, ``sizes[m]`` bytes, stored at ``timestamps[m]``), validated once per
        batch and written with one :meth:`IndexStoreFile.put_keys` per file: the bytes are
        those of one :meth:`put_key` per message, in order (a full file is sealed and the rest
        goes to a new one). SUCCESS when every key was written; else the failure status
        (logged) -- the keys of the messages before the failure are written.
        """
        n = len(keys)
        if not any(isinstance(k, str) and k.strip() for ks in keys for k in ks):
            return AppendResult.SUCCESS  # nothing to index (and no file to roll for it)
        for ks in keys:
            if len(ks) >= self.config.max_items:
                raise IllegalParam(f"{len(ks)} keys can never fit an index file of "
                                   f"{self.config.max_items - 1} items", keys=len(ks))
        start = 0
        with self._lock:
            if self._closed:
                return AppendResult.FILE_CLOSED
            attempts = 0
            while start < n:
                f = self._current
                if f is None or f.sealed:
                    try:
                        f = self._roll_locked()
                    except TieredStoreError as exc:
                        log.error("cannot create a new index file in %s: %s", self.directory, exc)
                        self.last_error = exc
                        return AppendResult.UNKNOWN_ERROR
                result, done = f.put_keys(topic, topic_id, queue_id, keys[start:], offsets[start:],
                                          sizes[start:], timestamps[start:])
                start += done
                if result is AppendResult.SUCCESS:
                    return result
                attempts = 0 if done else attempts + 1
                if result is not AppendResult.FILE_FULL or attempts >= self.config.put_attempts:
                    self.last_error = f.last_error if result is AppendResult.UNKNOWN_ERROR else None
                    log.error("index: keys of %d message(s) of %s queue %d from offset %d were not written: %s%s",
                              n - start, topic, queue_id, offsets[start], result.name,
                              "" if self.last_error is None else f" ({self.last_error})")
                    return result
                f.seal()
                self._current = None
        return AppendResult.SUCCESS

    def _roll_locked(self) -> IndexStoreFile:
        begin = self._clock()
        if self._local:
            begin = max(begin, max(self._local) + 1)
        f = IndexStoreFile.create(self.directory, begin, slot_count=self.config.max_hash_slots,
                                  max_items=self.config.max_items)
        if self._current is not None:
            self._current.seal()
        self._local[begin] = f
        self._current = f
        if len(self._local) > 1:
            self._wake.set()  # a sealed file waits for upload
        return f

    def roll_file(self) -> IndexStoreFile:
        """Seal the current file and start a new one (tools and tests)."""
        with self._lock:
            if self._closed:
                raise SegmentClosed(f"index service {self.directory!r} is shut down", path=self.directory)
            return self._roll_locked()

    # -- querying ---------------------------------------------------------------------

    def files(self) -> list[IndexFile]:
        """Every file, uploaded ones (in upload order) then local ones (oldest first)."""
        with self._lock:
            return [*self._uploaded, *(self._local[k] for k in sorted(self._local))]

    def statuses(self) -> list[IndexFileStatus]:
        return [f.status for f in self.files()]

    def _select(self, begin: int, end: int) -> list[IndexFile]:
        def overlaps(f: IndexFile) -> bool:
            lo, hi = f.min_timestamp, f.end_timestamp
            return (lo is None or lo <= end) and (hi is None or hi >= begin)

        with self._lock:
            if self._closed:
                raise SegmentClosed(f"index service {self.directory!r} is shut down", path=self.directory)
            candidates = [*self._uploaded, *(f for f in self._local.values() if f.item_count)]
        chosen = [f for f in candidates if overlaps(f)]
        chosen.sort(key=lambda f: (f.end_timestamp or 0, f.min_timestamp or 0), reverse=True)
        return chosen

    def query_async(self, topic: str, key: str, max_count: int, begin: int, end: int, *,
                    topic_id: int | None = None) -> "Future[list[IndexEntry]]":
        """Entries of ``topic#key`` stored in ``[begin, end]`` (ms, inclusive), newest first,
        deduplicated by (topic id, queue id, offset), at most ``max_count``.

        ``topic_id`` (optional) drops entries of other topics whose keys collide.
        Timestamps are precise to the second (see :class:`IndexEntry`).
        """
        check_query(topic, key, max_count, begin, end)
        done: Future[list[IndexEntry]] = Future()
        if max_count == 0 or begin > end:
            done.set_result([])
            return done
        files = self._select(begin, end)
        if not files:
            done.set_result([])
            return done
        try:
            futures = [self._executor.submit(self._query_file, f, topic, key, max_count, begin, end, topic_id)
                       for f in files]
        except RuntimeError:
            raise SegmentClosed(f"index service {self.directory!r} is shut down",
                                path=self.directory) from None
        remaining = [len(futures)]
        count_lock = threading.Lock()

        def finished(_: Future) -> None:
            with count_lock:
                remaining[0] -= 1
                if remaining[0]:
                    return
            # Only the last callback gets here: assemble once, from every result in file order.
            try:
                done.set_result(self._merge([f.result() for f in futures], max_count))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                done.set_exception(exc)

        for fut in futures:
            fut.add_done_callback(finished)
        return done

    def query(self, topic: str, key: str, max_count: int, begin: int, end: int, *,
              topic_id: int | None = None) -> list[IndexEntry]:
        """:meth:`query_async`, waiting for the result."""
        return self.query_async(topic, key, max_count, begin, end, topic_id=topic_id).result()

    def _query_file(self, f: IndexFile, topic: str, key: str, max_count: int, begin: int, end: int,
                    topic_id: int | None) -> list[IndexEntry]:
        try:
            return f.query(topic, key, max_count, begin, end, topic_id=topic_id,
                           max_scan_items=self.config.max_scan_items)
        except CorruptData as exc:
            log.error("index file %s is corrupt and was skipped: %s", f.path, exc)
            return []
        except NotFound:
            if getattr(f, "expired", False):
                return []  # deleted by expiry while we were reading it
            raise

    @staticmethod
    def _merge(per_file: list[list[IndexEntry]], max_count: int) -> list[IndexEntry]:
        merged = [e for entries in per_file for e in entries]
        merged.sort(key=lambda e: e.store_timestamp, reverse=True)  # stable: file order breaks ties
        seen: set[tuple[int, int, int]] = set()
        out: list[IndexEntry] = []
        for e in merged:
            ident = (e.topic_id, e.queue_id, e.offset)
            if ident in seen:
                continue
            seen.add(ident)
            out.append(e)
            if len(out) == max_count:
                break
        return out

    # -- compaction and upload --------------------------------------------------------

    def compact_and_upload(self) -> int:
        """Compact and upload every sealed local file except the newest; returns how many
        were uploaded. Stops at the first failure (logged); the file stays local and is
        tried again next time."""
        with self._upload_lock:
            with self._lock:
                if self._closed or not self._local:
                    return 0
                newest = max(self._local)
                todo = [self._local[k] for k in sorted(self._local)
                        if k != newest and self._local[k] is not self._current]
            uploaded = 0
            for f in todo:
                f.seal()
                if not f.item_count:
                    self._forget_local(f)
                    continue
                if not self._upload(f):
                    break
                uploaded += 1
            return uploaded

    def _forget_local(self, f: IndexStoreFile) -> None:
        with self._lock:
            if self._local.get(f.begin_timestamp) is f:
                del self._local[f.begin_timestamp]
        try:
            f.destroy()
        except TieredStoreError as exc:
            log.warning("cannot delete index file %s: %s", f.path, exc)

    def _upload(self, f: IndexStoreFile) -> bool:
        scratch = os.path.join(self._compacting, str(f.begin_timestamp))
        try:
            with open(scratch, "w+b") as out:
                info = f.compact_into(out)
                out.flush()
                out.seek(0)
                seg = self._upload_stream(out, info.size, info.begin_timestamp, info.end_timestamp)
        except Fenced:
            raise  # another store owns the tier now: nothing to retry
        except (TieredStoreError, OSError) as exc:
            log.warning("index file %s: compaction/upload failed, will retry: %s", f.path, exc)
            return False
        finally:
            try:
                os.unlink(scratch)
            except OSError:
                pass
        header = IndexHeader(END_MAGIC, info.begin_timestamp, info.end_timestamp, info.used_slot_count,
                             info.item_count)
        uploaded = UploadedIndexFile(seg, header=header)
        with self._lock:
            self._uploaded.append(uploaded)
            if self._local.get(f.begin_timestamp) is f:
                del self._local[f.begin_timestamp]
            f.replacement = uploaded
        try:
            f.destroy()
        except TieredStoreError as exc:
            log.warning("uploaded index file %s but cannot delete it: %s", f.path, exc)
        return True

    def _upload_stream(self, stream: Any, size: int, begin: int, end: int) -> FileSegment:
        base = self._next_base
        seg = self.flat_file.roll(base)
        seg.min_timestamp, seg.max_timestamp = begin, end
        try:
            while True:
                chunk = stream.read(self.config.upload_chunk_size)
                if not chunk:
                    break
                result = seg.append(chunk)
                if result is not AppendResult.SUCCESS:
                    raise DriverError(f"index segment {seg.path!r}: append returned {result.name}",
                                      retryable=True, path=seg.path)
                self._commit(seg)
            seg.seal()
            if seg.commit_position != size:
                raise DriverError(f"index segment {seg.path!r} holds {seg.commit_position} bytes, "
                                  f"expected {size}", retryable=True, path=seg.path)
            self.flat_file.flush_metadata(seg)
        except BaseException:
            self._drop_segment(seg)
            raise
        self._next_base = base + size
        return seg

    def _commit(self, seg: FileSegment) -> None:
        for attempt in range(self.config.commit_attempts):
            if seg.commit() and not seg.needs_commit():
                return
            time.sleep(min(0.05 * 2 ** attempt, 1.0))
        raise DriverError(f"index segment {seg.path!r}: commit failed {self.config.commit_attempts} times",
                          retryable=True, path=seg.path)

    def _drop_segment(self, seg: FileSegment) -> None:
        with self.flat_file._lock:
            if seg in self.flat_file.segments:
                self.flat_file.segments.remove(seg)
        try:
            seg.destroy()
            self.metadata.delete_file_segment(int(FileSegmentType.INDEX), self.flat_file.file_path,
                                              seg.base_offset)
        except TieredStoreError as exc:
            log.warning("cannot remove index segment %s: %s", seg.path, exc)

    # -- expiry -----------------------------------------------------------------------

    def destroy_expired(self, expire_timestamp: int | None = None) -> int:
        """Delete index files whose newest entry is older than ``expire_timestamp`` (default:
        now minus ``reserved_hours``): uploaded segments (metadata marked DELETED first, then
        the object and the record go) and sealed local files. The current file stays.
        Returns how many files went."""
        if expire_timestamp is None:
            expire_timestamp = self._clock() - self.config.reserved_hours * 3_600_000
        with self._upload_lock:
            with self._lock:
                gone = [u for u in self._uploaded
                        if u.end_timestamp is not None and u.end_timestamp < expire_timestamp]
                self._uploaded = [u for u in self._uploaded if u not in gone]
                newest = max(self._local) if self._local else None
                local_gone = [f for k, f in self._local.items()
                              if k != newest and f is not self._current and f.item_count
                              and f.end_timestamp < expire_timestamp]
                for f in local_gone:
                    del self._local[f.begin_timestamp]
            for f in local_gone:
                try:
                    f.destroy()
                except TieredStoreError as exc:
                    log.warning("cannot delete expired index file %s: %s", f.path, exc)
            with self.flat_file._lock:
                for u in gone:
                    u.expired = True
                    meta = self.metadata.get_file_segment(int(FileSegmentType.INDEX),
                                                          self.flat_file.file_path, u.segment.base_offset)
                    if meta is not None:
                        meta.status = int(SegmentStatus.DELETED)
                        self.metadata.update_file_segment(meta)
                    if u.segment in self.flat_file.segments:
                        self.flat_file.segments.remove(u.segment)
                    u.segment.close()
            self._purge_deleted()
        return len(gone) + len(local_gone)

    def _purge_deleted(self) -> None:
        path = self.flat_file.file_path
        for meta in list(self.metadata.iterate_file_segments(int(FileSegmentType.INDEX), path)):
            if meta.status != SegmentStatus.DELETED:
                continue
            try:
                self.driver.delete(self.flat_file.segment_path(meta.base_offset))
                self.metadata.delete_file_segment(int(FileSegmentType.INDEX), path, meta.base_offset)
            except TieredStoreError as exc:
                log.warning("cannot delete expired index segment %s@%d (retried later): %s", path,
                            meta.base_offset, exc)

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> None:
        """Start the background thread: expiry, then compaction and upload, every
        ``service_interval_s`` (and at once when a file was rolled)."""
        with self._lock:
            if self._closed:
                raise SegmentClosed(f"index service {self.directory!r} is shut down", path=self.directory)
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="tiered-index-service", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.destroy_expired()
            except Exception:  # noqa: BLE001 - the thread must survive a bad round
                log.exception("index expiry failed")
            try:
                self.compact_and_upload()
            except Fenced as exc:
                log.error("index service stops: %s", exc)
                return
            except Exception:  # noqa: BLE001
                log.exception("index compaction/upload failed")
            self._wake.wait(self.config.service_interval_s)
            self._wake.clear()

    def shutdown(self) -> None:
        """Stop the thread, fsync and close the local files (they are picked up again at the
        next start). Idempotent; puts then return FILE_CLOSED and queries raise SegmentClosed."""
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None:
            thread.join()
        with self._upload_lock:
            with self._lock:
                if self._closed:
                    return
                self._closed = True  # no new queries or puts from here on
            self._executor.shutdown(wait=True)  # lets queries in flight finish first
            with self._lock:
                for f in self._local.values():
                    try:
                        f.flush()
                    except TieredStoreError as exc:
                        log.warning("cannot fsync index file %s: %s", f.path, exc)
                    f.close()
                self._current = None
            self.coverage.save()  # after the files' writes
        self.flat_file.shutdown()

    close = shutdown

    def __enter__(self) -> "IndexStoreService":
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return (f"IndexStoreService({self.directory!r}, local={len(self._local)}, "
                f"uploaded={len(self._uploaded)})")


__all__ = ["INDEX_DIR_NAME", "COMPACTING_DIR_NAME", "IndexConfig", "IndexStoreService", "IndexFile"]
