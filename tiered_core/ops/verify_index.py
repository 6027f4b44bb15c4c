"""``tiered verify``: the uploaded key-index files (read-only).

Every uploaded index file the metadata lists must be a compacted index file
(``tiered_core/codec/tiered_index.py``): its header says END, its item count fits its size,
every slot of its slot table is empty or names a run of whole items inside the item area
(INDEX_UNREADABLE otherwise). With ``deep``, every entry must point at a message that
carries a key with the entry's hash (INDEX_ENTRY_WRONG otherwise): the entries are sorted
by queue and commit-log offset and their messages read in groups (one commit-log read per
run of nearby entries, through the queue's segment reader's commit log), each message's
frame checked (size, magic, topic, queue, stored offset; a body that fails its CRC is the
walk's finding, not the entry's), its index keys (:func:`~tiered_core.codec.index_keys.message_index_keys`)
hashed as the index does (:func:`~tiered_core.codec.hashing.index_key_hash`).

Entries this walk cannot judge are skipped, not reported: a topic id the metadata no longer
knows (a deleted topic), a queue outside ``topics``, a message below the commit log's first
segment (expired) or past the committed end of this snapshot of the metadata.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from tiered_core.codec.checks import PropCrcPolicy, check_message
from tiered_core.codec.hashing import index_key_hash
from tiered_core.codec.index_keys import message_index_keys
from tiered_core.codec.message import lazy_message_ext
from tiered_core.codec.compacted_check import compacted_file_problem
from tiered_core.codec.tiered_index import (
    COMPACT_ITEM,
    COMPACT_ITEM_SIZE,
    HEADER_SIZE,
    SLOT_SIZE,
    IndexHeader,
    compacted_slot_count,
)
from tiered_core.common import FileSegmentType, SegmentStatus
from tiered_core.errors import CorruptData, NotFound
from tiered_core.flat.segment_ref import RefLog
from tiered_core.ops.findings import Finding, FindingKind, VerifyStats
from tiered_core.ops.reconcile import backend_path
from tiered_core.spi.driver import SegmentDriver
from tiered_core.spi.metadata import TieredMetadataStore

#: Entries whose messages lie within this many bytes of each other are read in one request.
_GAP = 256 << 10
_MAX_SPAN = 16 << 20
#: Wrong entries named in a finding's facts (the count is always whole).
_EXAMPLES = 5


@dataclass
class IndexCheck:
    """What the key-index check found and read."""

    findings: list[Finding] = field(default_factory=list)
    stats: VerifyStats = field(default_factory=VerifyStats)


@dataclass(frozen=True)
class _QueueLog:
    """One queue's commit log as the entries are checked against it: ``[start, end)`` committed."""

    topic: str
    log: RefLog
    start: int
    end: int


def check_index(driver: SegmentDriver, metadata: TieredMetadataStore, cluster: str, broker: str, *,
                listing: dict[str, int], queue_logs: dict[tuple[str, int], tuple[Any, Any]], deep: bool,
                topics: Iterable[str] | None = None, progress: Callable[[int], None] | None = None) -> IndexCheck:
    """Check every uploaded index file of ``broker`` the metadata lists (module doc).
    ``listing``: the backend listing (path -> size): files missing or shorter than committed
    are the listing's findings and are skipped here. ``queue_logs``: (topic, queue) ->
    (commit-log segment references, committed end) of the queues to check entries against
    (only those; ``topics`` restricts them further). Reads only; driver errors other than a
    missing object propagate."""
    out = IndexCheck()
    wanted = None if topics is None else set(topics)
    names = {t.topic_id: t.topic for t in metadata.iterate_topics()}
    logs: dict[tuple[int, int], _QueueLog] = {}
    ids = {name: tid for tid, name in names.items()}
    for (topic, queue_id), (refs, end) in queue_logs.items():
        if topic in ids and (wanted is None or topic in wanted) and refs:
            logs[(ids[topic], queue_id)] = _QueueLog(topic, RefLog(driver, refs), refs[0].base_offset, end)
    metas = sorted((m for m in metadata.iterate_file_segments(int(FileSegmentType.INDEX))
                    if m.status != SegmentStatus.DELETED and m.size > 0 and m.path.split("/")[0] == broker),
                   key=lambda m: m.base_offset)
    for meta in metas:
        path = backend_path(cluster, meta)
        if listing.get(path, -1) < meta.size:
            continue  # missing or short: the listing reports it
        try:
            found = _check_file(driver, path, meta.size, logs, deep, out.stats)
        except NotFound:
            continue  # removed meanwhile (expiry): nothing left to check
        out.findings.extend(found)
        out.stats.index_files_checked += 1
        if progress is not None:
            progress(1)
    return out


