"""What ``tiered repair`` does about each mendable finding of the listing and the queues:
decided from the live state, never from the finding alone.

Each ``decide_*`` function looks at the backend and the metadata *as they are now* and
returns a :class:`~tiered_core.ops.repair_context.Decision`: the action and its data, or
why it must not act. The dry run (:func:`~tiered_core.ops.repair.plan_repair`) calls them
over a read-only driver and metadata; ``--apply`` calls them again under the store lock and
the prefix claim (the re-check) and then :func:`act`. Bytes are adopted into the metadata
only when they continue their flat file at exactly its committed end and pass the
read-back checks (:mod:`tiered_core.ops.repair_readback`).
"""

from __future__ import annotations

import logging

from tiered_core.codec._impl import crc32, peek_physical_offset, peek_total_size
from tiered_core.codec.consume_queue import CQ_UNIT_SIZE, decode_cq_unit
from tiered_core.codec.message import PHYSICAL_OFFSET_POS
from tiered_core.codec.naming import queue_path, segment_path
from tiered_core.common import NO_TIMESTAMP, FileSegmentType, SegmentStatus, now_ms
from tiered_core.errors import CorruptData, IllegalParam, NotFound
from tiered_core.ops.findings import Finding
from tiered_core.ops.reconcile import backend_path
from tiered_core.ops.repair_context import (
    ADOPT,
    ADOPT_TAIL,
    QUARANTINE,
    RECORD_QUEUE,
    RECORD_SEALED,
    RECORD_TIMES,
    REMOVE_LEFTOVERS,
    REWRITE,
    SEAL_OBJECT,
    Decision,
    RepairContext,
    record_of,
    segment_of,
)
from tiered_core.ops.repair_readback import check_consume_queue_span, check_extension, commit_log_prefix
from tiered_core.spi.metadata import FileSegmentMetadata, QueueMetadata

log = logging.getLogger(__name__)


# -- deciding -------------------------------------------------------------------------------------


def decide_unlisted(ctx: RepairContext, finding: Finding) -> Decision:
    """An object no metadata lists: adopt it when it is a segment of this store that
    continues its file at exactly the committed end (an empty file: at 0) and reads back
    whole (a commit-log segment: its head of whole messages, when only garbage follows);
    refuse when its file has no record and it does not start at 0 (lost metadata: rebuild
    it), and when it lies outside the committed range but begins as this store's segment (it
    may hold messages the tier holds nowhere else); else quarantine it."""
    path = finding.subject
    try:
        size = ctx.driver.size(path)
    except NotFound:
        return Decision.moot("the object is gone already")
    if size == 0:
        return Decision.moot("the object is empty (not data): nothing to do")
    seg = segment_of(ctx, path)
    if seg is None:
        return Decision(QUARANTINE, f"move it into the quarantine ({size} bytes; not a segment of this store)",
                        {"path": path, "size": size})
    topic, queue_id, file_type, base = seg
    records = ctx.records(topic, queue_id, file_type)
    if any(m.base_offset == base for m in records):
        return Decision.moot("the metadata lists it now")
    end = records[-1].base_offset + records[-1].size if records else 0
    if not records and base != 0:
        return Decision.refuse(f"the metadata holds no segment of {topic}/{queue_id}'s {file_type.name} at all: "
                               "if the metadata was lost, rebuild it from the listing with `tiered metadata "
                               "rebuild --config FILE --force`")
    if base == end:
        sealed = ctx.driver.is_sealed(path)
        new = FileSegmentMetadata(queue_path(ctx.broker, topic, queue_id), file_type, base, size,
                                  SegmentStatus.SEALED if sealed else SegmentStatus.NEW)
        try:
            whole, times = check_extension(ctx, topic, queue_id, file_type, path, base, base, base + size, new,
                                            torn_ok=True)
        except CorruptData as exc:
            why = f"it continues its file but fails the read-back check ({exc.message})"
            if file_type is FileSegmentType.COMMIT_LOG:
                return _decide_commit_log_prefix(ctx, path, topic, queue_id, base, size, sealed, why)
        else:
            return Decision(ADOPT, f"adopt it into the metadata: {file_type.name} segment of {topic}/{queue_id} "
                                   f"at {base}, {size} bytes, continuing the committed end",
                            {"path": path, "topic": topic, "queue_id": queue_id, "type": int(file_type),
                             "base": base, "size": whole - base, "sealed": sealed, "times": times})
    else:
        why = f"it does not continue its file (base {base}, committed end {end})"
        if base < records[0].base_offset:
            why += ("; it lies before the file's first recorded segment: if the metadata lost it, `tiered "
                    "metadata rebuild --config FILE --force` recovers it instead")
    if (base >= end or base < records[0].base_offset) and _begins_with_its_record(ctx, topic, queue_id, file_type,
                                                                                   path, base, size):
        # Outside the committed range and this store's by its head: it may hold messages the
        # tier holds nowhere else, so it is never moved on a guess.
        return Decision.refuse(f"{why}; it begins with a record of this store, so repair does not move it: restore "
                               "the metadata (`tiered metadata rebuild --config FILE --force` rebuilds it from the "
                               "listing) or the object from a copy of the bucket")
    return Decision(QUARANTINE, f"move it into the quarantine ({size} bytes; {why})", {"path": path, "size": size})


