"""Rebuild lost metadata from a driver's listing (``tiered metadata rebuild``).

Every segment path names its cluster, broker, topic, queue, file type and base offset
(:func:`tiered_core.codec.naming.parse_segment_path`), and the listing gives its size, so
the file-segment table and the queue table can be reconstructed from ``driver.list()``
alone. What the listing cannot tell is recovered by reading a few bytes:

* **status**: SEALED when ``driver.is_sealed(path)``, and for every segment but the last of
  its flat file (the flat layer only rolls after sealing); NEW otherwise.
* **timestamps** (``timestamps=True``, the default): a commit-log segment's begin/end are the
  store times of its first/last message, found through the consume queue (binary search
  over its units, ~log2(units) reads of 20 bytes) and read from the message, which must
  pass the store's one segment reader's checks
  (:class:`~tiered_core.flat.segment_reader.SegmentReader`, from the listing alone:
  size, CRC, topic, queue id, queue offset, physical offset, tags code, and its
  ``__CRC32#`` property when it has one) -- a message that fails it tells nothing; a
  consume-queue segment's are those of the messages its first/last whole unit points at; an
  index segment's come from its 28-byte header. Where no message can be read (the consume
  queue expired first, orphaned bytes), the begin is read from the segment's head if it
  holds a valid message, the end from the next segment's begin. A non-empty segment whose
  times stay unknown, or every segment with ``timestamps=False``, gets the rebuild time:
  expiry then keeps it for a full reserve period instead of deleting it at once (the flat
  layer treats an unknown end time as expired). Empty segments keep ``NO_TIMESTAMP``.
* **queues**: ``min_offset`` = first consume-queue segment's base / 20, ``max_offset`` = end of
  the last one / 20, a torn partial unit ignored. A queue without consume-queue segments
  gets -1/-1 (like a queue that was never initialised).
* **topics**: the tiered key index stores topic ids, so ids are recovered from it where
  possible (``topic_ids=True``): for each queue's first and last message (then, only if
  none named the id, in the topic's first queue the last message stored by the end of
  each of up to two uploaded index files spanning its life), the files covering its store
  time are asked for its keys, and the entry pointing at that queue and size, at that very
  offset or at another copy of that message, names the id (a few ranged reads per topic).
  Another copy: a dispatch that died between its commit-log append and its consume-queue
  units left messages the key index may point at, and its retry appended them again.
  Topics the index does not know get new ids in sorted topic order, above the recovered
  ones. The reserve time is unknown (-1: the configured default). With ``force``, a topic
  already in the store keeps its entry (id and reserve time).

Everything is written in one transaction of the target store: a failed rebuild leaves it
as it was.
"""

from __future__ import annotations

import bisect
import functools
import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, NamedTuple, Sequence

from tiered_core.common import LONG_MAX, NO_TIMESTAMP, FileSegmentType, SegmentStatus, now_ms
from tiered_core.codec.checks import PropCrcPolicy
from tiered_core.codec.message_batch import MessageBatch
from tiered_core.codec.consume_queue import CQ_UNIT_SIZE, ConsumeQueueUnit, decode_cq_unit
from tiered_core.codec._impl import peek_physical_offset, peek_queue_offset, peek_total_size
from tiered_core.codec.message import MAGIC_END, PHYSICAL_OFFSET_POS, MessageExt
from tiered_core.codec.index_keys import message_index_keys
from tiered_core.codec.tiered_index import BEGIN_MAGIC, END_MAGIC, HEADER_SIZE, IndexHeader
from tiered_core.codec.naming import (
    INDEX_QUEUE_ID,
    INDEX_TOPIC,
    cluster_dir,
    index_queue_path,
    parse_segment_path,
    queue_path,
)
from tiered_core.errors import CorruptData, IllegalParam, MetadataError, TieredStoreError
from tiered_core.flat.segment_ref import SegmentRef
from tiered_core.flat.segment_reader import SegmentReader
from tiered_core.flat.ownership import is_reserved_path
from tiered_core.spi.driver import SegmentDriver
from tiered_core.spi.metadata import FileSegmentMetadata, QueueMetadata, TieredMetadataStore, TopicMetadata

log = logging.getLogger(__name__)

_MAX_STRAYS_KEPT = 20
#: Uploaded index files' spans probed in a topic whose queues' first and last messages named
#: no id (each a bisect by store time: about 2 x log2(units) ranged reads).
_PROBE_WINDOWS = 2

