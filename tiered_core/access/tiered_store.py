"""TieredMessageStore: the public API, serving every read from whichever tier holds it.

Writes go to the local store; its reput step tells the dispatcher which queues exist,
and the dispatcher copies messages to the tiered store in group commits. Reads are
routed by the read policy (:class:`~tiered_core.access.policy.ReadPolicy`); a miss in
the tiered store falls back to the local one.
"""

from __future__ import annotations

import dataclasses
import logging
import operator
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Callable

from tiered_core.access.continuity import (
    check_no_tier_inside, continue_after_tier, history_trusted, set_aside_local_history, tier_only_until_ms,
)
from tiered_core.access.key_repair import KeyIndexRepair, key_index_gap, repair_ranges
from tiered_core.access.opening import check_before_open, rebuild_fix
from tiered_core.access.paths import check_store_path, make_store_dir
from tiered_core.access.tail_witness import local_witness
from tiered_core.access.dispatcher import DispatchConfig, DispatchStats, MessageStoreDispatcher
from tiered_core.access.fetcher import MessageFilter
from tiered_core.access.key_query import tiered_key_hits
from tiered_core.access.policy import ReadPolicy
from tiered_core.access.view import TierReadView
from tiered_core.access.results import (
    GetMessageResult,
    GetMessageStatus,
    PutMessageResult,
    PutMessageStatus,
    QueryMessageResult,
    StoreTier,
)
from tiered_core.codec.message import Message, MessageExt
from tiered_core.codec.naming import validate_topic
from tiered_core.config import StoreConfig
from tiered_core.errors import IllegalParam, SegmentClosed, StateConflict, TieredStoreError
from tiered_core.flat.damage import SegmentDamage
from tiered_core.flat.ownership import PrefixOwnership, ReadOnlyDriver, load_store_id
from tiered_core.flat.file_store import FlatFileStore
from tiered_core.ops.reconcile import ReconcileReport, listed_segment_paths, open_checked_metadata
from tiered_core.index.service import IndexStoreService
from tiered_core.local.local_store import LocalMessageStore, LocalStoreConfig
from tiered_core.common import LONG_MAX, BoundaryType, now_ms

log = logging.getLogger(__name__)
_PUT_OK = PutMessageStatus.PUT_OK

#: NOT_IN_MEM treats the newest this-many bytes of the local commit log as "in memory"
#: (RocketMQ asks the OS page cache; a bounded window is the portable stand-in).
IN_MEMORY_WINDOW = 256 << 20


@dataclass
class QueueStat:
    """Offsets of one queue in each tier (``tiered_*`` are -1 when it has no tiered file),
    and its damaged tiered segments (each names the segment, what is wrong and, when the
    consume queue can tell, the queue offsets it lost)."""

    topic: str
    queue_id: int
    local_min: int
    local_max: int
    tiered_min: int
    tiered_commit: int
    tiered_segments: int
    damage: list[SegmentDamage] = field(default_factory=list)
    #: Why the queue's tiered data could not be recovered at open (None: it was).
    unrecoverable: str | None = None


