"""The read-back checks of ``tiered repair``: bytes are adopted into the metadata only
when they read back through the store's checks -- commit-log bytes as whole messages of
their queue, each at its own offset (:func:`~tiered_core.flat.batch_check.check_batch`, one
pass), consume-queue units through the one segment reader
(:class:`~tiered_core.flat.segment_reader.SegmentReader`), every unit naming a valid
message of the committed (or just adopted) commit log.
"""

from __future__ import annotations

from tiered_core.codec.consume_queue import CQ_UNIT_SIZE
from tiered_core.codec.message import MAGIC_END, MAGIC_V1, MAGIC_V2, peek_magic, peek_store_timestamp, peek_total_size
from tiered_core.common import NO_TIMESTAMP, FileSegmentType
from tiered_core.errors import CorruptData
from tiered_core.flat.batch_check import check_batch
from tiered_core.flat.read_back import tail_messages
from tiered_core.flat.segment_reader import SegmentReader
from tiered_core.ops.repair_context import RepairContext
from tiered_core.spi.metadata import FileSegmentMetadata


def check_commit_log_span(ctx: RepairContext, topic: str, queue_id: int, path: str, base: int, start: int,
                          end: int, *, torn_ok: bool = False) -> tuple[int, tuple[int, int]]:
    """Check that bytes ``[start, end)`` of the commit-log segment at ``path`` (file offset
    ``base``) are whole, valid messages of ``topic``/``queue_id``, each at its own offset
    (one read, one validation pass). With ``torn_ok`` the bytes may end in the head of a
    message cut short (a write cut short). Returns where the whole messages end and their
    (first, last) store time. Raises :class:`CorruptData` naming what fails."""
    data = ctx.driver.read(path, start - base, end - start) if end > start else b""
    if len(data) != end - start:
        raise CorruptData(f"{path!r} holds {start - base + len(data)} bytes, not {end - base}", path=path)
    units, pos = [], 0
    while pos < len(data):
        if len(data) - pos < MAGIC_END:
            if torn_ok:
                break
            raise CorruptData(f"{path!r}: a message cut short at file offset {start + pos}", path=path,
                              offset=start + pos)
        size = peek_total_size(data, pos)
        if peek_magic(data, pos) not in (MAGIC_V1, MAGIC_V2) or size <= MAGIC_END:
            raise CorruptData(f"{path!r}: no message starts at file offset {start + pos}", path=path,
                              offset=start + pos)
        if pos + size > len(data):
            if torn_ok:
                break
            raise CorruptData(f"{path!r}: the message at file offset {start + pos} declares {size} bytes, "
                              f"{len(data) - pos} are left", path=path, offset=start + pos)
        units.append((start + pos, size, 0))
        pos += size
    if not units:
        return start, (NO_TIMESTAMP, NO_TIMESTAMP)
    batch = check_batch(units, data, start, topic=topic, queue_id=queue_id, queue_offset=None,
                        prop_crc=ctx.prop_crc, check_tags=False)
    if batch.error is not None:
        raise batch.error
    if ctx.witness is not None:  # (as the store's open asks its local disk before it adopts a tail)
        why = ctx.witness(topic, queue_id, tail_messages(data, pos))
        if why is not None:
            raise CorruptData(f"{path!r}: {why}", path=path, offset=start)
    return start + pos, (peek_store_timestamp(data, 0), peek_store_timestamp(data, units[-1][0] - start))


