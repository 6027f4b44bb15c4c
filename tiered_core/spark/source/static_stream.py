"""A static topic as a Structured Streaming source: ``spark.readStream.format("tiered")`` with
``.option("cluster", "cluster.toml").option("static_topic", "orders")``.

Offsets are ``{topic: {str(logic_queue_id): next_logic_offset}}``. The Spark driver plans from
the brokers' mapping files (:func:`~tiered_core.static_topic.read_static_topic_items`) and
tier metadata only: a broker whose ``store_path`` exists is described by its own metadata
store, which it only queries (:func:`~tiered_core.spark.source.stream_offsets.queue_views`: committed
units only); a broker whose ``store_path`` is gone by a listing of its prefix in the shared
tier (:class:`~tiered_core.static_topic.TieredBrokerReader`; it writes nothing more, so the
answer is remembered). No broker's message store is opened and no message is written. Each micro-batch
range of a logic queue is cut into one
:class:`~tiered_core.spark.source.static_batch.StaticItemPartition` per generation it spans, read by
executors exactly as the batch static-topic reader reads (:func:`read_static_partition`):
rows carry the logic queue id in ``queue_id`` and logic offsets in ``queue_offset``.

Offsets the stream passes over without reading, per logic queue:

* *skipped* (not data loss, a WARNING is logged): a generation boundary -- the tail of a
  closed generation on a broker whose ``store_path`` is gone that never reached the tier, and
  a hole between one generation's logic end and the next one's ``logicOffset`` (what
  :meth:`~tiered_core.static_topic.Cluster.get_message` skips; the batch reader reads only
  what the tier holds too);
* *lost* (``failOnDataLoss``): offsets expired from the tier (below the earliest
  generation's tier min, the expired head of a later generation, or units of a planned range
  that were gone when read).

A closed generation on a broker whose ``store_path`` still exists and whose tail is not yet
in the tier ends the logic queue for now: later generations are read once it is tiered.
"""

from __future__ import annotations

import bisect
import logging
import os
from dataclasses import dataclass
from typing import Iterator, Sequence

from pyspark.sql.datasource import InputPartition

from tiered_core.config import StoreConfig
from tiered_core.errors import IllegalOffset, InvalidOption
from tiered_core.spark.config_source import ClusterSource, open_metadata_readonly
from tiered_core.spark.failures import spark_facing
from tiered_core.spark.source.arrow_rows import messages_to_arrow
from tiered_core.spark.source.options import StreamOptions
from tiered_core.spark.source.queue_stream import QueueStreamReader
from tiered_core.spark.source.schema import arrow_schema
from tiered_core.spark.source.static_batch import StaticItemPartition, read_static_partition
from tiered_core.spark.source.stream_offsets import QueueKey, queue_views
from tiered_core.static_topic import LogicQueueMappingItem, TieredBrokerReader, read_static_topic_items

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GenerationSpan:
    """One decided generation of a logic queue as the tier holds it: logic offsets ``[lo, hi)``
    are readable; ``[item.logicOffset, lo)`` expired; ``[hi, last)`` is not (or never) tiered."""

    item: LogicQueueMappingItem
    lo: int
    hi: int
    last: int


