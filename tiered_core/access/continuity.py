"""An offset names one message forever: every local queue continues past what the tier holds.

A queue's offsets are handed out by the local store, and the tier keeps what was handed out
long after the local copy is gone. Every path that opens a store without its local history
-- a lost disk, a failover to a new ``store_path``, a restored old copy of the directory,
metadata rebuilt from the backend, a store written by migrate, import or the streaming
sink -- must therefore continue each queue after the tier's last offset, not at the local
store's. :func:`continue_after_tier` does so at open, with a durable *floor* in the local
consume queue (:meth:`~tiered_core.local.local_store.LocalMessageStore.raise_queue_floor`):
offsets below it are served by the tier and never handed out again. A queue with no local
history gets its floor at its first put (the floor provider).

When the local history was written under an older ownership epoch than the one this store
now holds (it took the prefix over: another store may have written the same offsets in
between), none of it is trusted: :func:`set_aside_local_history` moves it (never deletes it)
to ``{store_path}/given-up-history/``, and the store continues from the tier alone. Its
queues continue at the tier's end: the tier's consume queue must stay contiguous, so the
offsets between the tier's end and the given-up history's end are handed out again (nothing
durable names them: their messages were never tiered, and were lost to the cluster when
another store took the prefix over). The epoch the local history is in step with is kept in
``{store_path}/tiered-history-epoch``.
"""

from __future__ import annotations

import logging
import os

from tiered_core.common import fsync_dir, now_ms
from tiered_core.codec.naming import is_cluster_dir
from tiered_core.errors import StateConflict, TieredStoreError
from tiered_core.flat.file_store import FlatFileStore
from tiered_core.flat.message_file import FlatMessageFile
from tiered_core.flat.ownership import HISTORY_EPOCH_FILE, OWNER_DIR, read_history_epoch
from tiered_core.local.local_store import LocalMessageStore

log = logging.getLogger(__name__)


def tier_end(flat_files: FlatFileStore, topic: str, queue_id: int) -> tuple[int, int]:
    """``(offset, until_ms)``: the first queue offset past everything the tier holds for the
    queue (appended or durable, or recorded in its metadata) and the newest store time it
    holds (:func:`newest_store_time`); ``(0, -1)`` when it holds nothing."""
    flat = flat_files.get(topic, queue_id)
    if flat is None:
        return 0, -1
    return tier_max_offset(flat), newest_store_time(flat)


def tier_max_offset(flat: FlatMessageFile) -> int:
    """The first queue offset past everything the tier holds for ``flat``'s queue (see :func:`tier_end`)."""
    return max(flat.consume_queue_max_offset() if flat.initialized else 0, flat.queue_metadata.max_offset)


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
        return max(known, flat.reader().store_time(last))
    except TieredStoreError as exc:
        log.warning("%s: store time of the last tiered message unreadable (%s); using its metadata", flat, exc)
        return known


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


def history_trusted(store_path: str, *, epoch: int, took_over: bool) -> bool:
    """Whether the local history in ``store_path`` is in step with ownership epoch ``epoch``:
    recorded so, or nothing recorded (a store made before the record, or a new one) and no
    take-over in this open."""
    recorded = read_history_epoch(store_path)
    return recorded == epoch or (recorded is None and not took_over)


#: What a local store directory holds of its history (LocalMessageStore's layout).
LOCAL_HISTORY_ENTRIES = ("commitlog", "consumequeue", "index", "checkpoint.json")
GIVEN_UP_DIR = "given-up-history"


def check_no_tier_inside(store_path: str) -> None:
    """Raise :class:`StateConflict` when a directory of the local history in ``store_path``
    holds a tier (:func:`tier_inside`: another store's root put there), which setting the
    history aside would move with it. A take-over asks before it claims the prefix."""
    for name in LOCAL_HISTORY_ENTRIES:
        found = tier_inside(os.path.join(store_path, name))
        if found is not None:
            raise StateConflict(
                f"cannot set the local history of {store_path!r} aside: {os.path.join(store_path, name)!r} holds "
                f"another store's tier ({found!r}), which would move with it. Nothing was moved. "
                "Move that tier out of this store's directory (and point its store's driver root at the new place) "
                "first", path=found, store_path=store_path)