def commit_log_prefix(ctx: RepairContext, topic: str, queue_id: int, path: str, base: int,
                      size: int) -> tuple[int, tuple[int, int], bool, str]:
    """The longest run of whole, valid messages of ``topic``/``queue_id`` at the head of the
    commit-log segment at ``path`` (file offset ``base``, ``size`` bytes). Returns where it
    ends, its (first, last) store time, whether what follows it is no message at all (no
    message starts there: a garbage or torn tail) rather than a message that fails the checks
    (a damaged message), and why the run stops ("" when it covers the whole object)."""
    data = ctx.driver.read(path, 0, size) if size else b""
    units, pos = [], 0
    garbage, why = False, ""
    while pos < len(data):
        if len(data) - pos < MAGIC_END:
            garbage, why = True, f"a message cut short at file offset {base + pos}"
            break
        total = peek_total_size(data, pos)
        if peek_magic(data, pos) not in (MAGIC_V1, MAGIC_V2) or total <= MAGIC_END:
            garbage, why = True, f"no message starts at file offset {base + pos}"
            break
        if pos + total > len(data):
            garbage, why = True, f"the message at file offset {base + pos} declares {total} bytes, " \
                                 f"{len(data) - pos} are left"
            break
        units.append((base + pos, total, 0))
        pos += total
    if units:
        batch = check_batch(units, data, base, topic=topic, queue_id=queue_id, queue_offset=None,
                            prop_crc=ctx.prop_crc, check_tags=False)
        if batch.error is not None:
            units = units[:len(batch.units)]
            garbage, why = False, str(batch.error)
    if not units:
        return base, (NO_TIMESTAMP, NO_TIMESTAMP), garbage, why
    end = units[-1][0] + units[-1][1]
    return end, (peek_store_timestamp(data, 0), peek_store_timestamp(data, units[-1][0] - base)), garbage, why


def check_consume_queue_span(ctx: RepairContext, topic: str, queue_id: int, cq: list[FileSegmentMetadata],
                             start: int, end: int) -> tuple[int, int]:
    """Check that the units of queue offsets ``[start, end)`` of the consume queue ``cq``
    (records, the new bytes included) all read back through the segment reader as valid
    messages of the queue's committed commit log; returns the (first, last) store time."""
    cl = ctx.records(topic, queue_id, FileSegmentType.COMMIT_LOG)
    reader = SegmentReader.from_refs(ctx.driver, topic, queue_id, ctx.refs(cq), ctx.refs(cl), ctx.prop_crc)
    count, first, last = 0, NO_TIMESTAMP, NO_TIMESTAMP
    for batch in reader.batches(start, end):
        if count == 0 or first == NO_TIMESTAMP:
            first = peek_store_timestamp(batch.data, batch.units[0][0] - batch.base)
        last = peek_store_timestamp(batch.data, batch.units[-1][0] - batch.base)
        count += len(batch)
    if count != end - start:
        raise CorruptData(f"{topic}/{queue_id}: {end - start - count} of the units {start}..{end - 1} name no "
                          "message", topic=topic, queue_id=queue_id, queue_offset=start)
    return first, last


def check_extension(ctx: RepairContext, topic: str, queue_id: int, file_type: FileSegmentType, path: str,
                     base: int, start: int, end: int, new: FileSegmentMetadata | None,
                     torn_ok: bool = False) -> tuple[int, tuple[int, int]]:
    """Read-back check of file bytes ``[start, end)`` about to be adopted (``new``: the
    record of an adopted segment, None for a tail of a recorded one); with ``torn_ok`` a
    last record cut short is left out. Returns where the whole records end and their
    (first, last) store time."""
    if file_type is FileSegmentType.COMMIT_LOG:
        return check_commit_log_span(ctx, topic, queue_id, path, base, start, end, torn_ok=torn_ok)
    whole = end - end % CQ_UNIT_SIZE
    if start % CQ_UNIT_SIZE or (whole != end and not torn_ok):
        raise CorruptData(f"{path!r}: the bytes {start}..{end} are not whole consume-queue units", path=path)
    if whole <= start:
        return start, (NO_TIMESTAMP, NO_TIMESTAMP)
    cq = ctx.records(topic, queue_id, FileSegmentType.CONSUME_QUEUE)
    if new is not None:
        new = FileSegmentMetadata(new.path, new.type, new.base_offset, whole - new.base_offset, new.status)
        cq = sorted([*cq, new], key=lambda m: m.base_offset)
    else:
        cq = [FileSegmentMetadata(m.path, m.type, m.base_offset, whole - m.base_offset, m.status)
              if m.base_offset == base else m for m in cq]
    return whole, check_consume_queue_span(ctx, topic, queue_id, cq, start // CQ_UNIT_SIZE, whole // CQ_UNIT_SIZE)


__all__ = ["check_commit_log_span", "commit_log_prefix", "check_consume_queue_span", "check_extension"]
