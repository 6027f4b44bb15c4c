"""What ``tiered repair`` does about the key index: an uploaded index file that is gone or
cannot be read, and an index file no metadata lists.

A missing or unreadable file (INDEX_MISSING / INDEX_UNREADABLE) loses the keys it held
(key queries skip it). Repair moves an unreadable file into the quarantine, drops its
metadata record (so the store's index no longer opens it), then indexes the keys of the
messages of every queue stored in the file's time range again
(:func:`reindex_keys`: validated batches through the flat files' one segment reader, keys
taken as the dispatcher takes them, :func:`~tiered_core.index.batch_keys.batch_keys`) and
uploads the new index file, so ``tiered get --key`` finds them again. An entry indexed
twice is harmless: a key query checks every entry against its message.

An unlisted index object is adopted when it continues the INDEX flat file at its end, is
sealed (a finished upload) and reads as a compacted index file; otherwise quarantined.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Callable

from tiered_core.codec.naming import index_queue_path, parse_segment_path
from tiered_core.codec.tiered_index import COMPACT_ITEM_SIZE, END_MAGIC, HEADER_SIZE, SLOT_SIZE, IndexHeader
from tiered_core.common import LONG_MAX, NO_TIMESTAMP, AppendResult, BoundaryType, FileSegmentType, SegmentStatus
from tiered_core.errors import IllegalParam, NotFound, TieredStoreError
from tiered_core.flat.file_store import FlatFileStore
from tiered_core.index.batch_keys import batch_keys
from tiered_core.index.service import IndexStoreService
from tiered_core.ops.findings import Finding, FindingKind
from tiered_core.ops.repair_context import QUARANTINE, REINDEX, Decision, RepairContext
from tiered_core.spi.metadata import FileSegmentMetadata

log = logging.getLogger(__name__)

ADOPT_INDEX = "adopt_index"
#: Messages and commit-log bytes one read of the re-index takes, at most.
BATCH_MESSAGES = 4096
BATCH_BYTES = 16 << 20


def _index_base(ctx: RepairContext, path: str) -> int | None:
    try:
        info = parse_segment_path(path)
    except IllegalParam:
        return None
    if info.cluster != ctx.cluster or info.broker != ctx.broker or info.file_type is not FileSegmentType.INDEX:
        return None
    return info.base_offset


def is_index_path(ctx: RepairContext, path: str) -> bool:
    """Whether ``path`` is a key-index segment path of this store."""
    return _index_base(ctx, path) is not None


def _records(ctx: RepairContext) -> list[FileSegmentMetadata]:
    return sorted((m for m in ctx.metadata.iterate_file_segments(int(FileSegmentType.INDEX),
                                                                 index_queue_path(ctx.broker))
                   if m.status != SegmentStatus.DELETED), key=lambda m: m.base_offset)


def decide_index(ctx: RepairContext, finding: Finding) -> Decision:
    """INDEX_MISSING / INDEX_UNREADABLE: re-index the keys of the file's time range (after
    moving the file, when it is there, into the quarantine and dropping its record)."""
    path = finding.subject
    base = _index_base(ctx, path)
    if base is None:
        return Decision.refuse("not a key-index file path of this store")
    meta = next((m for m in _records(ctx) if m.base_offset == base), None)
    if meta is None:
        return Decision.moot("the metadata no longer lists it")
    exists = ctx.driver.exists(path)
    if finding.kind is FindingKind.INDEX_MISSING and exists:
        return Decision.moot("the backend holds it now: run `tiered verify` again")
    begin = 0 if meta.begin_timestamp == NO_TIMESTAMP else meta.begin_timestamp
    end = LONG_MAX if meta.end_timestamp == NO_TIMESTAMP else meta.end_timestamp
    move = "move the file into the quarantine, " if exists else ""
    return Decision(REINDEX, f"{move}drop its metadata record and index again the keys of the messages stored "
                             f"{begin}..{end} (the time range it covered)",
                    {"path": path, "base": base, "move": exists, "times": (begin, end)})


def decide_unlisted_index(ctx: RepairContext, finding: Finding) -> Decision:
    """An index object no metadata lists: adopt it when it continues the INDEX flat file,
    is sealed and reads as a compacted index file; else quarantine it."""
    path = finding.subject
    base = _index_base(ctx, path)
    assert base is not None
    try:
        size = ctx.driver.size(path)
    except NotFound:
        return Decision.moot("the object is gone already")
    records = _records(ctx)
    if any(m.base_offset == base for m in records):
        return Decision.moot("the metadata lists it now")
    end = max((m.base_offset + m.size for m in records), default=0)
    why = _index_problem(ctx, path, size)
    if base != end:
        why = f"it does not continue the key index's file (base {base}, end {end})"
    elif why is None and not ctx.driver.is_sealed(path):
        why = "it is not sealed (an upload cut short)"
    if why is None:
        header = IndexHeader.decode(ctx.driver.read(path, 0, HEADER_SIZE), path)
        return Decision(ADOPT_INDEX, f"adopt it into the metadata: key-index file at {base}, {size} bytes, "
                                     f"store times {header.begin_timestamp}..{header.end_timestamp}",
                        {"path": path, "base": base, "size": size,
                         "times": (header.begin_timestamp, header.end_timestamp)})
    return Decision(QUARANTINE, f"move it into the quarantine ({size} bytes; {why})", {"path": path, "size": size})


def _index_problem(ctx: RepairContext, path: str, size: int) -> str | None:
    """Why the object is not a compacted index file (its header and layout), or None."""
    if size < HEADER_SIZE + SLOT_SIZE:
        return f"only {size} bytes"
    header = IndexHeader.decode(ctx.driver.read(path, 0, HEADER_SIZE), path)
    rest = size - HEADER_SIZE - header.item_count * COMPACT_ITEM_SIZE
    if header.magic != END_MAGIC or header.item_count < 0 or rest <= 0 or rest % SLOT_SIZE:
        return f"its header (magic {header.magic:#010x}, {header.item_count} items) does not fit {size} bytes"
    return None


def act_index(ctx: RepairContext, finding: Finding, decision: Decision) -> str:
    """Carry an index decision out (``--apply``); :func:`reindex_keys` then restores the keys."""
    d, md = decision.data, ctx.metadata
    flat_path = index_queue_path(ctx.broker)
    if decision.action == ADOPT_INDEX:
        meta = FileSegmentMetadata(flat_path, FileSegmentType.INDEX, d["base"], d["size"], SegmentStatus.NEW,
                                   begin_timestamp=d["times"][0], end_timestamp=d["times"][1]).mark_sealed()
        md.update_file_segment(meta)
        md.flush()
        return f"adopted into the metadata ({d['size']} bytes at {d['base']})"
    if decision.action == REINDEX:
        done = []
        if d["move"]:
            assert ctx.quarantine is not None
            entry = ctx.quarantine.move(d["path"], reason=finding.detail, kind=finding.kind.value)
            done.append(f"{entry.then}; copy at {entry.copy}")
        md.delete_file_segment(int(FileSegmentType.INDEX), flat_path, d["base"])
        md.flush()
        done.append("its metadata record dropped; its keys are indexed again")
        return "; ".join(done)
    raise IllegalParam(f"unknown index repair action {decision.action!r}", action=decision.action)


def _merge(windows: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for begin, end in sorted(windows):
        if out and begin <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((begin, end))
    return out


def reindex_keys(ctx: RepairContext, windows: list[tuple[int, int]],
                 progress: Callable[[int], Any] | None = None) -> tuple[int, list[str]]:
    """Index again the keys of every tiered message stored within one of ``windows``
    (``(begin, end)`` store times, inclusive), for every queue of the store; then seal
    the index file they went into and upload it. Returns how many messages had their keys
    indexed, and the queues that could not be read (``topic/queue: why``; their keys are
    not indexed: what stops their flat file from opening must be mended first). ``progress(total)``: a context manager whose ``update(n)`` counts ``n`` more
    of the ``total`` messages to read. Raises :class:`TieredStoreError` when the index
    refuses keys; a damaged message is skipped (logged)."""
    windows = _merge(windows)
    if not windows:
        return 0, []
    store = FlatFileStore(ctx.driver, ctx.metadata, ctx.config.flat_config())
    index = None
    indexed = 0
    try:
        store.load()
        index = IndexStoreService.from_store_config(ctx.config, ctx.driver, ctx.metadata)
        ranges = []
        for flat in store.files():
            if not flat.initialized:
                continue
            for begin, end in windows:
                lo = flat.get_offset_in_consume_queue_by_time(begin, BoundaryType.LOWER)
                hi = (flat.consume_queue_commit_offset() if end >= LONG_MAX - 1
                      else flat.get_offset_in_consume_queue_by_time(end + 1, BoundaryType.LOWER))
                if lo < hi:
                    ranges.append((flat, lo, hi, begin, end))
        with (progress(sum(r[2] - r[1] for r in ranges)) if progress is not None
              else contextlib.nullcontext(None)) as bar:
            for flat, lo, hi, begin, end in ranges:
                indexed += _index_range(flat, index, lo, hi, begin, end, None if bar is None else bar.update)
        index.roll_file()
        uploaded = index.compact_and_upload()
        log.warning("repair: the keys of %d message(s) indexed again (%d index file(s) uploaded)", indexed, uploaded)
        skipped = [f"{topic}/{queue_id}: {why}" for topic, queue_id, why in store.failures]
    finally:
        if index is not None:
            index.shutdown()
        store.shutdown()
    return indexed, skipped


def _index_range(flat, index: IndexStoreService, offset: int, end: int, begin_ts: int, end_ts: int,
                 progress: Callable[[int], None] | None) -> int:
    indexed = 0
    while offset < end:
        batch = flat.read_batch(offset, min(BATCH_MESSAGES, end - offset), BATCH_BYTES)
        if batch.units:
            topic, queue_id, _n, keys, offsets, sizes, times = batch_keys(batch, lambda t: begin_ts <= t <= end_ts)
            if keys:
                result = index.put_keys(topic, flat.topic_id, queue_id, keys, offsets, sizes, times)
                if result is not AppendResult.SUCCESS:
                    raise TieredStoreError(f"{flat}: the key index refused the keys of {len(keys)} messages from "
                                           f"queue offset {offset}: {result.name}", topic=topic, queue_id=queue_id,
                                           offset=offset)
                indexed += len(keys)
            offset += len(batch.units)
            if progress is not None:
                progress(len(batch.units))
        if batch.error is not None:
            log.warning("repair: re-index of %s skips the damaged message at %d: %s", flat, offset, batch.error)
            offset += 1
        elif not batch.units:
            break
    return indexed


__all__ = ["ADOPT_INDEX", "act_index", "decide_index", "decide_unlisted_index", "is_index_path", "reindex_keys"]
