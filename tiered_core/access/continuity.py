"""An offset names one message forever: every local queue continues past what the tier holds.

A queue's offsets are handed out by the local store, and the tier keeps what was handed out
long after the local copy is gone. Every path that opens a store without its local history
-- a lost disk, a failover to a new ``store_path``, a restored old copy of the directory,
metadata rebuilt from the backend, a store written by migrate, import or the streaming
sink -- must therefore continue each queue after the tier's last offset, not at the local
store's. :func:`continue_after_tier` does so at open, with a durable *floor* in the local
consume queue (:meth:`~tiered_core.local.store.LocalMessageStore.raise_queue_floor`):
offsets below it are served by the tier and never handed out again. A queue with no local
history gets its floor at its first put (the floor provider).

When the local history was written under an older ownership epoch than the one this store
now holds (it took the prefix over: another store may have written the same offsets in
between), none of it is trusted: every local queue continues past both its own end and the
tier's, and its local copies are given up (the tier serves what it holds). The epoch the
local history is in step with is kept in ``{store_path}/tiered-history-epoch``.
"""

from __future__ import annotations

import logging
import os

from tiered_core.codec._impl import peek_store_timestamp
from tiered_core.common import fsync_dir
from tiered_core.errors import TieredStoreError
from tiered_core.flat.file_store import FlatFileStore
from tiered_core.flat.message_file import FlatMessageFile
from tiered_core.index.service import IndexStoreService
from tiered_core.local.store import LocalMessageStore

log = logging.getLogger(__name__)

#: The ownership epoch the local history is in step with (see the module docstring).
HISTORY_EPOCH_FILE = "tiered-history-epoch"


def tier_end(flat_files: FlatFileStore, topic: str, queue_id: int) -> tuple[int, int]:
    """``(offset, until_ms)``: the first queue offset past everything the tier holds for the
    queue (appended or durable, or recorded in its metadata) and the newest store time it
    holds (:func:`newest_store_time`); ``(0, -1)`` when it holds nothing."""
    flat = flat_files.get(topic, queue_id)
    if flat is None:
        return 0, -1
    end = max(flat.consume_queue_max_offset() if flat.initialized else 0, flat.queue_metadata.max_offset)
    return end, newest_store_time(flat)


def newest_store_time(flat: FlatMessageFile) -> int:
    """Store time of the queue's last durable tiered message (-1: none). Read from the
    message itself: segment metadata may be older than the bytes (a last segment whose
    later bytes were adopted at open keeps its recorded times)."""
    known = flat.max_store_timestamp()
    if not flat.initialized:
        return known
    last = flat.consume_queue_commit_offset() - 1
    try:
        if last < flat.consume_queue_min_offset():
            return known
        return max(known, peek_store_timestamp(flat.get_message(last)))
    except TieredStoreError as exc:
        log.warning("%s: store time of the last tiered message unreadable (%s); using its metadata", flat, exc)
        return known


def read_history_epoch(store_path: str) -> int | None:
    """The epoch recorded by :func:`write_history_epoch`; None when there is none (a store
    made before it was recorded, or a new one) or it is unreadable."""
    try:
        with open(os.path.join(store_path, HISTORY_EPOCH_FILE), encoding="ascii") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def write_history_epoch(store_path: str, epoch: int) -> None:
    """Record, durably, that the local history is in step with ownership epoch ``epoch``."""
    path = os.path.join(store_path, HISTORY_EPOCH_FILE)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="ascii") as f:
        f.write(f"{epoch}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(store_path)


def continue_after_tier(local: LocalMessageStore, flat_files: FlatFileStore, *, store_path: str,
                        epoch: int, took_over: bool) -> int:
    """Give every local queue a floor past what the tier holds; returns how many queues got one.

    ``epoch`` is the ownership epoch this store holds; ``took_over`` whether it took the
    prefix over in this open. The local history is trusted when it is in step with
    ``epoch`` (recorded, or nothing recorded and no take-over): then only a queue whose
    local end is below the tier's moves. Otherwise every local queue moves past both.
    Then the floor provider is installed for queues without local history, and the epoch
    recorded. Raises what the local store raises (a :class:`~tiered_core.errors.LocalIOError`
    or ``OSError`` on a failing disk) before recording the epoch, so a retry redoes it.
    """
    recorded = read_history_epoch(store_path)
    trusted = recorded == epoch or (recorded is None and not took_over)
    raised = 0
    queues = set(local.list_queues())
    for topic, queue_id in sorted(queues):
        end, until_ms = tier_end(flat_files, topic, queue_id)
        local_end = local.get_max_offset_in_queue(topic, queue_id)
        if trusted and end <= local_end:
            continue
        if local.raise_queue_floor(topic, queue_id, end, until_ms, supersede=not trusted):
            raised += 1
            if trusted:
                log.warning("%s/%d: the local queue ends at offset %d but the tier holds up to %d; it "
                            "continues at %d (offsets below it are served from the tier)",
                            topic, queue_id, local_end, end, end)
            else:
                log.warning("%s/%d: the local history predates ownership epoch %d (recorded: %s), so it is "
                            "given up: the queue continues at %d, past its local end %d and the tier's %d",
                            topic, queue_id, epoch, recorded, max(end, local_end), local_end, end)
    local.set_floor_provider(lambda topic, queue_id: tier_end(flat_files, topic, queue_id))
    if recorded != epoch:
        write_history_epoch(store_path, epoch)
    return raised


def key_index_gap(index: IndexStoreService, flat_files: FlatFileStore) -> int | None:
    """After a recovery path: the store time from which keys of tiered messages may be
    missing from the key index, or None when it covers what the tier holds.

    The dispatcher indexes a group's keys before it commits the group, but the index file
    being filled lives on the local disk until it is uploaded: a lost disk or an old copy
    of the directory loses the keys of what was tiered since. The index is taken to cover
    the tier when its newest file (local or uploaded) ends at or after the tier's newest
    message; otherwise the gap starts at that file's first time (0 when there is none), a
    bound that also covers a queue whose dispatch lagged behind the others.
    """
    newest = max((newest_store_time(f) for f in flat_files.files()), default=-1)
    if newest < 0:
        return None
    files = index.files()
    covered = max((f.end_timestamp or -1 for f in files), default=-1)
    if covered >= newest:
        return None
    last = max(files, key=lambda f: f.end_timestamp or -1, default=None)
    return (last.min_timestamp or 0) if last is not None else 0


__all__ = ["key_index_gap", "HISTORY_EPOCH_FILE", "continue_after_tier", "read_history_epoch", "tier_end",
           "write_history_epoch"]
