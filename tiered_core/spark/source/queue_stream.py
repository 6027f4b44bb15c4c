"""The skeleton of a micro-batch stream reader keyed by queue, shared by both tiered streams.

A variant (:class:`~tiered_core.spark.source.stream.TieredStreamReader`: a store's queues;
:class:`~tiered_core.spark.source.static_stream.StaticTopicStreamReader`: a static topic's
logic queues) says how to plan its queue views from metadata (:meth:`QueueStreamReader.plan_views`),
where a new query starts, what a data loss is called and how an executor reads a partition.
The skeleton does the rest of Spark's ``DataSourceStreamReader`` contract: offsets
``{topic: {str(queue_id): next_offset}}``, per-trigger limits shared max-min fairly
(:func:`~tiered_core.spark.source.stream_offsets.fair_split`), ``Trigger.AvailableNow``,
and expired offsets (:class:`~tiered_core.errors.IllegalOffset`, or skipped with a WARNING
when ``failOnDataLoss=false``).

Each micro-batch plans its views once: ``latestOffset`` plans them (a metadata read), and
``partitions`` and ``reportLatestOffset`` of the same micro-batch reuse that plan. A plan
only ever grows (more committed units, or fewer after expiry, which the checks catch), so a
fresher plan than the one a batch was cut from reads the same units.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, Sequence

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable, ReadLimit, ReadMaxBytes, ReadMaxRows, SupportsTriggerAvailableNow,
)

from tiered_core.spark.source.options import JSON_EARLIEST, JSON_LATEST, LATEST, StreamOptions
from tiered_core.spark.source.stream_offsets import QueueKey, fair_split, offset_map, queue_positions


class QueueViewLike(Protocol):
    """What the skeleton needs of one queue's plan (:class:`~tiered_core.spark.source.stream_offsets.QueueView`,
    :class:`~tiered_core.spark.source.static_stream.LogicQueueView`)."""

    @property
    def min_offset(self) -> int: ...

    @property
    def end_offset(self) -> int: ...

    def resolve(self, pos: int) -> tuple[int, int, int]: ...

    def count(self, start: int, end: int) -> int: ...

    def advance(self, start: int, n: int) -> int: ...

    def average_message_size(self) -> int: ...

    def partitions(self, start: int, end: int) -> list: ...


class QueueStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A micro-batch stream over queues keyed ``(topic, queue id)`` (see the module doc).

    Guarantees: every readable offset of every planned queue is read once per query (a
    checkpointed query resumes where it stopped); a micro-batch never reaches beyond what its
    plan holds; queues appearing while the query runs are read from their first offset;
    ``maxMessagesPerTrigger`` / ``maxBytesPerTrigger`` are shared max-min fairly. Raises
    :class:`~tiered_core.errors.IllegalOffset` (through the variant's :meth:`expired`) when a
    queue's next offset expired, unless ``failOnDataLoss=false``.
    """

    def __init__(self, options: StreamOptions) -> None:
        self.options = options
        self._target: dict[QueueKey, int] | None = None
        self._plan: dict[QueueKey, Any] | None = None  # the current micro-batch's views

    #: Attributes only the Spark driver's planning uses: not sent to executors with the reader.
    DRIVER_ONLY: tuple[str, ...] = ("_plan",)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        for name in self.DRIVER_ONLY:
            state[name] = None  # executors read partitions; they never need the driver's plan
        return state

    # -- what a variant provides -------------------------------------------------------------

    def plan_views(self) -> dict[QueueKey, QueueViewLike]:
        """Every readable queue's view, from metadata only."""
        raise NotImplementedError

    def wanted_starts(self) -> dict[QueueKey, int]:
        """The JSON ``startingOffsets`` this reader's queues are given (-2 earliest, -1 latest)."""
        return {(t, q): o for t, qs in (self.options.starting_map or {}).items() for q, o in qs.items()}

    def start_of(self, key: QueueKey, view: QueueViewLike, wanted: dict[QueueKey, int]) -> int:
        """Where a new query starts reading ``view``."""
        offset = wanted.get(key, JSON_EARLIEST if wanted or self.options.starting != LATEST else JSON_LATEST)
        if offset == JSON_LATEST:
            return view.end_offset
        return view.min_offset if offset == JSON_EARLIEST else offset

    def expired(self, key: QueueKey, first: int, end: int) -> None:
        """Offsets ``[first, end)`` of ``key`` to read are gone from the tier: raise, or log and go on."""
        raise NotImplementedError

    def skipped(self, key: QueueKey, first: int, end: int, count: int) -> None:
        """``count`` offsets in ``[first, end)`` are passed over without being data loss (a variant
        with such gaps logs them)."""

    # -- planning, once per micro-batch -------------------------------------------------------

    def views(self, *, fresh: bool = False) -> dict[QueueKey, QueueViewLike]:
        """This micro-batch's plan: made by ``latestOffset`` (``fresh``), reused by the calls after it."""
        if fresh or self._plan is None:
            self._plan = self.plan_views()
        return self._plan

    def checked(self, key: QueueKey, view: QueueViewLike, pos: int) -> int:
        """``pos`` moved to the next readable offset of ``view``; expired offsets on the way go
        to :meth:`expired`, skipped ones to :meth:`skipped`."""
        target, skipped, lost = view.resolve(pos)
        if lost:
            self.expired(key, pos, target)
        if skipped:
            self.skipped(key, pos, target, skipped)
        return target

    def limits(self, limit: ReadLimit | None) -> tuple[int | None, int | None]:
        """(max rows, max bytes) of one micro-batch: the engine's limit, else the options'."""
        if isinstance(limit, ReadAllAvailable):
            return None, None
        rows, nbytes = self.options.max_messages, self.options.max_bytes
        if isinstance(limit, ReadMaxRows):
            rows = limit.max_rows
        elif isinstance(limit, ReadMaxBytes):
            nbytes = limit.max_bytes
        return rows, nbytes

    # -- the DataSourceStreamReader contract -------------------------------------------------

    def initialOffset(self) -> dict:
        wanted = self.wanted_starts()
        starts = {key: self.start_of(key, view, wanted) for key, view in self.views(fresh=True).items()}
        starts.update({key: o for key, o in wanted.items() if o >= 0})  # beyond what is planned now: kept
        return offset_map(starts)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_messages is not None:
            return ReadMaxRows(self.options.max_messages)
        if self.options.max_bytes is not None:
            return ReadMaxBytes(self.options.max_bytes)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {key: view.end_offset for key, view in self.views(fresh=True).items()}

    def reportLatestOffset(self) -> dict | None:
        return offset_map({key: view.end_offset for key, view in self.views().items()})

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        positions = queue_positions(start)
        views = self.views(fresh=True)
        available: dict[QueueKey, int] = {}
        for key, view in views.items():
            begin = positions[key] = self.checked(key, view, positions.get(key, view.min_offset))
            end = view.end_offset
            if self._target is not None:
                end = min(end, self._target.get(key, begin))
            available[key] = view.count(begin, end)
        rows, nbytes = self.limits(limit)
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
            positions[key] = views[key].advance(positions[key], n)
        return offset_map(positions)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, stop = queue_positions(start), queue_positions(end)
        views = self.views()
        parts: list = []
        for key in sorted(stop):
            view = views.get(key)
            if view is None or begin.get(key, view.min_offset) >= stop[key]:
                continue
            first = self.checked(key, view, begin.get(key, view.min_offset))
            for part in view.partitions(first, min(stop[key], view.end_offset)):
                parts.append(dataclasses.replace(part, index=len(parts)))
        return parts

    def commit(self, end: dict) -> None:
        """Nothing to release: a tiered stream holds no reservations on any store."""


__all__ = ["QueueStreamReader", "QueueViewLike"]