Progress = Callable[[int, int], None]


@dataclass
class RebuildStats:
    """What a rebuild found and wrote."""

    topics: int = 0
    queues: int = 0
    segments: int = 0
    sealed: int = 0
    bytes: int = 0
    timestamps_read: int = 0
    topic_ids_recovered: int = 0  # topic ids found in the uploaded key index
    topic_ids_new: int = 0  # topics the key index did not know (new ids; their old index entries are lost)
    strays: int = 0  # listed objects that are not segment paths (skipped)
    stray_examples: list[str] = field(default_factory=list)
    #: Segment-named objects not adopted: a commit log with no consume queue whose first
    #: message does not read as one (another writer's object under a segment's name).
    not_adopted: list[str] = field(default_factory=list)
    #: Segments whose checksum the replaced records held was kept (``keep_checksums``).
    checksums_kept: int = 0
    #: Queues whose consume queue begins before the first message of their commit log:
    #: ``(topic, queue_id, first unit's offset, first message's offset)``. The units between
    #: name messages the tier no longer holds (expired, or a commit-log object lost), which
    #: reads skip; the listing cannot tell which (see :meth:`heads_without_messages_text`).
    heads_without_messages: list[tuple[str, int, int, int]] = field(default_factory=list)
    elapsed_s: float = 0.0

    def heads_without_messages_text(self, limit: int = 5) -> list[str]:
        """One line per queue of :attr:`heads_without_messages` (at most ``limit``, then a count)."""
        lines = [f"{topic}/{queue_id}: queue offsets {first}..{msg - 1} have consume-queue units but no message "
                 f"in the tier (the first message of its commit log is at queue offset {msg}): expired, or a "
                 "commit-log object was lost (restore it from a copy of the bucket, then `tiered metadata rebuild "
                 f"--force`); reads begin at offset {msg}"
                 for topic, queue_id, first, msg in self.heads_without_messages[:limit]]
        if len(self.heads_without_messages) > limit:
            lines.append(f"... and {len(self.heads_without_messages) - limit} more queue(s) like these")
        return lines


@dataclass
class _Seg:
    path: str
    base: int
    size: int
    sealed: bool = False
    begin: int = NO_TIMESTAMP
    end: int = NO_TIMESTAMP


def is_empty(metadata: TieredMetadataStore) -> bool:
    """True when the store holds no topic, queue or file segment."""
    return (next(iter(metadata.iterate_topics()), None) is None
            and next(iter(metadata.iterate_queues()), None) is None
            and next(iter(metadata.iterate_file_segments()), None) is None)


