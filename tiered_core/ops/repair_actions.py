"""What ``tiered repair`` does about each mendable finding of the listing and the queues:
decided from the live state, never from the finding alone.

Each ``decide_*`` function looks at the backend and the metadata *as they are now* and
returns a :class:`Decision`: the action and its data, or why it must not act (``skip``).
The dry run (:func:`~tiered_core.ops.repair.plan_repair`) calls them over a read-only
driver and metadata; ``--apply`` calls them again under the store lock and the prefix
claim (the re-check) and then :func:`act`. Bytes are adopted into the metadata only when
they continue their flat file at exactly its committed end and read back through the
store's checks: commit-log bytes as whole messages of the queue
(:func:`~tiered_core.flat.batch_check.check_batch`), consume-queue units through the one
segment reader (:class:`~tiered_core.flat.segment_reader.SegmentReader`), every unit
pointing at a valid message of the committed (or just adopted) commit log.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from tiered_core.codec.checks import PropCrcPolicy
from tiered_core.codec.consume_queue import CQ_UNIT_SIZE
from tiered_core.codec.message import MAGIC_END, MAGIC_V1, MAGIC_V2, peek_magic, peek_store_timestamp, peek_total_size
from tiered_core.codec.naming import parse_segment_path, queue_path
from tiered_core.common import NO_TIMESTAMP, FileSegmentType, SegmentStatus, now_ms
from tiered_core.errors import CorruptData, IllegalParam, NotFound
from tiered_core.flat.batch_check import check_batch
from tiered_core.flat.segment_reader import SegmentReader
from tiered_core.flat.segment_ref import SegmentRef
from tiered_core.ops.findings import Finding, FindingKind
from tiered_core.ops.quarantine import Quarantine
from tiered_core.ops.reconcile import backend_path
from tiered_core.spi.driver import SegmentDriver
from tiered_core.spi.metadata import FileSegmentMetadata, QueueMetadata, TieredMetadataStore

log = logging.getLogger(__name__)

# The actions, as the plan and the report name them.
ADOPT = "adopt"  # record an unlisted segment in the metadata
ADOPT_TAIL = "adopt_tail"  # raise a segment's committed size to the backend's
QUARANTINE = "quarantine"  # move the object into the quarantine (removed from the prefix)
REWRITE = "rewrite"  # quarantine a copy, rewrite the object with its committed bytes
SEAL_OBJECT = "seal_object"  # seal the backend object (the metadata records it sealed)
RECORD_SEALED = "record_sealed"  # record the segment sealed (the backend object is)
RECORD_TIMES = "record_times"  # record the segment's times read from its messages
REINDEX = "reindex"  # quarantine / drop an index file, index its messages' keys again
CLAIM = "claim"  # write this store's owner record

_TYPES = {FileSegmentType.COMMIT_LOG, FileSegmentType.CONSUME_QUEUE}


@dataclass
class Decision:
    """What to do about one finding now: ``action`` and ``detail`` (in words), with the
    data :func:`act` needs; or ``skip``: why nothing may be done -- a manual step, or
    (``moot``) nothing is wrong any more."""

    action: str | None
    detail: str
    data: dict[str, Any] = field(default_factory=dict)
    skip: str | None = None
    moot: bool = False

    @classmethod
    def refuse(cls, why: str) -> "Decision":
        """Repair must not act: ``why`` is the manual step."""
        return cls(None, why, skip=why)

    @classmethod
    def moot(cls, why: str) -> "Decision":
        """Nothing to do any more (the live state no longer shows the finding)."""
        return cls(None, why, skip=why, moot=True)


@dataclass
class RepairContext:
    """The backend and metadata repair decides against (read-only ones for the plan, the
    writer session's for ``--apply``). ``extra`` / ``sizes``: adoptions the dry run
    assumes done (so the next segment of a chain is judged after the previous one);
    ``quarantine``: this run's quarantine (``--apply`` only)."""

    config: Any
    driver: SegmentDriver
    metadata: TieredMetadataStore
    prefix: str
    prop_crc: PropCrcPolicy = PropCrcPolicy.IF_PRESENT
    quarantine: Quarantine | None = None
    extra: dict[tuple[str, int, FileSegmentType], list[FileSegmentMetadata]] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)

    @property
    def cluster(self) -> str:
        return self.config.cluster

    @property
    def broker(self) -> str:
        return self.config.broker

    def records(self, topic: str, queue_id: int, file_type: FileSegmentType) -> list[FileSegmentMetadata]:
        """The file's live segment records by base offset (with the dry run's assumed adoptions)."""
        metas = [m for m in self.metadata.iterate_file_segments(int(file_type), queue_path(self.broker, topic,
                                                                                           queue_id))
                 if m.status != SegmentStatus.DELETED]
        metas += self.extra.get((topic, queue_id, file_type), [])
        out = []
        for m in sorted(metas, key=lambda m: m.base_offset):
            size = self.sizes.get(backend_path(self.cluster, m))
            out.append(m if size is None else FileSegmentMetadata(m.path, m.type, m.base_offset, size, m.status,
                                                                  m.create_timestamp, m.begin_timestamp,
                                                                  m.end_timestamp, m.seal_timestamp))
        return out

    def refs(self, metas: list[FileSegmentMetadata]) -> tuple[SegmentRef, ...]:
        return tuple(SegmentRef(backend_path(self.cluster, m), m.base_offset, m.size) for m in metas)


