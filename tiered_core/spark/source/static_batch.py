"""Reading a static topic (seed 002) with the ``tiered`` data source: rows by logic queue.

``spark.read.format("tiered").option("cluster", "cluster.toml").option("static_topic", "orders").load()``
plans one partition per (logic queue, generation): the planner reads the brokers' mapping
files only (:func:`~tiered_core.static_topic.read_static_topic_items`; no store is opened),
and each task reads its generation's physical queue straight from the shared tiered backend
through a read-only view of that broker's flat files
(:class:`~tiered_core.static_topic.TieredBrokerReader`), whether or not the broker still
exists. Rows carry the logic queue id in ``queue_id`` and logic offsets in ``queue_offset``.
Only tiered (dispatched) messages are read. Options (:data:`~tiered_core.spark.source.options.OPTIONS`):
``cluster`` (a cluster TOML file, read where Spark plans; its text travels to executors),
``static_topic``, ``queues`` (comma list of logic queue ids).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from tiered_core.access.results import GetMessageStatus
from tiered_core.codec.message import MessageExt
from tiered_core.spark.config_source import ClusterSource
from tiered_core.spark.failures import spark_facing
from tiered_core.static_topic import LogicQueueMappingItem, TieredBrokerReader, read_static_topic_items

try:  # the data source needs pyspark; planning itself does not
    from pyspark.sql.datasource import DataSourceReader, InputPartition
except ImportError:  # pragma: no cover - pyspark is installed with the spark extra
    class InputPartition:  # type: ignore[no-redef]
        pass

    class DataSourceReader:  # type: ignore[no-redef]
        pass

#: Messages a task asks the tier for at once.
BATCH = 1024


@dataclass(frozen=True)
class StaticItemPartition(InputPartition):
    """Physical offsets ``[start, end)`` of queue ``queue_id`` of broker ``bname`` (``end`` -1: to
    what the tier holds), read as logic queue ``logic_queue`` with logic = physical + ``delta``."""

    index: int
    topic: str
    logic_queue: int
    gen: int
    bname: str
    queue_id: int
    start: int
    end: int
    delta: int

    @classmethod
    def of_item(cls, index: int, topic: str, logic_queue: int, item: LogicQueueMappingItem, start: int,
                end: int) -> "StaticItemPartition":
        """Physical offsets ``[start, end)`` of decided generation ``item`` of ``logic_queue``."""
        return cls(index, topic, logic_queue, item.gen, item.bname, item.queueId, start, end,
                   item.logicOffset - item.startOffset)


def plan_static_partitions(source: ClusterSource, topic: str, queues: set[int] | None = None
                           ) -> list[StaticItemPartition]:
    """One partition per decided generation of every wanted logic queue (mapping files only)."""
    total, items_by_queue = read_static_topic_items(source.configs(), topic)
    parts: list[StaticItemPartition] = []
    for q in range(total):
        if queues is not None and q not in queues:
            continue
        for item in items_by_queue.get(q, ()):
            if not item.decided:
                continue  # an undecided leader has no logic offsets yet (seed)
            parts.append(StaticItemPartition.of_item(len(parts), topic, q, item, item.startOffset, item.endOffset))
    return parts


def read_static_partition(source: ClusterSource, part: StaticItemPartition) -> Iterator[list[MessageExt]]:
    """The partition's messages, in batches, with logic queue id and logic offsets."""
    configs = source.configs()
    reader = TieredBrokerReader(configs[0], part.bname)
    try:
        end = part.end if part.end >= 0 else reader.max_offset(part.topic, part.queue_id)
        offset = max(part.start, reader.min_offset(part.topic, part.queue_id))
        while offset < end:
            res = reader.get_message(part.topic, part.queue_id, offset, min(BATCH, end - offset))
            if res.status is not GetMessageStatus.FOUND:
                break
            batch = [m for m in res.messages if m.queue_offset < end]
            for m in batch:
                m.queue_offset += part.delta
                m.queue_id = part.logic_queue
            yield batch
            offset = res.next_begin_offset
    finally:
        reader.close()


class StaticTopicReader(DataSourceReader):
    """Plans :class:`StaticItemPartition` s and reads them as Arrow batches."""

    def __init__(self, source: ClusterSource, topic: str, queues: set[int] | None) -> None:
        self.source, self.topic, self.queues = source, topic, queues

    def partitions(self):
        return plan_static_partitions(self.source, self.topic, self.queues) or [_Empty()]

    def read(self, partition):
        from tiered_core.spark.source.arrow_rows import messages_to_arrow
        from tiered_core.spark.source.schema import arrow_schema

        if not isinstance(partition, StaticItemPartition):
            return
        schema = arrow_schema()
        for batch in read_static_partition(self.source, partition):
            yield messages_to_arrow(batch, schema)


#: What Spark gets: :class:`StaticTopicReader` whose typed errors reach the driver tagged.
SparkStaticTopicReader = spark_facing(StaticTopicReader, "SparkStaticTopicReader", __name__)


class _Empty(InputPartition):
    def __init__(self) -> None:
        super().__init__(None)
