"""LocalMessageStore: the hot tier (RocketMQ's DefaultMessageStore, in small).

Directory layout under ``root``::

    commitlog/00000000000000000000 ...      all queues' messages (CommitLog)
    consumequeue/{topic}/{queueId}/000...   20-byte units per queue (ConsumeQueue)
    index/yyyyMMddHHmmssSSS                 key index (IndexFile)
    checkpoint.json                          flushed commit-log offset and reput offset
    lock                                     held (flock) while a process has the store open

Write path: :meth:`LocalMessageStore.put_message` assigns the queue offset and the
store timestamp, encodes the message and appends it to the CommitLog (one ``pwrite``;
it does not wake the reput thread unless that thread is idle). The *reput* step
(:meth:`LocalMessageStore.reput`, also run by a background thread) reads what was
appended since the last reput, in commit-log order, a chunk at a time: it scans the
records for the few fields it needs (no full decode), adds the units to their
ConsumeQueues (one write per queue run) and the keys to the index (one batch), then
tells queue listeners of queues new to them (the tiered dispatcher) and hands a
:class:`DispatchRequest` per message to dispatch listeners, if any. Reads go through
the consume queues.

Durability: with ``flush_mode=ASYNC`` (default) a background thread fsyncs the
commit log every ``flush_interval_ms`` (consume queues, index and checkpoint every
``flush_consume_queue_interval_ms``); with ``SYNC`` ``put_message`` returns after the message is
fsynced (concurrent puts share one fsync). :meth:`LocalMessageStore.commit_point`
is the offset below which messages are durable and may be tiered.

Restart: the CommitLog is validated from the file holding the checkpoint's flushed
offset and a torn tail is cut; consume-queue units pointing past the recovered log
are cut; the log is replayed into consume queues and index from the checkpoint's
reput offset (idempotently), so after a crash at any point every unit points at
whole, valid bytes.
"""

from __future__ import annotations

import enum
import fcntl
import json
import logging
import mmap
import os
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

from tiered_core.codec.consume_queue import CQ_UNIT, ConsumeQueueUnit
from tiered_core.codec.hashing import tags_hash_code
from tiered_core.codec.index_keys import message_index_keys
from tiered_core.codec._impl import decode_message, encode_message_buffer, peek_store_timestamp, validate_message
from tiered_core.codec.message import (
    BORNHOST_V6_FLAG,
    KEY_SEPARATOR,
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    SYS_FLAG_POS,
    Message,
    MessageExt,
    store_timestamp_position,
)
from tiered_core.codec.naming import validate_topic
from tiered_core.codec.reput_scan import SCAN_OTHER, find_property, index_keys_of, scan_reput_records
from tiered_core.errors import (
    ConfigError,
    CorruptData,
    IllegalOffset,
    IllegalParam,
    LocalIOError,
    SegmentClosed,
    StateConflict,
    TieredStoreError,
)
from tiered_core.local.commit_log import END_FILE_MIN_BLANK_LENGTH, CommitLog
from tiered_core.local.local_consume_queue import ConsumeQueue
from tiered_core.local.index_file import IndexService
from tiered_core.local.io_errors import local_io_error, with_stored
from tiered_core.local.mapped_file import parse_offset_file_name
from tiered_core.common import INT_MAX, LONG_MAX, BoundaryType, fsync_dir, now_ms, offset_by_time
from tiered_core.configdef import HOUR_MS, KEYS

log = logging.getLogger(__name__)

_I64 = struct.Struct(">q")
_time_ns = time.time_ns
_NOW_MS = now_ms  # (as imported: a test may patch this module's now_ms)
_CQ_UNIT = CQ_UNIT
_STORE_TS_POS = store_timestamp_position(0)
_STORE_TS_V6_POS = store_timestamp_position(BORNHOST_V6_FLAG)
_SYS_FLAG_LOW = SYS_FLAG_POS + 3  # sysFlag's low byte (big-endian int)
_TAGS_AT = PROPERTY_TAGS + NAME_VALUE_SEPARATOR
_KEYS_AT = PROPERTY_KEYS + NAME_VALUE_SEPARATOR
_UNIQ_AT = PROPERTY_UNIQ_KEY + NAME_VALUE_SEPARATOR
#: Pause of the background reput after a pass that found messages (lets a batch gather).
_REPUT_GATHER_S = 0.001
#: Default largest message (RocketMQ's maxMessageSize is 4 MiB; larger ones are common here).
DEFAULT_MAX_MESSAGE_SIZE = 16 << 20
#: Units one read_messages call looks at, at most (bounds a filtered read).
DEFAULT_MAX_SCAN = 16_000
CHECKPOINT_FILE = "checkpoint.json"
LOCK_FILE = "lock"
#: Bytes read to find a message's store timestamp (its head, IPv6 hosts included).
_HEAD_PEEK = 96
#: Pause of a background step after a local disk failure before it tries again.
_DISK_RETRY_S = 1.0


class FlushMode(str, enum.Enum):
    """When appended messages are fsynced (RocketMQ's flushDiskType)."""

    ASYNC = "ASYNC"  # a background thread, every flush_interval_ms
    SYNC = "SYNC"  # before put_message returns


@dataclass(frozen=True)
class LocalStoreConfig:
    """Settings of a :class:`LocalMessageStore`; every bad value raises ConfigError naming it.

    The slot and item counts of the index and the file sizes must stay the same for
    the life of a store directory. Fields bound to a config key (``KEYS.name.field()``)
    take their default from the declaration and ``StoreConfig.section(LocalStoreConfig)``
    fills them; the others are not config keys.
    """

    commit_log_file_size: int = KEYS.local_commit_log_file_size.field()
    consume_queue_units_per_file: int = 300_000  # mappedFileSizeConsumeQueue / 20
    index_hash_slots: int = 5_000_000  # maxHashSlotNum
    index_max_items: int = 20_000_000  # maxIndexNum
    message_index_enable: bool = True
    flush_mode: FlushMode = KEYS.local_flush.field(lambda mode: FlushMode(mode.upper()))
    flush_interval_ms: int = 500  # flushIntervalCommitLog
    flush_consume_queue_interval_ms: int = 1000  # flushIntervalConsumeQueue (also index, checkpoint)
    reput_interval_ms: int = 10  # background reput poll (a put wakes an idle reput thread)
    background_services: bool = True  # run the reput and flush threads
    #: Open to read (a read-only command): nothing in the directory is created, written or
    #: deleted, its times included. What the open of a directory a crash left must change --
    #: its torn tail cut, its queues and keys replayed -- is done in memory for this reader
    #: only (the next writable open does it on disk).
    read_only: bool = False
    file_reserved_time_ms: int = KEYS.local_retention_hours.field(lambda hours: hours * HOUR_MS)
    max_message_size: int | None = None  # largest encoded message; None: min(16 MiB, file size - 8)
    store_host: tuple[str, int] = ("127.0.0.1", 10911)
    #: Every put appends RocketMQ's whole-message CRC property (``__CRC32#``), computed once
    #: queue offset, store timestamp and physical offset are final.
    append_prop_crc: bool = KEYS.append_prop_crc.field()

    def __post_init__(self) -> None:
        def positive(key: str, minimum: int = 1) -> None:
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ConfigError(f"{key} must be an int >= {minimum}, got {value!r}", key=key, value=value)

        positive("commit_log_file_size", KEYS.local_commit_log_file_size.minimum)
        positive("consume_queue_units_per_file")
        positive("index_hash_slots")
        positive("index_max_items", 2)
        positive("flush_interval_ms")
        positive("flush_consume_queue_interval_ms")
        positive("reput_interval_ms")
        positive("file_reserved_time_ms", 0)
        if self.max_message_size is None:
            object.__setattr__(self, "max_message_size",
                               min(DEFAULT_MAX_MESSAGE_SIZE, self.commit_log_file_size - END_FILE_MIN_BLANK_LENGTH))
        positive("max_message_size", 128)
        try:
            mode = str(getattr(self.flush_mode, "value", self.flush_mode)).upper()
            # RocketMQ's flushDiskType spelling (ASYNC_FLUSH / SYNC_FLUSH) is accepted too
            object.__setattr__(self, "flush_mode", FlushMode(mode.removesuffix("_FLUSH")))
        except ValueError:
            raise ConfigError(f"flush_mode must be one of {[m.value for m in FlushMode]}, got "
                              f"{self.flush_mode!r}", key="flush_mode", value=self.flush_mode) from None
        for key in ("message_index_enable", "background_services", "append_prop_crc", "read_only"):
            if not isinstance(getattr(self, key), bool):
                raise ConfigError(f"{key} must be a bool, got {getattr(self, key)!r}", key=key)
        if self.max_message_size > self.commit_log_file_size - END_FILE_MIN_BLANK_LENGTH:
            raise ConfigError(
                f"max_message_size {self.max_message_size} does not fit a commit-log file of "
                f"{self.commit_log_file_size} bytes (at most {self.commit_log_file_size - 8})",
                key="max_message_size", value=self.max_message_size)
        host = self.store_host
        if not (isinstance(host, tuple) and len(host) == 2 and isinstance(host[0], str)
                and isinstance(host[1], int) and 0 <= host[1] <= 0xFFFF):
            raise ConfigError(f"store_host must be an (ip, port) pair, got {host!r}", key="store_host")


