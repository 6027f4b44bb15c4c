"""The ``tiered`` Structured Streaming source: ``spark.readStream.format("tiered")``.

Offsets are ``{topic: {str(queue_id): next_offset}}``. The Spark driver plans from the
store's metadata only (:func:`~tiered_core.spark.source.stream_offsets.queue_views`): a queue ends where
the metadata's committed consume-queue size ends, never at units a writer appended to the
backend but has not committed to the metadata. Executors read the planned ranges from the
shared backend alone (:func:`~tiered_core.spark.source.partition_reader.read_batches`: one validated read
path) and yield Arrow batches (:func:`~tiered_core.spark.source.arrow_rows.batch_to_arrow`).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Iterator

from pyspark.sql.datasource import InputPartition

from tiered_core.codec.consume_queue import CQ_UNIT_SIZE
from tiered_core.errors import IllegalOffset, InvalidOption
from tiered_core.spark.config_source import (
    ConfigSource, StoreNotReadable, open_metadata_readonly, require_shared_backend,
)
from tiered_core.spark.failures import spark_facing
from tiered_core.spark.source.partition_plan import QueuePartition
from tiered_core.spark.source.partition_reader import read_batches, reader_for
from tiered_core.spark.source.arrow_rows import batch_to_arrow
from tiered_core.spark.source.options import StreamOptions
from tiered_core.spark.source.queue_stream import QueueStreamReader
from tiered_core.spark.source.schema import arrow_schema
from tiered_core.spark.source.stream_offsets import QueueKey, QueueView, queue_views

log = logging.getLogger(__name__)


def source_queues(config) -> set[QueueKey]:
    """The (topic, queue id) pairs the store of ``config`` (a StoreConfig) holds in its tier,
    from its metadata opened read-only; none while the store does not exist (a stream may
    start before its source: nothing is created)."""
    try:
        metadata = open_metadata_readonly(config)
    except StoreNotReadable:
        return set()
    try:
        return set(queue_views(config, metadata))
    finally:
        metadata.close()


def check_starting_offsets(config, options: StreamOptions) -> None:
    """Refuse JSON ``startingOffsets`` naming a topic the query does not subscribe to, or a
    topic or queue the store of ``config`` does not hold (:class:`InvalidOption` naming the
    option, the topic and queue, and the topics the store holds). Metadata only, read-only."""
    wanted = options.starting_map
    if wanted is None:
        return
    held = source_queues(config)
    topics = sorted({t for t, _ in held})
    shown = ", ".join(topics[:20]) + (f" (and {len(topics) - 20} more)" if len(topics) > 20 else "")
    for topic, queues in wanted.items():
        if not options.wants_topic(topic):
            raise InvalidOption(f"option 'startingOffsets' names topic {topic!r}, which the query does not "
                                "subscribe to (options 'topics' / 'subscribePattern')", option="startingOffsets",
                                value=topic, topic=topic)
        if topic not in topics:
            raise InvalidOption(f"option 'startingOffsets' names topic {topic!r}, which the tiered store does not "
                                f"hold (its topics: {shown or 'none'})", option="startingOffsets", value=topic,
                                topic=topic)
        for queue_id in queues:
            if (topic, queue_id) not in held:
                ids = sorted(q for t, q in held if t == topic)
                raise InvalidOption(f"option 'startingOffsets' names topic {topic!r} queue {queue_id}, which the "
                                    f"tiered store does not hold (its queues of {topic!r}: "
                                    f"{', '.join(map(str, ids))})", option="startingOffsets",
                                    value=f"{topic}/{queue_id}", topic=topic, queue_id=queue_id)


class TieredStreamReader(QueueStreamReader):
    """A micro-batch stream of the messages a tiered store's metadata records as committed.

    Read-only: the store's metadata is opened read-only and nothing is ever created; a store
    that does not exist yet has no queues (they are read from their first message once it
    appears). Guarantees: every message is read once per query (offsets are per queue; a checkpointed
    query resumes where it stopped); a micro-batch never contains a unit beyond the committed
    offsets the metadata records when it is planned; queues and topics that appear while the
    query runs are read from their first message; ``maxMessagesPerTrigger`` /
    ``maxBytesPerTrigger`` are shared max-min fairly between queues (bytes estimated from each
    queue's committed commit-log bytes per unit). Raises, before the query starts,
    :class:`~tiered_core.errors.InvalidOption` for JSON ``startingOffsets`` naming a topic or
    queue the store does not have (or the subscription excludes), and
    :class:`~tiered_core.errors.ConfigError` for a process-local backend; while running,
    :class:`~tiered_core.errors.IllegalOffset` (naming topic, queue, both offsets) when a queue's
    next offset has expired from the tier, unless ``failOnDataLoss=false``, which skips to the
    tier's first message and logs a WARNING.
    """

    DRIVER_ONLY = (*QueueStreamReader.DRIVER_ONLY, "_config")

    def __init__(self, source: ConfigSource, options: StreamOptions) -> None:
        super().__init__(options)
        self.source = source
        self._readable: dict[tuple, int] = {}  # _readable_min's answers
        self._config = config = source.load()  # parsed once: every micro-batch plans with it
        require_shared_backend(config)
        check_starting_offsets(config, options)

    # -- metadata views (driver side) -------------------------------------------------------

    def plan_views(self) -> dict[QueueKey, QueueView]:
        config = self._config if self._config is not None else self.source.load()
        try:
            metadata = open_metadata_readonly(config)
        except StoreNotReadable:
            return {}  # the store does not exist yet: no queue to read (and none is created)
        try:
            views = queue_views(config, metadata, self.options.wants_topic)
        finally:
            metadata.close()
        for key, view in views.items():
            if view.commit_log[0].base_offset > 0 and view.end_offset > view.min_offset:
                views[key] = dataclasses.replace(view, min_offset=self._readable_min(view))
        return views

    def _segments(self, view: QueueView):
        """The queue's segment reader (:class:`~tiered_core.flat.segment_reader.SegmentReader`) over
        the view's segment references: its units and message heads are read there, not here."""
        return reader_for(self.source, view.topic, view.queue_id, view.consume_queue, view.commit_log)

    def _readable_min(self, view: QueueView) -> int:
        """The first offset whose unit points into the commit log the tier still holds (the
        commit log may have expired ahead of the consume queue): a bisect of backend reads,
        remembered while the queue's first segments stay the same."""
        cl_min = view.commit_log[0].base_offset
        key = (view.key, view.consume_queue[0].base_offset, cl_min)
        cache = self._readable
        if key not in cache:
            found = self._segments(view).first_unit_at_or_after(cl_min, view.min_offset, view.end_offset)
            if found is None:  # a missing or bad unit on the way: left to the read, which names it
                return view.min_offset
            cache[key] = found
        return cache[key]

    def start_of(self, key: QueueKey, view: QueueView, wanted: dict[QueueKey, int]) -> int:
        if self.options.starting_timestamp is not None:
            return self._segments(view).offset_by_time(self.options.starting_timestamp, view.min_offset,
                                                       view.end_offset)
        return super().start_of(key, view, wanted)

    def expired(self, key: QueueKey, first: int, end: int) -> None:
        """A start below the tier's min offset: :class:`IllegalOffset`, or skipped with a WARNING
        when ``failOnDataLoss`` is false."""
        topic, queue_id = key
        if self.options.fail_on_data_loss:
            raise IllegalOffset(
                f"topic {topic!r} queue {queue_id}: the stream's next offset {first} is below the "
                f"tier's min offset {end} (messages {first}..{end - 1} expired); "
                "set option failOnDataLoss=false to skip them", topic=topic, queue_id=queue_id,
                offset=first, min_offset=end)
        log.warning("tiered stream: topic %r queue %d: skipping offsets %d..%d, expired from the tier "
                    "(failOnDataLoss=false)", topic, queue_id, first, end - 1)

    # -- executors --------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator:
        if not isinstance(partition, QueuePartition):
            return
        schema = arrow_schema()
        expected = partition.start // CQ_UNIT_SIZE
        for batch in read_batches(self.source, partition):
            if batch.queue_offset > expected:
                self._lost(partition, expected, batch.queue_offset)
            yield batch_to_arrow(batch, schema)
            expected = batch.end_offset
        if expected < partition.end // CQ_UNIT_SIZE:
            self._lost(partition, expected, partition.end // CQ_UNIT_SIZE)

    def _lost(self, part: QueuePartition, first: int, end: int) -> None:
        """Units ``[first, end)`` of a planned range point at commit-log bytes the tier no longer
        holds (the commit log expired under them): data loss, as an expired start is."""
        if self.options.fail_on_data_loss:
            raise IllegalOffset(
                f"topic {part.topic!r} queue {part.queue_id}: messages {first}..{end - 1} are no longer in the "
                "tier's commit log (expired under their consume-queue units); set option failOnDataLoss=false "
                "to skip them", topic=part.topic, queue_id=part.queue_id, offset=first, end_offset=end)
        log.warning("tiered stream: topic %r queue %d: skipping offsets %d..%d, expired from the tier's commit "
                    "log (failOnDataLoss=false)", part.topic, part.queue_id, first, end - 1)


__all__ = ["TieredStreamReader"]


#: What Spark gets: :class:`TieredStreamReader` whose typed errors reach the driver tagged.
SparkTieredStreamReader = spark_facing(TieredStreamReader, "SparkTieredStreamReader", __name__)
