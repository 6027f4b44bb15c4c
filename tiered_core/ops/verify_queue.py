"""The per-queue walk of ``tiered verify``: one queue's segments, from references alone.

Everything here works from :class:`QueueWork` (plain picklable data: segment references,
the metadata's times and committed ends) and a driver, so the same walk runs in the CLI
process and, split into ranges of queue offsets, in Spark executors
(``tiered spark verify``). Reads go through the store's one segment reader
(:class:`~tiered_core.flat.segment_reader.SegmentReader`); nothing is written.

The pieces, in the order a walk uses them: :func:`queue_works` (one :class:`QueueWork` per
queue the metadata lists), :func:`structure_findings` (segments that do not join),
:func:`plan_ranges` + :func:`~tiered_core.ops.verify_range.verify_range` (the units and,
with ``deep``, the messages of a range of queue offsets), :func:`time_findings` (the
metadata's segment times against the messages), and :func:`finish_walk`, which merges the
ranges' results into one :class:`QueueWalk` the same way wherever the ranges ran (runs
of findings cut by range boundaries joined: :func:`merge_runs`).
:func:`~tiered_core.ops.verify_range.walk_queues` is the single-process walk;
``verify_store(..., walk=...)`` takes any callable of the :data:`Walk` shape (the Spark
walk is one).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol, Sequence

from tiered_core.codec.checks import PropCrcPolicy
from tiered_core.codec.consume_queue import CQ_UNIT_SIZE
from tiered_core.common import NO_TIMESTAMP, FileSegmentType, SegmentStatus
from tiered_core.flat.segment_ref import SegmentRef
from tiered_core.ops.findings import Finding, FindingKind, VerifyStats
from tiered_core.ops.reconcile import backend_path
from tiered_core.spi.driver import SegmentDriver
from tiered_core.spi.metadata import FileSegmentMetadata, TieredMetadataStore

#: Queue offsets one range (a Spark task) walks, at most, unless told otherwise.
UNITS_PER_RANGE = 1 << 18


@dataclass(frozen=True)
class QueueWork:
    """What the walk of one queue needs, from the metadata (picklable).

    ``consume_queue`` / ``commit_log``: the segments the metadata lists (ordered by base
    offset, sizes as committed); ``times``: backend path -> (begin, end) store times the
    metadata records for each commit-log segment; ``min_offset`` / ``max_offset``: the
    queue offsets ``[min, max)`` its committed consume queue holds."""

    topic: str
    queue_id: int
    consume_queue: tuple[SegmentRef, ...]
    commit_log: tuple[SegmentRef, ...]
    min_offset: int
    max_offset: int
    times: dict[str, tuple[int, int]] = field(default_factory=dict, hash=False, compare=False)

    @property
    def subject(self) -> str:
        """``topic/queue``: how findings about the queue as a whole name it."""
        return f"{self.topic}/{self.queue_id}"


@dataclass
class RangeResult:
    """What the walk of queue offsets ``[start, end)`` of one queue found, and its counters;
    ``times``: commit-log segment path -> (first, last) store time of the messages read in
    it (the earliest and the latest of each group's first and last message; merged over
    ranges to check the metadata's segment times)."""

    topic: str
    queue_id: int
    start: int
    end: int
    findings: list[Finding] = field(default_factory=list)
    stats: VerifyStats = field(default_factory=VerifyStats)
    times: dict[str, tuple[int, int]] = field(default_factory=dict)


@dataclass
class QueueWalk:
    """The per-queue part of a verify report: its findings (in a fixed order: by queue, then
    queue offset, kind and subject) and its counters (``queues_checked``,
    ``segments_checked``: consume-queue and commit-log segments walked, ``messages_read``,
    ``bytes_read``)."""

    findings: list[Finding] = field(default_factory=list)
    stats: VerifyStats = field(default_factory=VerifyStats)


class Walk(Protocol):
    """The shape of the per-queue walk ``verify_store`` runs: the queues' works in, their
    :class:`QueueWalk` out (:func:`walk_queues` in this process; the Spark walk of
    ``tiered spark verify`` over executors). ``progress(n)`` is told of ``n`` more queue
    offsets walked."""

    def __call__(self, driver: SegmentDriver, works: Sequence[QueueWork], *, deep: bool,
                 prop_crc: PropCrcPolicy, progress: Callable[[int], None] | None = None) -> QueueWalk: ...


# -- planning from the metadata ---------------------------------------------------------------


def queue_works(metadata: TieredMetadataStore, cluster: str, broker: str,
                topics: Iterable[str] | None = None) -> list[QueueWork]:
    """One :class:`QueueWork` per queue of ``broker`` the metadata's file-segment records
    list (segments marked DELETED left out), ordered by topic and queue id; only the
    ``topics`` given, when given. Reads only the metadata."""
    wanted = None if topics is None else set(topics)
    by_queue: dict[tuple[str, int], dict[int, list[FileSegmentMetadata]]] = defaultdict(lambda: defaultdict(list))
    for file_type in (FileSegmentType.CONSUME_QUEUE, FileSegmentType.COMMIT_LOG):
        for meta in metadata.iterate_file_segments(int(file_type)):
            if meta.status == SegmentStatus.DELETED:
                continue
            parts = meta.path.split("/")
            if len(parts) != 3 or not parts[2].isdigit() or parts[0] != broker:
                continue
            if wanted is not None and parts[1] not in wanted:
                continue
            by_queue[(parts[1], int(parts[2]))][int(file_type)].append(meta)
    works = []
    for (topic, queue_id), kinds in sorted(by_queue.items()):
        cq = sorted(kinds.get(int(FileSegmentType.CONSUME_QUEUE), ()), key=lambda m: m.base_offset)
        cl = sorted(kinds.get(int(FileSegmentType.COMMIT_LOG), ()), key=lambda m: m.base_offset)
        cq_refs = tuple(SegmentRef(backend_path(cluster, m), m.base_offset, m.size) for m in cq)
        cl_refs = tuple(SegmentRef(backend_path(cluster, m), m.base_offset, m.size) for m in cl)
        lo = cq_refs[0].base_offset // CQ_UNIT_SIZE if cq_refs else 0
        hi = (cq_refs[-1].base_offset + cq_refs[-1].size) // CQ_UNIT_SIZE if cq_refs else 0
        times = {ref.path: (m.begin_timestamp, m.end_timestamp) for ref, m in zip(cl_refs, cl)}
        works.append(QueueWork(topic, queue_id, cq_refs, cl_refs, lo, max(lo, hi), times))
    return works


def served_end(refs: Sequence[SegmentRef], i: int) -> int:
    """Where segment ``i``'s readable bytes end (absolute): its committed end, or the next
    segment's base when a torn tail runs past it (the next segment wins)."""
    end = refs[i].base_offset + refs[i].size
    return min(end, refs[i + 1].base_offset) if i + 1 < len(refs) else end


# -- structure ---------------------------------------------------------------------------------


def structure_findings(work: QueueWork) -> list[Finding]:
    """SEGMENT_GAP findings of ``work``'s consume queue and commit log: segment ``i`` ends
    (base + committed size) before segment ``i + 1`` begins. The finding names the next
    segment and the flat-file offsets missing; for the consume queue also the queue
    offsets. A segment whose size runs past the next base is a torn tail the next segment
    overrides: not a finding."""
    out = []
    for name, refs in (("consume queue", work.consume_queue), ("commit log", work.commit_log)):
        for prev, nxt in zip(refs, refs[1:]):
            end = prev.base_offset + prev.size
            if end >= nxt.base_offset:
                continue
            queue_offsets = None
            if refs is work.consume_queue:
                queue_offsets = (-(-end // CQ_UNIT_SIZE), nxt.base_offset // CQ_UNIT_SIZE)
            out.append(Finding(
                FindingKind.SEGMENT_GAP, nxt.path,
                f"the {name} of {work.subject} has no bytes {end}..{nxt.base_offset - 1} before this segment "
                f"({nxt.base_offset - end} bytes: {prev.path} ends at {end})",
                work.topic, work.queue_id, queue_offsets, (end, nxt.base_offset),
                {"log": "consume_queue" if refs is work.consume_queue else "commit_log",
                 "previous": prev.path, "missing_bytes": nxt.base_offset - end}))
    return out


# -- ranges ------------------------------------------------------------------------------------


def plan_ranges(work: QueueWork, units_per_range: int) -> list[tuple[int, int]]:
    """Split ``[work.min_offset, work.max_offset)`` into ranges of at most
    ``units_per_range`` queue offsets (a Spark task each), cut at consume-queue segment
    boundaries as the data source's partitions are. Empty for an empty queue; raises
    :class:`~tiered_core.errors.IllegalParam` for ``units_per_range`` < 1."""
    from tiered_core.errors import IllegalParam

    if units_per_range < 1:
        raise IllegalParam(f"units_per_range must be >= 1, got {units_per_range}", units_per_range=units_per_range)
    cuts = sorted({work.min_offset, work.max_offset,
                   *(r.base_offset // CQ_UNIT_SIZE for r in work.consume_queue
                     if work.min_offset < r.base_offset // CQ_UNIT_SIZE < work.max_offset)})
    out = []
    for lo, hi in zip(cuts, cuts[1:]):
        while lo < hi:
            out.append((lo, min(hi, lo + units_per_range)))
            lo = out[-1][1]
    return out


# -- segment times ------------------------------------------------------------------------------


def merge_times(results: Iterable[RangeResult]) -> dict[str, tuple[int, int]]:
    """The ``times`` of several ranges of one queue, merged (earliest first, latest last)."""
    times: dict[str, tuple[int, int]] = {}
    for result in results:
        for path, (lo, hi) in result.times.items():
            old = times.get(path)
            times[path] = (lo, hi) if old is None else (min(old[0], lo), max(old[1], hi))
    return times


#: The fix of a segment whose messages were stored outside the times its metadata records.
KNOWN_TIMES_FIX = ("the object may not be the one this store wrote (another store's object of the same name), or "
                   "the metadata's times were changed: compare the object with a copy of the bucket and restore it "
                   "from there; only if it is this store's own, record its times again with `tiered metadata "
                   "rebuild --force`")


def time_findings(work: QueueWork, results: list[RangeResult]) -> list[Finding]:
    """Findings of commit-log segments whose metadata times disagree with the first/last
    store time of the messages read in them (the merged ``times`` of every range).

    What "agree" means: the store records a segment's times as the earliest and the
    latest store time of every message appended to it (``FileSegment.append``), the
    metadata rebuild as those of its first and last message. Both contain the times of
    the messages read, and may be wider: bytes no unit points at (left by a crash) and a
    head whose units expired count for the store, and a clock that stepped back makes the
    earliest precede the first. So the metadata's ``[begin, end]`` must contain the first
    and last store time read; narrower is the finding (a read by time could miss those
    messages, expiry could delete them early). The queue's last segment (still being
    written, its times may lag) is left out. The finding's ``facts`` hold
    ``metadata_times``, ``read_times`` and ``times``: what the metadata should record
    (the read time on each side that disagrees, the metadata's on the other)."""
    times = merge_times(results)
    out = []
    for ref in work.commit_log[:-1]:
        if ref.path not in times:
            continue
        lo, hi = times[ref.path]
        begin, end = work.times.get(ref.path, (NO_TIMESTAMP, NO_TIMESTAMP))
        bad_begin, bad_end = begin > lo, end < hi or end == NO_TIMESTAMP
        if not (bad_begin or bad_end):
            continue
        wrong = " and ".join(w for w, bad in (("begin", bad_begin), ("end", bad_end)) if bad)
        if begin != NO_TIMESTAMP and end != NO_TIMESTAMP and (lo > end or hi < begin):
            wrong = "none of them was stored within them"
        else:
            wrong = f"the {wrong} is wrong"
        # A known time the messages fall outside is not the metadata's to be corrected: the
        # store records every appended message's time (see above), so the object is not the
        # one it wrote, or the metadata was changed, and repair cannot tell which.
        known = (bad_begin and begin != NO_TIMESTAMP) or (bad_end and end != NO_TIMESTAMP)
        out.append(Finding(
            FindingKind.TIME_BOUNDS_MISMATCH, ref.path,
            f"the metadata records store times {_time(begin)}..{_time(end)} for this segment of "
            f"{work.subject}, but its messages were stored {lo}..{hi} ({wrong})",
            work.topic, work.queue_id, None, (ref.base_offset, ref.base_offset + ref.size),
            {"metadata_times": [begin, end], "read_times": [lo, hi],
             "times": [lo if bad_begin else begin, hi if bad_end else end]},
            fix_text=KNOWN_TIMES_FIX if known else None, manual=known))
    return out


def _time(value: int) -> str:
    return "unknown" if value == NO_TIMESTAMP else str(value)


# -- findings of runs of queue offsets ----------------------------------------------------------


#: Kinds whose findings of neighbouring ranges join into one (runs of queue offsets).
RUN_KINDS = (FindingKind.UNIT_OUTSIDE_COMMIT_LOG, FindingKind.MISSING_OBJECT, FindingKind.LOST_BYTES)


def outside_finding(work_subject: str, topic: str, queue_id: int, q0: int, q1: int, facts: dict) -> Finding:
    """UNIT_OUTSIDE_COMMIT_LOG for the units of queue offsets ``[q0, q1)`` (``facts``: the
    first one's ``commitlog_offset`` and ``size``, and ``commit_log_end``: where the segment
    it points into, or the commit log, ends). With ``unit_object`` in ``facts`` the units do
    not decode as units: the finding names that consume-queue object, and says it is damaged."""
    n = q1 - q0
    unit_object = facts.get("unit_object")
    if unit_object is not None:
        # the unit itself does not decode: the consume-queue object is damaged, not the commit log
        what = "a consume-queue unit is" if n == 1 else f"{n} consume-queue units are"
        return Finding(FindingKind.UNIT_OUTSIDE_COMMIT_LOG, unit_object,
                       f"{what} damaged: {facts.get('why', 'not a valid unit')} (it reads as commit-log offset "
                       f"{facts.get('commitlog_offset')}, {facts.get('size')} bytes); the messages of these queue "
                       f"offsets of {topic}/{queue_id} cannot be found through the queue",
                       topic, queue_id, (q0, q1), (q0 * CQ_UNIT_SIZE, q1 * CQ_UNIT_SIZE), dict(facts, units=n),
                       fix_text="the consume-queue unit is damaged (not the commit log it points into): restore the "
                                "consume-queue object from a copy of the bucket")
    what = "a unit points" if n == 1 else f"{n} units point"
    return Finding(FindingKind.UNIT_OUTSIDE_COMMIT_LOG, work_subject,
                   f"{what} outside the commit log (the first at commit-log offset {facts.get('commitlog_offset')}, "
                   f"{facts.get('size')} bytes; {facts.get('why', 'no segment holds it')})",
                   topic, queue_id, (q0, q1), None, dict(facts, units=n))


def lost_finding(kind: FindingKind, path: str, topic: str, queue_id: int, q0: int, q1: int,
                 file_offsets: tuple[int, int], facts: dict) -> Finding:
    """MISSING_OBJECT / LOST_BYTES for segment ``path``: its bytes ``file_offsets`` are gone,
    with the messages (or units) of queue offsets ``[q0, q1)``."""
    gone = "the object is missing" if kind is FindingKind.MISSING_OBJECT else \
        f"the object holds {facts.get('backend_size')} of its {facts.get('committed_size')} committed bytes"
    return Finding(kind, path, f"{gone}: queue offsets {q0}..{q1 - 1} of {topic}/{queue_id} cannot be read",
                   topic, queue_id, (q0, q1), file_offsets, dict(facts, units=q1 - q0))


def merge_runs(findings: Sequence[Finding]) -> list[Finding]:
    """``findings`` with those of :data:`RUN_KINDS` that share kind and subject and whose
    queue offsets touch joined into one (a run split by range boundaries)."""
    out: list[Finding] = []
    runs: dict[tuple, list[Finding]] = {}
    for f in findings:
        if f.kind in RUN_KINDS and f.queue_offsets is not None:
            runs.setdefault((f.kind, f.subject, f.topic, f.queue_id), []).append(f)
        else:
            out.append(f)
    for (kind, subject, topic, queue_id), group in runs.items():
        group.sort(key=lambda f: f.queue_offsets)
        head = group[0]
        q0, q1 = head.queue_offsets
        for f in group[1:] + [None]:
            if f is not None and f.queue_offsets[0] <= q1:
                q1 = max(q1, f.queue_offsets[1])
                continue
            if kind is FindingKind.UNIT_OUTSIDE_COMMIT_LOG:
                out.append(outside_finding(subject, topic, queue_id, q0, q1, head.facts))
            else:
                out.append(lost_finding(kind, subject, topic, queue_id, q0, q1, head.file_offsets, head.facts))
            if f is not None:
                head, (q0, q1) = f, f.queue_offsets
    return out


# -- the whole walk -----------------------------------------------------------------------------


def finish_walk(works: Sequence[QueueWork], results: Iterable[RangeResult]) -> QueueWalk:
    """The :class:`QueueWalk` of ``works`` from the results of their ranges (any split, in
    any order): each queue's structure findings, the ranges' findings with runs that touch
    across range boundaries merged into one, and its time findings. The same ranges give
    the same walk wherever they ran."""
    by_queue: dict[tuple[str, int], list[RangeResult]] = defaultdict(list)
    for result in results:
        by_queue[(result.topic, result.queue_id)].append(result)
    walk = QueueWalk()
    for work in works:
        mine = sorted(by_queue.get((work.topic, work.queue_id), ()), key=lambda r: r.start)
        found = structure_findings(work)
        found += merge_runs([f for r in mine for f in r.findings])
        found += time_findings(work, mine)
        found.sort(key=_order)
        walk.findings.extend(found)
        walk.stats.queues_checked += 1
        walk.stats.segments_checked += len(work.consume_queue) + len(work.commit_log)
        for r in mine:
            walk.stats.messages_read += r.stats.messages_read
            walk.stats.bytes_read += r.stats.bytes_read
    return walk


def _order(f: Finding) -> tuple:
    q = f.queue_offsets[0] if f.queue_offsets is not None else (f.file_offsets[0] if f.file_offsets else -1)
    return (q, f.kind.value, f.subject)


def total_units(works: Iterable[QueueWork]) -> int:
    """The queue offsets a walk of ``works`` covers (a progress bar's total)."""
    return sum(w.max_offset - w.min_offset for w in works)


__all__ = ["QueueWalk", "QueueWork", "RUN_KINDS", "RangeResult", "UNITS_PER_RANGE", "Walk", "finish_walk",
           "lost_finding", "merge_runs", "merge_times", "outside_finding", "plan_ranges", "queue_works", "served_end",
           "structure_findings", "time_findings", "total_units"]