def _decide_commit_log_prefix(ctx: RepairContext, path: str, topic: str, queue_id: int, base: int, size: int,
                              sealed: bool, why: str) -> Decision:
    """An unlisted commit-log segment that continues its file but fails the read-back
    check: adopt its head of whole valid messages and cut the rest when no message starts
    there (a garbage or torn tail; a copy of the object goes into the quarantine), as the
    metadata rebuild keeps it; refuse when a message there fails the checks (a damaged
    message of this store) or a later segment continues the file past it."""
    keep, times, garbage, stop = commit_log_prefix(ctx, topic, queue_id, path, base, size)
    good = keep - base
    if good > 0 and garbage:
        later = segment_path(ctx.cluster, ctx.broker, topic, queue_id, FileSegmentType.COMMIT_LOG, base + size)
        if not ctx.driver.exists(later):
            return Decision(ADOPT, f"adopt its {good} bytes of whole messages into the metadata: COMMIT_LOG segment "
                                   f"of {topic}/{queue_id} at {base}, continuing the committed end; cut the "
                                   f"{size - good} bytes after them ({stop}; a copy of the object goes into the "
                                   "quarantine)",
                            {"path": path, "topic": topic, "queue_id": queue_id,
                             "type": int(FileSegmentType.COMMIT_LOG), "base": base, "size": good, "sealed": sealed, "times": times})
        return Decision.refuse(f"{why}; its first {good} bytes are whole messages of this store and the segment at "
                               f"{base + size} continues the file past the rest: restore the object from a copy of "
                               "the bucket")
    if good > 0 or _begins_with_its_record(ctx, topic, queue_id, FileSegmentType.COMMIT_LOG, path, base, size):
        return Decision.refuse(f"{why}; it holds messages of this store (stopped at: {stop}) the tier holds nowhere "
                               "else, so repair does not move it: restore the object from a copy of the bucket, or "
                               "rebuild the metadata (`tiered metadata rebuild --config FILE --force`)")
    return Decision(QUARANTINE, f"move it into the quarantine ({size} bytes; {why})", {"path": path, "size": size})


def _begins_with_its_record(ctx: RepairContext, topic: str, queue_id: int, file_type: FileSegmentType, path: str,
                            base: int, size: int) -> bool:
    """Whether the object begins as a segment of this store does: a commit-log segment with
    a message whose physical offset is its base offset (as the rebuild tells its own); a
    consume-queue segment with a valid unit that names its message in the committed commit
    log, or commit-log bytes the metadata does not list (in doubt: this store's)."""
    try:
        if file_type is FileSegmentType.COMMIT_LOG:
            if size < PHYSICAL_OFFSET_POS + 8:
                return False
            head = ctx.driver.read(path, 0, PHYSICAL_OFFSET_POS + 8)
            return peek_physical_offset(head, 0) == base and peek_total_size(head, 0) >= PHYSICAL_OFFSET_POS + 8
        if size < CQ_UNIT_SIZE:
            return False
        unit = decode_cq_unit(ctx.driver.read(path, 0, CQ_UNIT_SIZE))
    except (CorruptData, NotFound):
        return False
    if not unit.is_valid:
        return False
    cl = ctx.records(topic, queue_id, FileSegmentType.COMMIT_LOG)
    committed = cl[-1].base_offset + cl[-1].size if cl else 0
    if unit.commitlog_offset + unit.size > committed:
        return True
    first = base // CQ_UNIT_SIZE
    one = FileSegmentMetadata(queue_path(ctx.broker, topic, queue_id), file_type, base, CQ_UNIT_SIZE)
    try:
        check_consume_queue_span(ctx, topic, queue_id, [one], first, first + 1)
    except CorruptData:
        return False
    return True


