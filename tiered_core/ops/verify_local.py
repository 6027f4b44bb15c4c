"""``tiered verify``: what the local store holds that the tier does not have yet (read-only).

Reads the local store's files without its lock and without opening it (opening would take
the lock and run crash recovery, which writes): only directory listings, file sizes and
modification times, and one consume-queue unit per queue. The layout is RocketMQ's
(docs/ARCHITECTURE.md §5): ``commitlog/`` and ``consumequeue/{topic}/{queue}/`` hold files
named by the 20-digit offset of their first byte, each as long as what was written into it
(files are not pre-allocated), so a queue's local end is its last file's name plus its
length, in 20-byte units.

* LOCAL_PENDING (info), per queue: messages the local store holds past the tier's end
  (local max > tiered max): the dispatcher has not copied them yet. The local min is the
  first message the local commit log still holds (retention deletes commit-log files, not
  the units pointing into them).
* LOCAL_RETENTION_HELD (info): commit-log files older than ``local_retention_hours`` that
  local retention keeps because they hold messages not tiered yet (it never deletes those),
  naming the queue that holds them back.

A ``store_path`` without a local store (the tier verified alone) gives no findings. The
files may change while they are read (a running store): these findings are informational.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Iterable

from tiered_core.codec.checks import check_message
from tiered_core.codec.consume_queue import CQ_UNIT_SIZE, decode_cq_units
from tiered_core.codec.message import lazy_message_ext
from tiered_core.errors import CorruptData
from tiered_core.flat.read_back import TailWitness
from tiered_core.ops.findings import Finding, FindingKind

_HOUR_MS = 3_600_000
_NAME_DIGITS = 20


@dataclass(frozen=True)
class LocalQueue:
    """One local consume queue: offsets ``[min_offset, max_offset)`` on disk."""

    topic: str
    queue_id: int
    directory: str
    min_offset: int
    max_offset: int


def _offset_files(directory: str) -> list[tuple[int, str, int, int]]:
    """``(start, path, size, mtime_ms)`` of the offset-named files of ``directory``, by start."""
    out = []
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    for name in names:
        if len(name) != _NAME_DIGITS or not name.isdigit():
            continue
        path = os.path.join(directory, name)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue  # deleted by retention meanwhile
        out.append((int(name), path, st.st_size, st.st_mtime_ns // 1_000_000))
    out.sort()
    return out


def _first_live_offset(directory: str, lo: int, hi: int, commit_log_min: int) -> int:
    """The first queue offset in ``[lo, hi)`` whose local unit points at or past
    ``commit_log_min`` (the first byte the local commit log still holds): retention deletes
    commit-log files, not the consume-queue units that point into them. ``hi`` when none."""
    queue = LocalQueue("", 0, directory, lo, hi)
    while lo < hi:  # units point into the commit log in order: a binary search
        mid = (lo + hi) // 2
        phy = _unit_commit_offset(queue, mid)
        if phy is not None and phy >= commit_log_min:
            hi = mid
        else:
            lo = mid + 1
    return lo


def local_queues(store_path: str, topics: Iterable[str] | None = None) -> list[LocalQueue]:
    """Every local consume queue under ``store_path`` (only of ``topics`` when given); its
    min offset is that of the first message the local commit log still holds."""
    commit_log = _offset_files(os.path.join(store_path, "commitlog"))
    commit_log_min = commit_log[0][0] if commit_log else None
    base = os.path.join(store_path, "consumequeue")
    wanted = None if topics is None else set(topics)
    out = []
    try:
        topic_names = sorted(os.listdir(base))
    except (FileNotFoundError, NotADirectoryError):
        return []
    for topic in topic_names:
        if wanted is not None and topic not in wanted:
            continue
        tdir = os.path.join(base, topic)
        if not os.path.isdir(tdir):
            continue
        for queue in sorted(os.listdir(tdir)):
            if not queue.isdigit():
                continue
            qdir = os.path.join(tdir, queue)
            files = _offset_files(qdir)
            if not files:
                continue
            start, _path, size, _mtime = files[-1]
            lo, hi = files[0][0] // CQ_UNIT_SIZE, (start + size) // CQ_UNIT_SIZE
            if commit_log_min is not None:
                lo = _first_live_offset(qdir, lo, hi, commit_log_min)
            out.append(LocalQueue(topic, int(queue), qdir, lo, hi))
    return out


def _unit_commit_offset(queue: LocalQueue, queue_offset: int) -> int | None:
    """The commit-log offset the local unit ``queue_offset`` points at (None: none there)."""
    unit = _unit(queue, queue_offset)
    return None if unit is None else unit[0]


def _unit(queue: LocalQueue, queue_offset: int) -> tuple[int, int] | None:
    """``(commit-log offset, size)`` of the local unit ``queue_offset`` (None: none there)."""
    pos = queue_offset * CQ_UNIT_SIZE
    for start, path, size, _mtime in reversed(_offset_files(queue.directory)):
        if start <= pos < start + size:
            try:
                with open(path, "rb") as fh:
                    fh.seek(pos - start)
                    raw = fh.read(CQ_UNIT_SIZE)
            except OSError:
                return None
            if len(raw) < CQ_UNIT_SIZE:
                return None
            unit = decode_cq_units(raw)[0]
            return (unit.commitlog_offset, unit.size) if unit.is_valid else None
    return None


#: Tail messages a file witness compares at most (another writer's tail differs at its first).
_WITNESSED = 64


def local_witness(store_path: str) -> TailWitness | None:
    """The local disk of ``store_path`` as witness of a tiered commit-log tail (as a store's
    open asks its local store, ``tiered_core/access/tail_witness.py``), read from its files
    without the lock: a message it holds at a tail message's queue offset with another body
    or store time makes the tail another writer's. None without a local store."""
    queues = {(q.topic, q.queue_id): q for q in local_queues(store_path)}
    if not queues:
        return None
    commit_log = _offset_files(os.path.join(store_path, "commitlog"))

    def local_message(queue: LocalQueue, offset: int) -> bytes | None:
        unit = _unit(queue, offset)
        if unit is None:
            return None
        phy, size = unit
        for start, path, length, _mtime in commit_log:
            if start <= phy and phy + size <= start + length:
                try:
                    with open(path, "rb") as fh:
                        fh.seek(phy - start)
                        raw = fh.read(size)
                    check_message(raw, 0, commitlog_offset=phy, size=size, topic=queue.topic,
                                  queue_id=queue.queue_id)
                except (OSError, CorruptData):
                    return None  # changed or damaged meanwhile: no evidence
                return raw
        return None

    def witness(topic: str, queue_id: int, messages: list[tuple[int, bytes, int]]) -> str | None:
        queue = queues.get((topic, queue_id))
        if queue is None:
            return None
        held = [m for m in messages if queue.min_offset <= m[0] < queue.max_offset][:_WITNESSED]
        for offset, body, stored_at in held:
            raw = local_message(queue, offset)
            if raw is None:
                continue
            own = lazy_message_ext(raw)
            if own.queue_offset == offset and (bytes(own.body) != body or own.store_timestamp != stored_at):
                return (f"the message at queue offset {offset} is not the one this store acknowledged there "
                        "(its local disk holds another body or store time): another writer's")
        return None

    return witness