@dataclass(frozen=True)
class LogicQueueView:
    """Logic queue ``queue`` of ``topic``: its reachable generations, oldest first (never empty).

    ``min_offset``/``end_offset``: the first readable logic offset and the one past the last.
    Offsets between two spans are *skipped* (a generation boundary: an untiered tail of a gone
    broker, a hole before the next ``logicOffset``) or *lost* (expired from the tier)."""

    topic: str
    queue: int
    spans: tuple[GenerationSpan, ...]

    @property
    def min_offset(self) -> int:
        return self.spans[0].lo

    @property
    def end_offset(self) -> int:
        return self.spans[-1].hi

    def resolve(self, pos: int) -> tuple[int, int, int]:
        """``(readable position, skipped, lost)``: ``pos`` moved up to the next readable offset
        (unchanged when it is readable or at/after :attr:`end_offset`), with how many offsets
        on the way are a generation-boundary skip and how many expired from the tier."""
        if pos >= self.end_offset:
            return pos, 0, 0
        i = bisect.bisect_right([s.hi for s in self.spans], pos)  # first span ending after pos
        target = max(pos, self.spans[i].lo)
        skipped = 0
        for j in range(i):  # untiered tails and holes after earlier spans (all final: see the module doc)
            tail_start = self.spans[j].hi
            tail_end = self.spans[j + 1].item.logicOffset
            skipped += max(0, min(target, tail_end) - max(pos, tail_start))
        return target, skipped, (target - pos) - skipped

    def count(self, start: int, end: int) -> int:
        """Readable offsets in ``[start, end)``."""
        return sum(max(0, min(end, s.hi) - max(start, s.lo)) for s in self.spans)

    def advance(self, start: int, n: int) -> int:
        """The position after reading ``n`` readable offsets from ``start`` (at most to :attr:`end_offset`)."""
        pos = start
        for s in self.spans:
            if n <= 0:
                break
            if s.hi <= pos:
                continue
            pos = max(pos, s.lo)
            take = min(n, s.hi - pos)
            pos += take
            n -= take
        return pos

    def average_message_size(self) -> int:
        """Not known from mapping files (a static-topic stream has no byte limit): 1."""
        return 1

    def partitions(self, start: int, end: int) -> list[StaticItemPartition]:
        """Logic offsets ``[start, end)`` as one partition per generation (physical ranges, closed ends)."""
        return [StaticItemPartition.of_item(0, self.topic, self.queue, s.item, s.item.to_physical(max(start, s.lo)),
                                            s.item.to_physical(min(end, s.hi)))
                for s in self.spans if max(start, s.lo) < min(end, s.hi)]


def logic_queue_view(topic: str, queue: int, items: Sequence[LogicQueueMappingItem],
                     bounds: dict[tuple[str, int], tuple[int, int]], gone: set[str]) -> LogicQueueView | None:
    """The :class:`LogicQueueView` of a logic queue's ``items`` given each physical queue's tier
    ``bounds`` ``{(broker, queue id): (min, end)}`` (absent: nothing tiered yet) and the brokers
    whose ``store_path`` is ``gone``; None when no item is decided."""
    readable = [i for i in items if i.decided]
    spans: list[GenerationSpan] = []
    for n, item in enumerate(readable):
        phys_min, phys_end = bounds.get((item.bname, item.queueId), (item.startOffset, item.startOffset))
        hi = item.to_logic(max(item.startOffset, phys_end))
        last = item.logic_end() if item.closed else hi
        hi = min(hi, last)
        lo = min(hi, item.to_logic(max(item.startOffset, phys_min)))
        spans.append(GenerationSpan(item, lo, hi, last))
        if n + 1 < len(readable) and hi < last and item.bname not in gone:
            break  # its tail will reach the tier: the next generations wait for it
    return LogicQueueView(topic, queue, tuple(spans)) if spans else None


