"""Consume-queue units: the 20-byte index entry of one message in one queue.

Layout (big-endian, identical to RocketMQ's local ConsumeQueue and the tiered one)::

    0 commitLogOffset long   8 size int   12 tagsCode long

Unit ``i`` of a queue lives at flat offset ``i * 20``. ``tags_code`` is the
sign-extended Java ``String.hashCode`` of the tags (see :mod:`.hashing`).
"""

from __future__ import annotations

import struct
from typing import Iterable, Iterator, NamedTuple, Union

from tiered_core.common import INT_MAX, LONG_MAX, LONG_MIN
from tiered_core.errors import CorruptData, IllegalParam

Buffer = Union[bytes, bytearray, memoryview]

CQ_UNIT_SIZE = 20
#: One unit: commit-log offset, message size, tags hash code (big-endian).
CQ_UNIT = struct.Struct(">qiq")
_UNIT = CQ_UNIT


class ConsumeQueueUnit(NamedTuple):
    """One consume-queue entry: where the message is, its size and its tags hash."""

    commitlog_offset: int
    size: int
    tags_code: int

    @property
    def is_valid(self) -> bool:
        """True when it points at a message (offset >= 0, size > 0); a zero-filled
        (never written) unit is not valid."""
        return self.commitlog_offset >= 0 and self.size > 0

    def encode(self) -> bytes:
        return encode_cq_unit(self.commitlog_offset, self.size, self.tags_code)


def encode_cq_unit(commitlog_offset: int, size: int, tags_code: int = 0) -> bytes:
    """The 20 bytes of a unit. IllegalParam for offset < 0, size not in 1..2^31-1, or
    a tags code outside a Java long."""
    if not isinstance(commitlog_offset, int) or not 0 <= commitlog_offset <= LONG_MAX:
        raise IllegalParam(f"commit-log offset {commitlog_offset!r} must be in 0..2^63-1",
                           commitlog_offset=commitlog_offset)
    if not isinstance(size, int) or not 0 < size <= INT_MAX:
        raise IllegalParam(f"message size {size!r} must be in 1..2^31-1", size=size)
    if not isinstance(tags_code, int) or not LONG_MIN <= tags_code <= LONG_MAX:
        raise IllegalParam(f"tags code {tags_code!r} is not a 64-bit int", tags_code=tags_code)
    return _UNIT.pack(commitlog_offset, size, tags_code)


def encode_cq_units(units: Iterable[tuple[int, int, int]]) -> bytes:
    """Concatenated units (each a ConsumeQueueUnit or an (offset, size, tags_code) triple)."""
    return b"".join(encode_cq_unit(*u) for u in units)


def decode_cq_unit(buf: Buffer, offset: int = 0, *, base_offset: int = 0) -> ConsumeQueueUnit:
    """The unit at ``buf[offset:offset+20]``; CorruptData (``offset`` = ``base_offset +
    offset``) when fewer than 20 bytes are there."""
    if not isinstance(offset, int) or offset < 0:
        raise IllegalParam(f"offset {offset!r} must be an int >= 0", offset=offset)
    if offset + CQ_UNIT_SIZE > len(buf):
        at = base_offset + offset
        raise CorruptData(f"consume-queue unit at offset {at}: only "
                          f"{max(len(buf) - offset, 0)} of {CQ_UNIT_SIZE} bytes",
                          offset=at, reason="truncated")
    return ConsumeQueueUnit._make(_UNIT.unpack_from(buf, offset))


def iter_cq_units(buf: Buffer, *, base_offset: int = 0) -> Iterator[ConsumeQueueUnit]:
    """Every unit of a buffer of whole units. CorruptData when the length is not a
    multiple of 20 (raised before anything is yielded)."""
    n = len(buf)
    if n % CQ_UNIT_SIZE:
        at = base_offset + n - n % CQ_UNIT_SIZE
        raise CorruptData(f"consume-queue buffer of {n} bytes at offset {base_offset} is not "
                          f"a whole number of {CQ_UNIT_SIZE}-byte units; partial unit at {at}",
                          offset=at, reason="truncated")
    return map(ConsumeQueueUnit._make, _UNIT.iter_unpack(buf))


def decode_cq_units(buf: Buffer, *, base_offset: int = 0) -> list[ConsumeQueueUnit]:
    """``list(iter_cq_units(buf))``."""
    return list(iter_cq_units(buf, base_offset=base_offset))


__all__ = [
    "CQ_UNIT",
    "CQ_UNIT_SIZE",
    "ConsumeQueueUnit",
    "encode_cq_unit",
    "encode_cq_units",
    "decode_cq_unit",
    "iter_cq_units",
    "decode_cq_units",
]
