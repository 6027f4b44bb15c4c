"""MessageStoreDispatcher: copies messages from the local store to the tiered store.

Per queue, messages are copied in groups: when ``group_commit_count`` are waiting, when
the oldest waited ``group_commit_interval_ms``, or on ``force``. A group stays under
``group_commit_size`` bytes, but a single larger message is dispatched alone (RocketMQ
#10998 let it block the queue forever). Only messages below the local commit point
(durable locally) are copied. A group whose commit failed stays buffered in its
segments and is retried, in order, before anything newer is appended.

Concurrency: a round copies the queues that have work at once, each on a thread of its
own; a queue's groups commit one after the other, so a queue has at most one upload in
flight. ``max_pending_limit`` bounds the uploads in flight across queues (and across
callers: rounds of the background thread, ``dispatch(force=True)``, ``dispatch_queue``);
a queue beyond it waits for a permit. The thread pool grows only as queues with work
are submitted, up to that limit, so a store with four busy queues runs four threads.

A group is copied as a group (DESIGN section 9): its local consume-queue units and the
commit-log span they lie in are read once (``LocalMessageStore.read_group``); one pass
(:func:`~tiered_core.codec.dispatch_batch.build_group`) validates the messages, rewrites
their physical offsets, builds their tiered consume-queue units and picks up their store
times and index keys; the tiered commit log and consume queue each take one append, and
the index one ``put_keys``. The bytes are those of the per-message path.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from tiered_core.codec.consume_queue import CQ_UNIT_SIZE
from tiered_core.codec._impl import build_group
from tiered_core.codec._impl import peek_store_timestamp
from tiered_core.configdef import KEYS, bound_fields
from tiered_core.errors import Fenced, OffsetConflict, TieredStoreError
from tiered_core.flat.file_store import FlatFileStore
from tiered_core.spi.access import CompositeAccess
from tiered_core.local.local_store import DispatchRequest, LocalMessageStore
from tiered_core.common import AppendResult

log = logging.getLogger(__name__)

#: Rounds save the key-index coverage marks at most this often (shutdown always saves).
COVERAGE_SAVE_INTERVAL_S = 5.0


@dataclass
class _PendingKeys:
    """Keys of a queue's appended, not yet durable messages (what ``put_keys`` takes)."""

    keys: list[tuple[str, ...]] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class DispatchConfig:
    """The dispatcher's settings: defaults, bounds and meaning come from the declaration
    (:mod:`tiered_core.configdef.keys`); ``StoreConfig.section(DispatchConfig)`` fills them.
    A bad value raises :class:`~tiered_core.errors.ConfigError` naming the field."""

    group_commit_count: int = KEYS.group_commit_count.field()
    group_commit_size: int = KEYS.group_commit_size.field()
    group_commit_interval_ms: int = KEYS.group_commit_interval_ms.field()
    max_pending_limit: int = KEYS.max_pending_limit.field()

    def __post_init__(self) -> None:
        for name, (key, _) in bound_fields(type(self)).items():
            object.__setattr__(self, name, key.check(getattr(self, name), name, "DispatchConfig"))


@dataclass
class DispatchStats:
    """What one :meth:`MessageStoreDispatcher.dispatch` round did."""

    messages: int = 0
    bytes: int = 0
    groups: int = 0
    failed_commits: int = 0
    queues: int = 0
    errors: list[str] = field(default_factory=list)

    def add(self, other: "DispatchStats") -> None:
        self.messages += other.messages
        self.bytes += other.bytes
        self.groups += other.groups
        self.failed_commits += other.failed_commits
        self.errors.extend(other.errors)


class _ErrorLog:
    """The background dispatcher's log of failed rounds: the errors of a round when they differ
    from the last ones logged, or the same again after :attr:`REPEAT_S` (with how many rounds
    failed meanwhile), and one line when a round copies everything again. A backend that stays
    full or down is thus heard of at once and then once a minute, not once a round."""

    REPEAT_S = 60.0
    #: Errors shown per logged round (a backend that is down fails every queue's).
    SHOWN = 10

    def __init__(self, clock=time.monotonic) -> None:
        self._clock = clock
        self._last: list[str] = []
        self._logged_at = 0.0
        self._rounds = 0

    def round(self, errors: list[str]) -> None:
        if not errors:
            if self._last:
                log.warning("dispatch copies again after %d failed round(s)", self._rounds)
            self._last, self._rounds = [], 0
            return
        self._rounds += 1
        now = self._clock()
        if errors != self._last or now - self._logged_at >= self.REPEAT_S:
            for error in errors[:self.SHOWN]:
                log.error("dispatch round %d failing: %s", self._rounds, error)
            if len(errors) > self.SHOWN:
                log.error("dispatch round %d failing: and %d more queue(s)", self._rounds, len(errors) - self.SHOWN)
            self._last, self._logged_at = list(errors), now


