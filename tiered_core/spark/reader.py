"""Reading one planned partition on an executor: consume-queue units first, then the
commit-log ranges they point at. Commit-log bytes no unit points at (left by a crash
between the two commits) are never returned.

Every message is validated against its unit and the partition's topic and queue by the
store's one read path, :func:`tiered_core.flat.batch.check_batch` (the fetcher's checks
and policy, including ``verify_prop_crc`` from the config; this module only plans which
units and which commit-log span to read, segment by segment): the rows before a bad
message are returned, then the task fails with its CorruptData (naming topic, queue, queue offset and
reason) -- a bulk job never exports, migrates or re-indexes a message it cannot trust,
nor silently leaves one out."""

from __future__ import annotations

import atexit
import bisect
import functools
import os
import threading
from typing import Iterator

from tiered_core.codec.checks import PropCrcPolicy
from tiered_core.codec.consume_queue import CQ_UNIT_SIZE
from tiered_core.codec.message import MessageExt
from tiered_core.codec.message_batch import MessageBatch
from tiered_core.flat.batch import check_batch, decode_units, span_end
from tiered_core.ops.output_paths import LOCAL_PATH_OPTIONS
from tiered_core.errors import CorruptData, IllegalParam, NotFound
from tiered_core.spark.config_source import ConfigSource
from tiered_core.spark.source.options import ReadOptions
from tiered_core.spark.plan import QueuePartition, SegmentRef
from tiered_core.spi.driver import SegmentDriver

#: A zero-filled (never written) consume-queue unit.
_ZERO_UNIT = (0, 0, 0)
#: Units read from the consume queue per request.
UNITS_PER_READ = 4096
#: A commit-log read spans at most this many bytes (one larger message is read alone).
MAX_READ_BYTES = 16 << 20

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


class _CommitLog:
    """Ranged reads over a queue's commit-log segments (each read stays inside one segment)."""

    def __init__(self, driver: SegmentDriver, segments: tuple[SegmentRef, ...]) -> None:
        self.driver = driver
        self.segments = segments
        self.bases = [s.base_offset for s in segments]

    @property
    def min_offset(self) -> int:
        return self.bases[0]

    def segment_index(self, offset: int) -> int:
        return bisect.bisect_right(self.bases, offset) - 1

    def read(self, index: int, start: int, end: int) -> bytes:
        """The bytes ``[start, end)`` of segment ``index``, or fewer when the segment ends
        before ``end`` (units pointing past the commit log are then reported corrupt by
        :func:`check_batch`, as on the fetcher's path)."""
        seg = self.segments[index]
        try:
            data = self.driver.read(seg.path, start - seg.base_offset, end - start)
        except IllegalParam:  # the validating layer: the range passes the object's size
            data = b""
        if len(data) != end - start:
            available = min(end, seg.base_offset + self.driver.size(seg.path)) - start
            data = self.driver.read(seg.path, start - seg.base_offset, available) if available > 0 else b""
        return data


def _read_units(driver: SegmentDriver, seg: SegmentRef, pos: int, length: int) -> bytes:
    """Consume-queue bytes ``[pos, pos + length)`` (absolute), or fewer when the segment
    holds fewer (a truncated segment: the caller reports it after the units it holds)."""
    try:
        data = driver.read(seg.path, pos - seg.base_offset, length)
    except IllegalParam:  # the validating layer: the range passes the object's size
        data = b""
    if len(data) != length:
        available = seg.base_offset + driver.size(seg.path) - pos
        data = driver.read(seg.path, pos - seg.base_offset, available) if available > 0 else b""
    return data


def _bad_unit(part: QueuePartition, queue_offset: int, unit: tuple[int, int, int], detail: str) -> CorruptData:
    offset, size, _tags = unit
    return CorruptData(f"{part.topic}/{part.queue_id} queue offset {queue_offset}: consume-queue unit (commit-log "
                       f"offset {offset}, size {size}) {detail}", offset=offset, reason="unit", topic=part.topic,
                       queue_id=part.queue_id, queue_offset=queue_offset, size=size, path=part.consume_queue.path)


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
    """The partition's validated messages in queue order, as :class:`MessageBatch` es of up to
    ``UNITS_PER_READ`` (each one commit-log read). A bad message ends the read: the batch of
    the messages before it is yielded, then its CorruptData is raised.

    Units are read ``UNITS_PER_READ`` at a time and decoded in one call; a batch is a run of
    them that stays in one commit-log segment, points forward from its first unit and spans
    at most ``MAX_READ_BYTES`` (a larger message is read alone). Units that point at nothing
    (never written) or below the commit log's first segment (expired, RocketMQ #8076) are
    skipped while no readable unit came before them in the partition; any other unit whose
    offset or size is negative, or that points below the commit log after a readable unit,
    is corrupt (:class:`CorruptData` naming it), never skipped."""
    driver = driver_for(source)
    policy = prop_crc_policy(source)
    log = _CommitLog(driver, part.commit_log)
    bases, min_cl = log.bases, log.min_offset
    seg = part.consume_queue
    end = _unit_end(driver, part)
    pos = part.start
    readable = False  # a unit pointing into the commit log was seen
    while pos < end:
        length = min(end - pos, UNITS_PER_READ * CQ_UNIT_SIZE)
        raw = _read_units(driver, seg, pos, length)
        units = decode_units(raw)
        first_offset = pos // CQ_UNIT_SIZE
        pos += length
        i, n = 0, len(units)
        while i < n:
            first, size, _tags = units[i]
            if first < min_cl or size <= 0:
                if first < 0 or size < 0 or (size == 0 and units[i] != _ZERO_UNIT):
                    raise _bad_unit(part, first_offset + i, units[i], "is not a valid unit")
                if readable and units[i] != _ZERO_UNIT:
                    raise _bad_unit(part, first_offset + i, units[i],
                                    f"points below the commit log's first segment ({min_cl}) after units that "
                                    "point into it (units only point forward)")
                i += 1
                continue
            readable = True
            index = bisect.bisect_right(bases, first) - 1
            limit = first + MAX_READ_BYTES
            if index + 1 < len(bases):
                limit = min(limit, bases[index + 1])
            j = i + 1
            while j < n:
                off, size, _tags = units[j]
                if size <= 0 or off < first or off + size > limit:
                    break
                j += 1
            run = units[i:j]
            batch = check_batch(run, log.read(index, first, span_end(run)), first, topic=part.topic,
                                queue_id=part.queue_id, queue_offset=first_offset + i, prop_crc=policy)
            if len(batch):
                yield batch
            if batch.error is not None:
                raise batch.error
            i = j
        if len(raw) < length:  # after the intact units before the cut
            stop = pos - length + len(raw) - len(raw) % CQ_UNIT_SIZE
            raise CorruptData(f"{part.topic}/{part.queue_id}: consume-queue segment {seg.path!r} ends at queue "
                              f"offset {stop // CQ_UNIT_SIZE}, before offset {end // CQ_UNIT_SIZE} that the "
                              "metadata records as committed (the segment was truncated)", path=seg.path,
                              reason="truncated", topic=part.topic, queue_id=part.queue_id,
                              queue_offset=stop // CQ_UNIT_SIZE, offset=stop)


def read_messages(source: ConfigSource, part: QueuePartition, read: ReadOptions) -> Iterator[list[MessageExt]]:
    """The partition's messages that match ``read``, in queue order, in lists of up to 4096."""
    for batch in read_batches(source, part):
        out = [msg for msg in batch.messages() if read.wants_time(msg.store_timestamp)]
        if out:
            yield out