class TieredMessageStore:
    """A local message store with a tiered store behind it.

    Guarantees: a message put is readable at once (from the local store); once
    dispatched it stays readable after the local copy is deleted; local retention never
    deletes a message that is not yet tiered. Bad input raises
    :class:`~tiered_core.errors.IllegalParam` naming it; reads report missing data by
    status, never by exception.
    """

    def __init__(self, config: StoreConfig, *, background: bool = False, take_over: bool = False,
                 clock: Callable[[], int] | None = None, read_only: bool = False) -> None:
        if read_only and (background or take_over):
            raise IllegalParam("a store opened read-only runs no background services and takes nothing over",
                               read_only=read_only, background=background, take_over=take_over)
        self.config = config
        self.read_only = read_only
        self.policy = ReadPolicy.parse(config.storage_level)
        if not read_only:
            check_store_path(config)
        local_config = config.section(LocalStoreConfig)
        # A message must fit one tiered segment, or it could never be tiered: refuse it at put.
        local_config = dataclasses.replace(local_config, max_message_size=min(local_config.max_message_size,
                                                                              config.commit_log_max_size))
        driver = metadata = checks = view = report = None
        #: Where an untrusted local history was moved at this open (None: it was used).
        self.given_up_history: str | None = None
        self.local = None  # type: ignore[assignment]
        self._scratch: str | None = None
        try:
            # Everything that can refuse the open is checked first, writing nothing anywhere:
            # the identity, the owner of the tier prefix, the metadata against the tier.
            driver = config.open_driver()
            checks = check_before_open(config, driver, take_over=take_over, read_only=read_only)
            if read_only:
                self.local = self._open_local_read_only(local_config, clock)
                self.ownership = PrefixOwnership(driver, config.cluster, config.broker, checks.store_id or "",
                                                 config.store_path)  # never claimed: nothing is written
                self.driver = ReadOnlyDriver(driver)
                self.metadata = metadata = checks.metadata
                checks.metadata = None
                report = checks.report
            else:
                make_store_dir(config)
                # ``clock`` (ms since the epoch) stamps store times and names index files; tests pin it.
                self.local = LocalMessageStore(config.store_path, local_config, clock=clock)
                store_id = load_store_id(config.store_path, restore=checks.store_id)
                # Own the tier prefix before touching it; every later write checks the fence.
                self.ownership = PrefixOwnership(driver, config.cluster, config.broker, store_id, config.store_path)
                if take_over:  # (it may set the local history aside: refused before the claim, not after)
                    check_no_tier_inside(config.store_path)
                self.ownership.claim(take_over=take_over, reclaim=checks.reclaim)
                self.driver = self.ownership.guard(driver)
                epoch, took_over = self.ownership.record.epoch, self.ownership.took_over_from is not None
                if not history_trusted(config.store_path, epoch=epoch, took_over=took_over) \
                        and self.local.list_queues():
                    # Another store may have written these offsets since: continue from the tier alone.
                    self.local.close()
                    moved = set_aside_local_history(config.store_path, epoch)
                    log.warning("the local history of %s predates ownership epoch %d (another store wrote "
                                "this prefix since), so it is not used: moved to %s; every queue continues "
                                "after what the tier holds", config.store_path, epoch, moved)
                    self.local = LocalMessageStore(config.store_path, local_config, clock=clock)
                    self.given_up_history = moved
                checks.close()
                metadata, report = open_checked_metadata(
                    config.open_metadata, config.effective_metadata_path(), self.driver, config.cluster,
                    config.broker, rebuild=take_over or config.metadata_recovery == "rebuild",
                    fix=rebuild_fix(config), checked=None if take_over else checks.report)
                self.metadata = metadata
                checks.record(config.store_path, store_id, self.metadata)
                if self.ownership.took_over_from is not None:
                    # the tails the previous owner may still write: of the segments the
                    # (checked or rebuilt) metadata lists, never an object it does not
                    self.ownership.seal_tails(listed_segment_paths(self.metadata, config.cluster))
            # the tiered read stack (flat files, read-ahead cache, fetcher), built in one place;
            # from here on it owns the driver and the metadata and closes them
            # (a commit-log tail past the metadata's end is adopted only when the local disk,
            # where it still holds those offsets, holds the same messages)
            self.view = view = TierReadView(config, self.driver, self.metadata, witness=local_witness(self.local),
                                            owns_driver=True, owns_metadata=True)
            self.flat_files, self.cache, self.fetcher = view.flat_files, view.cache, view.fetcher
            if report is not None and report.missing:
                _forget_expired_missing(self.flat_files, report, config.cluster, (clock or now_ms)())
            #: Queues whose tiered files could not be recovered at open, with the reason: puts to
            #: them are refused and only what their tier still holds intact is served; the
            #: other queues work.
            self.unrecoverable: dict[tuple[str, int], str] = view.unrecoverable
            if self.unrecoverable:
                log.error("%d tiered queue(s) cannot be recovered; puts to them are refused and only their "
                          "intact tiered data is served (the other queues are open): %s", len(self.unrecoverable),
                          "; ".join(f"{t}/{q}: {why}" for (t, q), why in self.unrecoverable.items()))
            if not read_only:  # (a read-only open routes past the local end to the tier instead)
                continue_after_tier(self.local, self.flat_files, store_path=config.store_path,
                                    epoch=self.ownership.record.epoch)
            #: Key lookups ask the tiered index up to this time at least (see tier_only_until_ms).
            self._tier_only_until_ms = tier_only_until_ms(self.local, self.flat_files)
            # (A read-only open reads the store's own local index files, such as the keys a
            # streaming sink or import indexed, even without a local store: it writes nothing.)
            self.index = IndexStoreService.from_store_config(config, self.driver, self.metadata,
                                                             clock=clock or now_ms, read_only=read_only)
            #: After a recovery path, the repair of the key index (:mod:`tiered_core.access.key_repair`;
            #: see :attr:`key_index_gap_since`); None: nothing to repair.
            self.key_repair: KeyIndexRepair | None = None
            #: A read-only open's key-index gap (queue -> first offset whose keys the index
            #: misses, and since when): it cannot index them again, so key lookups say so.
            self._read_only_key_gap: tuple[dict[tuple[str, int], int], int] | None = None
            if not read_only:
                self.key_repair = self._plan_key_repair()
                if self.key_repair is not None and not background:
                    self.key_repair.run()
            else:
                self._read_only_key_gap = self._key_index_gap()
            self.dispatcher = MessageStoreDispatcher(self.local, self.flat_files, self.index,
                                                     config.section(DispatchConfig), clock=clock)
        except BaseException:
            if checks is not None:
                checks.close()
            if view is not None:
                view.close()  # (and the metadata and driver it owns)
            else:
                if metadata is not None:
                    metadata.close()
                if driver is not None:
                    driver.close()
            if self.local is not None:
                self.local.close()
            self._remove_scratch()
            raise
        if not read_only:  # a read-only store makes no tiered files for new local queues
            self.local.add_queue_listener(self.dispatcher.on_new_queue)
        self._closed = False
        self._lock = threading.Lock()
        self._expiry_listeners: list[Callable[[int], None]] = []
        self._retention_stop = threading.Event()
        self._retention_thread: threading.Thread | None = None
        if background:
            self.dispatcher.start()
            self.index.start()
            if self.key_repair is not None:
                self.key_repair.start()  # beside the store's traffic
            if config.local_retention_interval_ms > 0:
                self._retention_thread = threading.Thread(target=self._retention_loop, daemon=True,
                                                          name=f"local-retention:{config.broker}")
                self._retention_thread.start()

    def _key_index_gap(self) -> tuple[dict[tuple[str, int], int], int] | None:
        """What the key index misses (:mod:`tiered_core.access.key_repair`): per queue, the first
        tiered offset past its coverage mark, or without marks (a lost disk, a lost local index
        directory, a store from before the marks) from the first message stored at or after the
        end of what the index's own files cover; and that time (0 with marks). None: nothing.
        Reads only."""
        since = None
        if not self.index.coverage.known:
            since = key_index_gap(self.index, self.flat_files)
            if since is None:
                return None
        ranges = repair_ranges(self.index, self.flat_files, since=since)
        return (ranges, since if since is not None else 0) if ranges else None

    def _plan_key_repair(self) -> KeyIndexRepair | None:
        """The repair of what the key index misses (:meth:`_key_index_gap`), or None."""
        coverage = self.index.coverage
        gap = self._key_index_gap()
        if gap is None:
            if not coverage.known:
                coverage.declare_known()  # a new store, or one whose index covers its tier
                coverage.save()
            return None
        ranges, since = gap
        log.warning("the key index misses the keys of tiered messages of %d queue(s) (its local part was lost or "
                    "is older than the tier): indexing them again from the tier", len(ranges))
        return KeyIndexRepair(self.flat_files, self.index, ranges, since)

    @property
    def key_index_gap_since(self) -> int | None:
        """After a recovery path, the store time from which keys of tiered messages may be
        missing from the key index until its repair finished (None: none are missing)."""
        repair = self.key_repair
        return None if repair is None or repair.done.is_set() else repair.since

    def _open_local_read_only(self, local_config: LocalStoreConfig,
                              clock: Callable[[], int] | None) -> LocalMessageStore:
        """The local store of a read-only open, without background services; when
        ``store_path`` holds none (a lost disk, the metadata elsewhere), an empty one in a
        private temporary directory, so that nothing is created under ``store_path``."""
        local_config = dataclasses.replace(local_config, background_services=False, read_only=True)
        root = self.config.store_path
        if not os.path.isdir(os.path.join(root, "commitlog")):
            root = self._scratch = tempfile.mkdtemp(prefix="tiered-read-only-")
        return LocalMessageStore(root, local_config, clock=clock)

    def _remove_scratch(self) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def _refuse_write(self, what: str) -> None:
        if self.read_only:
            raise StateConflict(f"{what} refused: the store at {self.config.store_path!r} is open read-only",
                                store_path=self.config.store_path, read_only=True)

    @classmethod
    def open(cls, config: StoreConfig, *, background: bool = False, take_over: bool = False,
             clock: Callable[[], int] | None = None, read_only: bool = False) -> "TieredMessageStore":
        """Open (or create) the store ``config`` describes; ``background`` runs the dispatcher
        and index upload threads and, every ``local_retention_interval_ms``, local retention
        (:meth:`delete_expired_local`); otherwise call :meth:`dispatch` yourself.

        The store claims its tier prefix (``{cluster}/{broker}/``) first: when another store
        owns it, :class:`~tiered_core.errors.PrefixOwned` names both. ``take_over=True`` is a
        deliberate failover: this store becomes the owner, seals the previous owner's last
        segments (its next write fails with :class:`~tiered_core.errors.Fenced`) and rebuilds
        its metadata from the backend where it does not list everything. Objects the
        metadata does not list stop the open with :class:`~tiered_core.errors.UnknownObjects`
        unless ``metadata_recovery = "rebuild"``. ``clock`` (milliseconds since the epoch; the
        wall clock by default) stamps store times and names index files: tests pin it to get
        the same bytes for the same input.

        Identity: a store records the cluster, broker, driver and tier location it was created
        with (:mod:`tiered_core.ops.identity`); opened with another one it raises
        :class:`~tiered_core.errors.IdentityMismatch` naming the field, both values and the
        fix. Every check that can refuse the open runs before anything is written, so a
        refused open leaves the store directory, the tier and the metadata as they were.

        ``read_only=True`` opens the store to read it and write nothing to the tier or the
        metadata: no claim of the prefix (the driver refuses writes), the metadata read
        through a private in-memory copy, objects it does not list still refused
        (``UnknownObjects``), no tiered files made for new queues; :meth:`put_message`,
        :meth:`dispatch` and the expiry calls raise :class:`~tiered_core.errors.StateConflict`.
        The local store is opened as usual (its lock, its crash recovery), or, when
        ``store_path`` holds none, an empty one in a private temporary directory.
        """
        return cls(config, background=background, take_over=take_over, clock=clock, read_only=read_only)

    # -- writes ---------------------------------------------------------------------------

    #: Put admission, for a layer above that owns some queues of this store (static topics:
    #: :mod:`tiered_core.static_topic.guard` refuses direct puts into their physical queues).
    #: When set, ``put_guard(message, queue_id)`` runs first in every :meth:`put_message` and
    #: refuses the put by raising (nothing is written); None (the default) admits every put.
    put_guard: Callable[[Message, int], None] | None = None
    _tier_only_until_ms = -1
    _read_only_key_gap: "tuple[dict[tuple[str, int], int], int] | None" = None

    def put_message(self, message: Message, queue_id: int = 0) -> PutMessageResult:
        """Store ``message`` in queue ``queue_id`` (locally; the dispatcher tiers it later).

        Raises :class:`~tiered_core.errors.Fenced` once another store took this one's tier
        prefix over: producers must move to the new owner; whatever :attr:`put_guard` raises.
        """
        self._refuse_write("put")
        if self.put_guard is not None:
            self.put_guard(message, queue_id)
        if self.ownership.fenced is not None:
            raise self.ownership.fenced
        if self.unrecoverable and (message.topic, queue_id) in self.unrecoverable:
            why = self.unrecoverable[(message.topic, queue_id)]
            raise StateConflict(
                f"{message.topic}/{queue_id}: its tiered files could not be recovered at open ({why}), so where "
                "it continues is unknown: puts to it are refused. Restore the damaged object from a backup of "
                "the backend and reopen the store", topic=message.topic, queue_id=queue_id, reason=why)
        queue_offset, commitlog_offset, store_timestamp = self.local.put_message(message.topic, queue_id, message)
        return PutMessageResult(_PUT_OK, queue_offset, commitlog_offset, store_timestamp)

    def dispatch(self, force: bool = True) -> DispatchStats:
        """One synchronous dispatch round (tests, tools): reput, copy, upload the index.

        Raises :class:`~tiered_core.errors.Fenced` when another store took the prefix over.
        """
        self._refuse_write("dispatch")
        self.local.reput()
        self.local.flush()
        stats = self.dispatcher.dispatch(force=force)
        if self.ownership.fenced is not None:
            raise self.ownership.fenced
        if force:
            self.index.compact_and_upload()
        return stats

    # -- routing ----------------------------------------------------------------------------

    def _read_tiered(self, topic: str, queue_id: int, offset: int) -> bool:
        if self.policy is ReadPolicy.FORCE:
            return True
        if self.policy is ReadPolicy.DISABLE:
            return False
        flat = self.flat_files.get(topic, queue_id)
        if flat is None or offset >= flat.consume_queue_commit_offset():
            return False  # not tiered yet
        local_min = self.local.get_min_offset_in_queue(topic, queue_id)
        local_max = self.local.get_max_offset_in_queue(topic, queue_id)
        if local_max <= local_min or offset < local_min or offset >= local_max:
            return True  # not on the local disk
        if self.policy.check(ReadPolicy.NOT_IN_MEM):
            units = self.local.get_consume_queue_units(topic, queue_id, offset, 1)
            if units and units[0].commitlog_offset < self.local.get_commit_log_max_offset() - IN_MEMORY_WINDOW:
                return True
        return False

    # -- reads ------------------------------------------------------------------------------

    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_count: int = 32,
                    message_filter: MessageFilter | None = None) -> GetMessageResult:
        """Up to ``max_count`` messages of a queue from ``offset``; ``group`` names the consumer.

        A message whose tiered copy is damaged is never served: a read stops before it, and
        a read at it is served from the local copy, or else answers OFFSET_FOUND_NULL (the
        consumer retries; it is never told to skip) with the reason in ``result.error``."""
        validate_topic(topic)
        if max_count <= 0:
            raise IllegalParam(f"max_count must be > 0, got {max_count}", max_count=max_count)
        if offset < 0:
            raise IllegalParam(f"offset must be >= 0, got {offset}", offset=offset)
        if self.unrecoverable and (topic, queue_id) in self.unrecoverable:
            return self._get_unrecoverable(topic, queue_id, offset, max_count, message_filter)
        if self._read_tiered(topic, queue_id, offset):
            try:
                result = self.fetcher.get_message(topic, queue_id, offset, max_count, message_filter)
            except TieredStoreError as exc:
                log.warning("tiered read of %s/%d@%d failed (%s); reading locally", topic, queue_id, offset, exc)
                local_min = self.local.get_min_offset_in_queue(topic, queue_id)
                if offset < local_min:
                    # Only the tiered store has it: "try again", never OFFSET_TOO_SMALL, which
                    # would move the consumer past messages the tiered store still holds.
                    return GetMessageResult(GetMessageStatus.OFFSET_FOUND_NULL, next_begin_offset=offset,
                                            min_offset=local_min,
                                            max_offset=self.local.get_max_offset_in_queue(topic, queue_id),
                                            tier=StoreTier.TIERED, error=exc)
                return self._get_local(topic, queue_id, offset, max_count, message_filter)
            local_min = self.local.get_min_offset_in_queue(topic, queue_id)
            local_max = self.local.get_max_offset_in_queue(topic, queue_id)
            if (result.status in (GetMessageStatus.OFFSET_FOUND_NULL, GetMessageStatus.NO_MATCHED_LOGIC_QUEUE)
                    and local_min <= offset < local_max):
                return self._get_local(topic, queue_id, offset, max_count, message_filter)
            if local_max > local_min and local_min < result.min_offset:
                result.min_offset = local_min  # never raise max to the local max (RocketMQ #7363)
            return result
        try:
            result = self._get_local(topic, queue_id, offset, max_count, message_filter)
        except TieredStoreError as exc:  # local retention deleted the files under the read
            log.info("local read of %s/%d@%d failed (%s); bounds re-read", topic, queue_id, offset, exc)
            result = self._get_local(topic, queue_id, offset, max_count, message_filter)
        if result.status is GetMessageStatus.OFFSET_TOO_SMALL and self._read_tiered(topic, queue_id, offset):
            # Retention moved the local min past the offset after it was routed here: the
            # tiered store has it (never tell the consumer to skip what is still stored).
            return self.get_message(group, topic, queue_id, offset, max_count, message_filter)
        return result

    def _get_unrecoverable(self, topic: str, queue_id: int, offset: int, max_count: int,
                           message_filter: MessageFilter | None) -> GetMessageResult:
        """A queue whose tiered files could not be recovered: its local copy serves what it
        holds; an offset only the tier held is read from what the tier still holds intact
        (a queue whose newest segment lost bytes stays loaded, refusing writes only), or
        else answers OFFSET_FOUND_NULL with the reason (never "too small", which would move
        a consumer past it)."""
        local_min = self.local.get_min_offset_in_queue(topic, queue_id)
        local_max = self.local.get_max_offset_in_queue(topic, queue_id)
        if local_min <= offset < local_max or offset >= self._recorded_end(topic, queue_id):
            return self._get_local(topic, queue_id, offset, max_count, message_filter)
        why = self.unrecoverable[(topic, queue_id)]
        flat = self.flat_files.get(topic, queue_id)
        if flat is not None and flat.initialized:
            try:
                result = self.fetcher.get_message(topic, queue_id, offset, max_count, message_filter)
            except TieredStoreError as exc:
                why = f"{why}; reading {topic}/{queue_id}@{offset}: {exc}"
            else:
                if result.status is GetMessageStatus.FOUND:
                    return result
                if result.error is not None:
                    why = f"{why}; reading {topic}/{queue_id}@{offset}: {result.error}"
        return GetMessageResult(GetMessageStatus.OFFSET_FOUND_NULL, next_begin_offset=offset, min_offset=local_min,
                                max_offset=max(local_max, self._recorded_end(topic, queue_id)), tier=StoreTier.TIERED,
                                error=StateConflict(f"{topic}/{queue_id}@{offset} is in the tier, whose files of this "
                                                    f"queue could not be recovered at open: {why}", topic=topic,
                                                    queue_id=queue_id, offset=offset, reason=why))

    def _recorded_end(self, topic: str, queue_id: int) -> int:
        meta = self.metadata.get_queue(topic, queue_id)
        return meta.max_offset if meta is not None else 0

    def _get_local(self, topic: str, queue_id: int, offset: int, max_count: int,
                   message_filter: MessageFilter | None) -> GetMessageResult:
        lo = self.local.get_min_offset_in_queue(topic, queue_id)
        hi = self.local.get_max_offset_in_queue(topic, queue_id)
        if hi <= lo:
            # Nothing local (a lost disk, a failover, a floor): past the tier's end the queue
            # overflows as a whole; a queue neither tier knows does not exist.
            flat = self.flat_files.get(topic, queue_id)
            tier_lo, tier_hi = ((flat.consume_queue_min_offset(), flat.consume_queue_commit_offset())
                                if flat is not None and flat.initialized else (lo, hi))
            if not self.local.has_queue(topic, queue_id) and tier_hi <= 0:
                return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, next_begin_offset=offset,
                                        tier=StoreTier.LOCAL)
            end = max(hi, tier_hi)
            if end <= 0 or offset < end:
                status, nxt = GetMessageStatus.NO_MESSAGE_IN_QUEUE, offset
            else:
                status = GetMessageStatus.OFFSET_OVERFLOW_ONE if offset == end else GetMessageStatus.OFFSET_OVERFLOW_BADLY
                nxt = end
            # (an empty local queue's bounds say nothing of where the queue begins)
            return GetMessageResult(status, next_begin_offset=nxt, min_offset=tier_lo if tier_hi > 0 else lo,
                                    max_offset=end, tier=StoreTier.LOCAL)
        elif offset < lo:
            status, nxt = GetMessageStatus.OFFSET_TOO_SMALL, lo
        elif offset >= hi:
            # Past the local end, the queue ends where the tier does when that is further: a
            # read-only open of a restored old copy (a writable open continues the local queue
            # there). Told the local end, a consumer would go back and read the tier's again.
            flat = self.flat_files.get(topic, queue_id) if self.policy is not ReadPolicy.DISABLE else None
            if flat is not None and flat.initialized and offset >= flat.consume_queue_commit_offset() > hi:
                hi = flat.consume_queue_commit_offset()
            status = GetMessageStatus.OFFSET_OVERFLOW_ONE if offset == hi else GetMessageStatus.OFFSET_OVERFLOW_BADLY
            nxt = hi
        else:
            res = self.local.read_messages(topic, queue_id, offset, max_count, message_filter=message_filter)
            status = GetMessageStatus.FOUND if res.messages else GetMessageStatus.NO_MATCHED_MESSAGE
            return GetMessageResult(status, res.messages, res.next_offset, self.get_min_offset_in_queue(topic, queue_id),
                                    hi, StoreTier.LOCAL)
        if status is not GetMessageStatus.OFFSET_TOO_SMALL:
            lo = self.get_min_offset_in_queue(topic, queue_id)  # past the end: the queue's range, tiers and all
        return GetMessageResult(status, next_begin_offset=nxt, min_offset=lo, max_offset=hi, tier=StoreTier.LOCAL)

    # -- offsets and times ------------------------------------------------------------------

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        local = self.local.get_min_offset_in_queue(topic, queue_id)
        flat = self.flat_files.get(topic, queue_id)
        if self.policy is ReadPolicy.DISABLE or flat is None or not flat.initialized:
            return local
        try:  # the tiered min may need a read of the commit log's head
            tiered_min = flat.consume_queue_min_offset()
        except TieredStoreError as exc:
            log.warning("tiered min offset of %s/%d unavailable (%s); using the local one", topic, queue_id, exc)
            return local
        if flat.consume_queue_commit_offset() <= tiered_min:
            return local
        if self.local.get_max_offset_in_queue(topic, queue_id) <= local:
            return tiered_min  # an empty local queue (e.g. after a take-over) holds no offset of its own
        return min(local, tiered_min)

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        flat = self.flat_files.get(topic, queue_id)
        tiered = flat.consume_queue_commit_offset() if flat is not None else 0
        return max(self.local.get_max_offset_in_queue(topic, queue_id), tiered)

    def is_tiered(self, topic: str, queue_id: int, offset: int) -> bool:
        """Whether the tier durably holds the queue's message at ``offset``."""
        flat = self.flat_files.get(topic, queue_id)
        return (flat is not None and flat.initialized
                and flat.consume_queue_min_offset() <= offset < flat.consume_queue_commit_offset())

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        local = self.local.get_earliest_message_time(topic, queue_id)
        if self.policy is ReadPolicy.DISABLE:
            return local
        values = [t for t in (local, self.fetcher.get_earliest_message_time(topic, queue_id)) if t > -1]
        return min(values) if values else -1

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int,
                                    boundary: BoundaryType = BoundaryType.LOWER) -> int:
        """The queue offset of the first message stored at or after ``timestamp`` (see
        BoundaryType), over every offset either store serves: the tier and the local copy
        may each hold offsets the other does not (the tier expired ahead of the local copy,
        or the local copy is ahead of the tier)."""
        validate_topic(topic)
        _checked_queue_id(queue_id)
        timestamp = _checked_time(timestamp)
        if not isinstance(boundary, BoundaryType):
            raise IllegalParam(f"boundary must be a BoundaryType, got {boundary!r}", boundary=boundary)
        local_earliest = self.local.get_earliest_message_time(topic, queue_id)
        flat = self.flat_files.get(topic, queue_id)
        # A read-only open of a restored old copy: the tier holds offsets past the local end
        # (a writable open continues the local queue after them), newer than every local message.
        tier_ahead = flat is not None and flat.initialized and \
            flat.consume_queue_commit_offset() > self.local.get_max_offset_in_queue(topic, queue_id)
        # <=: messages of the local copy's first millisecond may also precede it in the tiered store
        if self.policy is not ReadPolicy.DISABLE and (
                self.policy is ReadPolicy.FORCE or local_earliest < 0 or timestamp <= local_earliest or tier_ahead):
            try:
                if flat is not None and flat.consume_queue_commit_offset() > flat.consume_queue_min_offset():
                    if self.policy is ReadPolicy.FORCE:
                        return self.fetcher.get_offset_in_queue_by_time(topic, queue_id, timestamp, boundary)
                    return self._offset_by_time_in_both(flat, topic, queue_id, timestamp, boundary)
            except TieredStoreError as exc:
                log.warning("tiered time lookup of %s/%d failed (%s); asking the local store", topic, queue_id, exc)
        return self.local.get_offset_in_queue_by_time(topic, queue_id, timestamp, boundary)

    def _offset_by_time_in_both(self, flat, topic: str, queue_id: int, timestamp: int,
                                boundary: BoundaryType) -> int:
        """The time lookup over the tier's offsets and the local copy's together (store times
        grow with offsets): the first offset stored at or after a time is the smaller of the
        two stores' answers that name a message; UPPER, when messages were stored exactly
        at ``timestamp``, is the last of them: the first stored at or after the next ms, less one."""
        tier_end = flat.consume_queue_commit_offset()
        local_min = self.local.get_min_offset_in_queue(topic, queue_id)
        local_end = self.local.get_max_offset_in_queue(topic, queue_id)

        def first_at_or_after(ts: int) -> int:
            found = [o for o in (self.fetcher.get_offset_in_queue_by_time(topic, queue_id, ts, BoundaryType.LOWER),)
                     if o < tier_end]
            if local_end > local_min:
                found += [o for o in (self.local.get_offset_in_queue_by_time(topic, queue_id, ts, BoundaryType.LOWER),)
                          if o < local_end]
            return min(found) if found else max(tier_end, local_end)

        lower = first_at_or_after(timestamp)
        if boundary is BoundaryType.LOWER or timestamp >= LONG_MAX:
            return lower
        after = first_at_or_after(timestamp + 1)
        return after - 1 if after > lower else lower

    # -- keys ---------------------------------------------------------------------------------

    def query_message(self, topic: str, key: str, max_count: int = 32, begin: int = 0,
                      end: int | None = None) -> QueryMessageResult:
        """Messages of ``topic`` with ``key`` (KEYS or UNIQ_KEY) stored in ``[begin, end]``:
        the local index first, then the tiered index for what is older than the local copy."""
        validate_topic(topic)
        end = LONG_MAX if end is None else end
        if _int_or_refused(max_count, "max_count must be an int > 0", "max_count") <= 0:
            raise IllegalParam(f"max_count must be an int > 0, got {max_count!r}", max_count=repr(max_count))
        max_count = operator.index(max_count)
        begin, end = _checked_time(begin), _checked_time(end)
        if not isinstance(key, str) or not key:
            raise IllegalParam(f"key {key!r} must be a non-empty string", key=repr(key))
        if " " in key:
            raise IllegalParam(f"key {key!r} holds a space, which separates a message's keys: no message has it "
                               "(look each key up alone)", key=key)
        earliest = self.local.get_earliest_message_time()
        force = self.policy is ReadPolicy.FORCE
        found: list[MessageExt] = []
        error: TieredStoreError | None = None
        if not force and earliest >= 0 and end >= earliest:
            found = self.local.query_message(topic, key, max_count, begin, end)
        # A queue continued past the tier (a floor) has older local copies the tier supersedes;
        # a queue only the tier holds may be newer than every local message (a restored copy).
        tier_until = max(earliest, self.local.superseded_until_ms(), self._tier_only_until_ms)
        if self.policy is not ReadPolicy.DISABLE and len(found) < max_count and (
                force or earliest < 0 or begin <= tier_until):  # <=: a tier-only message may be stored at tier_until
            window_end = end if force or earliest < 0 else min(end, tier_until)
            seen = {(m.queue_id, m.queue_offset) for m in found}
            hits, error = self._query_tiered(topic, key, max_count - len(found), begin, window_end)
            for m in hits:
                if (m.queue_id, m.queue_offset) not in seen:
                    found.append(m)
        if error is None and len(found) < max_count and self._read_only_key_gap is not None:
            error = self._key_gap_error(topic, end)
        return QueryMessageResult(found[:max_count], error)

    def _key_gap_error(self, topic: str, end: int) -> StateConflict | None:
        """Why a read-only key lookup of ``topic`` up to time ``end`` may miss messages: the
        key index misses keys of this topic's tiered messages that the local copy does not
        hold (its local part is older than the tier: a restored copy of the store directory),
        and only a writable open indexes them again. None when the gap holds nothing of the
        topic or the window, or only messages the local copy's own index finds."""
        ranges, since = self._read_only_key_gap
        if end < since:
            return None
        queues = []
        for (t, q), first in sorted(ranges.items()):
            flat = self.flat_files.get(t, q) if t == topic else None
            if flat is None:
                continue
            # offsets the local copy still holds are found through its own index
            local_min, local_max = self.local.get_min_offset_in_queue(t, q), self.local.get_max_offset_in_queue(t, q)
            if not (local_min <= first and flat.consume_queue_commit_offset() <= local_max):
                queues.append((q, first))
        if not queues:
            return None
        shown = ", ".join(f"{topic}/{q} from offset {first}" for q, first in queues[:5])
        return StateConflict(
            f"the key index misses the keys of tiered messages of {len(queues)} queue(s) of topic {topic!r} "
            f"({shown}{', ...' if len(queues) > 5 else ''}): its local part is older than the tier (a restored "
            "copy of the store directory, a crash before it caught up) and the local copy no longer holds those "
            "messages, and a read-only open does not index them again, so this lookup may "
            "have missed messages. The store's next writable open (starting it, `tiered put`) indexes them; reads "
            "by offset and time are not affected", topic=topic, key_index_gap=True,
            queues=[q for q, _first in queues])

    def _query_tiered(self, topic: str, key: str, max_count: int, begin: int,
                      end: int) -> tuple[list[MessageExt], TieredStoreError | None]:
        return tiered_key_hits(self.index, self.metadata, self.flat_files, self.fetcher.prop_crc,
                               topic, key, max_count, begin, end)

    # -- maintenance ----------------------------------------------------------------------------

    def delete_expired_local(self, now_ms: int | None = None) -> int:
        """Local retention: delete expired commit-log files, never a message not yet tiered.

        Returns how many commit-log files were deleted; when that is more than 0, every
        listener added by :meth:`add_local_expiry_listener` is called with the count after the
        files are gone (a listener's exception is logged, never raised here). A store opened
        with ``background=True`` runs this every ``local_retention_interval_ms``."""
        self._refuse_write("local retention")
        keep = self.dispatcher.untiered_local_offset()
        deleted = self.local.delete_expired(now_ms, keep_from=keep)
        if deleted:
            for listener in list(self._expiry_listeners):
                try:
                    listener(deleted)
                except Exception:  # noqa: BLE001 - retention is done; the listener's failure is its own
                    log.exception("local expiry listener %r failed", listener)
        return deleted

    def add_local_expiry_listener(self, listener: Callable[[int], None]) -> None:
        """Call ``listener(deleted_files)`` after each local retention run that deleted files
        (explicit or background), on the thread that ran it, with no store lock held."""
        self._expiry_listeners.append(listener)

    def _retention_loop(self) -> None:
        """The background local retention (RocketMQ's clean-commit-log service)."""
        interval = self.config.local_retention_interval_ms / 1000
        while not self._retention_stop.wait(interval):
            try:
                self.delete_expired_local()
            except SegmentClosed:
                return
            except Exception:  # noqa: BLE001 - keep the service alive, report it
                log.exception("local retention of %s failed", self.config.store_path)

    def delete_expired_tiered(self, now_ms: int | None = None) -> None:
        """Tiered retention: delete segments older than each topic's reserve time.

        Raises :class:`~tiered_core.errors.Fenced` when another store owns the prefix now.
        """
        self._refuse_write("tiered retention")
        self.ownership.check()
        self.flat_files.delete_expired(now_ms)
        self.index.destroy_expired()

    def stat(self, check_damage: bool = True) -> list[QueueStat]:
        """Per-queue offsets in each tier, and damaged tiered segments.

        ``check_damage`` compares every segment with ONE listing of the store's tier prefix
        (a segment that is gone or shorter than the metadata records is damaged; a listing
        that fails is logged and skipped); without it only the damage reads have met so far
        is reported. Damage never stops a stat: a damaged segment costs its own range only.
        Reads only."""
        damage: dict[tuple[str, int], list[SegmentDamage]] = {}
        if check_damage:
            try:
                damage = self.flat_files.check_damage()
            except TieredStoreError as exc:
                log.warning("cannot list the tier to check for damaged segments: %s", exc)
        keys = (set(self.local.list_queues()) | {(f.topic, f.queue_id) for f in self.flat_files.files()}
                | set(self.unrecoverable))
        out = []
        for topic, qid in sorted(keys):
            flat = self.flat_files.get(topic, qid)
            why = self.unrecoverable.get((topic, qid))
            if why is not None:
                meta = self.metadata.get_queue(topic, qid)
                out.append(QueueStat(topic, qid, self.local.get_min_offset_in_queue(topic, qid),
                                     self.local.get_max_offset_in_queue(topic, qid),
                                     meta.min_offset if meta else -1, meta.max_offset if meta else -1, 0,
                                     unrecoverable=why))
                continue
            out.append(QueueStat(
                topic, qid, self.local.get_min_offset_in_queue(topic, qid), self.local.get_max_offset_in_queue(topic, qid),
                flat.consume_queue_min_offset() if flat and flat.initialized else -1,
                flat.consume_queue_commit_offset() if flat and flat.initialized else -1,
                flat.segment_count() if flat else 0,
                damage.get((topic, qid)) or (flat.damaged_segments() if flat else [])))
        return out

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._retention_stop.set()
            if self._retention_thread is not None:
                self._retention_thread.join()
            if self.key_repair is not None:
                self.key_repair.stop()
            self.dispatcher.shutdown()
            self.index.shutdown()
        finally:
            try:
                self.local.close()  # (a full disk may fail its last flush: still close the rest)
            finally:
                try:
                    self.view.close()  # flat files, cache, metadata, driver
                finally:
                    self._remove_scratch()

    def __enter__(self) -> "TieredMessageStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _checked_time(timestamp: object) -> int:
    """``timestamp`` (epoch ms, an int) or IllegalParam naming it: a string, None, a float or
    a bool would compare as something else or fail deep in a lookup."""
    return _int_or_refused(timestamp, "timestamp must be epoch milliseconds (an int)", "timestamp")