class LocalPutResult(NamedTuple):
    """Where :meth:`LocalMessageStore.put_message` stored a message."""

    queue_offset: int
    commitlog_offset: int
    store_timestamp: int


#: LocalPutResult(...) without the generated __new__'s frame (the put path)
_new_put_result = tuple.__new__


class LocalReadResult(NamedTuple):
    """What :meth:`LocalMessageStore.read_messages` found."""

    messages: list[MessageExt]
    next_offset: int  # queue offset to read next (past skipped and filtered units)
    min_offset: int  # the queue's bounds when the read began
    max_offset: int


@dataclass(frozen=True, slots=True)
class DispatchRequest:
    """One message the reput step dispatched (handed to every dispatch listener)."""

    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    size: int
    store_timestamp: int
    tags_code: int
    keys: tuple[str, ...]
    uniq_key: str | None
    tags: str | None = None
    born_timestamp: int = 0
    sys_flag: int = 0


DispatchListener = Callable[[DispatchRequest], None]
#: Called with ``(topic, queue_id)`` (see :meth:`LocalMessageStore.add_queue_listener`).
QueueListener = Callable[[str, int], None]
#: ``(topic, queue_id) -> (offset, until_ms)`` (see :meth:`LocalMessageStore.set_floor_provider`).
FloorProvider = Callable[[str, int], tuple[int, int]]


class LocalGroup(NamedTuple):
    """What :meth:`LocalMessageStore.read_group` read: every unit asked for (``units``), of
    which the first ``taken`` were taken; message ``i < taken`` is
    ``buf[positions[i]:positions[i] + units[i].size]`` (not yet validated)."""

    units: list[ConsumeQueueUnit]
    taken: int
    buf: "bytes | mmap.mmap"  # a map is unmapped when the group is dropped
    positions: list[int]



#: How far ahead of the clock the newest store time may be before an open warns.
_CLOCK_AHEAD_WARN_MS = 60_000


class _Checkpoint(NamedTuple):
    commitlog_flushed: int
    reput_offset: int
    #: The key index's newest file when the checkpoint was written (retention never deletes
    #: it): gone at the next open, the index lost items the reput offset says are there.
    index_newest: str | None = None
    #: Every queue with a local consume queue when it was written, with its max offset then
    #: (None: an older checkpoint): one gone at the next open, or ending before that offset,
    #: lost consume-queue files or units, and is rebuilt from the commit log.
    queues: tuple[tuple[tuple[str, int], int], ...] | None = None


def acquire_store_lock(root: str) -> int:
    """Take the store directory's lock (``flock`` on ``{root}/lock``) without waiting.

    Returns the descriptor to pass to :func:`release_store_lock`. Raises
    :class:`~tiered_core.errors.StateConflict` naming ``root`` when another process holds it.
    """
    path = os.path.join(root, LOCK_FILE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _lock_holder(fd)
        os.close(fd)
        who = f" (pid {holder})" if holder else ""
        raise StateConflict(f"local store {root!r} is open in another process{who}: one process at a time uses a "
                            "store directory, read-only commands too; stop that process first (a broker, "
                            "another command, or a job writing this store)", path=root, pid=holder) from None
    return fd


def _file_size_hint(root: str) -> str:
    """`` (N bytes here)``: the size the commit-log files of ``root`` were made with, when the
    names of two of them tell it (the second starts where the first one's capacity ends)."""
    try:
        starts = sorted(int(n) for n in os.listdir(os.path.join(root, "commitlog")) if n.isdigit())
    except OSError:
        return ""
    return f" ({starts[1] - starts[0]} bytes here)" if len(starts) > 1 and starts[1] > starts[0] else ""


def _lock_holder(fd: int) -> int | None:
    """The pid holding the lock on the open file ``fd`` (Linux's /proc/locks), else None."""
    try:
        st = os.fstat(fd)
        with open("/proc/locks", encoding="ascii") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) >= 6 and fields[1] == "FLOCK":
                    major, minor, inode = fields[5].split(":")
                    if int(inode) == st.st_ino and os.makedev(int(major, 16), int(minor, 16)) == st.st_dev:
                        return int(fields[4])
    except (OSError, ValueError):
        pass
    return None


def release_store_lock(fd: int) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


