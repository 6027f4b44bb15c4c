"""The local reput's inner loops: scan commit-log records for the fields a dispatch needs.

The reput step turns each commit-log record into a consume-queue unit and index keys. It
needs a few fields at fixed positions (size, queue id and offset, store timestamp, sysFlag,
born timestamp) and three properties (``TAGS``, ``KEYS``, ``UNIQ_KEY``), not a decoded
:class:`~tiered_core.codec.message.MessageExt`. These are plain functions (bytes and ints
in, tuples out) so a compiled twin can replace them; the pure-Python versions are the
reference.

:func:`scan_reput_records` accepts a record only when :func:`~tiered_core.codec.message.
decode_message` (without the CRC, which the writer computed and recovery checked) would
accept its lengths; anything else stops the scan so the caller can take the per-record
path, which raises the exact error it always raised. UTF-8 of the topic and properties is
checked by the caller (``bytes.decode``).
"""

from __future__ import annotations

import struct
from typing import Union

from tiered_core.codec.message import (
    BORNHOST_V6_FLAG,
    MAGIC_V1,
    MAGIC_V2,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    STOREHOSTADDRESS_V6_FLAG,
)

Buffer = Union[bytes, bytearray, memoryview]

#: The scan consumed the buffer up to its end (fewer than 8 bytes may be left over).
SCAN_END = 0
#: The record at ``stop`` is longer than the bytes left in the buffer (``value``: its size).
SCAN_PARTIAL = 1
#: The bytes at ``stop`` are no message the fast path accepts (a BLANK record, a bad head,
#: a length that does not add up): the caller takes the per-record path there.
SCAN_OTHER = 2

# totalSize magic bodyCRC queueId flag queueOffset physicalOffset sysFlag bornTimestamp
_PREFIX = struct.Struct(">iIiiiqqiq")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U16 = struct.Struct(">H")
_MIN_SIZE = 91  # the smallest V1 message (codec.message._MIN_SIZE_V1)


def scan_reput_records(buf: Buffer, pos: int, limit: int) -> tuple[list[tuple], int, int, int]:
    """Scan the back-to-back records of ``buf[pos:limit]``.

    Returns ``(records, stop, status, value)``. ``records`` holds one tuple per accepted
    message, in order::

        (position, size, queue_id, queue_offset, store_timestamp, topic: bytes,
         properties: bytes, sys_flag, born_timestamp)

    ``stop`` is the position after the last accepted record. ``status`` says why the
    scan stopped: :data:`SCAN_END` (no whole record head left), :data:`SCAN_PARTIAL`
    (the record at ``stop`` has ``value`` bytes, more than are left) or
    :data:`SCAN_OTHER` (anything else at ``stop``; ``value`` is 0).

    A record is accepted when its magic is V1 or V2 and every length fits exactly:
    ``totalSize >= 91``, the header for its host kinds, the body, the topic and the
    properties end at ``totalSize``.
    """
    out: list[tuple] = []
    append = out.append
    prefix = _PREFIX.unpack_from
    i64 = _I64.unpack_from
    i32 = _I32.unpack_from
    u16 = _U16.unpack_from
    while pos + 8 <= limit:
        if pos + 48 > limit:
            # a head but no whole prefix: a partial message, or something else
            total, magic = struct.unpack_from(">iI", buf, pos)
            if (magic == MAGIC_V1 or magic == MAGIC_V2) and total > limit - pos:
                return out, pos, SCAN_PARTIAL, total
            return out, pos, SCAN_OTHER, 0
        total, magic, _crc, queue_id, _flag, queue_offset, _phys, sys_flag, born_ts = prefix(buf, pos)
        if magic == MAGIC_V1:
            tl_size = 1
        elif magic == MAGIC_V2:
            tl_size = 2
        else:
            return out, pos, SCAN_OTHER, 0
        if total < _MIN_SIZE:
            return out, pos, SCAN_OTHER, 0
        end = pos + total
        if end > limit:
            return out, pos, SCAN_PARTIAL, total
        # header: 48 + bornHost + storeTimestamp 8 + storeHost + reconsume 4 + prepTx 8 + bodyLen 4
        ts_pos = pos + (68 if sys_flag & BORNHOST_V6_FLAG else 56)
        header = ts_pos - pos + 8 + (20 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 8) + 16
        if header + tl_size + 2 > total:
            return out, pos, SCAN_OTHER, 0
        body_len = i32(buf, pos + header - 4)[0]
        body_end = pos + header + body_len
        if body_len < 0 or body_end + tl_size + 2 > end:
            return out, pos, SCAN_OTHER, 0
        if tl_size == 1:
            topic_len = buf[body_end]
        else:
            topic_len = u16(buf, body_end)[0]
        topic_start = body_end + tl_size
        topic_end = topic_start + topic_len
        if topic_end + 2 > end:
            return out, pos, SCAN_OTHER, 0
        if topic_end + 2 + u16(buf, topic_end)[0] != end:
            return out, pos, SCAN_OTHER, 0
        append((pos, total, queue_id, queue_offset, i64(buf, ts_pos)[0], bytes(buf[topic_start:topic_end]),
                bytes(buf[topic_end + 2:end]), sys_flag, born_ts))
        pos = end
    return out, pos, SCAN_END, 0


_NAME_STARTS: dict[str, str] = {}


def find_property(text: str, name: str) -> str | None:
    """``parse_properties(text).get(name)`` without building the map.

    The last pair named ``name`` with a non-empty value wins, as in the map (pairs with
    an empty value are skipped there).
    """
    key = _NAME_STARTS.get(name)
    if key is None:
        key = _NAME_STARTS.setdefault(name, PROPERTY_SEPARATOR + name + NAME_VALUE_SEPARATOR)
    n = len(key)
    end = len(text)
    while True:
        at = text.rfind(key, 0, end)
        if at < 0:
            break
        stop = text.find(PROPERTY_SEPARATOR, at + n)
        value = text[at + n:stop] if stop >= 0 else text[at + n:]
        if value:
            return value
        end = at + n - 1  # an earlier pair of that name
    if text.startswith(key[1:]):  # the first pair has no separator before it
        stop = text.find(PROPERTY_SEPARATOR, n - 1)
        value = text[n - 1:stop] if stop >= 0 else text[n - 1:]
        if value:
            return value
    return None


def index_keys_of(uniq: str | None, keys_text: str | None) -> list[str]:
    """The keys the local index records for a message with these ``UNIQ_KEY`` and ``KEYS``
    properties (:func:`tiered_core.codec.index_keys.message_index_keys` of its decoded form)."""
    if not keys_text:
        if uniq and uniq.strip():
            return [uniq]
        return []
    out: dict[str, None] = {}
    if uniq and uniq.strip():
        out[uniq] = None
    for key in keys_text.split(" "):
        if key and key.strip():
            out[key] = None
    return list(out)


__all__ = ["SCAN_END", "SCAN_PARTIAL", "SCAN_OTHER", "scan_reput_records", "find_property", "index_keys_of"]
