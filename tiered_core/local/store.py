"""LocalMessageStore: the hot tier (RocketMQ's DefaultMessageStore, in small).

Directory layout under ``root``::

    commitlog/00000000000000000000 ...      all queues' messages (CommitLog)
    consumequeue/{topic}/{queueId}/000...   20-byte units per queue (ConsumeQueue)
    index/yyyyMMddHHmmssSSS                 key index (IndexFile)
    checkpoint.json                          flushed commit-log offset and reput offset
    lock                                     held (flock) while a process has the store open

Write path: :meth:`LocalMessageStore.put_message` assigns the queue offset and the
store timestamp, encodes the message and appends it to the CommitLog. The *reput*
step (:meth:`LocalMessageStore.reput`, also run by a background thread) reads what
was appended since the last reput, in commit-log order, adds each message's unit to
its ConsumeQueue, its keys to the index, and hands a :class:`DispatchRequest` to
every registered listener (the tiered dispatcher). Reads go through the consume
queues.

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
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from tiered_core.codec.consume_queue import ConsumeQueueUnit
from tiered_core.codec.hashing import tags_hash_code
from tiered_core.codec.keys import message_index_keys
from tiered_core.codec._impl import decode_message, encode_message, peek_store_timestamp, validate_message
from tiered_core.codec.message import (
    PROPERTY_UNIQ_KEY,
    QUEUE_OFFSET_POS,
    Message,
    MessageExt,
    store_timestamp_position,
)
from tiered_core.codec.naming import validate_topic
from tiered_core.errors import (
    ConfigError,
    CorruptData,
    IllegalOffset,
    IllegalParam,
    SegmentClosed,
    StateConflict,
    TieredStoreError,
)
from tiered_core.local.commit_log import END_FILE_MIN_BLANK_LENGTH, CommitLog
from tiered_core.local.consume_queue import ConsumeQueue
from tiered_core.local.index_file import IndexService
from tiered_core.common import INT_MAX, LONG_MAX, BoundaryType, fsync_dir, now_ms, offset_by_time
from tiered_core.configdef import HOUR_MS, KEYS

log = logging.getLogger(__name__)

_I64 = struct.Struct(">q")
#: Default largest message (RocketMQ's maxMessageSize is 4 MiB; larger ones are common here).
DEFAULT_MAX_MESSAGE_SIZE = 16 << 20
#: Units one read_messages call looks at, at most (bounds a filtered read).
DEFAULT_MAX_SCAN = 16_000
CHECKPOINT_FILE = "checkpoint.json"
LOCK_FILE = "lock"
#: Bytes read to find a message's store timestamp (its head, IPv6 hosts included).
_HEAD_PEEK = 96


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
    reput_interval_ms: int = 10  # background reput poll (it also wakes on every put)
    background_services: bool = True  # run the reput and flush threads
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
        for key in ("message_index_enable", "background_services", "append_prop_crc"):
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


class LocalGroup(NamedTuple):
    """What :meth:`LocalMessageStore.read_group` read: every unit asked for (``units``), of
    which the first ``taken`` were taken; message ``i < taken`` is
    ``buf[positions[i]:positions[i] + units[i].size]`` (not yet validated)."""

    units: list[ConsumeQueueUnit]
    taken: int
    buf: "bytes | mmap.mmap"  # a map is unmapped when the group is dropped
    positions: list[int]


#: Bytes of other messages a group read takes in between two of its own rather than
#: issuing another read (a read costs about what copying this much does).
_GROUP_READ_GAP = 32 << 10


class _Checkpoint(NamedTuple):
    commitlog_flushed: int
    reput_offset: int


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
        os.close(fd)
        raise StateConflict(f"local store {root!r} is open in another process", path=root) from None
    return fd


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
      stores nothing.

    After opening, :attr:`recovery` (a :class:`~tiered_core.local.commit_log.RecoveryResult`)
    tells what restart recovery validated and cut.

    Thread-safe: puts from many threads, reads, reput, flush and retention may run
    concurrently. Raises :class:`~tiered_core.errors.SegmentClosed` after
    :meth:`close` and :class:`~tiered_core.errors.StateConflict` when another
    process has the directory open.
    """

    def __init__(self, root: str | os.PathLike[str], config: LocalStoreConfig | None = None, *,
                 clock: Callable[[], int] | None = None) -> None:
        self.root = os.fspath(root)
        self.config = config or LocalStoreConfig()
        self._clock = clock or now_ms
        self._closed = False
        self._put_lock = threading.Lock()
        self._reput_lock = threading.RLock()
        self._cq_lock = threading.Lock()
        self._retention_lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._listeners: list[DispatchListener] = []
        self._cqs: dict[tuple[str, int], ConsumeQueue] = {}
        self._queue_offsets: dict[tuple[str, int], int] = {}
        self._last_store_ts = 0
        self._opening = True
        self._valid_topics: set[str] = set()
        self._last_checkpoint: _Checkpoint | None = None
        self._reput_error: TieredStoreError | None = None
        self._stop = threading.Event()
        self._reput_wakeup = threading.Event()
        self._threads: list[threading.Thread] = []

        try:
            os.makedirs(self.root, exist_ok=True)
        except OSError as exc:
            raise IllegalParam(f"local store root {self.root!r} cannot be a directory: {exc.strerror or exc}",
                               path=self.root) from None
        self._lock_fd = self._acquire_dir_lock()
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
        self._commit_log = CommitLog(os.path.join(self.root, "commitlog"), cfg.commit_log_file_size)
        rec = self._commit_log.recover(cp.commitlog_flushed if cp else None)
        self.recovery = rec
        self._commit_log.flush()
        cl_min, cl_max = self._commit_log.min_offset, self._commit_log.max_offset
        self._load_consume_queues(cl_min, cl_max)
        self._index = (IndexService(os.path.join(self.root, "index"), cfg.index_hash_slots,
                                    cfg.index_max_items, clock=self._clock)
                       if cfg.message_index_enable else None)
        fsync_dir(self.root)  # the directories just created
        start = cp.reput_offset if cp else cl_min
        # Consume queues lost since the checkpoint (e.g. their directory was removed)
        # are rebuilt: replay from the newest message any queue still knows.
        cq_end = max((cq.last_unit_end() for cq in self._cqs.values()), default=-1)
        if cq_end < start:
            start = max(cq_end, cl_min)
        self._reput_offset = min(max(start, cl_min), cl_max)
        if self._index is not None:
            # Messages before the replay start are indexed; items past it may be partial
            # (killed mid-reput) or stale (bytes recovery cut): undo them, then replay.
            self._index.truncate_from(self._reput_offset)
        self._last_store_ts = self._commit_log.last_store_timestamp
        self.reput()
        if self._reput_error is not None:
            raise self._reput_error
        for key, cq in self._cqs.items():
            self._queue_offsets[key] = cq.max_offset
        self._opening = False
        self.flush()

    def _load_consume_queues(self, cl_min: int, cl_max: int) -> None:
        base = os.path.join(self.root, "consumequeue")
        os.makedirs(base, exist_ok=True)
        for topic in sorted(os.listdir(base)):
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
                cq = ConsumeQueue(os.path.join(tdir, qname), topic, qid,
                                  self.config.consume_queue_units_per_file)
                cq.recover(cl_max)
                cq.correct_min_offset(cl_min)
                self._cqs[(topic, qid)] = cq

    def _read_checkpoint(self) -> _Checkpoint | None:
        path = os.path.join(self.root, CHECKPOINT_FILE)
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            cp = _Checkpoint(int(data["commitlog_flushed"]), int(data["reput_offset"]))
            if cp.commitlog_flushed < 0 or cp.reput_offset < 0:
                raise ValueError("negative offset")
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
                           "reput_offset": cp.reput_offset, "written_at": now_ms()})
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(self.root)
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
        interval = self.config.reput_interval_ms / 1000
        while not self._stop.is_set():
            self._reput_wakeup.wait(interval)
            self._reput_wakeup.clear()
            if self._stop.is_set():
                break
            try:
                self.reput()
            except SegmentClosed:
                break
            except Exception:  # noqa: BLE001 - the loop must survive; reput logs details
                log.exception("local store %s: reput failed", self.root)
                self._stop.wait(0.1)

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
            except Exception:  # noqa: BLE001
                log.exception("local store %s: flush failed", self.root)

    # ---------------------------------------------------------------- writes ----
    def _check_open(self) -> None:
        if self._closed:
            raise SegmentClosed(f"local store {self.root!r} is closed", path=self.root)

    def put_message(self, topic: str, queue_id: int, message: Message) -> LocalPutResult:
        """Store ``message`` in queue ``(topic, queue_id)``.

        Returns its queue offset, commit-log offset and store timestamp. With SYNC
        flush the message is fsynced before this returns. IllegalParam for a bad
        topic, queue id or message (nothing is stored).
        """
        self._check_open()
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
        prop_crc = self.config.append_prop_crc
        data = bytearray(encode_message(message, queue_id=queue_id, queue_offset=0, store_timestamp=0,
                                        store_host=self.config.store_host, prop_crc=prop_crc))
        if len(data) > self.config.max_message_size:
            raise IllegalParam(f"message to {topic!r} is {len(data)} bytes encoded; at most "
                               f"{self.config.max_message_size} are accepted", topic=topic, size=len(data))
        ts_pos = store_timestamp_position(struct.unpack_from(">i", data, 36)[0])
        key = (topic, queue_id)
        with self._put_lock:
            self._check_open()
            queue_offset = self._queue_offsets.get(key, 0)
            ts = max(int(self._clock()), self._last_store_ts)
            _I64.pack_into(data, QUEUE_OFFSET_POS, queue_offset)
            _I64.pack_into(data, ts_pos, ts)
            res = self._commit_log.append(data, ts, prop_crc=prop_crc)
            self._queue_offsets[key] = queue_offset + 1
            self._last_store_ts = ts
        self._reput_wakeup.set()
        if self.config.flush_mode is FlushMode.SYNC:
            self._commit_log.flush_to(res.commitlog_offset + res.size)
        return LocalPutResult(queue_offset, res.commitlog_offset, ts)

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

    @property
    def reput_offset(self) -> int:
        """Commit-log offset up to which messages are in consume queues and the index."""
        return self._reput_offset

    def reput(self) -> int:
        """Dispatch every message appended since the last reput; returns how many.

        On a corrupt record the reput stops before it, logs, keeps the error in
        :attr:`reput_error` and tries again next time.
        """
        with self._reput_lock:
            if self._closed:
                raise SegmentClosed(f"local store {self.root!r} is closed", path=self.root)
            end = self._commit_log.max_offset
            count = 0
            try:
                for rec in self._commit_log.iter_records(self._reput_offset, end, validate=False):
                    # decoding checks every length of the record (the CRC was checked
                    # by recovery for old bytes and is computed by us for new ones)
                    msg = decode_message(rec.data, verify_crc=False, base_offset=rec.offset)
                    self._dispatch(msg, rec.offset, len(rec.data))
                    self._reput_offset = rec.offset + len(rec.data)
                    count += 1
                self._reput_offset = max(self._reput_offset, end)
                self._reput_error = None
            except CorruptData as exc:
                if self._reput_error is None or str(self._reput_error) != str(exc):
                    log.error("local store %s: reput stopped at %d: %s", self.root, self._reput_offset, exc)
                self._reput_error = exc
            return count

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
                    cq = ConsumeQueue(d, topic, queue_id, self.config.consume_queue_units_per_file)
                    # a queue directory lost in a power cut would restart its offsets at 0
                    fsync_dir(os.path.join(base, topic))
                    fsync_dir(base)
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
        cq = self._consume_queue(msg.topic, msg.queue_id, create=True)
        tags_code = tags_hash_code(msg.tags)
        cq.put(msg.queue_offset, offset, size, tags_code)
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
        for listener in list(self._listeners):
            try:
                listener(req)
            except Exception:  # noqa: BLE001 - a listener must not stop the reput
                log.exception("dispatch listener %r failed on %s/%d@%d", listener, req.topic,
                              req.queue_id, req.queue_offset)

    # ----------------------------------------------------------------- flush ----
    def flush(self) -> int:
        """fsync the commit log, then consume queues and index, then write the
        checkpoint. Returns the flushed commit-log offset."""
        with self._flush_lock:
            flushed = self._commit_log.flush()
            reput = self._reput_offset
            for cq in list(self._cqs.values()):
                if cq.dirty:
                    cq.flush()
            if self._index is not None:
                self._index.flush()
            self._write_checkpoint(_Checkpoint(flushed, reput))
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
        hold/release), or, for a group across commit-log files, one pread per run of nearby
        messages -- never one read per message.

        Reads the units of ``offset .. offset+count-1`` and takes them from the first while
        each is valid (not a gap), durable (below :meth:`commit_point`) and, after the first,
        keeps the total size within ``max_bytes``. The bytes are NOT validated: the caller
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
        file_size = self._commit_log.file_size
        first, last = units[0].commitlog_offset, units[taken - 1].commitlog_offset + units[taken - 1].size
        if first // file_size == (last - 1) // file_size:
            # One file (the usual case): one map of the span, nothing copied until read.
            view, at = self._commit_log.map_range(first, last - first)
            return LocalGroup(units, taken, view, [at + u.commitlog_offset - first for u in units[:taken]])
        pieces: list[bytes] = []
        positions: list[int] = []
        base = 0  # where the current run's bytes start in the joined buffer
        i = 0
        while i < taken:
            start = units[i].commitlog_offset
            end = start + units[i].size
            j = i + 1
            file_end = start - start % file_size + file_size
            while j < taken:  # extend the run while the next message is near, in the same file
                nxt = units[j]
                if nxt.commitlog_offset < end or nxt.commitlog_offset - end > _GROUP_READ_GAP \
                        or nxt.commitlog_offset + nxt.size > file_end:
                    break
                end = nxt.commitlog_offset + nxt.size
                j += 1
            pieces.append(self._commit_log.read(start, end - start))
            positions.extend(base + u.commitlog_offset - start for u in units[i:j])
            base += end - start
            i = j
        buf = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        return LocalGroup(units, taken, buf, positions)

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
        Messages whose commit-log bytes expired meanwhile are left out; CorruptData
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
                    if unit.commitlog_offset < self._commit_log.min_offset:
                        continue  # expired while we read
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
        try:
            self.reput()
            self.flush()
        finally:
            with self._put_lock, self._reput_lock:
                self._closed = True
                self._close_files()
            self._release_dir_lock()

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
    "FlushMode",
    "BoundaryType",
]