def _int_or_refused(value: object, what: str, field: str) -> int:
    """``value`` as an int (anything with ``__index__`` but a bool), else IllegalParam ``what``."""
    if not isinstance(value, bool):
        try:
            return operator.index(value)  # type: ignore[arg-type]
        except TypeError:
            pass
    raise IllegalParam(f"{what}, got {value!r}", **{field: repr(value)})


def _checked_queue_id(queue_id: object) -> int:
    """``queue_id`` (an int >= 0) or IllegalParam naming it."""
    checked = _int_or_refused(queue_id, "queue id must be an int >= 0", "queue_id")
    if checked < 0:
        raise IllegalParam(f"queue id must be an int >= 0, got {queue_id!r}", queue_id=repr(queue_id))
    return checked


def _forget_expired_missing(flat_files: FlatFileStore, report: ReconcileReport, cluster: str, now: int) -> None:
    """Segments the metadata lists and the backend does not hold: leading ones past their
    reserve time were expired by tiered retention while this metadata was away (a store
    directory restored from a backup), and are cleaned as expiry would; the rest are damage."""
    forgotten = flat_files.forget_expired_missing(report.missing, now)
    if forgotten:
        log.warning("%d segment(s) under %r that the metadata lists are gone from the backend and older than "
                    "their reserve time (tiered retention deleted them, e.g. while the store directory was a "
                    "backup): treated as expired", forgotten, report.prefix)
    listed = listed_segment_paths(flat_files.metadata, cluster) if forgotten else None
    left = [path for path in report.missing if listed is None or path in listed]
    if left:
        log.error("the metadata lists %d non-empty segment(s) the backend does not hold under %r, e.g. %s",
                  len(left), report.prefix, left[:5])