def set_aside_local_history(store_path: str, epoch: int) -> str | None:
    """Move the local history of the (closed) local store in ``store_path`` to
    ``{store_path}/given-up-history/epoch-{epoch}-{ms}/`` and return that directory (None
    when there was nothing to move). Nothing is deleted: an operator may read it, and
    delete it when no longer needed."""
    present = [name for name in LOCAL_HISTORY_ENTRIES if os.path.exists(os.path.join(store_path, name))]
    if not present:
        return None
    check_no_tier_inside(store_path)
    target = os.path.join(store_path, GIVEN_UP_DIR, f"epoch-{epoch}-{now_ms()}")
    os.makedirs(target)
    for name in present:
        os.replace(os.path.join(store_path, name), os.path.join(target, name))
    fsync_dir(target)
    fsync_dir(store_path)
    return target


def tier_inside(path: str) -> str | None:
    """The first mark of a tier found below ``path`` -- an owner-record directory, or a
    cluster's segment directory (``{md5}_{cluster}``, also when its records were deleted) --
    or None."""
    for directory, subdirs, _files in os.walk(path):
        for name in subdirs:
            if name == OWNER_DIR or is_cluster_dir(name):
                return os.path.join(directory, name)
    return None


def continue_after_tier(local: LocalMessageStore, flat_files: FlatFileStore, *, store_path: str,
                        epoch: int) -> int:
    """Give every local queue whose local end is below the tier's a floor at the tier's end;
    returns how many got one. The local history must be trusted (:func:`history_trusted`;
    set an untrusted one aside first). Then installs the floor provider for queues without
    local history and records ``epoch``. Raises what the local store raises (a
    :class:`~tiered_core.errors.LocalIOError` or ``OSError`` on a failing disk) before
    recording the epoch, so a retry redoes it.
    """
    # A local queue ending below the tier may have lost consume-queue units (files deleted or
    # cut) whose messages the local commit log still holds: they are rebuilt first, so the
    # queue continues after them instead of handing their offsets out again. (Not a queue
    # without a local consume queue: a tiered queue that never had one -- imported, mirrored
    # -- would make every open scan the whole local commit log.)
    behind = [(f.topic, f.queue_id) for f in flat_files.files()
              if local.has_queue(f.topic, f.queue_id)
              and tier_max_offset(f) > local.get_max_offset_in_queue(f.topic, f.queue_id)]
    if behind:
        local.rebuild_queues(behind)
    raised = 0
    for topic, queue_id in local.list_queues():
        end, until_ms = tier_end(flat_files, topic, queue_id)
        local_end = local.get_max_offset_in_queue(topic, queue_id)
        if end > local_end and local.raise_queue_floor(topic, queue_id, end, until_ms):
            raised += 1
            log.warning("%s/%d: the local queue ends at offset %d but the tier holds up to %d; it "
                        "continues at %d (offsets below it are served from the tier)",
                        topic, queue_id, local_end, end, end)
    local.set_floor_provider(lambda topic, queue_id: tier_end(flat_files, topic, queue_id))
    if read_history_epoch(store_path) != epoch:
        write_history_epoch(store_path, epoch)
    return raised


def tier_only_until_ms(local: LocalMessageStore, flat_files: FlatFileStore) -> int:
    """The newest store time (from the metadata) of a tiered queue the local store has no
    consume queue for, when the local store holds messages; -1 otherwise.

    Key lookups ask the tiered index only for what is older than the oldest local message,
    which holds while the local store and the tier share one history in commit-log order.
    A restored old copy of the directory breaks it: a queue first written after the copy was
    taken is tier-only, with messages newer than every local one. Its first put raises a
    floor that records this time; until then the store widens the tiered window by it. So
    does a queue whose tier holds offsets past its local end (the restored copy read by a
    read-only open, which does not continue the local queue after the tier).
    """
    if local.get_earliest_message_time() < 0:
        return -1  # (nothing local: the tiered index is asked for everything anyway)
    return max((f.max_store_timestamp() for f in flat_files.files()
                if not local.has_queue(f.topic, f.queue_id)
                or f.initialized and local.get_max_offset_in_queue(f.topic, f.queue_id) < f.consume_queue_commit_offset()),
               default=-1)


__all__ = ["GIVEN_UP_DIR", "check_no_tier_inside", "tier_inside", "LOCAL_HISTORY_ENTRIES", "HISTORY_EPOCH_FILE", "continue_after_tier", "history_trusted", "read_history_epoch",
           "set_aside_local_history", "tier_end", "tier_max_offset", "tier_only_until_ms", "write_history_epoch"]
