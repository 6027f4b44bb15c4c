"""The executor side of a Spark read: one driver per store per executor process
(:func:`driver_for`), and a planned partition read through the store's one segment reader
(:class:`~tiered_core.flat.segment_reader.SegmentReader`, from the partition's segment
references alone: executors have no metadata database).

The reader validates every message against its unit and the partition's topic and queue
(:func:`tiered_core.flat.batch_check.check_batch`, with the store's ``verify_prop_crc``) and
never returns commit-log bytes no unit points at: the rows before a bad message are
returned, then the task fails with its CorruptData (naming topic, queue, queue offset and
reason) -- a bulk job never exports, migrates or re-indexes a message it cannot trust, nor
silently leaves one out."""

from __future__ import annotations

import atexit
import functools
import os
import threading
from typing import Iterator, Sequence

from tiered_core.codec.checks import PropCrcPolicy
from tiered_core.codec.consume_queue import CQ_UNIT_SIZE
from tiered_core.codec.message import MessageExt
from tiered_core.codec.message_batch import MessageBatch
from tiered_core.flat.segment_reader import SegmentReader
from tiered_core.ops.output_paths import LOCAL_PATH_OPTIONS
from tiered_core.errors import NotFound
from tiered_core.spark.config_source import ConfigSource
from tiered_core.spark.source.options import ReadOptions
from tiered_core.spark.source.partition_plan import QueuePartition, SegmentRef
from tiered_core.spi.driver import SegmentDriver

_drivers: dict[ConfigSource, SegmentDriver] = {}
_drivers_lock = threading.Lock()


def driver_for(source: ConfigSource, *, writable: bool = False) -> SegmentDriver:
    """The backend driver of ``source``, opened once per executor process and reused by its tasks.

    Unless ``writable`` (a job's target), a local tier (driver option ``root`` or
    ``database``) that does not exist raises :class:`NotFound` instead of being created by
    the driver: reads never create anything."""
    with _drivers_lock:
        driver = _drivers.get(source)
        if driver is None:
            config = source.load()
            if not writable:
                _require_tier_root(config)
            driver = _drivers[source] = config.open_driver()
        return driver


def _require_tier_root(config) -> None:
    options = config.effective_driver_options()
    for name in LOCAL_PATH_OPTIONS:
        path = options.get(name)
        if isinstance(path, str) and path and not os.path.exists(path):
            raise NotFound(path, f"does not exist: it is the tier (driver {config.driver!r} option {name!r}) of "
                                 f"the store at store_path {config.store_path!r}, whose metadata lists segments "
                                 f"there; a read never creates it (check the config's {name!r} option)")


@functools.lru_cache(maxsize=64)
def prop_crc_policy(source: ConfigSource) -> PropCrcPolicy:
    """How ``source``'s store treats the ``__CRC32#`` property (its ``verify_prop_crc``)."""
    return PropCrcPolicy.from_config(source.load().verify_prop_crc)


@atexit.register
def _close_drivers() -> None:
    with _drivers_lock:
        for driver in _drivers.values():
            try:
                driver.close()
            except Exception:  # closing at exit: nothing left to report to
                pass
        _drivers.clear()


def reader_for(source: ConfigSource, topic: str, queue_id: int, consume_queue: Sequence[SegmentRef],
               commit_log: Sequence[SegmentRef]) -> SegmentReader:
    """The segment reader of ``topic``/``queue_id`` of ``source``'s store over the given
    segments (each ordered by base offset), through this executor's driver."""
    return SegmentReader.from_refs(driver_for(source), topic, queue_id, consume_queue, commit_log,
                                   prop_crc_policy(source))


def _unit_end(driver: SegmentDriver, part: QueuePartition) -> int:
    """Where the partition's units end (absolute consume-queue offset, whole units)."""
    seg = part.consume_queue
    end = part.end
    if part.open_end:
        # The queue's newest range: units committed after the last metadata update count.
        size = driver.size(seg.path)
        end = max(end, seg.base_offset + size - size % CQ_UNIT_SIZE)
        if part.limit >= 0:
            end = min(end, part.limit)
    return end


def read_batches(source: ConfigSource, part: QueuePartition) -> Iterator[MessageBatch]:
    """The partition's validated messages in queue order, as :class:`MessageBatch` es
    (:meth:`SegmentReader.batches <tiered_core.flat.segment_reader.SegmentReader.batches>`).
    A bad message ends the read: the batch of the messages before it is yielded, then its
    CorruptData is raised."""
    reader = reader_for(source, part.topic, part.queue_id, (part.consume_queue,), part.commit_log)
    end = _unit_end(driver_for(source), part)
    yield from reader.batches(part.start // CQ_UNIT_SIZE, end // CQ_UNIT_SIZE)


def read_messages(source: ConfigSource, part: QueuePartition, read: ReadOptions) -> Iterator[list[MessageExt]]:
    """The partition's messages that match ``read``, in queue order, in lists of up to 4096."""
    for batch in read_batches(source, part):
        out = [msg for msg in batch.messages() if read.wants_time(msg.store_timestamp)]
        if out:
            yield out
