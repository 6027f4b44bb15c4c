"""RocketMQ's whole-message CRC property (``__CRC32#``), byte-compatible with the broker.

A broker with ``enabledAppendPropCRC=true`` reserves the last 20 bytes of every message
(``CommitLog.CRC32_RESERVED_LEN``) for a final property::

    __CRC32# \\x01 d0 d1 ... d9 \\x02

where ``d0..d9`` are the ASCII decimal digits of ``crc32(message[0 : totalSize - 20]) &
0x7FFFFFFF`` written least-significant digit first (``MessageDecoder.createCrc32``). It is
computed once the queue offset, physical offset and store timestamp are final, so unlike
the body CRC it covers the whole header and every property before it. A reader with
``forceVerifyPropCRC=true`` reads the digits back (most significant last) and recomputes;
a value of 0 counts as "no CRC".

Here the property is recognised by position: the message's last 20 bytes must be exactly
that pair (where every RocketMQ writer puts it). Pure functions, stdlib only.
"""

from __future__ import annotations

import zlib
from typing import Union

from tiered_core.errors import CorruptData, IllegalParam

Buffer = Union[bytes, bytearray, memoryview]

PROPERTY_CRC32 = "__CRC32#"
#: len("__CRC32#") + 1 (\x01) + 10 digits + 1 (\x02): RocketMQ's CommitLog.CRC32_RESERVED_LEN.
CRC32_RESERVED_LEN = len(PROPERTY_CRC32) + 1 + 10 + 1
_NAME = PROPERTY_CRC32.encode("ascii") + b"\x01"
_NAME_LEN = len(_NAME)
#: The property as reserved before its value is known (a value of 0 reads as "no CRC").
CRC32_PLACEHOLDER = _NAME + b"0" * 10 + b"\x02"
_DIGITS = frozenset(b"0123456789")


def prop_crc_digits(crc: int) -> bytes:
    """The 10 ASCII digits RocketMQ writes for ``crc`` (0..2^31-1), least significant first:
    ``'0' + crc % 10``, then ``crc /= 10``, ten times."""
    if not 0 <= crc <= 0x7FFFFFFF:
        raise IllegalParam(f"a property CRC is in 0..2^31-1, got {crc!r}", crc=crc)
    return (b"%010d" % crc)[::-1]


def has_prop_crc_slot(buf: Buffer, offset: int, total: int) -> bool:
    """True when the message ``buf[offset:offset+total]`` ends with a ``__CRC32#`` pair
    (whatever its digits): name, separator, 10 bytes, ``\\x02``."""
    if total < CRC32_RESERVED_LEN:
        return False
    start = offset + total - CRC32_RESERVED_LEN
    return buf[start:start + _NAME_LEN] == _NAME and buf[offset + total - 1] == 2


def stored_prop_crc(buf: Buffer, offset: int, total: int) -> int | None:
    """The CRC the property of the message at ``buf[offset]`` (``total`` bytes) holds.

    None when the message has no property slot or its value is 0 (RocketMQ: not
    present); -1 when the slot holds something other than 10 ASCII digits (so it can
    never match a CRC).
    """
    if not has_prop_crc_slot(buf, offset, total):
        return None
    end = offset + total - 1
    digits = bytes(buf[end - 10:end])
    if not _DIGITS.issuperset(digits):
        return -1
    value = int(digits[::-1])
    if value == 0:
        return None
    return value if value <= 0x7FFFFFFF else -1


def compute_prop_crc(buf: Buffer, offset: int, total: int) -> int:
    """``crc32`` of the message's bytes before its last 20 (RocketMQ ``UtilAll.crc32``)."""
    return zlib.crc32(memoryview(buf)[offset:offset + total - CRC32_RESERVED_LEN]) & 0x7FFFFFFF


def java_crc32(buf: Buffer, start: int = 0, end: int | None = None) -> int:
    """RocketMQ ``UtilAll.crc32`` of ``buf[start:end]``: ``zlib.crc32(...) & 0x7FFFFFFF`` (the
    body CRC of a message, and the property CRC's digest). Slice bounds as in Python."""
    return zlib.crc32(memoryview(buf).cast("B")[start:end]) & 0x7FFFFFFF


def write_prop_crc(buf: bytearray | memoryview, offset: int = 0, total: int | None = None) -> int:
    """Compute the CRC of the message at ``buf[offset]`` and write it into its property slot.

    ``total`` defaults to the message's totalSize field. Returns the CRC. IllegalParam when
    the message has no ``__CRC32#`` slot at its end or ``buf`` is read-only.
    """
    if isinstance(buf, bytes) or (isinstance(buf, memoryview) and buf.readonly):
        raise IllegalParam("write_prop_crc needs a writable buffer (bytearray)", offset=offset)
    if total is None:
        total = int.from_bytes(buf[offset:offset + 4], "big", signed=True)
    if offset < 0 or total <= 0 or offset + total > len(buf) or not has_prop_crc_slot(buf, offset, total):
        raise IllegalParam(f"message at {offset} ({total} bytes) does not end with a "
                           f"{PROPERTY_CRC32} property slot", offset=offset, size=total)
    crc = compute_prop_crc(buf, offset, total)
    end = offset + total - 1
    buf[end - 10:end] = prop_crc_digits(crc)
    return crc


def upload_crc_error(buf: Buffer, size: int, stored: int | None) -> CorruptData | None:
    """Why the local message ``buf[:size]`` must not be tiered: its ``__CRC32#`` property
    (``stored``, from :func:`stored_prop_crc`; None = no property) does not match its bytes,
    and tiering would recompute it over them. None when there is nothing wrong. The error's
    ``offset`` is the message's physical-offset field: where it lies in the local commit log."""
    if stored is None:
        return None
    actual = compute_prop_crc(buf, 0, size)
    if actual == stored:
        return None
    at = int.from_bytes(buf[28:36], "big", signed=True)
    return CorruptData(f"message at local commit-log offset {at} ({size} bytes): its __CRC32# property "
                       f"holds {stored} but its bytes give {actual}; refusing to upload it under a new CRC",
                       offset=at, reason="prop_crc_mismatch", size=size)


__all__ = [
    "PROPERTY_CRC32",
    "CRC32_RESERVED_LEN",
    "CRC32_PLACEHOLDER",
    "prop_crc_digits",
    "has_prop_crc_slot",
    "stored_prop_crc",
    "compute_prop_crc",
    "java_crc32",
    "write_prop_crc",
    "upload_crc_error",
]