def rebuild_metadata(
    driver: SegmentDriver,
    metadata: TieredMetadataStore,
    *,
    cluster: str,
    broker: str,
    force: bool = False,
    timestamps: bool = True,
    topic_ids: bool = True,
    progress: Progress | None = None,
    progress_every: int = 1000,
    prop_crc: PropCrcPolicy = PropCrcPolicy.IF_PRESENT,
    keep_checksums: bool = False,
) -> RebuildStats:
    """Reconstruct ``metadata`` from the segments of ``cluster``/``broker`` that ``driver`` lists.

    Refuses a store that is not empty unless ``force``, in which case its queues and segments
    are replaced (topics present in the listing keep their entries; the others are removed).
    ``progress(done, total)`` is called every ``progress_every`` segments and at the end.
    ``prop_crc``: how the messages read for their times are checked against their
    ``__CRC32#`` property (default: verified when present, as there is no store config to
    say more; ``REQUIRE`` for a store with ``verify_prop_crc``). A message that fails the
    read path's validation tells nothing (its time is not used); the rebuild goes on.
    ``keep_checksums`` (with ``force``; only for records this very store wrote: the caller
    checked the store id they record): each segment keeps the checksum its old record held
    (the CRC-32 of the bytes written to it), so ``tiered verify --checksums`` still finds an
    object put in its place; the listing cannot tell, and the rebuild does not hash.

    Raises :class:`MetadataError` (store not empty) or what the driver and store raise.
    """
    started = time.monotonic()
    if not force and not is_empty(metadata):
        raise MetadataError(f"metadata store {getattr(metadata, 'path', metadata)!r} is not empty; "
                            "refusing to overwrite it (use force / --force to replace its contents)",
                            path=getattr(metadata, "path", None))
    stats = RebuildStats()
    now = now_ms()
    files = _scan(driver, f"{cluster_dir(cluster)}/{broker}/", cluster, broker, stats)
    total = sum(len(segs) for segs in files.values())
    done = 0

    def tick(n: int) -> None:
        nonlocal done
        before, done = done, done + n
        if progress is not None and progress_every > 0 and done // progress_every > before // progress_every:
            progress(done, total)

    queues: dict[tuple[str, int], tuple[int, int]] = {}
    topics: set[str] = set()
    views: dict[str, list[tuple[int, _QueueTimes]]] = {}
    for (topic, queue_id) in sorted({(t, q) for (t, q, _type) in files}):
        cl = files.get((topic, queue_id, FileSegmentType.COMMIT_LOG), [])
        cq = files.get((topic, queue_id, FileSegmentType.CONSUME_QUEUE), [])
        cl.sort(key=lambda seg: seg.base)
        if cl and not cq and cl[0].size and not _begins_with_its_message(driver, cl[0]):
            # Nothing of a store writes a commit log without its consume queue, nor one that
            # does not begin with a message: not this store's data. Left out (verify names
            # it, `tiered repair --apply` moves it to the quarantine), never adopted.
            stats.not_adopted += [seg.path for seg in cl]
            log.warning("rebuild: %s/%d has commit-log object(s) without a consume queue whose first message does "
                        "not read as a message (e.g. %r); not adopted", topic, queue_id, cl[0].path)
            files.pop((topic, queue_id, FileSegmentType.COMMIT_LOG))
            continue
        # (an empty segment holds nothing to tell: a writer killed after creating it, adopted
        # where the store would have rolled it, see _past_the_end)
        while len(cl) > 1 and (_past_the_end(cl) or cl[-1].size and not _begins_with_its_message(driver, cl[-1])):
            # A segment after the last one of a commit log begins with the message at its base
            # offset (each message names its tiered offset): one that does not was written by
            # something else under the next segment's name. Left out, never adopted.
            foreign = cl.pop()
            stats.not_adopted.append(foreign.path)
            log.warning("rebuild: %r does not begin with the message at its base offset %d; not adopted",
                        foreign.path, foreign.base)
        cq.sort(key=lambda seg: seg.base)
        if cq and not cl and 0 < cq[0].size < CQ_UNIT_SIZE:
            # A consume queue is tiered after its commit log: one without any commit log that
            # holds not even a whole unit is not this store's (a store's torn first unit has
            # its commit log beside it), and adopted, it would be cut away as a torn tail.
            stats.not_adopted += [seg.path for seg in cq]
            log.warning("rebuild: %s/%d has consume-queue object(s) without a commit log, the first of %d bytes "
                        "(no whole unit, e.g. %r); not adopted", topic, queue_id, cq[0].size, cq[0].path)
            files.pop((topic, queue_id, FileSegmentType.CONSUME_QUEUE))
            cq = []
            if not cl:
                continue
        while len(cq) > 1 and (_past_the_end(cq) or _contradicts_the_commit_log(driver, cq[-1], cl)):
            # Likewise a consume-queue segment after a queue's first: its first unit names the
            # message of its base queue offset, which the commit log (tiered first) holds.
            foreign = cq.pop()
            stats.not_adopted.append(foreign.path)
            log.warning("rebuild: %r does not begin with a unit naming the message at queue offset %d; "
                        "not adopted", foreign.path, foreign.base // CQ_UNIT_SIZE)
        if cq:
            kept = _without_units_past_the_commit_log(driver, cq[-1], cl)
            if kept < cq[-1].size:
                # Units after the last one that names a message of the commit log (tiered
                # first) are not this store's: recorded without them, they are a tail past
                # the committed end, which the open refuses to adopt and repair sets aside.
                log.warning("rebuild: %r ends in %d byte(s) of units that name no message of the commit log; "
                            "recorded without them (`tiered repair --apply` sets them aside)", cq[-1].path,
                            cq[-1].size - kept)
                cq[-1].size = kept
        if cl and cq:
            first_message = _first_queue_offset(driver, cl[0])
            if first_message is not None and first_message > cq[0].base // CQ_UNIT_SIZE:
                stats.heads_without_messages.append((topic, queue_id, cq[0].base // CQ_UNIT_SIZE, first_message))
        idx = files.get((topic, queue_id, FileSegmentType.INDEX), [])
        for segs in (cl, cq, idx):
            segs.sort(key=lambda s: s.base)
            for i, seg in enumerate(segs):
                seg.sealed = i + 1 < len(segs) or driver.is_sealed(seg.path)
        view = _QueueTimes(driver, cl, cq, stats, prop_crc)
        if timestamps:
            view.fill()
            for seg in idx:
                _index_times(driver, seg, stats)
        for seg in (*cl, *cq, *idx):
            if seg.size and seg.begin == NO_TIMESTAMP:
                seg.begin = now
            if seg.size and seg.end == NO_TIMESTAMP:
                seg.end = max(now, seg.begin)
        tick(len(cl) + len(cq) + len(idx))
        if cl or cq:
            topics.add(topic)
            queues[(topic, queue_id)] = _queue_range(cq)
            views.setdefault(topic, []).append((queue_id, view))
    index_segments = files.get((INDEX_TOPIC, INDEX_QUEUE_ID, FileSegmentType.INDEX), [])
    known_ids = _topic_ids_from_index(driver, index_segments, views) if topic_ids and index_segments else {}

    checksums = {(int(m.type), m.path, m.base_offset): (m.checksum, m.checksum_size)
                 for m in metadata.iterate_file_segments() if m.checksum is not None} \
        if force and keep_checksums else {}
    with metadata.transaction():
        kept = _replace_topics(metadata, sorted(topics)) if force else {}
        if force:
            for queue in list(metadata.iterate_queues()):
                metadata.delete_queue(queue.topic, queue.queue_id)
            for key in {(s.type, s.path) for s in metadata.iterate_file_segments()}:
                metadata.delete_file_segment(*key)
        taken = {t.topic_id for t in kept.values()}
        for topic in sorted(topics):
            topic_id = known_ids.get(topic)
            if topic in kept or topic_id is None or topic_id in taken:
                continue
            metadata.update_topic(TopicMetadata(topic_id, topic, update_timestamp=now), touch=False)
            taken.add(topic_id)
            stats.topic_ids_recovered += 1
        for topic in sorted(topics):
            if metadata.get_topic(topic) is None:
                metadata.add_topic(topic)
                stats.topic_ids_new += bool(index_segments)
        stats.topics = len(topics)
        for (topic, queue_id), (lo, hi) in sorted(queues.items()):
            metadata.update_queue(QueueMetadata(topic, queue_id, lo, hi, now, broker_name=broker), touch=False)
        stats.queues = len(queues)
        for (topic, queue_id, file_type), segs in sorted(files.items()):
            logical = (index_queue_path(broker) if file_type is FileSegmentType.INDEX
                       else queue_path(broker, topic, queue_id))
            for seg in segs:
                meta = FileSegmentMetadata(
                    logical, int(file_type), seg.base, size=seg.size,
                    status=int(SegmentStatus.SEALED if seg.sealed else SegmentStatus.NEW),
                    create_timestamp=now, begin_timestamp=seg.begin, end_timestamp=seg.end,
                    seal_timestamp=now if seg.sealed else 0)
                checksum = checksums.get((int(file_type), logical, seg.base))
                if checksum is not None and checksum[1] <= seg.size:
                    meta.checksum, meta.checksum_size = checksum
                    stats.checksums_kept += 1
                metadata.update_file_segment(meta)
                stats.segments += 1
                stats.sealed += seg.sealed
                stats.bytes += seg.size
    if progress is not None and progress_every > 0:
        progress(total, total)
    stats.elapsed_s = time.monotonic() - started
    return stats


def _scan(driver: SegmentDriver, prefix: str, cluster: str, broker: str,
          stats: RebuildStats) -> dict[tuple[str, int, FileSegmentType], list[_Seg]]:
    files: dict[tuple[str, int, FileSegmentType], list[_Seg]] = {}
    for path, size in driver.list(prefix):
        if is_reserved_path(path):
            continue  # owner records and the quarantine: never segments
        try:
            info = parse_segment_path(path)
        except IllegalParam:
            info = None
        if info is None or info.cluster != cluster or info.broker != broker:
            stats.strays += 1
            if len(stats.stray_examples) < _MAX_STRAYS_KEPT:
                stats.stray_examples.append(path)
            log.warning("rebuild: %r is not a segment path of %s/%s; skipped", path, cluster, broker)
            continue
        files.setdefault((info.topic, info.queue_id, info.file_type), []).append(
            _Seg(path, info.base_offset, size))
    return files


def _begins_with_its_message(driver: SegmentDriver, seg: _Seg) -> bool:
    """Whether commit-log segment ``seg`` begins with a message whose physical-offset field
    is the segment's base offset (what a store's tiered commit log writes)."""
    if seg.size < PHYSICAL_OFFSET_POS + 8:
        return False
    try:
        head = driver.read(seg.path, 0, PHYSICAL_OFFSET_POS + 8)
        return peek_physical_offset(head, 0) == seg.base and peek_total_size(head, 0) >= PHYSICAL_OFFSET_POS + 8
    except CorruptData:
        return False


def _first_queue_offset(driver: SegmentDriver, seg: _Seg) -> int | None:
    """The queue offset of the message commit-log segment ``seg`` begins with (None: it
    holds no whole header, or the header does not read)."""
    if seg.size < PHYSICAL_OFFSET_POS + 8:
        return None
    try:
        return peek_queue_offset(driver.read(seg.path, 0, PHYSICAL_OFFSET_POS + 8), 0)
    except CorruptData:
        return None


def _past_the_end(segs: list[_Seg]) -> bool:
    """Whether the last of ``segs`` (sorted) is an empty object past the end of the one before:
    a store rolls its next segment at its last one's end, so an empty one further on holds
    nothing and names a gap (adopted, the queue would continue after offsets never written)."""
    last, before = segs[-1], segs[-2]
    return last.size == 0 and last.base > before.base + before.size


def _contradicts_the_commit_log(driver: SegmentDriver, seg: _Seg, cl: list[_Seg]) -> bool:
    """Whether consume-queue segment ``seg``'s first unit contradicts the queue's commit log
    ``cl`` (sorted): it names no message (an invalid unit), or a place past the commit log's
    end (the commit log is tiered before its consume queue), or a message there that is not
    the one of the segment's base queue offset. A unit naming a commit-log range that is not
    listed (expired, never seen) tells nothing: such a segment is adopted as before."""
    if seg.size < CQ_UNIT_SIZE:
        return False
    try:
        unit = decode_cq_unit(driver.read(seg.path, 0, CQ_UNIT_SIZE))
    except CorruptData:
        return False
    if not unit.is_valid:
        return True
    if not cl or unit.commitlog_offset < cl[0].base:
        return False
    holder = cl[bisect.bisect_right([s.base for s in cl], unit.commitlog_offset) - 1]
    if unit.commitlog_offset >= holder.base + holder.size:
        return holder is cl[-1]  # past the end; (in a gap of the listing it tells nothing)
    if unit.commitlog_offset + unit.size > holder.base + holder.size:
        return True  # a message never spans two segments
    try:
        head = driver.read(holder.path, unit.commitlog_offset - holder.base, min(unit.size, PHYSICAL_OFFSET_POS + 8))
        return not (peek_total_size(head, 0) == unit.size
                    and peek_physical_offset(head, 0) == unit.commitlog_offset
                    and peek_queue_offset(head, 0) == seg.base // CQ_UNIT_SIZE)
    except CorruptData:
        return True


def _without_units_past_the_commit_log(driver: SegmentDriver, seg: _Seg, cl: list[_Seg]) -> int:
    """The size of the last consume-queue segment ``seg`` up to its last whole unit that is
    valid and names a place inside the commit log ``cl`` (sorted); ``seg.size`` when its last
    whole unit does (its torn bytes, if any, are kept as before). Read backwards from the
    end, a few units at a time: one read when the tail is the store's own."""
    if not cl or seg.size < CQ_UNIT_SIZE:
        return seg.size
    cl_end = cl[-1].base + cl[-1].size
    end = seg.size - seg.size % CQ_UNIT_SIZE
    step = 64 * CQ_UNIT_SIZE
    while end > 0:
        start = max(0, end - step)
        data = driver.read(seg.path, start, end - start)
        for i in range((end - start) // CQ_UNIT_SIZE - 1, -1, -1):
            unit = decode_cq_unit(data[i * CQ_UNIT_SIZE:(i + 1) * CQ_UNIT_SIZE])
            if unit.is_valid and unit.commitlog_offset + unit.size <= cl_end:
                found = start + (i + 1) * CQ_UNIT_SIZE
                return seg.size if found == seg.size - seg.size % CQ_UNIT_SIZE else found
        end = start
    return 0


def _queue_range(cq: list[_Seg]) -> tuple[int, int]:
    if not cq:
        return -1, -1
    last = cq[-1]
    end = last.base + last.size - last.size % CQ_UNIT_SIZE
    return cq[0].base // CQ_UNIT_SIZE, end // CQ_UNIT_SIZE


def _replace_topics(metadata: TieredMetadataStore, topics: Iterable[str]) -> dict[str, TopicMetadata]:
    """With force: keep the entries of topics still present, drop the others."""
    wanted = set(topics)
    kept: dict[str, TopicMetadata] = {}
    for topic in list(metadata.iterate_topics()):
        if topic.topic in wanted:
            kept[topic.topic] = topic
        else:
            metadata.delete_topic(topic.topic)
    return kept


def _topic_ids_from_index(driver: SegmentDriver, index_segments: list[_Seg],
                          views: dict[str, list[tuple[int, "_QueueTimes"]]]) -> dict[str, int]:
    """Topic -> id, for the topics whose messages the uploaded key index points at."""
    from tiered_core.index.store_file import UploadedIndexFile  # only needed here

    readers = []
    for seg in index_segments:
        if not seg.size:
            continue
        reader = UploadedIndexFile(_SegmentRef(seg.path), read=functools.partial(driver.read, seg.path),
                                   size=seg.size)
        try:
            header = reader.header()
        except TieredStoreError:
            continue  # not a complete, compacted upload
        readers.append((header.begin_timestamp, header.end_timestamp, reader))
    found: dict[str, int] = {}
    if not readers:
        return found
    for topic, queue_views in views.items():
        topic_id = _probe_topic_id(topic, queue_views, readers)
        if topic_id is not None:
            found[topic] = topic_id
    return found


def _probe_topic_id(topic: str, queue_views: list[tuple[int, "_QueueTimes"]], readers: list) -> int | None:
    for queue_id, view in queue_views:  # each queue's last and first message
        for q in view.probe_units():
            topic_id = _entry_topic_id(topic, queue_id, view, q, readers)
            if topic_id is not None:
                return topic_id
    if not queue_views:
        return None
    # None named the id: messages inside the uploaded files' spans, in the first queue alone
    # (the id is the topic's; each window costs a bisect).
    queue_id, view = queue_views[0]
    for q in view.window_units([(begin, end) for begin, end, _reader in readers]):
        topic_id = _entry_topic_id(topic, queue_id, view, q, readers)
        if topic_id is not None:
            return topic_id
    return None


def _entry_topic_id(topic: str, queue_id: int, view: "_QueueTimes", q: int, readers: list) -> int | None:
    """The topic id of an uploaded index entry for unit ``q``'s message, if one points at it
    (or at another copy of it)."""
    located = view.message(q)
    if located is None:
        return None
    offset, size, msg = located
    keys = message_index_keys(msg)[:4]
    for begin, end, reader in readers:
        # Entries keep whole seconds since the file's begin: allow a second either side.
        if not begin - 1000 <= msg.store_timestamp <= end + 1000:
            continue
        for key in keys:
            try:
                entries = reader.query(topic, key, 64, 0, LONG_MAX)
            except TieredStoreError:
                continue
            for entry in entries:
                if (entry.queue_id, entry.size) == (queue_id, size) and (
                        entry.offset == offset or view.holds_copy(entry.offset, size, q, msg)):
                    return entry.topic_id
    return None


class _SegmentRef(NamedTuple):
    """What UploadedIndexFile needs of a segment when it reads through a driver directly."""

    path: str
    min_timestamp: int | None = None
    max_timestamp: int | None = None


def _index_times(driver: SegmentDriver, seg: _Seg, stats: RebuildStats) -> None:
    if seg.size < HEADER_SIZE:
        return
    try:
        header = IndexHeader.decode(driver.read(seg.path, 0, HEADER_SIZE), seg.path)
    except TieredStoreError as exc:
        log.warning("rebuild: cannot read the header of %s: %s", seg.path, exc)
        return
    begin, end = header.begin_timestamp, header.end_timestamp
    if header.magic in (BEGIN_MAGIC, END_MAGIC) and 0 <= begin <= end:
        seg.begin, seg.end = begin, end
        stats.timestamps_read += 1


def _known(ts: int | None) -> int:
    return NO_TIMESTAMP if ts is None else ts


class _QueueTimes:
    """Store times of one queue's segments, read through its consume queue (see the module doc)."""

    def __init__(self, driver: SegmentDriver, cl: list[_Seg], cq: list[_Seg], stats: RebuildStats,
                 prop_crc: PropCrcPolicy = PropCrcPolicy.IF_PRESENT) -> None:
        self.cl, self.cq, self.stats = cl, cq, stats
        self.cl_bases = [s.base for s in cl]
        # The queue whose messages these must be (every segment path names it).
        info = parse_segment_path((cl or cq)[0].path) if (cl or cq) else None
        self.topic = info.topic if info is not None else ""
        self.queue_id = info.queue_id if info is not None else -1
        # Each consume-queue segment serves whole units from its base up to the next one's base
        # (a segment rolled at a torn unit's start overrides the torn tail).
        self.ranges: list[tuple[int, int, _Seg]] = []
        for i, seg in enumerate(cq):
            end = seg.base + seg.size - seg.size % CQ_UNIT_SIZE
            if i + 1 < len(cq):
                end = min(end, cq[i + 1].base)
            if end > seg.base:
                self.ranges.append((seg.base // CQ_UNIT_SIZE, end // CQ_UNIT_SIZE, seg))
        self.range_starts = [r[0] for r in self.ranges]
        # All reads go through the store's one segment reader, from the listing alone.
        self.reader = SegmentReader.from_refs(
            driver, self.topic, self.queue_id, [SegmentRef(s.path, s.base, s.size) for _, _, s in self.ranges],
            [SegmentRef(s.path, s.base, s.size) for s in cl], prop_crc)

    # -- reads -------------------------------------------------------------------------

    def unit(self, q: int) -> ConsumeQueueUnit | None:
        """Unit ``q`` (commit-log offset, size, tags code), or None when unreadable."""
        i = bisect.bisect_right(self.range_starts, q) - 1
        if i < 0 or q >= self.ranges[i][1]:
            return None
        try:
            unit = self.reader.unit(q)
        except TieredStoreError:
            return None
        return unit if unit is not None and unit.is_valid else None

    def _checked(self, offset: int, size: int | None, q: int | None, tags_code: int | None, *,
                 warn: bool = True) -> MessageBatch | None:
        """The message at commit-log ``offset`` (a batch of one) if it passes the read path's
        validation (:meth:`SegmentReader.message_at
        <tiered_core.flat.segment_reader.SegmentReader.message_at>`) as this queue's message
        (``q``, ``tags_code``, ``size`` None: not known); else None (logged unless not ``warn``)."""
        i = bisect.bisect_right(self.cl_bases, offset) - 1
        if i < 0:
            return None
        seg = self.cl[i]
        pos = offset - seg.base
        try:
            if size is None:  # no unit: the message's own size, if it has a message's head
                size = self.reader.message_size(offset) if pos + MAGIC_END <= seg.size else None
                if size is None:
                    return None
            if size <= 0 or pos + size > seg.size:
                return None
            batch = self.reader.message_at(offset, size, queue_offset=q, tags_code=tags_code)
        except TieredStoreError:
            return None
        if batch.error is not None:
            if warn:
                log.warning("rebuild: %s: %s; its store time is not used", seg.path, batch.error.message)
            return None
        return batch

    def store_time(self, offset: int, unit: ConsumeQueueUnit | None = None, q: int | None = None) -> int | None:
        """Store time of the message at commit-log ``offset`` (that of ``unit`` number ``q``, when
        known), or None when unreadable or when it fails validation."""
        batch = self._checked(offset, unit.size if unit is not None else None, q,
                              unit.tags_code if unit is not None else None)
        if batch is None:
            return None
        ts = batch.message(0).store_timestamp
        self.stats.timestamps_read += 1
        return ts if 0 <= ts < NO_TIMESTAMP else None

    def message(self, q: int) -> "tuple[int, int, MessageExt] | None":
        """(commit-log offset, size, decoded message) of unit ``q``, or None when unreadable
        or when it fails validation."""
        unit = self.unit(q)
        if unit is None:
            return None
        batch = self._checked(unit.commitlog_offset, unit.size, q, unit.tags_code)
        if batch is None:
            return None
        return unit.commitlog_offset, unit.size, batch.message(0)

    def probe_units(self) -> list[int]:
        """The last and the first unit (the newest message is the likeliest still indexed)."""
        if not self.ranges:
            return []
        return sorted({self.ranges[-1][1] - 1, self.ranges[0][0]}, reverse=True)

    def window_units(self, windows: Sequence[tuple[int, int]]) -> list[int]:
        """For up to :data:`_PROBE_WINDOWS` of ``windows`` (uploaded index files' time spans)
        that end inside this queue's life, the last unit stored by the window's end: a queue
        whose first and last messages no uploaded file holds (their files expired, or not
        uploaded yet) is still found by the messages in between. Two reads for the queue's
        ends, then a bisect by store time per window."""
        if not self.ranges or not windows:
            return []
        lo, hi = self.ranges[0][0], self.ranges[-1][1]
        first, last = self.unit_time(lo), self.unit_time(hi - 1)
        if first is None or last is None:
            return []
        ends = sorted({end for begin, end in windows if begin <= last and first <= end < last})
        if len(ends) > _PROBE_WINDOWS:  # spread over the queue's life
            step = len(ends) / _PROBE_WINDOWS
            ends = [ends[int(i * step)] for i in range(_PROBE_WINDOWS)]
        units: list[int] = []
        for end in ends:
            try:
                q = self.reader.offset_by_time(end + 1, lo, hi) - 1
            except TieredStoreError:
                continue
            if lo < q < hi - 1 and q not in units:
                units.append(q)
        return units

    def holds_copy(self, offset: int, msg_size: int, q: int, msg: MessageExt) -> bool:
        """Whether commit-log ``offset`` holds another copy of ``msg`` (this queue's message
        ``q``, ``msg_size`` bytes): a dispatch appends to the commit log before it commits consume-queue units, so
        one that died in between left its messages there unreferenced, and the key index may
        point at those while the retry's copies are the ones the units name."""
        batch = self._checked(offset, msg_size, q, None, warn=False)  # (a probe: no store time is at stake)
        if batch is None:
            return False
        other = batch.message(0)
        return ((other.store_timestamp, bytes(other.body), message_index_keys(other))
                == (msg.store_timestamp, bytes(msg.body), message_index_keys(msg)))

    def unit_time(self, q: int) -> int | None:
        unit = self.unit(q)
        return None if unit is None else self.store_time(unit.commitlog_offset, unit, q)

    def _first_unit_at_or_after(self, offset: int) -> int | None:
        """The smallest queue offset whose unit points at or after commit-log ``offset``."""
        if not self.ranges:
            return None
        end = self.ranges[-1][1]
        try:
            q = self.reader.first_unit_at_or_after(offset, self.ranges[0][0], end)
        except TieredStoreError:
            return None
        return q if q is not None and q < end else None

    # -- filling -----------------------------------------------------------------------

    def fill(self) -> None:
        for i, seg in enumerate(self.cl):
            if not seg.size:
                continue
            end_offset = seg.base + seg.size
            first = self._first_unit_at_or_after(seg.base)
            after = self._first_unit_at_or_after(end_offset)
            if first is not None and self._points_into(first, seg):
                seg.begin = _known(self.unit_time(first))
                last = (after if after is not None else self.ranges[-1][1]) - 1
                if last >= first and self._points_into(last, seg):
                    seg.end = _known(self.unit_time(last))
            if seg.begin == NO_TIMESTAMP:
                seg.begin = _known(self.store_time(seg.base))
        for i, seg in enumerate(self.cl):
            if seg.size and seg.end == NO_TIMESTAMP:
                nxt = next((s.begin for s in self.cl[i + 1:] if s.begin != NO_TIMESTAMP), NO_TIMESTAMP)
                seg.end = nxt if nxt != NO_TIMESTAMP else seg.begin
        first_stored = self.cl[0].base if self.cl else None
        for start, end, seg in self.ranges:
            begin = self.unit_time(start)
            if begin is None and first_stored is not None:
                # The head's messages expired before its units: take the first one still stored.
                q = self._first_unit_at_or_after(first_stored)
                if q is not None and start < q < end:
                    begin = self.unit_time(q)
            seg.end = _known(self.unit_time(end - 1))
            seg.begin = _known(begin) if begin is not None else seg.end

    def _points_into(self, q: int, seg: _Seg) -> bool:
        unit = self.unit(q)
        return unit is not None and seg.base <= unit[0] < seg.base + seg.size


__all__ = ["RebuildStats", "is_empty", "rebuild_metadata"]