def decide_tail(ctx: RepairContext, finding: Finding) -> Decision:
    """Bytes past a segment's committed end. When the segment is the last of its file and
    they read back as whole records (maybe ending in one cut short): adopt the whole
    records, and cut the torn rest off (a copy of the object goes into the quarantine
    first). Otherwise (a bad tail) quarantine a copy of the object and rewrite it with its
    committed bytes only."""
    path = finding.subject
    meta = record_of(ctx, path)
    if meta is None:
        return Decision.refuse("the metadata does not list it as a segment of this store")
    try:
        size = ctx.driver.size(path)
    except NotFound:
        return Decision.refuse("the object is gone")
    if size <= meta.size:
        return Decision.moot(f"the backend holds {size} bytes, no more than the {meta.size} committed: "
                             "nothing past the end any more")
    topic, queue_id, file_type, base = segment_of(ctx, path)  # type: ignore[misc]
    records = ctx.records(topic, queue_id, file_type)
    is_last = records[-1].base_offset == base
    why = "" if is_last else "are never read: the next segment continues the file from the committed end"
    if is_last:
        try:
            whole, times = check_extension(ctx, topic, queue_id, file_type, path, base, base + meta.size,
                                            base + size, None, torn_ok=True)
        except CorruptData as exc:
            why = exc.message
        else:
            # (a BAD_TAIL that reads back now -- its units point into commit-log bytes an
            # earlier step adopted -- is adopted like any tail that reads back)
            good, torn = whole - base, base + size - whole
            cut = f"; cut the torn {torn} bytes after them (a copy of the object goes into the quarantine)" \
                if torn else ""
            if good == meta.size:
                return Decision(REWRITE, f"cut the torn {torn} bytes past the committed end (a copy of the object "
                                         "goes into the quarantine)", {"path": path, "keep": meta.size, "size": size})
            return Decision(ADOPT_TAIL, f"adopt the {good - meta.size} bytes of whole records past the committed "
                                        f"end (committed size {meta.size} -> {good}){cut}",
                            {"path": path, "topic": topic, "queue_id": queue_id, "type": int(file_type),
                             "base": base, "size": good, "times": times, "torn": torn})
    if is_last:
        why = f"fail the read-back check: {why}"
    return Decision(REWRITE, f"copy the object into the quarantine, then rewrite it with its {meta.size} committed "
                             f"bytes (the {size - meta.size} bytes past them {why})",
                    {"path": path, "keep": meta.size, "size": size})


