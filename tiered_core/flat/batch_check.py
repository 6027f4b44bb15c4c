"""The group kernel of the one validated read path from consume queue to commit log.

Every tiered read goes through :class:`~tiered_core.flat.segment_reader.SegmentReader`
(the fetcher through :meth:`FlatMessageFile.read_batch
<tiered_core.flat.message_file.FlatMessageFile.read_batch>`, the Spark readers over a
planned partition, the metadata rebuild and key queries probing single messages), which
owns the I/O and calls :func:`read_batch` (I/O given as two callables) or, where it has
already read the units and the commit-log span itself, :func:`check_batch`: the consume-queue units are
read once, the commit-log span they point at once, and one pass
(:func:`tiered_core.codec.batch_kernels.scan_units`) splits and validates every message -- the
checks of :mod:`tiered_core.codec.checks`, in its order. The result is a
:class:`MessageBatch`: the valid messages before the first bad unit (never one after it),
and that unit's :class:`~tiered_core.errors.CorruptData`, exactly as ``check_units``
reports it.

What differs between callers is explicit, never a copy of the loop: the property-CRC
policy (``prop_crc``: a store's ``verify_prop_crc``; recovery tools use ``IF_PRESENT``),
whether the queue offset is known (``check_queue_offset``), whether the units carry real
tags codes (``check_tags``). What a caller does with the error is its own: the fetcher
serves the messages before it and never the bad one, Spark fails the task after the rows
before it, the rebuild ignores a bad message's time.
"""

from __future__ import annotations

from typing import Callable, Sequence

from tiered_core.codec._impl import cq_span, scan_cq_units, scan_units
from tiered_core.codec.checks import PropCrcPolicy, scan_flags, unit_error
from tiered_core.codec.consume_queue import CQ_UNIT, CQ_UNIT_SIZE
from tiered_core.codec.message_batch import MessageBatch

_UNIT = CQ_UNIT


def check_batch(units: Sequence[tuple[int, int, int]], data: bytes, base: int, *, topic: str, queue_id: int,
                queue_offset: int | None, prop_crc: PropCrcPolicy = PropCrcPolicy.IGNORE,
                verify_crc: bool = True, check_tags: bool = True) -> MessageBatch:
    """Split and validate ``data`` (the commit log from ``base``) along ``units`` in one pass.

    Unit ``i`` must be message ``queue_offset + i`` of ``topic``/``queue_id``
    (``queue_offset=None``: not known, not checked; the batch then numbers from 0). The
    batch holds the units before the first bad one; its ``error`` names that one."""
    units = units if isinstance(units, list) else list(units)
    valid, reason, detail = scan_units(
        units, data, base, topic.encode("utf-8", "surrogatepass"), queue_id,
        -1 if queue_offset is None else queue_offset,
        scan_flags(topic, queue_offset is not None, verify_crc, prop_crc, check_tags))
    error = None
    if reason is not None:
        error = unit_error(units[valid], valid, reason, detail, topic=topic, queue_id=queue_id,
                           queue_offset=queue_offset)
        units = units[:valid]
    return MessageBatch(topic, queue_id, 0 if queue_offset is None else queue_offset, data, base, units, error)


def check_cq_batch(cq: bytes, data: bytes, base: int, *, topic: str, queue_id: int, queue_offset: int,
                   prop_crc: PropCrcPolicy = PropCrcPolicy.IGNORE) -> MessageBatch:
    """:func:`check_batch` of the units in the consume-queue bytes ``cq`` (whole 20-byte
    units), checked without a Python object per unit: the batch decodes its units only
    when a caller asks for them."""
    valid, reason, detail = scan_cq_units(
        cq, data, base, topic.encode("utf-8", "surrogatepass"), queue_id, queue_offset,
        scan_flags(topic, True, True, prop_crc, True))
    if reason is None:
        return MessageBatch(topic, queue_id, queue_offset, data, base, None, cq=cq)
    units = decode_units(cq)
    error = unit_error(units[valid], valid, reason, detail, topic=topic, queue_id=queue_id,
                       queue_offset=queue_offset)
    return MessageBatch(topic, queue_id, queue_offset, data, base, units[:valid], error)


def decode_units(cq: bytes) -> list[tuple[int, int, int]]:
    """``(commitlog_offset, size, tags_code)`` of each whole 20-byte unit of ``cq``."""
    whole = len(cq) - len(cq) % CQ_UNIT_SIZE
    return list(_UNIT.iter_unpack(memoryview(cq)[:whole] if whole != len(cq) else cq))


def trim_units(units: list[tuple[int, int, int]], max_bytes: int) -> list[tuple[int, int, int]]:
    """The longest prefix of ``units`` (at least one) whose span from the first unit's offset
    stays within ``max_bytes``. A unit pointing before the first one ends the prefix after
    itself (validation then reports it)."""
    if not units:
        return units
    first = units[0][0]
    limit = first + max_bytes
    for n, (off, size, _tags) in enumerate(units):
        if n and off + size > limit:
            return units[:n]
        if off < first:
            return units[:n + 1]
    return units


def span_end(units: Sequence[tuple[int, int, int]]) -> int:
    """The commit-log offset after the furthest message ``units`` point at."""
    return max(off + size for off, size, _ in units)


def read_batch(read_consume_queue: Callable[[int, int], bytes], read_commit_log: Callable[[int, int], bytes],
               queue_offset: int, count: int, max_bytes: int, *, topic: str, queue_id: int,
               prop_crc: PropCrcPolicy = PropCrcPolicy.IGNORE, verify_crc: bool = True,
               check_tags: bool = True) -> MessageBatch:
    """Up to ``count`` validated messages from ``queue_offset``: the units read once
    (``read_consume_queue(queue_offset, count)`` -> their bytes), trimmed to ``max_bytes``
    of commit log (at least one message), the span they point at read once
    (``read_commit_log(offset, length)``, which may return fewer bytes: the units beyond
    them are then out of range), then :func:`check_batch`."""
    units, end = cq_span(read_consume_queue(queue_offset, count), max_bytes) if count > 0 else ([], 0)
    if not units:  # (cq_span: decode_units, trim_units and span_end in one pass)
        return MessageBatch(topic, queue_id, queue_offset, b"", 0, [])
    first = units[0][0]
    if first < 0 or units[0][1] <= 0:
        # No unit a store writes looks like this: the consume queue is damaged here (reading
        # the commit log at such an offset would blame the reader's offset instead).
        return MessageBatch(topic, queue_id, queue_offset, b"", 0, [], unit_error(
            units[0], 0, "bad_unit", "is not a valid consume-queue unit: the consume queue is damaged there",
            topic=topic, queue_id=queue_id, queue_offset=queue_offset))
    data = read_commit_log(first, end - first) if end > first else b""
    return check_batch(units, data, first, topic=topic, queue_id=queue_id, queue_offset=queue_offset,
                       prop_crc=prop_crc, verify_crc=verify_crc, check_tags=check_tags)


__all__ = ["MessageBatch", "check_batch", "check_cq_batch", "decode_units", "read_batch", "span_end", "trim_units"]