def _segment_of(ctx: RepairContext, path: str) -> tuple[str, int, FileSegmentType, int] | None:
    """``(topic, queue, type, base)`` when ``path`` is a commit-log or consume-queue segment
    path of this store's cluster and broker; None otherwise."""
    try:
        info = parse_segment_path(path)
    except IllegalParam:
        return None
    if info.cluster != ctx.cluster or info.broker != ctx.broker or info.file_type not in _TYPES:
        return None
    return info.topic, info.queue_id, info.file_type, info.base_offset


def _record_of(ctx: RepairContext, path: str) -> FileSegmentMetadata | None:
    seg = _segment_of(ctx, path)
    if seg is None:
        return None
    topic, queue_id, file_type, base = seg
    return next((m for m in ctx.records(topic, queue_id, file_type) if m.base_offset == base), None)


# -- the read-back checks -----------------------------------------------------------------------


def check_commit_log_span(ctx: RepairContext, topic: str, queue_id: int, path: str, base: int, start: int,
                          end: int, *, torn_ok: bool = False) -> tuple[int, tuple[int, int]]:
    """Check that bytes ``[start, end)`` of the commit-log segment at ``path`` (file offset
    ``base``) are whole, valid messages of ``topic``/``queue_id``, each at its own offset
    (one read, one validation pass). With ``torn_ok`` the bytes may end in the head of a
    message cut short (a write cut short). Returns where the whole messages end and their
    (first, last) store time. Raises :class:`CorruptData` naming what fails."""
    data = ctx.driver.read(path, start - base, end - start) if end > start else b""
    if len(data) != end - start:
        raise CorruptData(f"{path!r} holds {start - base + len(data)} bytes, not {end - base}", path=path)
    units, pos = [], 0
    while pos < len(data):
        if len(data) - pos < MAGIC_END:
            if torn_ok:
                break
            raise CorruptData(f"{path!r}: a message cut short at file offset {start + pos}", path=path,
                              offset=start + pos)
        size = peek_total_size(data, pos)
        if peek_magic(data, pos) not in (MAGIC_V1, MAGIC_V2) or size <= MAGIC_END:
            raise CorruptData(f"{path!r}: no message starts at file offset {start + pos}", path=path,
                              offset=start + pos)
        if pos + size > len(data):
            if torn_ok:
                break
            raise CorruptData(f"{path!r}: the message at file offset {start + pos} declares {size} bytes, "
                              f"{len(data) - pos} are left", path=path, offset=start + pos)
        units.append((start + pos, size, 0))
        pos += size
    if not units:
        return start, (NO_TIMESTAMP, NO_TIMESTAMP)
    batch = check_batch(units, data, start, topic=topic, queue_id=queue_id, queue_offset=None,
                        prop_crc=ctx.prop_crc, check_tags=False)
    if batch.error is not None:
        raise batch.error
    return start + pos, (peek_store_timestamp(data, 0), peek_store_timestamp(data, units[-1][0] - start))


