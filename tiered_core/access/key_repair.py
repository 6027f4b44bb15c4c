"""Key-index repair: index again the keys of tiered messages the key index does not hold.

The dispatcher indexes a group's keys before it commits the group, and marks the queue
covered (:mod:`tiered_core.index.coverage`); but the index file being filled, and the marks,
live on the local disk until the file is uploaded. A restored old copy of the directory
brings back an older index and its marks: :func:`repair_ranges` then names, per queue, the
tiered messages past the marks, exactly. A lost disk (or a failover to a new ``store_path``)
loses the marks too: then :func:`key_index_gap` bounds what may be missing by time (from the
first time of the newest index file left, uploaded ones included; 0 when there is none),
and every queue is read from there. :class:`KeyIndexRepair` reads those ranges (validated
batches, as every tiered read), puts their keys (UNIQ_KEY and KEYS) into the index and
advances the marks as it goes, so a repair cut short resumes where it stopped. An entry
indexed twice is harmless: a key query checks every entry against the consume queue and
finds each message once.
"""

from __future__ import annotations

import logging
import threading

from tiered_core.access.continuity import newest_store_time
from tiered_core.common import AppendResult, BoundaryType
from tiered_core.errors import TieredStoreError
from tiered_core.flat.file_store import FlatFileStore
from tiered_core.flat.message_file import FlatMessageFile
from tiered_core.index.batch_keys import batch_keys
from tiered_core.index.service import IndexStoreService

log = logging.getLogger(__name__)

#: Messages and commit-log bytes one read takes, at most.
BATCH_MESSAGES = 4096
BATCH_BYTES = 16 << 20
#: Damaged messages skipped one at a time in a queue before the rest of the queue is given up.
MAX_SKIPS = 1000


def key_index_gap(index: IndexStoreService, flat_files: FlatFileStore) -> int | None:
    """Without coverage marks: the store time from which keys of tiered messages may be
    missing from the key index, or None when it covers what the tier holds (its newest
    file, local or uploaded, ends at or after the tier's newest message)."""
    newest = max((newest_store_time(f) for f in flat_files.files()), default=-1)
    if newest < 0:
        return None
    files = index.files()
    covered = max((f.end_timestamp or -1 for f in files), default=-1)
    if covered >= newest:
        return None
    last = max(files, key=lambda f: f.end_timestamp or -1, default=None)
    return (last.min_timestamp or 0) if last is not None else 0


def repair_ranges(index: IndexStoreService, flat_files: FlatFileStore, *,
                  since: int | None = None) -> dict[tuple[str, int], int]:
    """Per queue, the queue offset from which its tiered messages need their keys indexed
    again (queues needing nothing are left out): from the coverage mark when the record is
    known (a queue without a mark from its first tiered message), else from the first
    message stored at or after ``since`` (None: nothing to repair)."""
    out: dict[tuple[str, int], int] = {}
    for flat in flat_files.files():
        if not flat.initialized:
            continue
        lo, end = flat.consume_queue_min_offset(), flat.consume_queue_commit_offset()
        if index.coverage.known:
            mark = index.coverage.get(flat.topic, flat.queue_id)
            start = lo if mark is None else max(lo, mark)
        elif since is not None:
            start = max(lo, flat.get_offset_in_consume_queue_by_time(since, BoundaryType.LOWER))
        else:
            continue
        if start < end:
            out[(flat.topic, flat.queue_id)] = start
    return out


class KeyIndexRepair:
    """Indexes again the keys of the tiered messages of ``ranges`` (queue -> first offset),
    up to each queue's commit offset when it starts.

    :meth:`run` does it on the calling thread, :meth:`start` on a thread of its own (stopped
    by :meth:`stop`). It advances the index's coverage marks as it goes and saves them; when
    every range is done it declares the record known. A queue it cannot read is logged and
    left (the next open tries again); a damaged message is skipped. ``done`` is set once
    every range was indexed.
    """

    def __init__(self, flat_files: FlatFileStore, index: IndexStoreService,
                 ranges: dict[tuple[str, int], int], since: int | None) -> None:
        self.flat_files, self.index, self.ranges = flat_files, index, dict(ranges)
        #: The earliest store time whose keys may be missing until ``done`` (for reports).
        self.since = since
        self.done = threading.Event()
        self.indexed = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="tiered-key-index-repair", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def run(self) -> int:
        """Repair every range; returns how many messages had their keys indexed again."""
        complete = True
        for (topic, queue_id), start in sorted(self.ranges.items()):
            flat = self.flat_files.get(topic, queue_id)
            if self._stop.is_set():
                return self.indexed
            if flat is None:
                continue
            try:
                self._repair_queue(flat, start)
            except TieredStoreError as exc:
                complete = False
                log.error("key-index repair of %s failed (%s); the next open tries again", flat, exc)
            finally:
                self.index.coverage.save()
        if complete and not self._stop.is_set():
            self.index.coverage.declare_known()
            self.index.coverage.save()
            self.done.set()
            log.warning("key index repaired: the keys of %d tiered message(s) of %d queue(s) indexed again",
                        self.indexed, len(self.ranges))
        return self.indexed

    def _repair_queue(self, flat: FlatMessageFile, offset: int) -> None:
        end = flat.consume_queue_commit_offset()
        skips = 0
        while offset < end and not self._stop.is_set():
            batch = flat.read_batch(offset, min(BATCH_MESSAGES, end - offset), BATCH_BYTES)
            if batch.units:
                topic, queue_id, _n, keys, offsets, sizes, times = batch_keys(batch, None)
                if keys:
                    result = self.index.put_keys(topic, flat.topic_id, queue_id, keys, offsets, sizes, times)
                    if result is not AppendResult.SUCCESS:
                        raise TieredStoreError(f"{flat}: the key index refused the keys of {len(keys)} messages "
                                               f"from queue offset {offset}: {result.name}", topic=topic,
                                               queue_id=queue_id, offset=offset)
                    self.indexed += len(keys)
                offset += len(batch.units)
                self.index.coverage.mark(flat.topic, flat.queue_id, offset)
            if batch.error is not None:
                skips += 1
                if skips > MAX_SKIPS:
                    raise batch.error
                log.warning("key-index repair of %s skips the damaged message at %d: %s", flat, offset, batch.error)
                offset += 1
            elif not batch.units:
                return
        if not self._stop.is_set():
            self.index.coverage.mark(flat.topic, flat.queue_id, end)


__all__ = ["KeyIndexRepair", "key_index_gap", "repair_ranges"]