class LocalMessageStore:
    """The local hot tier: one CommitLog, a ConsumeQueue per queue, an index.

    Guarantees:

    * queue offsets of a queue are assigned 0, 1, 2... in commit-log order and
      never reused (retention keeps each queue's newest consume-queue file), save
      for messages a crash destroyed before they were durable: nothing below
      :meth:`commit_point` is ever lost;
    * store timestamps never decrease (the clock is clamped to the last one);
    * a message is readable through its queue once the reput step reached it;
      messages below :meth:`commit_point` are fsynced;
    * after any crash, reopening yields a store whose every consume-queue unit
      points at a whole, valid message (a torn tail is cut);
    * bad input raises :class:`~tiered_core.errors.IllegalParam` naming it and
      stores nothing;
    * a local disk failure (full, a file too large, read-only, a failing device) is a
      :class:`~tiered_core.errors.LocalIOError` naming the file, never a bare ``OSError``;
      units and keys it kept from being written are written by the next reput (or the
      replay at the next open).

    After opening, :attr:`recovery` (a :class:`~tiered_core.local.commit_log.RecoveryResult`)
    tells what restart recovery validated and cut.

    Thread-safe: puts from many threads, reads, reput, flush and retention may run
    concurrently. Raises :class:`~tiered_core.errors.SegmentClosed` after
    :meth:`close` and :class:`~tiered_core.errors.StateConflict` when another
    process has the directory open.
    """

    def __init__(self, root: str | os.PathLike[str], config: LocalStoreConfig | None = None, *,
                 clock: Callable[[], int] | None = None, lock: bool = True) -> None:
        """``lock=False``: the caller holds the directory's lock already (a writer session)."""
        self.root = os.fspath(root)
        self.config = config or LocalStoreConfig()
        self._clock = clock or now_ms
        # the put path reads time.time_ns itself for common.now_ms (not for another clock)
        self._default_clock = self._clock is _NOW_MS
        self._sync_flush = self.config.flush_mode is FlushMode.SYNC
        self._closed = False
        # a put's queue offset, store time and commit-log append; the commit log's appends
        # hold it too (its append lock), so a put takes one lock
        self._put_lock = threading.RLock()
        self._reput_lock = threading.RLock()
        self._cq_lock = threading.Lock()
        self._retention_lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._listeners: list[DispatchListener] = []
        self._queue_listeners: list[tuple[QueueListener, set[tuple[str, int]]]] = []
        self._topic_names: dict[bytes, str] = {}
        self._cqs: dict[tuple[str, int], ConsumeQueue] = {}
        self._queue_offsets: dict[tuple[str, int], int] = {}
        self._floor_provider: FloorProvider | None = None
        #: While consume queues are rebuilt (:meth:`rebuild_queues`): the reput writes units of
        #: these queues only, and no keys, no listeners.
        self._rebuild_only: set[tuple[str, int]] | None = None
        self._last_store_ts = 0
        self._opening = True
        self._valid_topics: set[str] = set()
        self._last_checkpoint: _Checkpoint | None = None
        self._reput_error: TieredStoreError | None = None
        self._background_errors: dict[str, str] = {}  # what -> the last error logged for it
        self._stop = threading.Event()
        self._reput_wakeup = threading.Event()
        self._reput_idle = False  # the reput thread waits for a put to wake it
        self._threads: list[threading.Thread] = []

        try:
            os.makedirs(self.root, exist_ok=True)
        except OSError as exc:
            raise IllegalParam(f"local store root {self.root!r} cannot be a directory: {exc.strerror or exc}",
                               path=self.root) from None
        self._lock_fd = self._acquire_dir_lock() if lock else -1
        self._commit_log: CommitLog | None = None
        self._index: IndexService | None = None
        try:
            self._open()
        except BaseException:
            self._close_files()
            self._release_dir_lock()
            raise
        if self.config.background_services:
            self._start_services()

    # ------------------------------------------------------------------ opening ----
    def _acquire_dir_lock(self) -> int:
        return acquire_store_lock(self.root)

    def _release_dir_lock(self) -> None:
        if self._lock_fd >= 0:
            release_store_lock(self._lock_fd)
            self._lock_fd = -1

    def _open(self) -> None:
        cfg = self.config
        cp = self._read_checkpoint()
        try:
            self._commit_log = CommitLog(os.path.join(self.root, "commitlog"), cfg.commit_log_file_size,
                                         append_lock=self._put_lock, private=cfg.read_only)
        except StateConflict as exc:
            if "file size" not in exc.message:
                raise
            raise ConfigError(f"{exc.message}. The commit-log files of {self.root!r} were made with another "
                              f"local_commit_log_file_size than the {cfg.commit_log_file_size} bytes configured; it "
                              f"must stay the size the store was created with{_file_size_hint(self.root)}",
                              key="local_commit_log_file_size", value=cfg.commit_log_file_size,
                              path=self.root) from None
        rec = self._commit_log.recover(cp.commitlog_flushed if cp else None)
        self.recovery = rec
        self._commit_log.flush()
        cl_min, cl_max = self._commit_log.min_offset, self._commit_log.max_offset
        lost = self._load_consume_queues(cl_min, cl_max)
        if cp is not None and cp.queues:
            lost += [key for key, recorded in cp.queues if key not in lost and
                     (key not in self._cqs or self._cqs[key].max_offset < recorded)]
        start = cp.reput_offset if cp else cl_min
        # Consume queues lost since the checkpoint (e.g. their directory was removed)
        # are rebuilt: replay from the newest message any queue still knows.
        cq_end = max((cq.last_unit_end() for cq in self._cqs.values()), default=-1)
        if cq_end < start:
            start = max(cq_end, cl_min)
        self._reput_offset = min(max(start, cl_min), cl_max)
        if lost:
            # Before the replay past the checkpoint: a queue's units are only ever appended.
            self._rebuild(lost, "its consume-queue files are gone or cut", files_lost=True)
        self._index = (IndexService(os.path.join(self.root, "index"), cfg.index_hash_slots,
                                    cfg.index_max_items, clock=self._clock, read_only=cfg.read_only)
                       if cfg.message_index_enable else None)
        if not cfg.read_only:
            fsync_dir(self.root)  # the directories just created
        if self._index is not None and cp is not None and cp.index_newest and \
                not os.path.exists(os.path.join(self.root, "index", cp.index_newest)):
            # The key index lost files (its directory was emptied, a file removed): every
            # local message's keys are indexed again, or key lookups would miss them for good.
            if cfg.read_only:
                log.warning("the key index file %r that the checkpoint names is gone from %s: key lookups miss "
                            "local messages until the store's next writable open indexes them again",
                            cp.index_newest, os.path.join(self.root, "index"))
            else:
                log.warning("the key index file %r that the checkpoint names is gone from %s: indexing the keys "
                            "of every local message again", cp.index_newest, os.path.join(self.root, "index"))
                self._reput_offset = cl_min
        if self._index is not None:
            # Messages before the replay start are indexed; items past it may be partial
            # (killed mid-reput) or stale (bytes recovery cut): undo them, then replay.
            self._index.truncate_from(self._reput_offset)
        self._last_store_ts = self._commit_log.last_store_timestamp
        ahead = self._last_store_ts - _time_ns() // 1_000_000  # (an injected clock is never asked here)
        if self._default_clock and ahead > _CLOCK_AHEAD_WARN_MS:
            # Store times never go backwards (time lookups and the time index need them in
            # order): until the clock passes that time, every message gets it.
            log.warning("local store %s: its newest message was stored at %d, %.1f h ahead of this machine's clock "
                        "(a clock that ran fast, or a store from a machine with one): every new message gets that "
                        "store time until the clock passes it; check the clock", self.root,
                        self._last_store_ts, ahead / 3_600_000)
        self.reput()
        if self._reput_error is not None:
            raise self._reput_error
        for key, cq in self._cqs.items():
            self._queue_offsets[key] = cq.max_offset
        self._opening = False
        self.flush()

    def _load_consume_queues(self, cl_min: int, cl_max: int) -> list[tuple[str, int]]:
        """Open every consume queue; returns those whose directory holds no unit file (their
        files were lost: a queue's directory is made with its first unit, and retention keeps
        its last file)."""
        lost: list[tuple[str, int]] = []
        base = os.path.join(self.root, "consumequeue")
        if not self.config.read_only:
            os.makedirs(base, exist_ok=True)
        for topic in sorted(os.listdir(base) if os.path.isdir(base) else ()):
            tdir = os.path.join(base, topic)
            try:
                validate_topic(topic)
            except IllegalParam:
                log.warning("ignoring %s: not a valid topic name", tdir)
                continue
            if not os.path.isdir(tdir):
                continue
            for qname in sorted(os.listdir(tdir)):
                if not qname.isdigit() or (len(qname) > 1 and qname[0] == "0") or int(qname) > INT_MAX:
                    log.warning("ignoring %s: not a queue id", os.path.join(tdir, qname))
                    continue
                qid = int(qname)
                qdir = os.path.join(tdir, qname)
                if os.path.isdir(qdir) and not any(parse_offset_file_name(n) is not None for n in os.listdir(qdir)):
                    lost.append((topic, qid))
                cq = ConsumeQueue(os.path.join(tdir, qname), topic, qid,
                                  self.config.consume_queue_units_per_file, private=self.config.read_only)
                cq.recover(cl_max)
                cq.correct_min_offset(cl_min)
                self._cqs[(topic, qid)] = cq
        return lost

    def _read_checkpoint(self) -> _Checkpoint | None:
        path = os.path.join(self.root, CHECKPOINT_FILE)
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            newest = data.get("index_newest")
            queues = data.get("queues")
            cp = _Checkpoint(int(data["commitlog_flushed"]), int(data["reput_offset"]),
                             newest if isinstance(newest, str) and newest else None,
                             tuple(((str(e[0]), int(e[1])), int(e[2])) for e in queues if len(e) == 3)
                             if isinstance(queues, list) else None)
            if cp.commitlog_flushed < 0 or cp.reput_offset < 0:
                raise ValueError("negative offset")
            if queues is not None and (not isinstance(queues, list) or cp.queues is None
                                       or len(cp.queues) != len(queues) or any(m < 0 for _k, m in cp.queues)):
                # (a queue list it cannot use would hide a consume queue cut since: no checkpoint)
                raise ValueError("a queue entry is not [topic, queue id, max offset >= 0]")
            return cp
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("checkpoint %s is unreadable (%s): validating the whole commit log", path, exc)
            return None

    def _write_checkpoint(self, cp: _Checkpoint) -> None:
        if cp == self._last_checkpoint:
            return
        path = os.path.join(self.root, CHECKPOINT_FILE)
        tmp = path + ".tmp"
        body = json.dumps({"version": 1, "commitlog_flushed": cp.commitlog_flushed,
                           "reput_offset": cp.reput_offset, "index_newest": cp.index_newest,
                           "queues": [[t, q, m] for (t, q), m in cp.queues or ()], "written_at": now_ms()})
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)  # (a failure before this keeps the previous checkpoint)
            fsync_dir(self.root)
        except OSError as exc:
            raise local_io_error("writing the checkpoint", path, exc) from None
        self._last_checkpoint = cp

    # ------------------------------------------------------------- services ----
    def _start_services(self) -> None:
        t = threading.Thread(target=self._reput_loop, name=f"local-reput:{self.root}", daemon=True)
        t.start()
        self._threads.append(t)
        t = threading.Thread(target=self._flush_loop, name=f"local-flush:{self.root}", daemon=True)
        t.start()
        self._threads.append(t)

    def _reput_loop(self) -> None:
        """Reput passes: after a pass that found messages, a short pause lets the next batch
        gather (puts do not wake a busy thread); after an empty pass the thread is idle and
        the next put wakes it (or the poll interval ends)."""
        interval = self.config.reput_interval_ms / 1000
        gather = min(interval, _REPUT_GATHER_S)
        while not self._stop.is_set():
            try:
                found = self.reput()
            except SegmentClosed:
                break
            except LocalIOError as exc:  # a full or failed disk: retried until it recovers
                self._background_failed("reput", exc)
                self._stop.wait(_DISK_RETRY_S)
                continue
            except Exception as exc:  # noqa: BLE001 - the loop must survive
                self._background_failed("reput", exc)
                self._stop.wait(0.1)
                continue
            self._background_failed("reput", None)
            if found:
                self._stop.wait(gather)
                continue
            self._reput_wakeup.clear()
            self._reput_idle = True
            # a put that came after the pass but before the flag was set did not wake us
            if self._commit_log.max_offset <= self._reput_offset or self._reput_error is not None:
                self._reput_wakeup.wait(interval)
            self._reput_idle = False

    def _flush_loop(self) -> None:
        interval = self.config.flush_interval_ms / 1000
        full_every = self.config.flush_consume_queue_interval_ms / 1000
        last_full = time.monotonic()
        while not self._stop.wait(interval):
            try:
                if time.monotonic() - last_full >= full_every:
                    last_full = time.monotonic()
                    self.flush()
                else:
                    self._commit_log.flush()  # what the commit point needs
            except SegmentClosed:
                break
            except Exception as exc:  # noqa: BLE001 - the loop must survive
                self._background_failed("flush", exc)
                continue
            self._background_failed("flush", None)

    def _background_failed(self, what: str, exc: BaseException | None) -> None:
        """Log a background step's failure once (not at every retry), and its recovery."""
        if exc is None:
            if self._background_errors.pop(what, None) is not None:
                log.warning("local store %s: %s works again", self.root, what)
            return
        text = str(exc)
        if self._background_errors.get(what) == text:
            return
        self._background_errors[what] = text
        if isinstance(exc, TieredStoreError):
            log.error("local store %s: %s failed (retried until it works): %s", self.root, what, exc)
        else:
            log.error("local store %s: %s failed (retried until it works)", self.root, what, exc_info=exc)

    # ---------------------------------------------------------------- writes ----
    def _check_open(self) -> None:
        if self._closed:
            raise SegmentClosed(f"local store {self.root!r} is closed", path=self.root)

    def put_message(self, topic: str, queue_id: int, message: Message) -> LocalPutResult:
        """Store ``message`` in queue ``(topic, queue_id)``.

        Returns its queue offset, commit-log offset and store timestamp. With SYNC
        flush the message is fsynced before this returns. IllegalParam for a bad
        topic, queue id or message (nothing is stored). A local disk failure is a
        :class:`~tiered_core.errors.LocalIOError` naming the file whose ``stored`` says what
        happened: False when the commit-log append failed (nothing of the message is kept,
        its queue offset is not used up), True when only the SYNC fsync after it failed.
        """
        if self._closed:
            raise SegmentClosed(f"local store {self.root!r} is closed", path=self.root)
        if topic not in self._valid_topics:
            validate_topic(topic)
            self._valid_topics.add(topic)
        if isinstance(queue_id, bool) or not isinstance(queue_id, int) or not 0 <= queue_id <= INT_MAX:
            raise IllegalParam(f"queue id {queue_id!r} must be an int in 0..2^31-1", queue_id=queue_id)
        if not isinstance(message, Message):
            raise IllegalParam(f"message must be a Message, got {type(message).__name__}", topic=topic)
        if message.topic != topic:
            raise IllegalParam(f"message topic {message.topic!r} differs from the queue's topic {topic!r}",
                               topic=topic, message_topic=message.topic)
        # Encode outside the lock (CRC of the body); queue offset, store time and
        # physical offset are patched in under it (and then the property CRC, if enabled).
        config = self.config
        prop_crc = config.append_prop_crc
        data = encode_message_buffer(message, queue_id=queue_id, queue_offset=0, store_timestamp=0,
                                     store_host=config.store_host, prop_crc=prop_crc)
        if len(data) > config.max_message_size:
            raise IllegalParam(f"message to {topic!r} is {len(data)} bytes encoded; at most "
                               f"{config.max_message_size} are accepted", topic=topic, size=len(data))
        # storeTimestamp follows the born host: 56, or 68 for IPv6 (sysFlag's low byte is at 39)
        ts_pos = _STORE_TS_V6_POS if data[_SYS_FLAG_LOW] & BORNHOST_V6_FLAG else _STORE_TS_POS
        key = (topic, queue_id)
        with self._put_lock:  # (the commit log's append lock too)
            if self._closed:
                raise SegmentClosed(f"local store {self.root!r} is closed", path=self.root)
            queue_offset = self._queue_offsets.get(key)
            if queue_offset is None:  # the queue's first put in this process
                try:
                    queue_offset = self._first_queue_offset(topic, queue_id)
                except LocalIOError as exc:  # (before the append: nothing was stored)
                    raise with_stored(exc, False) from None
                except OSError as exc:  # the queue's floor file
                    where = exc.filename or os.path.join(self.root, "consumequeue", topic, str(queue_id))
                    raise with_stored(local_io_error("raising the first offset of", where, exc), False) from None
            ts = _time_ns() // 1_000_000 if self._default_clock else int(self._clock())  # (now_ms)
            if ts < self._last_store_ts:
                ts = self._last_store_ts
            _I64.pack_into(data, ts_pos, ts)
            # encoded above, size checked; it sets the queue offset with the physical offset
            try:
                offset = self._commit_log.append_held(data, ts, prop_crc, queue_offset)
            except LocalIOError as exc:
                # the append did not move the log's end: nothing of the message is readable,
                # its partial bytes were cut (or are cut by recovery), its queue offset is unused
                raise with_stored(exc, False) from None
            self._queue_offsets[key] = queue_offset + 1
            self._last_store_ts = ts
        if self._reput_idle:
            # the reput thread waits for work: wake it (a busy one finds this message itself)
            self._reput_idle = False
            self._reput_wakeup.set()
        if self._sync_flush:
            try:
                self._commit_log.flush_to(offset + len(data))
            except LocalIOError as exc:
                # in the log (reads and the reput see it) but not confirmed on disk
                raise with_stored(exc, True, f"{topic}/{queue_id}@{queue_offset}, commit-log offset "
                                             f"{offset}, not confirmed on disk") from None
        return _new_put_result(LocalPutResult, (queue_offset, offset, ts))

    def set_floor_provider(self, provider: FloorProvider | None) -> None:
        """Ask ``provider(topic, queue_id)`` for ``(offset, until_ms)`` before the first put to
        a queue this store has no consume queue for: the put continues at ``offset`` (see
        :meth:`raise_queue_floor`). A tiered store passes what its tier holds, so a queue
        whose local history is gone never hands out an offset the tier already holds. An
        exception from the provider fails the put, storing nothing."""
        self._floor_provider = provider

    def raise_queue_floor(self, topic: str, queue_id: int, offset: int, until_ms: int = -1) -> bool:
        """Continue queue ``(topic, queue_id)`` at ``offset`` when it ends below it.

        Offsets below ``offset`` belong to another tier from now on: the queue neither
        serves nor hands them out (:meth:`ConsumeQueue.raise_floor`; durable, the consume
        queue is created when missing). ``until_ms``: the newest store time that tier holds
        (key lookups, :meth:`superseded_until_ms`). Returns False, changing nothing, when
        the queue already reaches ``offset``.
        """
        self._check_open()
        validate_topic(topic)
        key = (topic, queue_id)
        with self._put_lock:
            cq = self._consume_queue(topic, queue_id, create=True)
            raised = cq.raise_floor(offset, until_ms)
            if self._queue_offsets.get(key, 0) < cq.max_offset:
                self._queue_offsets[key] = cq.max_offset
            return raised

    def _first_queue_offset(self, topic: str, queue_id: int) -> int:
        """The next offset of a queue this process has not put to yet (put lock held)."""
        cq = self._cqs.get((topic, queue_id))
        start = cq.max_offset if cq is not None else 0
        provider = self._floor_provider
        if provider is not None:
            floor, until_ms = provider(topic, queue_id)
            if floor > start:
                self.raise_queue_floor(topic, queue_id, floor, until_ms)
                start = floor
        return start

    def superseded_until_ms(self) -> int:
        """The newest store time up to which some queue's messages are held by another tier
        instead of this store (:meth:`raise_queue_floor`); -1 when no queue has a floor. Key
        lookups of older messages must ask that tier, whatever this store's earliest time is."""
        return max((cq.floor_until_ms for cq in list(self._cqs.values()) if cq.floor), default=-1)

    def rebuild_queues(self, queues: Iterable[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        """Add to the consume queues of ``queues`` the units of their messages the commit log
        holds past their end (a queue whose files were lost or cut while the checkpoint says
        everything was dispatched): the commit log is replayed, in groups, from the end of each
        queue's last valid unit (from its first file when a queue has none), the units a queue
        holds already are skipped, and nothing else -- other queues, keys, listeners -- is
        touched. Returns ``{queue: (first, end)}`` for the queues that got units (each logged).

        For a store being opened, before its queues are continued past another tier (a tiered
        store asks for the queues that end below what its tier holds) and before it serves.
        """
        self._check_open()
        keys = set(queues)
        if not keys:
            return {}
        with self._flush_lock, self._put_lock, self._reput_lock:
            self._check_open()
            self.reput()
            done = self._rebuild(keys, "it ends below what the tier holds")
            for key, (_first, end) in done.items():
                if self._queue_offsets.get(key, end) < end:
                    self._queue_offsets[key] = end
            return done

    def _rebuild(self, keys: Iterable[tuple[str, int]], why: str, *,
                 files_lost: bool = False) -> dict[tuple[str, int], tuple[int, int]]:
        """Replay ``[start, reput offset)`` of the commit log into the consume queues of ``keys``
        only (see :meth:`rebuild_queues`); reput lock held (or opening). ``files_lost``: the
        queues' files are known to be gone (a queue the log holds nothing of is logged too)."""
        keys = set(keys)
        cl_min = self._commit_log.min_offset
        end = self._reput_offset
        before: dict[tuple[str, int], int] = {}
        start = end
        for key in keys:
            cq = self._cqs.get(key)
            before[key] = cq.max_offset if cq is not None else 0
            last_end = cq.last_unit_end() if cq is not None else -1
            start = min(start, max(last_end, cl_min))
        if start < end:
            # The reput machinery walks the commit log at the reput offset: lend it the range
            # (the flush lock is held, so no checkpoint records the lowered offset).
            self._rebuild_only = keys
            self._reput_offset = start
            try:
                self._reput_to(end, [0])
            except CorruptData as exc:
                log.error("local store %s: rebuilding consume queues stopped at commit-log offset %d: %s",
                          self.root, self._reput_offset, exc)
            finally:
                self._rebuild_only = None
                self._reput_offset = end
        done: dict[tuple[str, int], tuple[int, int]] = {}
        for key in sorted(keys):
            cq = self._cqs.get(key)
            if cq is None or cq.max_offset <= before[key]:
                if files_lost and end >= self._commit_log.max_offset:
                    log.warning("consume queue %s/%d: %s and the local commit log holds none of its messages "
                                "past them", key[0], key[1], why)
                elif files_lost:  # the replay from the reput offset, right after, restores what the log holds
                    log.info("consume queue %s/%d: %s; the replay of the local commit log from offset %d "
                             "rebuilds it", key[0], key[1], why, end)
                continue
            first = max(before[key], cq.min_offset)
            done[key] = (first, cq.max_offset)
            log.warning("consume queue %s/%d ended at offset %d (%s) but the local commit log holds more of its "
                        "messages: rebuilt units %d..%d from commit-log offset %d on", key[0], key[1], before[key],
                        why, first, cq.max_offset - 1, start)
        return done

    # ----------------------------------------------------------------- reput ----
    def add_dispatch_listener(self, listener: DispatchListener) -> None:
        """Call ``listener(DispatchRequest)`` for every message dispatched from now on,
        in commit-log order, on the reput thread (after its unit and keys are stored).

        A listener must be quick and must not raise (exceptions are logged and
        ignored). Messages dispatched before registration (e.g. replayed at open)
        are not replayed to it: use :meth:`list_queues` and the consume queues.
        """
        with self._reput_lock:
            self._listeners.append(listener)

    def remove_dispatch_listener(self, listener: DispatchListener) -> None:
        with self._reput_lock:
            self._listeners.remove(listener)

    def add_queue_listener(self, listener: QueueListener) -> None:
        """Call ``listener(topic, queue_id)`` once for each queue the reput dispatches a
        message to from now on (the first time it does), on the reput thread, after that
        message's unit and keys are stored.

        The cheap way to learn of new queues: it is called once per queue, not per
        message (a per-message :meth:`add_dispatch_listener` makes the reput build a
        :class:`DispatchRequest` for every message). Queues that exist already are in
        :meth:`list_queues`. A listener must be quick; exceptions are logged and ignored.
        """
        with self._reput_lock:
            self._queue_listeners.append((listener, set()))

    def remove_queue_listener(self, listener: QueueListener) -> None:
        with self._reput_lock:
            for i, (fn, _told) in enumerate(self._queue_listeners):
                if fn == listener:
                    del self._queue_listeners[i]
                    return
            raise ValueError(f"{listener!r} is not a queue listener")

    @property
    def reput_offset(self) -> int:
        """Commit-log offset up to which messages are in consume queues and the index."""
        return self._reput_offset

    def reput(self) -> int:
        """Dispatch every message appended since the last reput; returns how many.

        On a corrupt record the reput stops before it, logs, keeps the error in
        :attr:`reput_error` and tries again next time. A local disk failure while writing
        units or keys raises :class:`~tiered_core.errors.LocalIOError` naming the file (also
        kept in :attr:`reput_error`): the reput offset stays before the messages concerned,
        so the next reput writes them again.

        Records are taken a commit-log chunk at a time (:meth:`CommitLog.read_chunk`),
        scanned for the few fields a dispatch needs (:func:`~tiered_core.codec.reput_scan.
        scan_reput_records`), their consume-queue units written once per queue and their
        keys indexed in one batch; anything the scan does not accept (a BLANK record, a
        record larger than a chunk, a bad one) takes the per-record path, which raises the
        error a bad record always raised.

        Caught up (nothing appended past the reput offset, checked without the lock: both
        offsets only grow, and the reput offset moves only after its messages are dispatched)
        it returns 0 at once.
        """
        if not self._closed and self._reput_offset >= self._commit_log.max_offset:
            return 0
        with self._reput_lock:
            if self._closed:
                raise SegmentClosed(f"local store {self.root!r} is closed", path=self.root)
            end = self._commit_log.max_offset
            count = [0]
            try:
                self._reput_to(end, count)
                self._reput_offset = max(self._reput_offset, end)
                self._reput_error = None
            except CorruptData as exc:
                if self._reput_error is None or str(self._reput_error) != str(exc):
                    log.error("local store %s: reput stopped at %d: %s", self.root, self._reput_offset, exc)
                self._reput_error = exc
            except LocalIOError as exc:
                # The reput offset stays before every message whose unit or keys were not all
                # written: the next reput (or the replay at the next open) writes them again.
                self._reput_error = exc
                raise
            return count[0]

    def _reput_to(self, end: int, count: list[int]) -> None:
        read_chunk = self._commit_log.read_chunk
        while self._reput_offset < end:
            base = self._reput_offset
            data = read_chunk(base, end)
            if data is None:
                if not self._reput_one(end, count):  # past a BLANK record, or the end
                    return
                continue
            records, stop, status, _value = scan_reput_records(data, 0, len(data))
            done = self._dispatch_records(records, base, count) if records else 0
            if done < len(records) or stop == 0 or status == SCAN_OTHER:
                # the record at the reput offset needs the per-record path
                if not self._reput_one(end, count):
                    return

    def _reput_one(self, end: int, count: list[int]) -> bool:
        """Dispatch the next record the per-record way; False when there is none."""
        records = self._commit_log.iter_records(self._reput_offset, end, validate=False)
        try:
            for rec in records:
                # decoding checks every length of the record (the CRC was checked
                # by recovery for old bytes and is computed by us for new ones)
                msg = decode_message(rec.data, verify_crc=False, base_offset=rec.offset)
                self._dispatch(msg, rec.offset, len(rec.data))
                self._reput_offset = rec.offset + len(rec.data)
                count[0] += 1
                return True
            return False
        finally:
            records.close()

    def _topic_of(self, raw: bytes) -> str | None:
        """The topic named by a record's topic bytes, if valid (cached); None otherwise."""
        try:
            topic = raw.decode("utf-8")
            if topic not in self._valid_topics:
                validate_topic(topic)
                self._valid_topics.add(topic)
        except (UnicodeDecodeError, IllegalParam):
            return None
        self._topic_names[raw] = topic
        return topic

    def _dispatch_records(self, records: list[tuple], base: int, count: list[int]) -> int:
        """Dispatch scanned records (offsets relative to ``base``) in one batch: their
        units (one write per queue run), their keys (one index batch), then the
        listeners. Returns how many were dispatched; it stops before a record whose
        topic or properties do not decode (the per-record path names the problem)."""
        topic_names = self._topic_names
        runs: list[list] = []  # [cq key, first queue offset, next queue offset, units]
        open_runs: dict[tuple[str, int], list] = {}
        only = self._rebuild_only
        rebuilding = only is not None
        index_entries: list[tuple[str, list[str], int, int]] | None = (
            [] if self._index is not None and not rebuilding else None)
        requests: list[DispatchRequest] | None = [] if self._listeners and not rebuilding else None
        opening = self._opening
        pack_unit = _CQ_UNIT.pack
        done = 0
        reput_end = base
        try:
            for pos, size, queue_id, queue_offset, store_ts, topic_raw, props_raw, sys_flag, born_ts in records:
                topic = topic_names.get(topic_raw)
                if topic is None:
                    topic = self._topic_of(topic_raw)
                    if topic is None:
                        break
                if rebuilding and (topic, queue_id) not in only:
                    done += 1
                    reput_end = base + pos + size
                    continue
                try:
                    text = props_raw.decode("utf-8")
                except UnicodeDecodeError:
                    break
                offset = base + pos
                # (a property can only be found where its name and separator are)
                tags = find_property(text, PROPERTY_TAGS) if _TAGS_AT in text else None
                keys_text = find_property(text, PROPERTY_KEYS) if _KEYS_AT in text else None
                uniq = find_property(text, PROPERTY_UNIQ_KEY) if _UNIQ_AT in text else None
                tags_code = tags_hash_code(tags)
                unit = pack_unit(offset, size, tags_code)
                key = (topic, queue_id)
                run = open_runs.get(key)
                if run is not None and run[2] == queue_offset:
                    run[2] = queue_offset + 1
                    run[3] += unit
                else:
                    run = [key, queue_offset, queue_offset + 1, bytearray(unit)]
                    runs.append(run)
                    open_runs[key] = run
                if index_entries is not None and (uniq or keys_text):
                    keys = index_keys_of(uniq, keys_text)
                    if keys:
                        index_entries.append((topic, keys, offset, store_ts))
                if opening and store_ts > self._last_store_ts:
                    self._last_store_ts = store_ts  # (puts keep it up to date afterwards)
                if requests is not None:
                    requests.append(DispatchRequest(
                        topic=topic, queue_id=queue_id, queue_offset=queue_offset, commitlog_offset=offset,
                        size=size, store_timestamp=store_ts, tags_code=tags_code,
                        keys=tuple(k for k in keys_text.split(KEY_SEPARATOR) if k) if keys_text else (),
                        uniq_key=uniq, tags=tags, born_timestamp=born_ts, sys_flag=sys_flag))
                done += 1
                reput_end = offset + size
        finally:
            # units first, then keys (as one message at a time did); the reput offset moves
            # only once both are written, so a crash replays the batch (both are idempotent)
            for key, first, _next, units in runs:
                self._consume_queue(key[0], key[1], create=True).put_units(first, units)
            if index_entries:
                self._index.put_batch(index_entries)
            self._reput_offset = reput_end
            count[0] += done
        if self._queue_listeners and not rebuilding:
            self._announce_queues([run[0] for run in runs])
        if requests:
            self._notify(requests)
        return done

    def _notify(self, requests: list[DispatchRequest]) -> None:
        for req in requests:
            for listener in list(self._listeners):
                try:
                    listener(req)
                except Exception:  # noqa: BLE001 - a listener must not stop the reput
                    log.exception("dispatch listener %r failed on %s/%d@%d", listener, req.topic,
                                  req.queue_id, req.queue_offset)

    def _announce_queues(self, keys: list[tuple[str, int]]) -> None:
        """Call each queue listener once for every queue it has not been told of yet."""
        for listener, told in list(self._queue_listeners):
            for key in keys:
                if key in told:
                    continue
                told.add(key)
                try:
                    listener(key[0], key[1])
                except Exception:  # noqa: BLE001 - a listener must not stop the reput
                    log.exception("queue listener %r failed on %s/%d", listener, key[0], key[1])

    @property
    def reput_error(self) -> TieredStoreError | None:
        """The error that stopped the last reput, if it did not finish."""
        return self._reput_error

    def _consume_queue(self, topic: str, queue_id: int, create: bool) -> ConsumeQueue | None:
        key = (topic, queue_id)
        cq = self._cqs.get(key)
        if cq is None and create:
            with self._cq_lock:
                cq = self._cqs.get(key)
                if cq is None:
                    base = os.path.join(self.root, "consumequeue")
                    d = os.path.join(base, topic, str(queue_id))
                    cq = ConsumeQueue(d, topic, queue_id, self.config.consume_queue_units_per_file,
                                      private=self.config.read_only)
                    # a queue directory lost in a power cut would restart its offsets at 0
                    for directory in (() if self.config.read_only else (os.path.join(base, topic), base)):
                        try:
                            fsync_dir(directory)
                        except OSError as exc:
                            cq.close()
                            raise local_io_error("fsync of the directory", directory, exc) from None
                    self._cqs[key] = cq
        return cq

    def _dispatch(self, msg: MessageExt, offset: int, size: int) -> None:
        if msg.topic not in self._valid_topics:
            try:
                validate_topic(msg.topic)  # it becomes a directory name
            except IllegalParam:
                raise CorruptData(f"message at commit-log offset {offset} has an invalid topic "
                                  f"{msg.topic!r}", offset=offset, reason="bad_topic") from None
            self._valid_topics.add(msg.topic)
        only = self._rebuild_only
        if only is not None and (msg.topic, msg.queue_id) not in only:
            return
        cq = self._consume_queue(msg.topic, msg.queue_id, create=True)
        tags_code = tags_hash_code(msg.tags)
        cq.put(msg.queue_offset, offset, size, tags_code)
        if only is not None:
            return  # (a rebuild: the unit only)
        uniq = msg.properties.get(PROPERTY_UNIQ_KEY) or None
        req = DispatchRequest(
            topic=msg.topic, queue_id=msg.queue_id, queue_offset=msg.queue_offset,
            commitlog_offset=offset, size=size, store_timestamp=msg.store_timestamp,
            tags_code=tags_code, keys=tuple(msg.keys), uniq_key=uniq, tags=msg.tags,
            born_timestamp=msg.born_timestamp, sys_flag=msg.sys_flag,
        )
        if self._index is not None:
            keys = message_index_keys(msg)
            if keys:
                self._index.put_keys(msg.topic, keys, offset, msg.store_timestamp)
        if self._opening and msg.store_timestamp > self._last_store_ts:
            self._last_store_ts = msg.store_timestamp  # (puts keep it up to date afterwards)
        if self._queue_listeners:
            self._announce_queues([(msg.topic, msg.queue_id)])
        self._notify([req])

    # ----------------------------------------------------------------- flush ----
    def flush(self) -> int:
        """fsync the commit log, then consume queues and index, then write the
        checkpoint. Returns the flushed commit-log offset."""
        with self._flush_lock:
            if self.config.read_only:
                return self._commit_log.flushed_offset  # nothing of a reader's is written
            # (each queue's max offset before the commit log's flush: the units it counts
            # point at bytes this flush makes durable)
            maxes = tuple(sorted((key, cq.max_offset) for key, cq in list(self._cqs.items())))
            flushed = self._commit_log.flush()
            reput = self._reput_offset
            for cq in list(self._cqs.values()):
                if cq.dirty:
                    cq.flush()
            newest = None
            if self._index is not None:
                self._index.flush()
                files = self._index.files
                newest = os.path.basename(files[-1].path) if files else None
            self._write_checkpoint(_Checkpoint(flushed, reput, newest, maxes))
            return flushed

    def commit_point(self) -> int:
        """Commit-log offset below which every message is durable and may be tiered."""
        return self._commit_log.confirmed_offset

    @property
    def flushed_offset(self) -> int:
        return self._commit_log.flushed_offset

    @property
    def commit_log(self) -> CommitLog:
        return self._commit_log

    # ----------------------------------------------------------------- reads ----
    def list_queues(self) -> list[tuple[str, int]]:
        """Every (topic, queue id) with a consume queue, sorted."""
        return sorted(self._cqs)

    def has_queue(self, topic: str, queue_id: int) -> bool:
        """Whether ``(topic, queue_id)`` has a consume queue (O(1), unlike :meth:`list_queues`)."""
        return (topic, queue_id) in self._cqs

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """First readable queue offset (0 for an unknown queue)."""
        cq = self._cqs.get((topic, queue_id))
        return cq.min_offset if cq is not None else 0

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        """Next queue offset to be dispatched: one past the last readable message (0 when none)."""
        cq = self._cqs.get((topic, queue_id))
        return cq.max_offset if cq is not None else 0

    def get_commit_log_min_offset(self) -> int:
        return self._commit_log.min_offset

    def get_commit_log_max_offset(self) -> int:
        return self._commit_log.max_offset

    def get_consume_queue_units(self, topic: str, queue_id: int, offset: int,
                                max_count: int = 1) -> list[ConsumeQueueUnit]:
        """Units of ``offset .. offset+max_count-1`` (fewer at the end; [] for an unknown
        queue). IllegalOffset outside ``[min, max]``. Gap units are not valid
        (``unit.is_valid``)."""
        cq = self._cqs.get((topic, queue_id))
        if cq is None:
            return []
        return cq.get_units(offset, max_count)

    def read_group(self, topic: str, queue_id: int, offset: int, count: int,
                   max_bytes: int | None = None) -> "LocalGroup":
        """A group of a queue's messages for the dispatcher: their consume-queue units, read
        once, and their commit-log bytes: one read-only map of the span they lie in (one
        hold/release) -- never one read per message.

        Reads the units of ``offset .. offset+count-1`` and takes them from the first while
        each is valid (not a gap), durable (below :meth:`commit_point`), in the first one's
        commit-log file and, after the first, keeps the total size within ``max_bytes``. The bytes are NOT validated: the caller
        validates each message (:func:`~tiered_core.codec.dispatch_batch.build_group`).
        IllegalOffset when a taken message is no longer stored.
        """
        self._check_open()
        cq = self._cqs.get((topic, queue_id))
        units = cq.get_units(offset, count) if cq is not None and count > 0 else []
        commit_point = self.commit_point()
        taken = total = 0
        for unit in units:
            if not unit.is_valid or unit.commitlog_offset + unit.size > commit_point:
                break
            if taken and max_bytes is not None and total + unit.size > max_bytes:
                break
            total += unit.size
            taken += 1
        if not taken:
            return LocalGroup(units, 0, b"", [])
        # The group ends where the first message's commit-log file does (a message never
        # crosses files): one read-only map of the span, nothing copied until read. Other
        # queues' messages between ours are mapped, never read.
        file_size = self._commit_log.file_size
        first = units[0].commitlog_offset
        file_end = first - first % file_size + file_size
        while units[taken - 1].commitlog_offset + units[taken - 1].size > file_end:
            taken -= 1
        last = units[taken - 1].commitlog_offset + units[taken - 1].size
        view, at = self._commit_log.map_range(first, last - first)
        return LocalGroup(units, taken, view, [at + u.commitlog_offset - first for u in units[:taken]])

    def get_message_bytes(self, commitlog_offset: int, size: int | None = None, *,
                          verify: bool = True) -> bytes:
        """The stored bytes of the message at ``commitlog_offset`` (``size`` bytes, as
        its consume-queue unit says, or as its head says when None).

        With ``verify`` (default) the record is checked whole -- magic, every length,
        the size, the body CRC -- so corrupt bytes are never handed on (e.g. copied to
        the tiered store). IllegalOffset when it is not stored (expired or past the
        end), CorruptData when no valid message of that size is there.
        """
        self._check_open()
        if size is None:
            data = self._commit_log.read_message(commitlog_offset)
        else:
            data = self._commit_log.read(commitlog_offset, size)
        if verify:
            total = validate_message(data, base_offset=commitlog_offset)
            if total != len(data):
                raise CorruptData(f"message at commit-log offset {commitlog_offset} is {total} bytes, "
                                  f"not {len(data)}", offset=commitlog_offset, reason="length_mismatch")
        return data

    def get_message_by_commitlog_offset(self, commitlog_offset: int, size: int | None = None) -> MessageExt:
        """The decoded (CRC-checked) message at ``commitlog_offset``."""
        data = self.get_message_bytes(commitlog_offset, size)
        return decode_message(data, base_offset=commitlog_offset)

    def get_messages(self, topic: str, queue_id: int, offset: int, max_count: int = 32, *,
                     max_bytes: int | None = None) -> list[MessageExt]:
        """Up to ``max_count`` messages of a queue from ``offset`` on, decoded and CRC-checked.

        ``[]`` at the max offset or for an unknown queue; IllegalOffset below the min
        offset or past the max offset (``min_offset``/``max_offset`` attributes);
        ``max_bytes`` bounds the total size (at least one message is returned).
        A read stops before a message whose commit-log bytes expired meanwhile
        (IllegalOffset when that is the first one); CorruptData
        (naming the commit-log offset) when a message fails validation.
        """
        return self.read_messages(topic, queue_id, offset, max_count, max_bytes=max_bytes).messages

    def read_messages(self, topic: str, queue_id: int, offset: int, max_count: int = 32, *,
                      max_bytes: int | None = None,
                      message_filter: Callable[[int], bool] | None = None,
                      max_scan: int = DEFAULT_MAX_SCAN) -> "LocalReadResult":
        """Like :meth:`get_messages`, with a tags filter and where to read on.

        ``message_filter(tags_code)`` False skips a message without reading it; at
        most ``max_scan`` units are looked at per call (so a filter matching nothing
        cannot make one call read the whole queue). ``next_offset`` is the queue
        offset after the last unit looked at: the next call starts there. The bounds
        are those of the queue when the read began.
        """
        self._check_open()
        if max_count <= 0:
            raise IllegalParam(f"max_count must be > 0, got {max_count}", max_count=max_count)
        if max_scan <= 0:
            raise IllegalParam(f"max_scan must be > 0, got {max_scan}", max_scan=max_scan)
        cq = self._cqs.get((topic, queue_id))
        if cq is None:
            return LocalReadResult([], offset, 0, 0)
        lo, hi = cq.min_offset, cq.max_offset
        out: list[MessageExt] = []
        total = 0
        cur = offset
        scanned = 0
        batch = max_count if message_filter is None else max(max_count, 256)
        while len(out) < max_count and scanned < max_scan:
            units = cq.get_units(cur, min(batch, max_scan - scanned))
            if not units:
                break
            for unit in units:
                if max_bytes is not None and out and total + unit.size > max_bytes:
                    return LocalReadResult(out, cur, lo, hi)
                here = cur
                cur += 1
                scanned += 1
                if not unit.is_valid or (message_filter is not None and not message_filter(unit.tags_code)):
                    continue
                try:
                    data = self._commit_log.read(unit.commitlog_offset, unit.size)
                except IllegalOffset:
                    if unit.commitlog_offset < self._commit_log.min_offset and out:
                        # Expired while we read: stop before it, so a result is always a
                        # contiguous run (the next read, from ``here``, is below the min and
                        # goes to the tiered store, or is told the new min).
                        return LocalReadResult(out, here, lo, hi)
                    raise
                msg = decode_message(data, base_offset=unit.commitlog_offset)
                if msg.topic != topic or msg.queue_id != queue_id or msg.queue_offset != here:
                    raise CorruptData(
                        f"consume queue {topic}/{queue_id} unit {here} points at commit-log offset "
                        f"{unit.commitlog_offset}, which holds {msg.topic}/{msg.queue_id}@{msg.queue_offset}",
                        offset=unit.commitlog_offset, reason="index_mismatch")
                out.append(msg)
                total += unit.size
                if len(out) >= max_count:
                    break
        return LocalReadResult(out, cur, lo, hi)

    def _store_time_of_unit(self, unit: ConsumeQueueUnit) -> int | None:
        if not unit.is_valid:
            return None
        try:
            head = self._commit_log.read(unit.commitlog_offset, min(unit.size, _HEAD_PEEK))
            return peek_store_timestamp(head)
        except (IllegalOffset, CorruptData):
            return None

    def get_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        """Store time of the message at ``offset`` (IllegalOffset when not readable)."""
        cq = self._cqs.get((topic, queue_id))
        if cq is None:
            raise IllegalOffset(f"queue {topic}/{queue_id} has no messages", offset=offset)
        ts = self._store_time_of_unit(cq.get_unit(offset))
        if ts is None:
            raise IllegalOffset(f"message {topic}/{queue_id}@{offset} is not readable", offset=offset)
        return ts

    def get_earliest_message_time(self, topic: str | None = None, queue_id: int | None = None) -> int:
        """Store time of the oldest readable message of the store (no arguments) or of
        one queue; -1 when there is none."""
        if topic is None:
            lo, hi = self._commit_log.min_offset, self._commit_log.max_offset
            if lo >= hi:
                return -1
            try:
                for rec in self._commit_log.iter_records(lo, hi):
                    return peek_store_timestamp(rec.data)
            except (IllegalOffset, CorruptData):
                return -1
            return -1
        if queue_id is None:
            raise IllegalParam("queue_id is needed with topic", topic=topic)
        cq = self._cqs.get((topic, queue_id))
        if cq is None:
            return -1
        for off in range(cq.min_offset, min(cq.max_offset, cq.min_offset + 64)):
            ts = self._store_time_of_unit(cq.get_unit(off))
            if ts is not None:
                return ts
        return -1

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int,
                                    boundary: BoundaryType = BoundaryType.LOWER) -> int:
        """The queue offset of the first message stored at or after ``timestamp`` (ms).

        Semantics of the tiered store (digest 3.4): an empty queue gives its min
        offset; a time after the last message gives max offset; before the first, the
        min offset. LOWER gives the first offset stored at or after the time; UPPER
        the same unless messages were stored exactly at the time, then the last of
        them. E.g. times 40,50,50,50,60,60,70 at offsets 10..16: 35->10, 45->11,
        50 LOWER->11, 50 UPPER->13, 60 LOWER->14, 75->17.
        """
        if not isinstance(boundary, BoundaryType):
            raise IllegalParam(f"boundary must be a BoundaryType, got {boundary!r}", boundary=boundary)
        cq = self._cqs.get((topic, queue_id))
        if cq is None:
            return 0

        def time_at(off: int) -> int:
            ts = self._store_time_of_unit(cq.get_unit(off))
            return -1 if ts is None else ts  # unreadable (gap) units sort first

        return offset_by_time(cq.min_offset, cq.max_offset - 1, timestamp, boundary, time_at)

    def query_message(self, topic: str, key: str, max_count: int = 32, begin: int = 0,
                      end: int = LONG_MAX) -> list[MessageExt]:
        """Messages of ``topic`` whose KEYS or UNIQ_KEY include ``key``, stored in
        ``[begin, end]`` ms, newest first, at most ``max_count`` (index lookup; each
        hit is read and checked, so hash collisions never leak other keys)."""
        self._check_open()
        validate_topic(topic)
        if not isinstance(key, str) or not key:
            raise IllegalParam(f"key {key!r} must be a non-empty string", key=key)
        if max_count <= 0:
            raise IllegalParam(f"max_count must be > 0, got {max_count}", max_count=max_count)
        if self._index is None:
            return []
        found: dict[int, MessageExt] = {}

        def accept(phy: int) -> bool:
            if phy < self._commit_log.min_offset or phy >= self._reput_offset:
                return False  # expired, or not dispatched yet (or a stale item past a recovery cut)
            try:
                msg = self.get_message_by_commitlog_offset(phy)
            except (IllegalOffset, CorruptData):
                return False
            if msg.topic != topic or not begin <= msg.store_timestamp <= end:
                return False
            cq = self._cqs.get((topic, msg.queue_id))
            if cq is not None and msg.queue_offset < cq.min_offset:
                return False  # below the queue's floor: another tier serves that offset
            if key not in msg.keys and msg.uniq_key != key:
                return False
            found[phy] = msg
            return True

        offsets = self._index.query(topic, key, max_count, begin, end, accept)
        return [found[o] for o in offsets]

    # ------------------------------------------------------------- retention ----
    def delete_expired(self, now_ms: int | None = None, *, keep_from: int | None = None) -> int:
        """Delete commit-log files older than ``file_reserved_time_ms`` (by mtime, which
        is the store time of a full file's last message), oldest first, never the
        active file, never bytes not yet reput or flushed, nor at/after ``keep_from``
        (e.g. what the tiered store has not copied yet). Consume-queue min offsets
        move first, then their files, index files and the commit-log files go.
        Returns the number of commit-log files deleted."""
        self._check_open()
        now = self._clock() if now_ms is None else now_ms
        with self._retention_lock:
            keep = min(self._reput_offset, self._commit_log.flushed_offset)
            if keep_from is not None:
                keep = min(keep, keep_from)
            files = self._commit_log.expired_files(now, self.config.file_reserved_time_ms, keep)
            if not files:
                return 0
            new_min = files[-1].limit
            for cq in list(self._cqs.values()):
                cq.delete_expired(new_min)
            if self._index is not None:
                self._index.delete_expired(new_min)
            return self._commit_log.delete_files_before(new_min)

    # ----------------------------------------------------------------- close ----
    def close(self) -> None:
        """Stop the services, dispatch and flush what is left, write the checkpoint,
        release the directory. Idempotent."""
        if self._closed:
            return
        self._stop.set()
        self._reput_wakeup.set()
        for t in self._threads:
            t.join()
        failure: BaseException | None = None
        try:
            try:
                self.reput()
            except LocalIOError as exc:
                failure = exc  # flush what is written all the same; the next open replays the rest
            self.flush()
        finally:
            with self._put_lock, self._reput_lock:
                self._closed = True
                self._close_files()
            self._release_dir_lock()
        if failure is not None:
            raise failure

    def _close_files(self) -> None:
        for cq in self._cqs.values():
            cq.close()
        if self._index is not None:
            self._index.close()
        if self._commit_log is not None:
            self._commit_log.close()

    def __enter__(self) -> "LocalMessageStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = [
    "LocalMessageStore",
    "LocalStoreConfig",
    "LocalPutResult",
    "LocalReadResult",
    "DispatchRequest",
    "DispatchListener",
    "QueueListener",
    "FlushMode",
    "BoundaryType",
]