def check_consume_queue_span(ctx: RepairContext, topic: str, queue_id: int, cq: list[FileSegmentMetadata],
                             start: int, end: int) -> tuple[int, int]:
    """Check that the units of queue offsets ``[start, end)`` of the consume queue ``cq``
    (records, the new bytes included) all read back through the segment reader as valid
    messages of the queue's committed commit log; returns the (first, last) store time."""
    cl = ctx.records(topic, queue_id, FileSegmentType.COMMIT_LOG)
    reader = SegmentReader.from_refs(ctx.driver, topic, queue_id, ctx.refs(cq), ctx.refs(cl), ctx.prop_crc)
    count, first, last = 0, NO_TIMESTAMP, NO_TIMESTAMP
    for batch in reader.batches(start, end):
        if count == 0 or first == NO_TIMESTAMP:
            first = peek_store_timestamp(batch.data, batch.units[0][0] - batch.base)
        last = peek_store_timestamp(batch.data, batch.units[-1][0] - batch.base)
        count += len(batch)
    if count != end - start:
        raise CorruptData(f"{topic}/{queue_id}: {end - start - count} of the units {start}..{end - 1} name no "
                          "message", topic=topic, queue_id=queue_id, queue_offset=start)
    return first, last


def _check_extension(ctx: RepairContext, topic: str, queue_id: int, file_type: FileSegmentType, path: str,
                     base: int, start: int, end: int, new: FileSegmentMetadata | None,
                     torn_ok: bool = False) -> tuple[int, tuple[int, int]]:
    """Read-back check of file bytes ``[start, end)`` about to be adopted (``new``: the
    record of an adopted segment, None for a tail of a recorded one); with ``torn_ok`` a
    last record cut short is left out. Returns where the whole records end and their
    (first, last) store time."""
    if file_type is FileSegmentType.COMMIT_LOG:
        return check_commit_log_span(ctx, topic, queue_id, path, base, start, end, torn_ok=torn_ok)
    whole = end - end % CQ_UNIT_SIZE
    if start % CQ_UNIT_SIZE or (whole != end and not torn_ok):
        raise CorruptData(f"{path!r}: the bytes {start}..{end} are not whole consume-queue units", path=path)
    if whole <= start:
        return start, (NO_TIMESTAMP, NO_TIMESTAMP)
    cq = ctx.records(topic, queue_id, FileSegmentType.CONSUME_QUEUE)
    if new is not None:
        new = FileSegmentMetadata(new.path, new.type, new.base_offset, whole - new.base_offset, new.status)
        cq = sorted([*cq, new], key=lambda m: m.base_offset)
    else:
        cq = [FileSegmentMetadata(m.path, m.type, m.base_offset, whole - m.base_offset, m.status)
              if m.base_offset == base else m for m in cq]
    return whole, check_consume_queue_span(ctx, topic, queue_id, cq, start // CQ_UNIT_SIZE, whole // CQ_UNIT_SIZE)


# -- deciding -------------------------------------------------------------------------------------


def decide_unlisted(ctx: RepairContext, finding: Finding) -> Decision:
    """An object no metadata lists: adopt it when it is a segment of this store that
    continues its file at exactly the committed end (an empty file: at 0) and reads back
    whole; refuse when its file has no record and it does not start at 0 (lost metadata:
    rebuild it); else quarantine it."""
    path = finding.subject
    try:
        size = ctx.driver.size(path)
    except NotFound:
        return Decision.moot("the object is gone already")
    if size == 0:
        return Decision.moot("the object is empty (not data): nothing to do")
    seg = _segment_of(ctx, path)
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
            whole, times = _check_extension(ctx, topic, queue_id, file_type, path, base, base, base + size, new,
                                            torn_ok=True)
        except CorruptData as exc:
            why = f"it continues its file but fails the read-back check ({exc.message})"
        else:
            return Decision(ADOPT, f"adopt it into the metadata: {file_type.name} segment of {topic}/{queue_id} "
                                   f"at {base}, {size} bytes, continuing the committed end",
                            {"path": path, "topic": topic, "queue_id": queue_id, "type": int(file_type),
                             "base": base, "size": whole - base, "sealed": sealed, "times": times})
    else:
        why = f"it does not continue its file (base {base}, committed end {end})"
    return Decision(QUARANTINE, f"move it into the quarantine ({size} bytes; {why})", {"path": path, "size": size})


def decide_tail(ctx: RepairContext, finding: Finding) -> Decision:
    """Bytes past a segment's committed end. When the segment is the last of its file and
    they read back as whole records (maybe ending in one cut short): adopt the whole
    records, and cut the torn rest off (a copy of the object goes into the quarantine
    first). Otherwise (a bad tail) quarantine a copy of the object and rewrite it with its
    committed bytes only."""
    path = finding.subject
    meta = _record_of(ctx, path)
    if meta is None:
        return Decision.refuse("the metadata does not list it as a segment of this store")
    try:
        size = ctx.driver.size(path)
    except NotFound:
        return Decision.refuse("the object is gone")
    if size <= meta.size:
        return Decision.moot(f"the backend holds {size} bytes, no more than the {meta.size} committed: "
                             "nothing past the end any more")
    topic, queue_id, file_type, base = _segment_of(ctx, path)  # type: ignore[misc]
    records = ctx.records(topic, queue_id, file_type)
    is_last = records[-1].base_offset == base
    why = "" if is_last else "are never read: the next segment continues the file from the committed end"
    if is_last:
        try:
            whole, times = _check_extension(ctx, topic, queue_id, file_type, path, base, base + meta.size,
                                            base + size, None, torn_ok=True)
        except CorruptData as exc:
            why = exc.message
        else:
            good, torn = whole - base, base + size - whole
            if finding.kind is not FindingKind.UNCOMMITTED_TAIL and good > meta.size:
                return Decision.moot("the bytes past the committed end read back now: run `tiered verify` again")
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


def decide_sealed(ctx: RepairContext, finding: Finding) -> Decision:
    """Metadata and backend disagree about a seal: seal the object, or record it sealed."""
    path = finding.subject
    meta = _record_of(ctx, path)
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


def decide_times(ctx: RepairContext, finding: Finding) -> Decision:
    """Record the segment times verify read from the messages (the finding's ``times``),
    when the metadata still records the times verify saw."""
    meta = _record_of(ctx, finding.subject)
    times = finding.facts.get("times")
    seen = finding.facts.get("metadata_times")
    if meta is None:
        return Decision.refuse("the metadata does not list it as a segment of this store")
    if not times or len(times) != 2:
        return Decision.refuse("the finding carries no times read from the messages: run `tiered verify --deep`")
    if seen is not None and [meta.begin_timestamp, meta.end_timestamp] != list(seen):
        return Decision.refuse("the metadata's times changed since verify read them: run `tiered verify --deep` "
                               "again")
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
        meta = _record_of(ctx, d["path"])
        assert meta is not None
        cut = ""
        if d["torn"]:
            assert ctx.quarantine is not None
            entry = ctx.quarantine.move(d["path"], reason=f"{finding.detail} (the torn bytes after the whole records)",
                                        kind=finding.kind.value, keep=d["size"])
            cut = f"; {entry.then} (copy at {entry.copy})"
        old = meta.size
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
    if decision.action == RECORD_SEALED:
        meta = _record_of(ctx, d["path"])
        assert meta is not None
        md.update_file_segment(meta.mark_sealed())
        md.flush()
        return "recorded as sealed"
    if decision.action == SEAL_OBJECT:
        ctx.driver.seal(d["path"])
        return "sealed the backend object"
    if decision.action == RECORD_TIMES:
        meta = _record_of(ctx, d["path"])
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


__all__ = [
    "ADOPT", "ADOPT_TAIL", "CLAIM", "QUARANTINE", "RECORD_SEALED", "RECORD_TIMES", "REINDEX", "REWRITE",
    "SEAL_OBJECT", "Decision", "RepairContext", "act", "assume", "check_commit_log_span",
    "check_consume_queue_span", "decide_sealed", "decide_tail", "decide_times", "decide_unlisted",
]