class StaticTopicStreamReader(QueueStreamReader):
    """A micro-batch stream of static topic ``topic`` by logic queue (see the module doc).

    Guarantees: every tiered message of every decided generation is read once per query, in
    logic-offset order per logic queue (a checkpointed query resumes where it stopped); only
    units the tier's metadata records as committed are read; ``maxMessagesPerTrigger`` is
    shared max-min fairly between logic queues (:func:`~tiered_core.spark.source.stream_offsets.fair_split`).
    Raises, before the query starts, :class:`~tiered_core.errors.InvalidOption` for JSON
    ``startingOffsets`` naming a logic queue outside ``[0, totalQueues)`` and
    :class:`~tiered_core.errors.MappingError` when no broker maps ``topic``; while running,
    :class:`~tiered_core.errors.IllegalOffset` (naming topic, logic queue and offsets) when
    offsets to read expired from the tier, unless ``failOnDataLoss=false`` (then skipped with a
    WARNING). A generation-boundary skip is never an error (a WARNING is logged).
    """

    def __init__(self, source: ClusterSource, topic: str, options: StreamOptions) -> None:
        super().__init__(options)
        self.source, self.topic = source, topic
        self._gone_bounds: dict[tuple[str, int], tuple[int, int]] = {}  # listings of gone brokers (final)
        total, _ = read_static_topic_items(source.configs(), topic)
        for queue in (options.starting_map or {}).get(topic, {}):
            if not 0 <= queue < total:
                raise InvalidOption(f"option 'startingOffsets' names logic queue {queue} of static topic {topic!r}, "
                                    f"which has logic queues 0..{total - 1}", option="startingOffsets",
                                    topic=topic, queue_id=queue)

    # -- planning (driver side, metadata only) ---------------------------------------------

    def _bounds(self, configs: list[StoreConfig], wanted: set[tuple[str, int]], gone: set[str]
                ) -> dict[tuple[str, int], tuple[int, int]]:
        """Tier ``(min, end)`` of each wanted physical queue (broker, queue id)."""
        by_name = {c.broker: c for c in configs}
        out: dict[tuple[str, int], tuple[int, int]] = {}
        for broker in sorted({b for b, _ in wanted}):
            ids = {q for b, q in wanted if b == broker}
            if broker in gone:
                missing = [q for q in ids if (broker, q) not in self._gone_bounds]
                if missing:
                    reader = TieredBrokerReader(configs[0], broker)
                    try:
                        for q in missing:
                            self._gone_bounds[(broker, q)] = (reader.min_offset(self.topic, q),
                                                              reader.max_offset(self.topic, q))
                    finally:
                        reader.close()
                out.update({(broker, q): self._gone_bounds[(broker, q)] for q in ids})
                continue
            config = by_name[broker]
            if not os.path.exists(config.effective_metadata_path()):
                continue  # nothing tiered yet (and opening would create the store)
            metadata = open_metadata_readonly(config)
            try:
                views = queue_views(config, metadata, lambda t: t == self.topic)
            finally:
                metadata.close()
            out.update({(broker, q): (v.min_offset, v.end_offset) for (_, q), v in views.items() if q in ids})
        return out

    def plan_views(self) -> dict[QueueKey, LogicQueueView]:
        configs = self.source.configs()
        _, items = read_static_topic_items(configs, self.topic)
        gone = {i.bname for its in items.values() for i in its} - {c.broker for c in configs
                                                                   if os.path.isdir(c.store_path)}
        wanted = {(i.bname, i.queueId) for its in items.values() for i in its if i.decided}
        bounds = self._bounds(configs, wanted, gone)
        views = {}
        for queue, its in sorted(items.items()):
            view = logic_queue_view(self.topic, queue, its, bounds, gone)
            if view is not None:
                views[(self.topic, queue)] = view
        return views

    def wanted_starts(self) -> dict[QueueKey, int]:
        return {(self.topic, q): o for q, o in ((self.options.starting_map or {}).get(self.topic) or {}).items()}

    def expired(self, key: QueueKey, first: int, end: int) -> None:
        self._lost(key[1], first, end, "expired from the tier")

    def skipped(self, key: QueueKey, first: int, end: int, count: int) -> None:
        log.warning("tiered stream: static topic %r logic queue %d: offsets %d..%d skipped at a generation "
                    "boundary (%d offset(s) never tiered or not mapped; not data loss)", self.topic, key[1],
                    first, end - 1, count)

    def _lost(self, queue: int, first: int, end: int, why: str) -> None:
        if self.options.fail_on_data_loss:
            raise IllegalOffset(f"static topic {self.topic!r} logic queue {queue}: messages {first}..{end - 1} "
                                f"{why}; set option failOnDataLoss=false to skip them", topic=self.topic,
                                queue_id=queue, offset=first, end_offset=end)
        log.warning("tiered stream: static topic %r logic queue %d: skipping offsets %d..%d, %s "
                    "(failOnDataLoss=false)", self.topic, queue, first, end - 1, why)

    # -- executors --------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator:
        if not isinstance(partition, StaticItemPartition):
            return
        schema = arrow_schema()
        expected, end = partition.start + partition.delta, partition.end + partition.delta
        for batch in read_static_partition(self.source, partition):
            if not batch:
                continue
            if batch[0].queue_offset > expected:
                self._lost(partition.logic_queue, expected, batch[0].queue_offset, "no longer in the tier")
            yield messages_to_arrow(batch, schema)
            expected = batch[-1].queue_offset + 1
        if expected < end:
            self._lost(partition.logic_queue, expected, end, "no longer in the tier")


__all__ = ["GenerationSpan", "LogicQueueView", "StaticTopicStreamReader", "logic_queue_view"]


#: What Spark gets: :class:`StaticTopicStreamReader` whose typed errors reach the driver tagged.
SparkStaticTopicStreamReader = spark_facing(StaticTopicStreamReader, "SparkStaticTopicStreamReader", __name__)
