"""Planning a read on the Spark driver: metadata only, no segment bytes.

Each :class:`QueuePartition` covers a range of one queue's consume queue (at most one
consume-queue segment, split further when it holds more than ``max_units_per_partition``
units) and carries the plain data an executor needs to read it: segment paths, base
offsets, sizes. Pruning by topic, queue and time happens here, from segment metadata.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from tiered_core.codec.consume_queue import CQ_UNIT_SIZE
from tiered_core.codec.naming import segment_path
from tiered_core.common import NO_TIMESTAMP, FileSegmentType, SegmentStatus
from tiered_core.flat.segment_ref import SegmentRef
from tiered_core.spark.source.options import ReadOptions
from tiered_core.spi.metadata import FileSegmentMetadata, TieredMetadataStore

try:  # the data source needs pyspark; planning itself does not
    from pyspark.sql.datasource import InputPartition
except ImportError:  # pragma: no cover - pyspark is installed with the spark extra
    class InputPartition:  # type: ignore[no-redef]
        pass


@dataclass(frozen=True)
class QueuePartition(InputPartition):
    """Consume-queue bytes ``[start, end)`` (absolute offsets, whole units) of ``topic``/``queue_id``.

    ``open_end``: this is the queue's last range, so the executor re-checks the segment's
    backend size (units committed after the last metadata update count, as in recovery).
    Pruning uses metadata only: a store is read as its metadata describes it.
    ``commit_log``: the queue's commit-log segments, ordered by base offset.
    """

    index: int
    topic: str
    queue_id: int
    consume_queue: SegmentRef
    start: int
    end: int
    open_end: bool
    limit: int  # end of this segment's readable units (next segment's base), or -1
    commit_log: tuple[SegmentRef, ...]

    @property
    def units(self) -> int:
        return (self.end - self.start) // CQ_UNIT_SIZE


def parse_flat_path(path: str) -> tuple[str, str, int] | None:
    """``broker/topic/queue`` -> (broker, topic, queue id); None for anything else."""
    parts = path.split("/")
    if len(parts) != 3 or not parts[2].isdigit():
        return None
    return parts[0], parts[1], int(parts[2])


def live_segments(metadata: TieredMetadataStore, file_type: int) -> dict[str, list[FileSegmentMetadata]]:
    """Segments not marked DELETED, grouped by flat-file path, ordered by base offset."""
    out: dict[str, list[FileSegmentMetadata]] = defaultdict(list)
    for meta in metadata.iterate_file_segments(file_type):
        if meta.status != SegmentStatus.DELETED:
            out[meta.path].append(meta)
    for metas in out.values():
        metas.sort(key=lambda m: m.base_offset)
    return out


def plan_partitions(config, metadata: TieredMetadataStore, read: ReadOptions) -> list[QueuePartition]:
    """The input partitions of a read of ``config``'s store (a StoreConfig) with ``read``'s pruning."""
    consume_queues = live_segments(metadata, int(FileSegmentType.CONSUME_QUEUE))
    commit_logs = live_segments(metadata, int(FileSegmentType.COMMIT_LOG))
    partitions: list[QueuePartition] = []
    for flat_path in sorted(consume_queues):
        parsed = parse_flat_path(flat_path)
        if parsed is None:
            continue
        broker, topic, queue_id = parsed
        if broker != config.broker or not read.wants_topic(topic) or not read.wants_queue(queue_id):
            continue
        cl = tuple(SegmentRef(segment_path(config.cluster, broker, topic, queue_id, FileSegmentType.COMMIT_LOG,
                                           m.base_offset), m.base_offset, m.size)
                   for m in commit_logs.get(flat_path, ()))
        if not cl:
            continue  # no commit log: nothing the units could point at
        segs = consume_queues[flat_path]
        for i, meta in enumerate(segs):
            last = i == len(segs) - 1
            limit = -1 if last else segs[i + 1].base_offset
            end = meta.base_offset + meta.size
            if limit >= 0:
                end = min(end, limit)  # a realigned torn tail: the next segment wins
            end -= (end - meta.base_offset) % CQ_UNIT_SIZE
            if end <= meta.base_offset:
                continue  # empty
            if (meta.begin_timestamp != NO_TIMESTAMP and meta.end_timestamp != NO_TIMESTAMP
                    and not read.overlaps(meta.begin_timestamp, meta.end_timestamp)):
                continue  # pruned by time, before any byte is read
            ref = SegmentRef(segment_path(config.cluster, broker, topic, queue_id, FileSegmentType.CONSUME_QUEUE,
                                          meta.base_offset), meta.base_offset, meta.size)
            step = read.max_units_per_partition * CQ_UNIT_SIZE
            start = meta.base_offset
            while True:
                stop = min(end, start + step)
                partitions.append(QueuePartition(len(partitions), topic, queue_id, ref, start, stop,
                                                 last and stop >= end, limit, cl))
                if stop >= end:
                    break
                start = stop
    return partitions
