"""Key-index repair after a recovery path: index again the keys the key index lost.

The dispatcher indexes a group's keys before it commits the group, but the index file being
filled lives on the local disk until it is uploaded: a lost disk, a failover to a new
``store_path`` or an old copy of the directory loses the keys of what was tiered since.
:func:`key_index_gap` finds from which store time keys may be missing; :class:`KeyIndexRepair`
reads every queue's tiered messages from there (validated batches, as every tiered read)
and puts their keys (UNIQ_KEY and KEYS) into the key index again. An entry indexed twice
is harmless: a key query checks every entry against the consume queue and finds each
message once.

Until the repair finished, ``{store_path}/tiered-key-index-repair`` records its start time,
so a repair cut short (the store closed or killed) starts again at the next open.
"""

from __future__ import annotations

import logging
import os
import threading

from tiered_core.access.continuity import newest_store_time
from tiered_core.common import AppendResult, BoundaryType, fsync_dir
from tiered_core.errors import TieredStoreError
from tiered_core.flat.file_store import FlatFileStore
from tiered_core.flat.message_file import FlatMessageFile
from tiered_core.index.batch_keys import batch_keys
from tiered_core.index.service import IndexStoreService

log = logging.getLogger(__name__)

#: Records the start time of a key-index repair that has not finished (see the module docstring).
REPAIR_FILE = "tiered-key-index-repair"
#: Messages and commit-log bytes one read takes, at most.
BATCH_MESSAGES = 4096
BATCH_BYTES = 16 << 20
#: Damaged messages skipped one at a time in a queue before the rest of the queue is given up.
MAX_SKIPS = 1000


def key_index_gap(index: IndexStoreService, flat_files: FlatFileStore) -> int | None:
    """The store time from which keys of tiered messages may be missing from the key index,
    or None when it covers what the tier holds.

    The index is taken to cover the tier when its newest file (local or uploaded) ends at or
    after the tier's newest message; otherwise the gap starts at that file's first time (0
    when there is none), a bound that also covers a queue whose dispatch lagged behind the
    others."""
    newest = max((newest_store_time(f) for f in flat_files.files()), default=-1)
    if newest < 0:
        return None
    files = index.files()
    covered = max((f.end_timestamp or -1 for f in files), default=-1)
    if covered >= newest:
        return None
    last = max(files, key=lambda f: f.end_timestamp or -1, default=None)
    return (last.min_timestamp or 0) if last is not None else 0


def pending_repair(store_path: str) -> int | None:
    """The start time of a repair that did not finish, or None."""
    try:
        with open(os.path.join(store_path, REPAIR_FILE), encoding="ascii") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


class KeyIndexRepair:
    """Indexes again the keys of every tiered message of ``flat_files`` stored since ``since``.

    :meth:`run` does it on the calling thread, :meth:`start` on a thread of its own (stopped
    by :meth:`stop`). A queue it cannot read is logged and left out (the record stays, so
    the next open tries again); a damaged message is skipped. ``done`` is set once the
    repair finished and its record is removed.
    """

    def __init__(self, store_path: str, flat_files: FlatFileStore, index: IndexStoreService, since: int) -> None:
        self.store_path, self.flat_files, self.index, self.since = store_path, flat_files, index, since
        self.done = threading.Event()
        self.indexed = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._record()

    def _record(self) -> None:
        path = os.path.join(self.store_path, REPAIR_FILE)
        if pending_repair(self.store_path) == self.since:
            return
        with open(path + ".tmp", "w", encoding="ascii") as f:
            f.write(f"{self.since}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(path + ".tmp", path)
        fsync_dir(self.store_path)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="tiered-key-index-repair", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def run(self) -> int:
        """Repair every queue; returns how many messages had their keys indexed again."""
        complete = True
        for flat in self.flat_files.files():
            if self._stop.is_set():
                return self.indexed
            try:
                self._repair_queue(flat)
            except TieredStoreError as exc:
                complete = False
                log.error("key-index repair of %s failed (%s); the next open tries again", flat, exc)
        if complete and not self._stop.is_set():
            try:
                os.unlink(os.path.join(self.store_path, REPAIR_FILE))
            except FileNotFoundError:
                pass
            self.done.set()
            log.warning("key index repaired: the keys of %d tiered message(s) stored since %d indexed again",
                        self.indexed, self.since)
        return self.indexed

    def _repair_queue(self, flat: FlatMessageFile) -> None:
        if not flat.initialized:
            return
        end = flat.consume_queue_commit_offset()
        offset = max(flat.consume_queue_min_offset(), flat.get_offset_in_consume_queue_by_time(self.since,
                                                                                                BoundaryType.LOWER))
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
            if batch.error is not None:
                skips += 1
                if skips > MAX_SKIPS:
                    raise batch.error
                log.warning("key-index repair of %s skips the damaged message at %d: %s", flat, offset, batch.error)
                offset += 1
            elif not batch.units:
                return


__all__ = ["KeyIndexRepair", "REPAIR_FILE", "key_index_gap", "pending_repair"]
