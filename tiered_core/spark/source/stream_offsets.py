"""What a stream reader may read, from metadata only, and how a micro-batch's budget is shared.

:func:`queue_views` lists each queue's readable range as the metadata records it: from the
first live consume-queue segment to the committed end of the last one (segment sizes as
committed to the metadata, whole units). Units a writer appended to the backend but has not
recorded in metadata yet are never counted, so a reader never sees a tail that is not
committed. :func:`fair_split` shares a per-trigger budget between queues max-min fairly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from tiered_core.codec.consume_queue import CQ_UNIT_SIZE
from tiered_core.codec.naming import segment_path
from tiered_core.common import FileSegmentType
from tiered_core.spark.source.partition_plan import QueuePartition, SegmentRef, live_segments, parse_flat_path
from tiered_core.spi.metadata import TieredMetadataStore

#: A queue's key in views and allocations.
QueueKey = tuple[str, int]


@dataclass(frozen=True)
class QueueView:
    """Queue ``topic``/``queue_id`` as metadata records it: offsets ``[min_offset, end_offset)``
    readable; ``consume_queue`` segments (ordered, sizes clamped to whole committed units and to
    the next segment's base); ``commit_log`` segments; ``commit_log_bytes`` their committed total."""

    topic: str
    queue_id: int
    min_offset: int
    end_offset: int
    consume_queue: tuple[SegmentRef, ...]
    commit_log: tuple[SegmentRef, ...]
    commit_log_bytes: int

    @property
    def key(self) -> QueueKey:
        return self.topic, self.queue_id

    def average_message_size(self) -> int:
        """Committed commit-log bytes per readable unit (>= 1): the byte estimate of a micro-batch."""
        units = self.end_offset - self.min_offset
        return max(1, self.commit_log_bytes // units) if units > 0 else 1

    def resolve(self, pos: int) -> tuple[int, int, int]:
        """``(readable position, skipped, lost)``: ``pos`` moved up to :attr:`min_offset` when it
        expired (the offsets below it are lost; a queue has no skips)."""
        target = max(pos, self.min_offset)
        return target, 0, target - pos

    def count(self, start: int, end: int) -> int:
        """Readable offsets in ``[start, end)``."""
        return max(0, end - start)

    def advance(self, start: int, n: int) -> int:
        """The position after reading ``n`` offsets from ``start``."""
        return start + n

    def partitions(self, start: int, end: int) -> list[QueuePartition]:
        """Queue offsets ``[start, end)`` as one :class:`QueuePartition` per consume-queue segment
        they cross (closed ends: only these units are read, never the backend's newer tail)."""
        out: list[QueuePartition] = []
        segs = self.consume_queue
        for i, seg in enumerate(segs):
            seg_end = seg.base_offset + seg.size
            lo = max(start * CQ_UNIT_SIZE, seg.base_offset)
            hi = min(end * CQ_UNIT_SIZE, seg_end)
            if lo < hi:
                limit = segs[i + 1].base_offset if i + 1 < len(segs) else -1
                out.append(QueuePartition(len(out), self.topic, self.queue_id, seg, lo, hi, False, limit,
                                          self.commit_log))
        return out


def queue_views(config, metadata: TieredMetadataStore, wants_topic=None) -> dict[QueueKey, QueueView]:
    """Every queue of ``config``'s broker (a StoreConfig) with a live consume queue and commit log,
    ``wants_topic(topic)`` permitting; metadata only."""
    consume_queues = live_segments(metadata, int(FileSegmentType.CONSUME_QUEUE))
    commit_logs = live_segments(metadata, int(FileSegmentType.COMMIT_LOG))
    views: dict[QueueKey, QueueView] = {}
    for flat_path, metas in consume_queues.items():
        parsed = parse_flat_path(flat_path)
        if parsed is None:
            continue
        broker, topic, queue_id = parsed
        if broker != config.broker or (wants_topic is not None and not wants_topic(topic)):
            continue
        cl_metas = commit_logs.get(flat_path, ())
        if not cl_metas or not metas:
            continue
        cl = tuple(SegmentRef(segment_path(config.cluster, broker, topic, queue_id, FileSegmentType.COMMIT_LOG,
                                           m.base_offset), m.base_offset, m.size) for m in cl_metas)
        segs = []
        for i, meta in enumerate(metas):
            end = meta.base_offset + meta.size
            if i + 1 < len(metas):
                end = min(end, metas[i + 1].base_offset)  # a realigned torn tail: the next segment wins
            end -= (end - meta.base_offset) % CQ_UNIT_SIZE
            segs.append(SegmentRef(segment_path(config.cluster, broker, topic, queue_id,
                                                FileSegmentType.CONSUME_QUEUE, meta.base_offset),
                                   meta.base_offset, max(0, end - meta.base_offset)))
        first, last = segs[0], segs[-1]
        views[(topic, queue_id)] = QueueView(topic, queue_id, first.base_offset // CQ_UNIT_SIZE,
                                             (last.base_offset + last.size) // CQ_UNIT_SIZE, tuple(segs), cl,
                                             sum(m.size for m in cl_metas))
    return views


def fair_split(available: Mapping[QueueKey, int], budget: int) -> dict[QueueKey, int]:
    """Share ``budget`` between queues with ``available[q]`` each, max-min fairly and deterministically:
    every queue gets an equal share, a queue needing less gives the rest to the others (the
    remainder of the division goes to the queues that sort last by (need, topic, queue id)).
    At least one unit is given when anything is available, so a stream always moves."""
    wanting = sorted(((n, key) for key, n in available.items() if n > 0), key=lambda t: (t[0], t[1]))
    out = {key: 0 for key in available}
    remaining = max(0, budget)
    for i, (need, key) in enumerate(wanting):
        share = remaining // (len(wanting) - i)
        take = min(need, share)
        out[key] = take
        remaining -= take
    if wanting and not any(out.values()):
        out[wanting[0][1]] = 1
    return out


def offset_map(positions: Mapping[QueueKey, int]) -> dict[str, dict[str, int]]:
    """A stream's offsets as Spark keeps them, ``{topic: {str(queue_id): offset}}``, sorted."""
    out: dict[str, dict[str, int]] = {}
    for (topic, queue_id), offset in sorted(positions.items()):
        out.setdefault(topic, {})[str(queue_id)] = int(offset)
    return out


def queue_positions(offsets: Mapping[str, Any] | None) -> dict[QueueKey, int]:
    """:func:`offset_map` read back: ``{(topic, queue_id): offset}``."""
    out: dict[QueueKey, int] = {}
    for topic, queues in (offsets or {}).items():
        for queue_id, offset in queues.items():
            out[(topic, int(queue_id))] = int(offset)
    return out


__all__ = ["QueueKey", "QueueView", "fair_split", "offset_map", "queue_positions", "queue_views"]
