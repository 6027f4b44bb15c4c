"""A writer's session on a store it writes without opening it (Spark import, reindex, the
streaming sink, migrate's target): the store lock, the tier-prefix claim, the backend
driver and the metadata, taken in that order and released in reverse.

Also the staging of one queue's flat files over a scratch metadata store seeded from the
store's (:class:`QueueSeed`, :func:`open_staged_queue`): a job appends there, and records
the outcome in the store's metadata in one transaction (:func:`record_outcome`), so
nothing becomes readable before that transaction.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from dataclasses import dataclass
from typing import Any, Iterator

from tiered_core.common import FileSegmentType, SegmentStatus, now_ms
from tiered_core.errors import StateConflict
from tiered_core.spi.metadata import FileSegmentMetadata, QueueMetadata, TieredMetadataStore

#: How often a waiting writer tries the store lock again, in seconds.
LOCK_RETRY_SECONDS = 0.1


class WriterSession:
    """Exclusive write access to the store of ``config`` (a :class:`~tiered_core.config.StoreConfig`)
    for a job that does not open the store itself.

    On enter it holds, until exit:

    * the store's lock (``flock`` on ``{store_path}/lock``; ``store_path`` is created), so
      neither the store nor another writer on this machine runs meanwhile; given a
      ``lock_timeout``, it waits up to that many seconds for it (None: not at all);
    * the claim of the store's (cluster, broker) tier prefix under the store's id
      (:func:`~tiered_core.ops.claim.claim_store_prefix`), so no other store writes that
      prefix and this job writes only where its store is the owner;
    * :attr:`driver`, the backend driver (open), and :attr:`metadata`, the store's
      metadata (opened at first use: a job that fails before it never creates or touches it).

    Raises :class:`~tiered_core.errors.StateConflict` naming ``store_path`` when the lock is
    held by another process (after ``lock_timeout``, naming the ``writer``),
    :class:`~tiered_core.errors.PrefixOwned` when another store owns the prefix,
    :class:`~tiered_core.errors.IdentityMismatch` when the store directory records another
    identity; on any of them nothing is held and nothing was written to the backend.
    """

    def __init__(self, config: Any, *, lock_timeout: float | None = None, writer: str = "writer",
                 appends: bool = False) -> None:
        self.config = config
        self.appends = appends
        self.lock_timeout = lock_timeout
        self.writer = writer
        self.driver: Any = None
        self.owner: Any = None
        self._metadata: TieredMetadataStore | None = None
        self._stack: contextlib.ExitStack | None = None

    def __enter__(self) -> "WriterSession":
        from tiered_core.local.local_store import release_store_lock
        from tiered_core.ops.claim import claim_store_prefix

        stack = contextlib.ExitStack()
        try:
            os.makedirs(self.config.store_path, exist_ok=True)
            lock = acquire_lock(self.config.store_path, self.lock_timeout, self.writer)
            stack.callback(release_store_lock, lock)
            self.driver = stack.enter_context(self.config.open_driver())
            self.owner = claim_store_prefix(self.config, self.driver)  # refused when another store owns it
            stack.callback(self._close_metadata)
            self._stack = stack
            if self.appends:
                self._refuse_untiered_local_messages()
        except BaseException:
            self._stack = None
            stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()

    @property
    def metadata(self) -> TieredMetadataStore:
        """The store's metadata (writable; opened, and created if absent, at first use)."""
        if self._stack is None:
            raise StateConflict("the writer session is not open", path=self.config.store_path)
        if self._metadata is None:
            self._metadata = self.config.open_metadata()
        return self._metadata

    def _close_metadata(self) -> None:
        metadata, self._metadata = self._metadata, None
        if metadata is not None:
            metadata.close()

    def _refuse_untiered_local_messages(self) -> None:
        """A job that appends messages at their queue offsets (import, migrate, the sink)
        would hand out again the offsets of messages the store acknowledged but has not
        tiered yet: they are in its local directory only. Raises StateConflict naming the
        queues; nothing was written."""
        from tiered_core.codec.consume_queue import CQ_UNIT_SIZE
        from tiered_core.codec.naming import queue_path
        from tiered_core.local.local_store import LocalMessageStore, LocalStoreConfig

        root = self.config.store_path
        if not os.path.isdir(os.path.join(root, "commitlog")):
            return
        local_config = dataclasses.replace(self.config.section(LocalStoreConfig), background_services=False,
                                           read_only=True)
        ahead = []
        with LocalMessageStore(root, local_config, lock=False) as local:  # this session holds the lock
            for topic, queue_id in local.list_queues():
                local_end = local.get_max_offset_in_queue(topic, queue_id)
                queue = self.metadata.get_queue(topic, queue_id)
                tiered = max(0, queue.max_offset if queue is not None else 0)
                for seg in self.metadata.iterate_file_segments(int(FileSegmentType.CONSUME_QUEUE),
                                                               queue_path(self.config.broker, topic, queue_id)):
                    tiered = max(tiered, (seg.base_offset + seg.size) // CQ_UNIT_SIZE)
                if local_end > tiered:
                    ahead.append(f"{topic}/{queue_id} offsets {tiered}-{local_end - 1}")
        if ahead:
            shown = ", ".join(ahead[:5]) + (f" and {len(ahead) - 5} more queue(s)" if len(ahead) > 5 else "")
            raise StateConflict(
                f"{self.writer}: the store at {root!r} holds messages it acknowledged but has not tiered yet "
                f"({shown}); appending at their queue offsets would give those offsets to other messages. "
                "Nothing was written. Fix: let the store dispatch them first (open it and dispatch, e.g. "
                f"`tiered put ... --dispatch` or TieredMessageStore.open(config).dispatch(force=True)), then run "
                "again; or write into a new store", path=root, queues=ahead[:20])

    def seed(self, topic: str, queue_id: int) -> "QueueSeed":
        """The store's recorded state of one queue (:class:`QueueSeed`)."""
        from tiered_core.codec.naming import queue_path

        return seed_of(self.metadata, topic, queue_id, queue_path(self.config.broker, topic, queue_id))


def acquire_lock(root: str, timeout: float | None = None, writer: str = "writer") -> int:
    """The store lock of ``root`` (see :func:`~tiered_core.local.local_store.acquire_store_lock`),
    waiting up to ``timeout`` seconds. Raises StateConflict naming ``root``: at once with
    ``timeout`` None (the lock's own error), else after it (naming ``writer``, the waiting job)."""
    from tiered_core.local.local_store import acquire_store_lock

    deadline = time.monotonic() + (timeout or 0.0)
    while True:
        try:
            return acquire_store_lock(root)
        except StateConflict:
            if timeout is None:
                raise
            if time.monotonic() >= deadline:
                raise StateConflict(f"{writer}: the target store {root!r} stayed locked by another "
                                    f"process for {timeout:.0f}s (a broker, an import, or another sink); "
                                    f"the target must be written only by this {writer}",
                                    path=root) from None
            time.sleep(LOCK_RETRY_SECONDS)


# -- staging one queue's flat files --------------------------------------------------------


@dataclass(frozen=True)
class QueueSeed:
    """The target's recorded state of one queue before a job appends to it (plain data, so
    it travels to Spark tasks)."""

    topic: str
    queue_id: int
    queue: dict[str, Any] | None
    segments: tuple[dict[str, Any], ...]


def seed_of(metadata: TieredMetadataStore, topic: str, queue_id: int, flat_path: str) -> QueueSeed:
    """The :class:`QueueSeed` of one queue as ``metadata`` records it."""
    queue = metadata.get_queue(topic, queue_id)
    segments = tuple(dataclasses.asdict(m) for t in (FileSegmentType.COMMIT_LOG, FileSegmentType.CONSUME_QUEUE)
                     for m in metadata.iterate_file_segments(t, flat_path))
    return QueueSeed(topic, queue_id, None if queue is None else dataclasses.asdict(queue), segments)


def adopt_unrecorded(driver, scratch: TieredMetadataStore, config, topic: str, queue_id: int) -> None:
    """Record in ``scratch`` the segment objects of this queue that exist in the backend but
    not in metadata (left by a job that failed before its metadata commit), so a re-run
    continues after them instead of rolling over them; and adopt the bytes a recorded
    segment gained after its last metadata update (that failed run filled it and rolled to
    a new one: flat-file recovery re-checks only the last segment). Only a writer holding
    the store's :class:`WriterSession` (or a task of its job) may call it: the lock and
    the prefix claim are what make those bytes this store's own."""
    from tiered_core.codec.naming import file_name_to_offset, queue_path, segment_dir

    flat_path = queue_path(config.broker, topic, queue_id)
    for kind in (FileSegmentType.COMMIT_LOG, FileSegmentType.CONSUME_QUEUE):
        prefix = segment_dir(config.cluster, config.broker, topic, queue_id, kind) + "/"
        for path, size in driver.list(prefix):
            try:
                base = file_name_to_offset(path.rsplit("/", 1)[-1], strict=True)
            except Exception:
                continue
            recorded = scratch.get_file_segment(int(kind), flat_path, base)
            if recorded is None:
                meta = FileSegmentMetadata(flat_path, int(kind), base, size=size, create_timestamp=now_ms())
                if size and driver.is_sealed(path):
                    meta.mark_sealed()
                scratch.update_file_segment(meta)
            elif size > recorded.size and recorded.status != SegmentStatus.DELETED:
                recorded.size = size
                if recorded.status != SegmentStatus.SEALED and driver.is_sealed(path):
                    recorded.mark_sealed()
                scratch.update_file_segment(recorded)


def seed_scratch(scratch: TieredMetadataStore, seed: QueueSeed, driver, config) -> None:
    """Fill a scratch metadata store with ``seed``, then adopt what an interrupted earlier
    run left in the backend (:func:`adopt_unrecorded`)."""
    with scratch.transaction():
        if seed.queue is not None:
            scratch.update_queue(QueueMetadata(**seed.queue), touch=False)
        for seg in seed.segments:
            scratch.update_file_segment(FileSegmentMetadata(**seg))
    adopt_unrecorded(driver, scratch, config, seed.topic, seed.queue_id)


@contextlib.contextmanager
def open_staged_queue(driver, config, seed: QueueSeed, scratch_path: str) -> Iterator[tuple[Any, Any]]:
    """One queue's :class:`~tiered_core.flat.message_file.FlatMessageFile` writing to the real
    backend but recording its segments in a scratch metadata store at ``scratch_path``
    (seeded with ``seed`` and what an interrupted run left): yields ``(flat, scratch)``;
    :func:`queue_outcome` then gives what to record. Shuts the flat file down and closes
    the scratch store on exit."""
    from tiered_core.flat.message_file import FlatMessageFile
    from tiered_core.metadata import open_metadata_store

    scratch = open_metadata_store("sqlite", scratch_path)
    try:
        seed_scratch(scratch, seed, driver, config)
        flat = FlatMessageFile(driver, scratch, seed.topic, seed.queue_id, config.flat_config())
        try:
            yield flat, scratch
        finally:
            flat.shutdown()
    finally:
        scratch.close()


def queue_outcome(scratch: TieredMetadataStore, flat, stats) -> dict[str, Any]:
    """One staged queue's result (plain data): counts, and the queue and segment metadata to record."""
    queue = scratch.get_queue(flat.topic, flat.queue_id)
    segments = [dataclasses.asdict(m) for t in (FileSegmentType.COMMIT_LOG, FileSegmentType.CONSUME_QUEUE)
                for m in scratch.iterate_file_segments(t, flat.file_path)]
    return {"topic": flat.topic, "queue_id": flat.queue_id, "appended": stats.appended,
            "skipped": stats.skipped, "queue": dataclasses.asdict(queue), "segments": segments}


def record_outcome(metadata: TieredMetadataStore, outcome: list[dict[str, Any]]) -> int:
    """Record staged queues' results in the store's metadata (inside the caller's
    transaction); returns how many segments were recorded."""
    segments = 0
    for item in outcome:
        if metadata.get_topic(item["topic"]) is None:
            metadata.add_topic(item["topic"])
        metadata.update_queue(QueueMetadata(**item["queue"]))
        for seg in item["segments"]:
            metadata.update_file_segment(FileSegmentMetadata(**seg))
            segments += 1
    return segments


__all__ = [
    "LOCK_RETRY_SECONDS", "QueueSeed", "WriterSession", "acquire_lock", "adopt_unrecorded", "open_staged_queue",
    "queue_outcome", "record_outcome", "seed_of", "seed_scratch",
]
