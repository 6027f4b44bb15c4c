"""The ``tiered`` Structured Streaming source: ``spark.readStream.format("tiered")``.

Offsets are ``{topic: {str(queue_id): next_offset}}``. The Spark driver plans from the
store's metadata only (:func:`~tiered_core.spark.offsets.queue_views`): a queue ends where
the metadata's committed consume-queue size ends, never at units a writer appended to the
backend but has not committed to the metadata. Executors read the planned ranges from the
shared backend alone (:func:`~tiered_core.spark.reader.read_batches`: one validated read
path) and yield Arrow batches (:func:`~tiered_core.spark.arrow_batch.batch_to_arrow`).
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import struct
from typing import Iterator, Sequence

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable, ReadLimit, ReadMaxBytes, ReadMaxRows, SupportsTriggerAvailableNow,
)

from tiered_core.codec.consume_queue import CQ_UNIT_SIZE, iter_cq_units
from tiered_core.codec.message import BORNHOST_V6_FLAG
from tiered_core.common import BoundaryType, offset_by_time
from tiered_core.errors import IllegalOffset, InvalidOption
from tiered_core.spark.arrow_batch import batch_to_arrow
from tiered_core.spark.failures import spark_facing
from tiered_core.spark.offsets import QueueKey, QueueView, fair_split, offset_map, queue_positions, queue_views
from tiered_core.spark.options import ConfigSource, StoreNotReadable, open_metadata_readonly, require_shared_backend
from tiered_core.spark.plan import QueuePartition
from tiered_core.spark.reader import driver_for, read_batches
from tiered_core.spark.schema import arrow_schema
from tiered_core.spark.stream_options import JSON_EARLIEST, JSON_LATEST, LATEST, StreamOptions

log = logging.getLogger(__name__)

#: sysFlag@36; the store timestamp follows the born host (8 bytes IPv4, 20 IPv6) at 56 or 68.
_SYS_FLAG = struct.Struct(">i")
_TIMESTAMP = struct.Struct(">q")
_STORE_TS_POS = (56, 68)


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


class TieredStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
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

    def __init__(self, source: ConfigSource, options: StreamOptions) -> None:
        self.source = source
        self.options = options
        self._target: dict[QueueKey, int] | None = None
        self._readable: dict[tuple, int] = {}  # _readable_min's answers
        config = source.load()
        require_shared_backend(config)
        check_starting_offsets(config, options)

    # -- metadata views (driver side) -------------------------------------------------------

    def _views(self) -> dict[QueueKey, QueueView]:
        config = self.source.load()
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

    def _unit_at(self, view: QueueView, offset: int):
        pos = offset * CQ_UNIT_SIZE
        seg = view.consume_queue[bisect.bisect_right([s.base_offset for s in view.consume_queue], pos) - 1]
        buf = driver_for(self.source).read(seg.path, pos - seg.base_offset, CQ_UNIT_SIZE)
        return next(iter_cq_units(buf, base_offset=pos))

    def _readable_min(self, view: QueueView) -> int:
        """The first offset whose unit points into the commit log the tier still holds (the
        commit log may have expired ahead of the consume queue): a bisect of backend reads,
        remembered while the queue's first segments stay the same."""
        cl_min = view.commit_log[0].base_offset
        key = (view.key, view.consume_queue[0].base_offset, cl_min)
        cache = self._readable
        if key not in cache:
            lo, hi = view.min_offset, view.end_offset  # units point forward: the first one at/after cl_min
            if self._unit_at(view, lo).commitlog_offset >= cl_min:
                hi = lo  # the usual case: one read
            while lo < hi:
                mid = (lo + hi) // 2
                if self._unit_at(view, mid).commitlog_offset >= cl_min:
                    hi = mid
                else:
                    lo = mid + 1
            cache[key] = lo
        return cache[key]

    def _offset_by_time(self, view: QueueView, timestamp: int) -> int:
        driver = driver_for(self.source)
        cl_bases = [s.base_offset for s in view.commit_log]

        def store_time(offset: int) -> int:
            unit = self._unit_at(view, offset)
            if not unit.is_valid or unit.commitlog_offset < cl_bases[0]:
                return -1  # expired from the commit log: older than any time asked for
            cl = view.commit_log[bisect.bisect_right(cl_bases, unit.commitlog_offset) - 1]
            head = driver.read(cl.path, unit.commitlog_offset - cl.base_offset, min(unit.size, 80))
            at = _STORE_TS_POS[1 if _SYS_FLAG.unpack_from(head, 36)[0] & BORNHOST_V6_FLAG else 0]
            return _TIMESTAMP.unpack_from(head, at)[0]

        return offset_by_time(view.min_offset, view.end_offset - 1, timestamp, BoundaryType.LOWER, store_time)

    def _start_of(self, view: QueueView, wanted: dict[str, dict[int, int]] | None) -> int:
        opts = self.options
        if opts.starting_timestamp is not None:
            return self._offset_by_time(view, opts.starting_timestamp)
        if wanted is not None:
            offset = wanted.get(view.topic, {}).get(view.queue_id, JSON_EARLIEST)
            if offset == JSON_LATEST:
                return view.end_offset
            return view.min_offset if offset == JSON_EARLIEST else offset
        return view.end_offset if opts.starting == LATEST else view.min_offset

    def _checked_start(self, view: QueueView, start: int) -> int:
        """``start``, or the tier's first offset when it expired and ``failOnDataLoss`` is false."""
        if start >= view.min_offset:
            return start
        if self.options.fail_on_data_loss:
            raise IllegalOffset(
                f"topic {view.topic!r} queue {view.queue_id}: the stream's next offset {start} is below the "
                f"tier's min offset {view.min_offset} (messages {start}..{view.min_offset - 1} expired); "
                "set option failOnDataLoss=false to skip them", topic=view.topic, queue_id=view.queue_id,
                offset=start, min_offset=view.min_offset)
        log.warning("tiered stream: topic %r queue %d: skipping offsets %d..%d, expired from the tier "
                    "(failOnDataLoss=false)", view.topic, view.queue_id, start, view.min_offset - 1)
        return view.min_offset

    # -- the DataSourceStreamReader contract -------------------------------------------------

    def initialOffset(self) -> dict:
        wanted = self.options.starting_map
        starts = {key: self._start_of(view, wanted) for key, view in self._views().items()}
        if wanted is not None:  # a JSON start may lie beyond what is committed now: keep it
            starts.update({(t, q): o for t, qs in wanted.items() for q, o in qs.items() if o >= 0})
        return offset_map(starts)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_messages is not None:
            return ReadMaxRows(self.options.max_messages)
        if self.options.max_bytes is not None:
            return ReadMaxBytes(self.options.max_bytes)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {key: view.end_offset for key, view in self._views().items()}

    def reportLatestOffset(self) -> dict | None:
        return offset_map({key: view.end_offset for key, view in self._views().items()})

    def _limits(self, limit: ReadLimit | None) -> tuple[int | None, int | None]:
        """(max rows, max bytes) of one micro-batch: the engine's limit, else the options'."""
        if isinstance(limit, ReadAllAvailable):
            return None, None
        rows, nbytes = self.options.max_messages, self.options.max_bytes
        if isinstance(limit, ReadMaxRows):
            rows = limit.max_rows
        elif isinstance(limit, ReadMaxBytes):
            nbytes = limit.max_bytes
        return rows, nbytes

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        positions = queue_positions(start)
        views = self._views()
        available: dict[QueueKey, int] = {}
        for key, view in views.items():
            begin = self._checked_start(view, positions.get(key, view.min_offset))
            positions[key] = begin
            end = view.end_offset
            if self._target is not None:
                end = min(end, self._target.get(key, begin))
            available[key] = max(0, end - begin)
        rows, nbytes = self._limits(limit)
        take = dict(available)
        if rows is not None:
            take = fair_split(take, rows)
        if nbytes is not None:
            sizes = {key: views[key].average_message_size() for key in take}
            by_bytes = fair_split({key: n * sizes[key] for key, n in take.items()}, nbytes)
            take = {key: min(take[key], by_bytes[key] // sizes[key]) for key in take}
            if not any(take.values()) and any(available.values()):
                first = min(key for key, n in available.items() if n > 0)
                take[first] = 1  # one message bigger than the budget still moves the stream
        for key, n in take.items():
            positions[key] += n
        return offset_map(positions)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, stop = queue_positions(start), queue_positions(end)
        views = self._views()
        parts: list[QueuePartition] = []
        for key in sorted(stop):
            view = views.get(key)
            if view is None:
                continue
            first = begin.get(key, view.min_offset)
            if first >= stop[key]:
                continue
            first = self._checked_start(view, first)
            last = min(stop[key], view.end_offset)
            for part in view.partitions(first, last):
                parts.append(dataclasses.replace(part, index=len(parts)))
        return parts

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

    def commit(self, end: dict) -> None:
        """Nothing to release: the source holds no reservations on the store."""


__all__ = ["TieredStreamReader"]


#: What Spark gets: :class:`TieredStreamReader` whose typed errors reach the driver tagged.
SparkTieredStreamReader = spark_facing(TieredStreamReader, "SparkTieredStreamReader", __name__)
