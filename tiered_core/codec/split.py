"""Cut a commit-log range into messages along consume-queue units (fetcher reads).

RocketMQ's ``splitMessageBuffer`` silently skips a unit whose bytes do not match
(bad magic, other size) and its callers then number the remaining messages as if
nothing was skipped. Here each result keeps the index of its unit, and a mismatch is
a :class:`~tiered_core.errors.CorruptData` unless the caller asks to skip it.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple, Sequence

from tiered_core.codec.consume_queue import ConsumeQueueUnit
from tiered_core.codec.message import Buffer, _as_buffer, validate_message
from tiered_core.errors import CorruptData


class UnitSlice(NamedTuple):
    """Unit ``index`` (of the units given): its message is ``buf[position:position+unit.size]``."""

    index: int
    unit: ConsumeQueueUnit
    position: int


def split_by_units(
    units: Sequence[ConsumeQueueUnit] | Iterable[ConsumeQueueUnit],
    buf: Buffer,
    buf_offset: int | None = None,
    *,
    verify_crc: bool = True,
    skip_corrupt: bool = False,
) -> list[UnitSlice]:
    """Locate each unit's message in ``buf``, which holds the commit log from ``buf_offset``.

    ``buf_offset`` defaults to the first unit's commit-log offset. Stops at the first
    unit whose bytes are not (wholly) inside ``buf`` (a trimmed read). A unit whose bytes
    are not a valid message of exactly ``unit.size`` bytes raises CorruptData (with
    ``offset`` = its commit-log offset), or is left out when ``skip_corrupt``.
    """
    units = list(units)
    if not units:
        return []
    buf = _as_buffer(buf)
    base = units[0].commitlog_offset if buf_offset is None else buf_offset
    limit = len(buf)
    out: list[UnitSlice] = []
    for i, unit in enumerate(units):
        pos = unit.commitlog_offset - base
        if pos < 0 or unit.size <= 0 or pos + unit.size > limit:
            break
        try:
            size = validate_message(buf, pos, verify_crc=verify_crc, base_offset=base)
            if size != unit.size:
                raise CorruptData(
                    f"message at offset {unit.commitlog_offset} is {size} bytes but its "
                    f"consume-queue unit says {unit.size}",
                    offset=unit.commitlog_offset, reason="unit_mismatch")
        except CorruptData:
            if skip_corrupt:
                continue
            raise
        out.append(UnitSlice(i, unit, pos))
    return out


__all__ = ["UnitSlice", "split_by_units"]