def decide_queue_row(ctx: RepairContext, finding: Finding) -> Decision:
    """A queue whose consume-queue segments the metadata lists without a row for the queue:
    record the row, its offsets from the segments (as the metadata rebuild does)."""
    topic, queue_id = finding.topic, finding.queue_id
    if topic is None or queue_id is None:
        return Decision.refuse("the finding names no queue")
    if ctx.metadata.get_queue(topic, queue_id) is not None:
        return Decision.moot("the metadata holds the queue's row now")
    cq = ctx.records(topic, queue_id, FileSegmentType.CONSUME_QUEUE)
    if not cq:
        return Decision.refuse("the metadata lists no consume-queue segment of the queue: rebuild the metadata "
                               "(`tiered metadata rebuild --config FILE --force`)")
    lo = cq[0].base_offset // CQ_UNIT_SIZE
    hi = max(lo, (cq[-1].base_offset + cq[-1].size) // CQ_UNIT_SIZE)
    return Decision(RECORD_QUEUE, f"record the queue's row: offsets {lo}..{hi - 1} (from its {len(cq)} consume-queue "
                                  "segment(s))", {"topic": topic, "queue_id": queue_id, "min": lo, "max": hi})


def decide_sealed(ctx: RepairContext, finding: Finding) -> Decision:
    """Metadata and backend disagree about a seal: seal the object, or record it sealed."""
    path = finding.subject
    meta = record_of(ctx, path)
    if meta is None:
        return Decision.refuse("the metadata does not list it as a segment of this store")
    try:
        size, sealed = ctx.driver.size(path), ctx.driver.is_sealed(path)
    except NotFound:
        return Decision.refuse("the object is gone")
    recorded = meta.status == SegmentStatus.SEALED
    if recorded == sealed:
        return Decision.moot("the metadata and the backend agree now")
    if size != meta.size:
        return Decision.refuse(f"the backend holds {size} bytes, the metadata {meta.size}: mend the size first")
    if sealed:
        return Decision(RECORD_SEALED, "record the segment as sealed (the backend object is)", {"path": path})
    return Decision(SEAL_OBJECT, "seal the backend object (the metadata records it as sealed)", {"path": path})


def decide_leftovers(ctx: RepairContext, finding: Finding) -> Decision:
    """Leftover pieces of a sealed segment: its seal, run again, removes them (the driver's
    own clean-up, which removes only pieces of the segment's own id whose bytes it holds)."""
    path = finding.subject
    meta = record_of(ctx, path)
    if meta is None:
        return Decision.refuse("the metadata does not list it as a segment of this store")
    try:
        if not ctx.driver.is_sealed(path):
            return Decision.moot("the backend object is not sealed: its next compaction removes them")
    except NotFound:
        return Decision.refuse("the object is gone")
    now = [(name, size) for seg, name, size in ctx.driver.leftover_objects(path) if seg == path]
    if not now:
        return Decision.moot("they are gone")
    return Decision(REMOVE_LEFTOVERS, f"remove its {len(now)} leftover piece(s) ({sum(s for _, s in now)} bytes), "
                                      "as its seal does", {"path": path, "count": len(now)})


def decide_times(ctx: RepairContext, finding: Finding) -> Decision:
    """Record the segment times verify read from the messages (the finding's ``times``),
    when the metadata still records the times verify saw and did not know the side that is
    wrong. A known time the messages fall outside is never overwritten: the store records
    every appended message's time, so either the object is not the one it wrote (another
    store's of the same name and size) or its metadata was changed, and repair cannot tell
    which (re-recording would make verify call another store's messages whole)."""
    meta = record_of(ctx, finding.subject)
    times = finding.facts.get("times")
    seen = finding.facts.get("metadata_times")
    read = finding.facts.get("read_times")
    if meta is None:
        return Decision.refuse("the metadata does not list it as a segment of this store")
    if not times or len(times) != 2:
        return Decision.refuse("the finding carries no times read from the messages: run `tiered verify --deep`")
    if seen is not None and [meta.begin_timestamp, meta.end_timestamp] != list(seen):
        return Decision.refuse("the metadata's times changed since verify read them: run `tiered verify --deep` "
                               "again")
    begin, end = meta.begin_timestamp, meta.end_timestamp
    if read is not None and len(read) == 2 and \
            ((begin != NO_TIMESTAMP and begin > read[0]) or (end != NO_TIMESTAMP and end < read[1])):
        return Decision.refuse(
            f"its messages were stored at {read[0]}..{read[1]}, outside the times {begin}..{end} this store "
            "recorded when it appended them: the object may not be the one this store wrote (another store's "
            "object of the same name), or the metadata's times were changed. Compare the object with a copy of "
            "the bucket and restore it from there; only if it is this store's own, record its times again with "
            "`tiered metadata rebuild --force`")
    return Decision(RECORD_TIMES, f"record store times {times[0]}..{times[1]} (was {meta.begin_timestamp}.."
                                  f"{meta.end_timestamp})", {"path": finding.subject, "times": list(times)})


# -- acting ---------------------------------------------------------------------------------------


def act(ctx: RepairContext, finding: Finding, decision: Decision) -> str:
    """Carry ``decision`` out (``--apply``; ``ctx`` is the writer's); returns what was done."""
    d, md = decision.data, ctx.metadata
    if decision.action == ADOPT:
        file_type = FileSegmentType(d["type"])
        flat = queue_path(ctx.broker, d["topic"], d["queue_id"])
        records = ctx.records(d["topic"], d["queue_id"], file_type)
        cut = ""
        if ctx.driver.size(d["path"]) > d["size"]:  # a torn record after the whole ones: cut it first
            assert ctx.quarantine is not None
            entry = ctx.quarantine.move(d["path"], reason=f"{finding.detail} (the torn bytes after the whole "
                                        "records)", kind=finding.kind.value, keep=d["size"])
            cut = f"; {entry.then} (copy at {entry.copy})"
        with md.transaction():
            if md.get_topic(d["topic"]) is None:
                md.add_topic(d["topic"])
            prev = records[-1] if records else None
            if (prev is not None and prev.status != SegmentStatus.SEALED
                    and ctx.driver.is_sealed(backend_path(ctx.cluster, prev))):
                md.update_file_segment(prev.mark_sealed())
            meta = FileSegmentMetadata(flat, file_type, d["base"], d["size"], SegmentStatus.NEW, now_ms(),
                                       d["times"][0], d["times"][1])
            if d["sealed"]:
                meta.mark_sealed()
            md.update_file_segment(meta)
            _raise_queue_end(ctx, d["topic"], d["queue_id"], file_type, d["base"] + d["size"])
        md.flush()
        return f"adopted into the metadata ({d['size']} bytes at {d['base']}){cut}"
    if decision.action == ADOPT_TAIL:
        meta = record_of(ctx, d["path"])
        assert meta is not None
        cut = ""
        if d["torn"]:
            assert ctx.quarantine is not None
            entry = ctx.quarantine.move(d["path"], reason=f"{finding.detail} (the torn bytes after the whole records)",
                                        kind=finding.kind.value, keep=d["size"])
            cut = f"; {entry.then} (copy at {entry.copy})"
        old = meta.size
        if meta.checksum is not None and meta.checksum_size == old < d["size"]:
            # the adopted bytes are the store's (they passed the read-back check): hashed in, as the open does
            meta.checksum = crc32(ctx.driver.read(d["path"], old, d["size"] - old), meta.checksum)
            meta.checksum_size = d["size"]
        meta.size = d["size"]
        first, last = d["times"]
        if first != NO_TIMESTAMP:
            meta.begin_timestamp = first if meta.begin_timestamp == NO_TIMESTAMP else min(meta.begin_timestamp, first)
            meta.end_timestamp = max(meta.end_timestamp, last)
        if meta.status != SegmentStatus.SEALED and ctx.driver.is_sealed(d["path"]):
            meta.mark_sealed()  # as the store's open records a seal it missed
        with md.transaction():
            md.update_file_segment(meta)
            _raise_queue_end(ctx, d["topic"], d["queue_id"], FileSegmentType(d["type"]), d["base"] + d["size"])
        md.flush()
        return f"committed size raised {old} -> {d['size']}{cut}"
    if decision.action in (QUARANTINE, REWRITE):
        assert ctx.quarantine is not None
        entry = ctx.quarantine.move(d["path"], reason=finding.detail, kind=finding.kind.value,
                                    keep=d.get("keep"))
        return f"{entry.then}; copy at {entry.copy}"
    if decision.action == RECORD_QUEUE:
        with md.transaction():
            if md.get_topic(d["topic"]) is None:
                md.add_topic(d["topic"])
            md.update_queue(QueueMetadata(d["topic"], d["queue_id"], d["min"], d["max"], now_ms(), ctx.broker))
        md.flush()
        return f"recorded the queue's row (offsets {d['min']}..{d['max'] - 1})"
    if decision.action == RECORD_SEALED:
        meta = record_of(ctx, d["path"])
        assert meta is not None
        md.update_file_segment(meta.mark_sealed())
        md.flush()
        return "recorded as sealed"
    if decision.action == SEAL_OBJECT:
        ctx.driver.seal(d["path"])
        return "sealed the backend object"
    if decision.action == REMOVE_LEFTOVERS:
        ctx.driver.seal(d["path"])  # on a sealed segment: removes its own garbage pieces only
        left = sum(1 for seg, _, _ in ctx.driver.leftover_objects(d["path"]) if seg == d["path"])
        return f"removed {d['count'] - left} leftover piece(s)" + (f" ({left} could not be removed)" if left else "")
    if decision.action == RECORD_TIMES:
        meta = record_of(ctx, d["path"])
        assert meta is not None
        meta.begin_timestamp, meta.end_timestamp = d["times"]
        md.update_file_segment(meta)
        md.flush()
        return f"recorded store times {d['times'][0]}..{d['times'][1]}"
    raise IllegalParam(f"unknown repair action {decision.action!r}", action=decision.action)


def _raise_queue_end(ctx: RepairContext, topic: str, queue_id: int, file_type: FileSegmentType, end: int) -> None:
    """After consume-queue bytes were adopted: the queue's max offset covers them, so no
    offset the tier holds is handed out again."""
    if file_type is not FileSegmentType.CONSUME_QUEUE:
        return
    end_offset = end // CQ_UNIT_SIZE
    queue = ctx.metadata.get_queue(topic, queue_id)
    if queue is None:
        ctx.metadata.update_queue(QueueMetadata(topic, queue_id, end_offset, end_offset, now_ms(), ctx.broker))
    elif queue.max_offset < end_offset:
        queue.max_offset = end_offset
        ctx.metadata.update_queue(queue)


def assume(ctx: RepairContext, decision: Decision) -> None:
    """Dry run: record an adoption as if done, so later decisions see it."""
    d = decision.data
    if decision.action == ADOPT:
        file_type = FileSegmentType(d["type"])
        ctx.extra.setdefault((d["topic"], d["queue_id"], file_type), []).append(FileSegmentMetadata(
            queue_path(ctx.broker, d["topic"], d["queue_id"]), file_type, d["base"], d["size"]))
    elif decision.action == ADOPT_TAIL:
        ctx.sizes[d["path"]] = d["size"]


__all__ = ["act", "assume", "decide_leftovers", "decide_queue_row", "decide_sealed", "decide_tail", "decide_times",
           "decide_unlisted"]