def _check_file(driver: SegmentDriver, path: str, size: int, logs: dict[tuple[int, int], _QueueLog], deep: bool,
                stats: VerifyStats) -> list[Finding]:
    head = driver.read(path, 0, HEADER_SIZE)
    problem = compacted_file_problem(head, size)
    if problem is None:
        header = IndexHeader.decode(head, path)
        slots = compacted_slot_count(header, size)
        table = driver.read(path, 0, HEADER_SIZE + slots * SLOT_SIZE)
        stats.bytes_read += len(table)
        problem = compacted_file_problem(table, size)
    facts = {"size": size}
    if problem is not None:
        return [Finding(FindingKind.INDEX_UNREADABLE, path, f"not a readable key-index file: {problem}",
                        facts=dict(facts, problem=problem))]
    if not deep or not header.item_count:
        return []
    items = driver.read(path, HEADER_SIZE + slots * SLOT_SIZE, header.item_count * COMPACT_ITEM_SIZE)
    stats.bytes_read += len(items)
    whole = len(items) - len(items) % COMPACT_ITEM_SIZE
    by_queue: dict[tuple[int, int], list[tuple[int, int, int, int]]] = defaultdict(list)
    for i, (h, tid, qid, off, msize, _diff) in enumerate(COMPACT_ITEM.iter_unpack(items[:whole])):
        log = logs.get((tid, qid))
        if log is not None and log.start <= off and off + msize <= log.end:
            by_queue[(tid, qid)].append((off, msize, h, i))
    wrong: list[dict[str, Any]] = []
    checked = 0
    for (tid, qid), entries in sorted(by_queue.items()):
        entries.sort()
        log = logs[(tid, qid)]
        for group in _groups(entries):
            first, end = group[0][0], max(o + s for o, s, _h, _i in group)
            try:
                data = log.log.read(first, end - first)
            except NotFound:
                continue  # the segment is gone (expired meanwhile, or missing: the listing's finding)
            stats.bytes_read += len(data)
            for off, msize, h, i in group:
                checked += 1
                reason = _entry_problem(data, off - first, off, msize, h, log.topic, qid)
                if reason is not None:
                    wrong.append({"item": i, "topic": log.topic, "queue_id": qid, "commitlog_offset": off,
                                  "size": msize, "hash": h, "reason": reason})
    stats.index_entries_checked += checked
    if not wrong:
        return []
    first = wrong[0]
    return [Finding(FindingKind.INDEX_ENTRY_WRONG, path,
                    f"{len(wrong)} of {checked} entries checked point at a message that does not carry their key "
                    f"(the first: item {first['item']}, {first['topic']}/{first['queue_id']} commit-log offset "
                    f"{first['commitlog_offset']}: {first['reason']})",
                    first["topic"] if all(w["topic"] == first["topic"] for w in wrong) else None,
                    first["queue_id"] if all((w["topic"], w["queue_id"]) == (first["topic"], first["queue_id"])
                                             for w in wrong) else None,
                    facts={"wrong_entries": len(wrong), "entries_checked": checked, "examples": wrong[:_EXAMPLES]})]


def _groups(entries: list[tuple[int, int, int, int]]) -> Iterable[list[tuple[int, int, int, int]]]:
    """Runs of entries (sorted by offset) close enough to read with one request."""
    group: list[tuple[int, int, int, int]] = []
    start = end = 0
    for entry in entries:
        off, size = entry[0], entry[1]
        if group and (off - end > _GAP or off + size - start > _MAX_SPAN):
            yield group
            group = []
        if not group:
            start = off
            end = off + size
        group.append(entry)
        end = max(end, off + size)
    if group:
        yield group


def _entry_problem(data: bytes, pos: int, offset: int, size: int, hash_code: int, topic: str,
                   queue_id: int) -> str | None:
    """Why the entry (``hash_code`` -> the message of ``size`` bytes at commit-log ``offset``,
    at ``pos`` of ``data``) is wrong; None when that message carries a key of that hash."""
    if pos + size > len(data):
        return None  # the commit log's bytes there are gone: the listing and the walk report them
    try:  # the message's frame only: a body that fails its CRC is the walk's finding, not the entry's
        check_message(data, pos, commitlog_offset=offset, size=size, topic=topic, queue_id=queue_id,
                      verify_crc=False, prop_crc=PropCrcPolicy.IGNORE)
    except CorruptData as exc:
        return f"no message of that size there ({exc.message})"
    message = lazy_message_ext(bytes(data[pos:pos + size]), topic)
    keys = message_index_keys(message)
    if any(index_key_hash(topic, key) == hash_code for key in keys):
        return None
    return f"the message there (queue offset {message.queue_offset}) has no key with hash {hash_code} (keys {keys})"


__all__ = ["IndexCheck", "check_index"]
