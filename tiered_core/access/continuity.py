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

from tiered_core.common import fsync_dir
from tiered_core.flat.file_store import FlatFileStore
from tiered_core.local.store import LocalMessageStore

log = logging.getLogger(__name__)

#: The ownership epoch the local history is in step with (see the module docstring).
HISTORY_EPOCH_FILE = "tiered-history-epoch"


def tier_end(flat_files: FlatFileStore, topic: str, queue_id: int) -> tuple[int, int]:
    """``(offset, until_ms)``: the first queue offset past everything the tier holds for the
    queue (appended or durable, or recorded in its metadata) and the newest store time it
    holds; ``(0, -1)`` when it holds nothing."""
    flat = flat_files.get(topic, queue_id)
    if flat is None:
        return 0, -1
    end = max(flat.consume_queue_max_offset() if flat.initialized else 0, flat.queue_metadata.max_offset)
    return end, flat.max_store_timestamp()


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


__all__ = ["HISTORY_EPOCH_FILE", "continue_after_tier", "read_history_epoch", "tier_end",
           "write_history_epoch"]