def local_findings(store_path: str, tiered_max: dict[tuple[str, int], int], *, retention_hours: int,
                   topics: Iterable[str] | None = None, now_ms: int | None = None) -> list[Finding]:
    """LOCAL_PENDING and LOCAL_RETENTION_HELD findings of the local store at ``store_path``
    (module doc). ``tiered_max``: (topic, queue) -> the tier's end (queue offset) per the
    metadata; ``retention_hours``: the config's ``local_retention_hours``. Reads only; a
    missing store directory gives no findings."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    out: list[Finding] = []
    # (commit-log offset of the first untiered message, the queue it belongs to)
    untiered: list[tuple[int, str, int, int]] = []
    for q in local_queues(store_path, topics):
        tiered = tiered_max.get((q.topic, q.queue_id), 0)
        if q.max_offset <= tiered:
            continue
        first = max(tiered, q.min_offset)
        count = q.max_offset - first
        # offsets between the tier's end and the local min exist nowhere: not pending
        lost = f"; offsets {tiered}..{q.min_offset - 1} are neither tiered nor local" if q.min_offset > tiered else ""
        out.append(Finding(FindingKind.LOCAL_PENDING, f"{q.topic}/{q.queue_id}",
                           f"{count} message(s) in the local store are not tiered yet (local offsets "
                           f"{first}..{q.max_offset - 1}; the tier ends at {tiered}{lost})",
                           q.topic, q.queue_id, (first, q.max_offset), None,
                           {"local_min": q.min_offset, "local_max": q.max_offset, "tiered_max": tiered,
                            "pending": count}))
        phy = _unit_commit_offset(q, first)
        if phy is not None:
            untiered.append((phy, q.topic, q.queue_id, first))
    if not untiered:
        return out
    oldest, topic, queue_id, offset = min(untiered)
    files = _offset_files(os.path.join(store_path, "commitlog"))
    reserve_ms = retention_hours * _HOUR_MS
    held = []
    for i, (start, path, size, mtime) in enumerate(files[:-1]):  # never the active file
        limit = files[i + 1][0]
        if mtime + reserve_ms <= now and limit > oldest:
            held.append((start, path, size, mtime))
    if held:
        out.append(Finding(
            FindingKind.LOCAL_RETENTION_HELD, os.path.join(store_path, "commitlog"),
            f"{len(held)} commit-log file(s) ({sum(h[2] for h in held)} bytes) older than local_retention_hours "
            f"({retention_hours} h) are kept: they hold messages not tiered yet, the first of them "
            f"{topic}/{queue_id} offset {offset} (commit-log offset {oldest})",
            topic, queue_id, None, (held[0][0], files[files.index(held[-1]) + 1][0]),
            {"files": [os.path.basename(h[1]) for h in held[:20]], "held_bytes": sum(h[2] for h in held),
             "oldest_untiered_commitlog_offset": oldest, "retention_hours": retention_hours,
             "waiting_queues": sorted({f"{t}/{q}" for _p, t, q, _o in untiered})}))
    return out


__all__ = ["LocalQueue", "local_findings", "local_queues"]