class MessageStoreDispatcher:
    """Local -> tiered copy, per queue, in group commits. Thread-safe.

    ``index`` (an :class:`~tiered_core.index.service.IndexStoreService`) receives every
    message's keys once its group is durable.
    """

    def __init__(self, local: LocalMessageStore, flat_files: FlatFileStore, index=None,
                 config: DispatchConfig | None = None, *, clock: Callable[[], int] | None = None) -> None:
        self.local = local
        self.flat_files = flat_files
        self.index = index
        self.config = config = config or DispatchConfig()
        # The group rules, as attributes (a test may change one on a running dispatcher).
        self.group_commit_count = config.group_commit_count
        self.group_commit_size = config.group_commit_size
        self.group_commit_interval_ms = config.group_commit_interval_ms
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)
        # Uploads in flight (a queue's group commit), across queues and callers.
        self._uploads = threading.BoundedSemaphore(config.max_pending_limit)
        # One thread per queue being copied; threads start only when no idle one is left.
        self._pool = ThreadPoolExecutor(max_workers=config.max_pending_limit, thread_name_prefix="tiered-dispatch")
        self._queue_locks: dict[tuple[str, int], threading.Lock] = {}
        self._locks_lock = threading.Lock()
        # Keys of groups appended but not yet durable, per queue: indexed once committed.
        self._pending_index: dict[tuple[str, int], _PendingKeys] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- wiring ---------------------------------------------------------------------------

    def on_dispatch(self, request: DispatchRequest) -> None:
        """Local reput listener (per message): make sure the queue has a flat file."""
        self.on_new_queue(request.topic, request.queue_id)

    def on_new_queue(self, topic: str, queue_id: int) -> None:
        """Local queue listener (once per queue): make sure the queue has a flat file (no
        copying here; rounds find new data by polling the local queues)."""
        try:
            self.flat_files.compute_if_absent(topic, queue_id)
        except TieredStoreError as exc:
            log.error("cannot create tiered files for %s/%d: %s", topic, queue_id, exc)

    def start(self, interval_s: float = 1.0) -> None:
        """Run :meth:`dispatch` in a background thread every ``interval_s``. What a round
        could not copy (a backend refusing writes: full, read-only, down) is logged, as a
        synchronous :meth:`dispatch` returns it (:class:`_ErrorLog`)."""
        errors = _ErrorLog()

        def loop() -> None:
            while not self._stop.is_set():
                try:
                    errors.round(self.dispatch().errors)
                except Fenced as exc:  # another store owns the tier now: stop for good
                    log.error("dispatcher stops: %s", exc)
                    return
                except Exception:  # noqa: BLE001 - keep the service alive, report it
                    log.exception("dispatch round failed")
                self._wake.wait(interval_s)
                self._wake.clear()

        self._thread = threading.Thread(target=loop, name="tiered-dispatcher", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        self._pool.shutdown(wait=True)

    # -- rounds ---------------------------------------------------------------------------

    def dispatch(self, force: bool = False) -> DispatchStats:
        """One round over every queue (concurrently). With ``force``, each queue is copied
        up to the local commit point, group after group, ignoring the count and age rules."""
        queues = set(self.local.list_queues())
        queues.update((f.topic, f.queue_id) for f in self.flat_files.files())
        stats = DispatchStats(queues=len(queues))
        futures = [self._pool.submit(self._dispatch_queue, topic, qid, force)  # (one coverage save below)
                   for topic, qid in sorted(queues) if not self._idle(topic, qid)]
        for fut in futures:
            stats.add(fut.result())
        if self.index is not None:
            self.index.coverage.save(min_interval_s=COVERAGE_SAVE_INTERVAL_S)
        return stats

    def _idle(self, topic: str, queue_id: int) -> bool:
        """True when the queue has nothing to copy and no commit to retry, so a round needs
        no task (and no thread) for it. Any doubt says False: dispatch_queue decides."""
        try:
            flat = self.flat_files.get(topic, queue_id)
            if flat is not None and not self.local.has_queue(topic, queue_id):
                return True  # tier only: nothing to copy
            if flat is None or not flat.initialized:
                return False
            current = flat.consume_queue_max_offset()
            # (a tier ahead of the local queue is not idle: dispatch_queue reports the conflict)
            return (flat.consume_queue_commit_offset() >= current
                    and current == self.local.get_max_offset_in_queue(topic, queue_id))
        except TieredStoreError:
            return False

    def _queue_lock(self, key: tuple[str, int]) -> threading.Lock:
        with self._locks_lock:
            return self._queue_locks.setdefault(key, threading.Lock())

    def dispatch_queue(self, topic: str, queue_id: int, force: bool = False) -> DispatchStats:
        """Copy one queue (see :meth:`dispatch`), then save the key-index coverage."""
        try:
            return self._dispatch_queue(topic, queue_id, force)
        finally:
            if self.index is not None:
                self.index.coverage.save()

    def _dispatch_queue(self, topic: str, queue_id: int, force: bool) -> DispatchStats:
        stats = DispatchStats()
        lock = self._queue_lock((topic, queue_id))
        if not lock.acquire(blocking=force):
            return stats  # another round is copying this queue
        try:
            flat = self.flat_files.compute_if_absent(topic, queue_id)
            while True:
                group = self._dispatch_group(flat, force, stats)
                if not group:
                    break
        except Fenced:
            raise  # not this queue's problem: the whole store must stop writing
        except TieredStoreError as exc:
            log.debug("dispatch of %s/%d failed: %s", topic, queue_id, exc)  # (the caller logs or returns it)
            stats.errors.append(f"{topic}/{queue_id}: {exc}")
        finally:
            lock.release()
        return stats

    def _dispatch_group(self, flat: CompositeAccess, force: bool, stats: DispatchStats) -> bool:
        """Copy and commit one group. True when another group should follow at once."""
        key = (flat.topic, flat.queue_id)
        if not self.local.has_queue(*key):
            return False  # only the tier holds this queue (its first put continues past it)
        local_min = self.local.get_min_offset_in_queue(*key)
        local_max = self.local.get_max_offset_in_queue(*key)
        if not flat.initialized:
            flat.init_offset(local_min)
        current = flat.consume_queue_max_offset()
        if flat.consume_queue_commit_offset() < current:
            # The previous group did not become durable: retry it before anything newer.
            if not self._commit(flat, stats):
                return False
        if current > local_max:
            # The tier holds offsets the local queue has not reached: its next puts would
            # name tiered messages again. Never copy from such a queue.
            raise OffsetConflict(
                f"{flat.topic}/{flat.queue_id}: the local queue ends at offset {local_max} but the tier "
                f"holds up to {current}; its messages from {local_max} on would reuse tiered offsets. "
                "Reopen the store (it continues every queue past the tier) and put them again",
                topic=flat.topic, queue_id=flat.queue_id, offset=local_max, tiered_end=current)
        if current < local_min:
            stats.errors.append(f"{flat.topic}/{flat.queue_id}: local messages {current}..{local_min - 1} "
                                "expired before they were tiered")
            log.error("%s: local messages from %d to %d expired before they were tiered",
                      flat, current, local_min - 1)
            return False
        if current >= local_max:
            return False
        flat.rolling_file()
        # A group ends where the consume-queue segment does: sealing a full segment commits its
        # units, and they must not become durable before the group's keys are indexed (_commit).
        # It takes at most one segment buffer's worth of appends (max_group_commit_count).
        target = min(current + self.group_commit_count, local_max, current + flat.consume_queue_room(),
                     current + flat.config.max_group_commit_count)
        if not force and local_max - current < self.group_commit_count:
            head = self.local.get_consume_queue_units(*key, current, 1)
            if not head or head[0].commitlog_offset + head[0].size > self.local.commit_point():
                return False
            if head[0].is_valid:
                oldest = peek_store_timestamp(self.local.get_message_bytes(head[0].commitlog_offset, head[0].size))
                if oldest + self.group_commit_interval_ms > self._clock():
                    return False  # hold: neither enough messages nor old enough
        # The group: its units and its commit-log bytes in one read; the units taken are valid,
        # durable locally, and stay under group_commit_size (a lone big message is still taken).
        group = self.local.read_group(*key, current, target - current, self.group_commit_size - 1)
        units, taken = group.units, group.taken
        if taken < len(units) and not units[taken].is_valid:
            # The local store lost this message (a gap unit): it cannot be tiered, and queue
            # offsets must stay contiguous. Stop here and say so.
            stats.errors.append(f"{flat.topic}/{flat.queue_id}: local message {current + taken} is missing")
        if not taken:
            return False
        units = units[:taken]
        sizes = [u.size for u in units]
        tiered_offset = flat.commit_log_max_offset()
        built = build_group(group.buf, group.positions, [u.commitlog_offset for u in units], sizes,
                            [u.tags_code for u in units], tiered_offset, self.index is not None)
        count = built.count
        if count:
            # One append per flat file for the whole group.
            result, count = flat.append_commit_log_batch(built.data, sizes[:count], built.timestamps, tiered_offset)
            if result is not AppendResult.SUCCESS:
                log.warning("%s: commit-log append returned %s", flat, result.name)
            if count:
                result, count = flat.append_consume_queue_batch(current, built.units[:count * CQ_UNIT_SIZE],
                                                                built.timestamps[:count])
                if result is not AppendResult.SUCCESS:
                    # The messages' commit-log bytes stay unreferenced; they are copied again next round.
                    log.warning("%s: consume-queue append returned %s", flat, result.name)
            if count and built.keys is not None:
                pending = self._pending_index.get(key)
                if pending is None:
                    pending = self._pending_index[key] = _PendingKeys()
                offset = tiered_offset
                for i in range(count):
                    if built.keys[i]:
                        pending.keys.append(built.keys[i])
                        pending.offsets.append(offset)
                        pending.sizes.append(sizes[i])
                        pending.timestamps.append(built.timestamps[i])
                    offset += sizes[i]
        if built.error is not None and count == built.count:
            raise built.error  # what came before it is appended, and committed next round
        if not count:
            return False
        size = sum(sizes[:count])
        stats.messages += count
        stats.bytes += size
        stats.groups += 1
        if not self._commit(flat, stats):
            return False
        more = self.local.get_max_offset_in_queue(*key) - flat.consume_queue_max_offset()
        return more > 0 and (force or more >= self.group_commit_count)

    def _commit(self, flat: CompositeAccess, stats: DispatchStats) -> bool:
        """Make the queue's appended group durable: commit log, then its keys in the index,
        then the consume queue. So every message with a durable consume-queue unit has its
        keys indexed, whenever the process dies; a group retried after a failure may index
        a key twice (queries check each entry against the consume queue)."""
        with self._uploads:  # at most max_pending_limit uploads in flight
            return self._commit_group(flat, stats)

    def _commit_group(self, flat: CompositeAccess, stats: DispatchStats) -> bool:
        key = (flat.topic, flat.queue_id)
        if not flat.commit_commit_log():
            self._failed(flat, stats)
            return False
        pending = self._pending_index.pop(key, None)
        if self.index is not None and pending is not None and pending.keys:
            # One batched insert for the group's keys.
            result = self.index.put_keys(flat.topic, flat.topic_id, flat.queue_id,
                                         pending.keys, pending.offsets, pending.sizes, pending.timestamps)
            if result is not AppendResult.SUCCESS:
                # The group's consume-queue units wait for their keys (a unit must never be
                # durable before its keys are indexed): the retry of the group indexes them.
                self._pending_index[key] = pending
                why = getattr(self.index, "last_error", None)
                stats.errors.append(f"{flat}: index put returned {result.name}" + (f": {why}" if why else ""))
                stats.failed_commits += 1
                return False
        if not flat.commit():
            self._failed(flat, stats)
            return False
        if self.index is not None:  # every message of the queue below the commit has its keys indexed
            self.index.coverage.mark(flat.topic, flat.queue_id, flat.consume_queue_commit_offset())
        return True

    @staticmethod
    def _failed(flat: CompositeAccess, stats: DispatchStats) -> None:
        """Count a commit that left bytes unuploaded, with the backend's error when it gave one
        (none when another commit of the queue was in flight)."""
        stats.failed_commits += 1
        why = flat.commit_error()
        if why is not None:
            stats.errors.append(f"{flat.topic}/{flat.queue_id}: commit failed, a later dispatch retries it: {why}")

    def untiered_local_offset(self) -> int | None:
        """The smallest local commit-log offset of a message not yet tiered (None: all are).

        Local retention must not delete from there on.
        """
        lowest: int | None = None
        for topic, qid in self.local.list_queues():
            flat = self.flat_files.get(topic, qid)
            start = flat.consume_queue_commit_offset() if flat is not None and flat.initialized \
                else self.local.get_min_offset_in_queue(topic, qid)
            lost = flat.first_lost_queue_offset() if flat is not None and flat.initialized else None
            if lost is not None and lost < start:
                start = lost  # the tier lost their copies: the local ones may be the last
            if start >= self.local.get_max_offset_in_queue(topic, qid):
                continue
            start = max(start, self.local.get_min_offset_in_queue(topic, qid))
            units = self.local.get_consume_queue_units(topic, qid, start, 1)
            if units and (lowest is None or units[0].commitlog_offset < lowest):
                lowest = units[0].commitlog_offset
        return lowest
