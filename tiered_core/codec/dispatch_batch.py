"""The dispatch group loop: local messages in, tiered commit-log bytes and consume-queue units out.

One pass over a group of one queue's messages, read from the local commit log in one
buffer: validate each (exactly what ``LocalMessageStore.get_message_bytes`` checks, and the
UTF-8 a full decode would check), copy it into the tiered commit-log buffer with its
physical offset rewritten to its tiered offset (and RocketMQ's whole-message CRC property
``__CRC32#`` checked on the local bytes, then recomputed, as
:meth:`~tiered_core.flat.commit_log_file.FlatCommitLogFile.append_message` does), build its
tiered consume-queue unit, and pick up its store timestamp and index keys -- with
precompiled structs, without :func:`~tiered_core.codec.message.decode_message`.

:func:`build_group` takes and returns plain bytes, ints, lists and tuples, so a compiled
twin (``tiered_core._speedups``) can provide the same function (it needs only the fast
path: for a message its checks refuse, :func:`message_error` gives the error); this module
is the reference and the test oracle. The per-message reference it must agree with, byte for
byte, is ``get_message_bytes`` + ``decode_message`` + ``append_message`` + ``encode_cq_unit``
+ :func:`~tiered_core.codec.index_keys.message_index_keys` (see ``tests/test_dispatch_batch.py``).
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple, Sequence

from tiered_core.codec.index_keys import message_index_keys_from_properties
from tiered_core.codec.message import (
    BORNHOST_V6_FLAG,
    MAGIC_V1,
    MAGIC_V2,
    STOREHOSTADDRESS_V6_FLAG,
    Buffer,
    decode_message,
    validate_message,
)
from tiered_core.codec.prop_crc import (
    CRC32_RESERVED_LEN,
    has_prop_crc_slot,
    prop_crc_digits,
    stored_prop_crc,
    upload_crc_error,
)
from tiered_core.errors import CorruptData

# totalSize, magic, bodyCRC, (queueId, flag, queueOffset skipped), physicalOffset, sysFlag
_HEAD = struct.Struct(">iIi16xqi")
_PHYS = struct.Struct(">q")
_CQ_UNIT = struct.Struct(">qiq")
_U16 = struct.Struct(">H")
_CRC_NAME = b"__CRC32#\x01"
_PHYSICAL_OFFSET_POS = 28


def _tail_struct(born_v6: bool, store_v6: bool) -> tuple[struct.Struct, int]:
    """(struct of storeTimestamp and bodyLength read from the message start, header size)."""
    born = 20 if born_v6 else 8
    store = 20 if store_v6 else 8
    ts_pos = 48 + born
    body_len_pos = ts_pos + 8 + store + 4 + 8
    return struct.Struct(f">{ts_pos}xq{body_len_pos - ts_pos - 8}xi"), body_len_pos + 4


#: sysFlag & (BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG) -> (tail struct, header size)
_TAILS = {
    flags: _tail_struct(bool(flags & BORNHOST_V6_FLAG), bool(flags & STOREHOSTADDRESS_V6_FLAG))
    for flags in (0, BORNHOST_V6_FLAG, STOREHOSTADDRESS_V6_FLAG, BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)
}
_HOST_FLAGS = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG


class GroupBuild(NamedTuple):
    """What :func:`build_group` made of the first ``count`` messages (all of them when
    ``error`` is None; else ``error`` is why message ``count`` cannot be tiered)."""

    count: int
    data: bytearray  # the tiered commit-log bytes of those messages, back to back
    units: bytearray  # their tiered consume-queue units (20 bytes each)
    timestamps: list[int]  # their store timestamps
    keys: list[tuple[str, ...]] | None  # their index keys (None when not asked for)
    error: CorruptData | None


def message_error(buf: Buffer, pos: int, size: int, offset: int) -> CorruptData:
    """The error the per-message path raises for the message at ``buf[pos:pos+size]``
    (local commit-log ``offset``): validate, check the size, decode, check the CRC property.

    :func:`build_group` (and a compiled twin) call it for a message its fast checks refuse,
    so the error is always the reference's, whatever the fast path looked at first."""
    raw = bytes(buf[pos:pos + size])
    try:
        total = validate_message(raw, base_offset=offset)
        if total != size:
            return CorruptData(f"message at commit-log offset {offset} is {total} bytes, not {size}",
                               offset=offset, reason="length_mismatch")
        decode_message(raw, verify_crc=False, base_offset=offset)
    except CorruptData as exc:
        return exc
    error = upload_crc_error(raw, size, stored_prop_crc(raw, 0, size))
    if error is not None:
        return error
    return CorruptData(f"message at commit-log offset {offset} ({size} bytes) failed validation",
                       offset=offset, reason="length_mismatch")


def build_group(
    buf: Buffer,
    positions: Sequence[int],
    offsets: Sequence[int],
    sizes: Sequence[int],
    tags_codes: Sequence[int],
    tiered_offset: int,
    want_keys: bool = True,
) -> GroupBuild:
    """Build the tiered bytes of a group of messages.

    In: ``buf`` holds the local commit-log bytes; message ``i`` is
    ``buf[positions[i]:positions[i] + sizes[i]]``, stored locally at commit-log offset
    ``offsets[i]`` with consume-queue tags code ``tags_codes[i]``; ``tiered_offset`` is the
    tiered commit log's append offset (where message 0 goes); ``want_keys`` asks for the
    index keys of each message.

    Out (:class:`GroupBuild`): ``count`` messages built; ``data`` their bytes with
    physicalOffset@28 = their tiered offset (``tiered_offset`` + the sizes before) and, for a
    message carrying a non-zero ``__CRC32#`` property, that property recomputed; ``units``
    their consume-queue units ``(tiered offset, size, tags code)``; ``timestamps`` their
    storeTimestamp; ``keys`` their :func:`~tiered_core.codec.index_keys.message_index_keys`.
    Stops at the first message that is not a valid message of exactly ``sizes[i]`` bytes
    (magic, lengths, body CRC, UTF-8 topic and properties) or whose ``__CRC32#`` property does
    not match its local bytes: ``error`` is then the CorruptData the per-message path raises
    for it (``offset`` = its local commit-log offset; for ``prop_crc_mismatch`` its
    physical-offset field). Never raises for bad bytes.
    """
    n = len(positions)
    total_size = 0
    for i in range(n):
        total_size += sizes[i]
    data = bytearray(total_size)
    units = bytearray(20 * n)
    timestamps: list[int] = []
    keys: list[tuple[str, ...]] | None = [] if want_keys else None
    head = _HEAD.unpack_from
    tails = _TAILS
    u16 = _U16.unpack_from
    crc32 = zlib.crc32
    pack_unit = _CQ_UNIT.pack_into
    pack_phys = _PHYS.pack_into
    index_keys = message_index_keys_from_properties
    add_ts = timestamps.append
    add_keys = keys.append if keys is not None else None
    last_topic = None
    out_pos = 0
    tiered = tiered_offset
    error = None
    count = 0
    with memoryview(buf) as mv:
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        limit = len(mv)
        for i in range(n):
            pos = positions[i]
            size = sizes[i]
            end = pos + size
            ok = False
            if size >= 40 and pos >= 0 and end <= limit:
                total, magic, body_crc, _phys, sys_flag = head(mv, pos)
                tail, header_size = tails[sys_flag & _HOST_FLAGS]
                if total == size and (magic == MAGIC_V1 or magic == MAGIC_V2) and header_size + 3 <= size:
                    store_ts, body_len = tail.unpack_from(mv, pos)
                    body_start = pos + header_size
                    body_end = body_start + body_len
                    tl = 1 if magic == MAGIC_V1 else 2
                    if body_len >= 0 and body_end + tl + 2 <= end:
                        topic_len = mv[body_end] if tl == 1 else u16(mv, body_end)[0]
                        topic_end = body_end + tl + topic_len
                        if topic_end + 2 <= end and topic_end + 2 + u16(mv, topic_end)[0] == end \
                                and crc32(mv[body_start:body_end]) & 0x7FFFFFFF == body_crc:
                            ok = True
            if not ok:
                error = message_error(mv, pos, size, offsets[i])
                break
            topic = mv[body_end + tl:topic_end].tobytes()
            props = mv[topic_end + 2:end].tobytes()
            try:
                if topic != last_topic:
                    topic.decode("utf-8")
                    last_topic = topic
                text = props.decode("utf-8")
            except UnicodeDecodeError:
                error = message_error(mv, pos, size, offsets[i])
                break
            # RocketMQ's whole-message CRC property, recognised by position (the last 20 bytes).
            crc_start = end - CRC32_RESERVED_LEN
            if len(props) >= CRC32_RESERVED_LEN:
                has_crc = props[-CRC32_RESERVED_LEN:-11] == _CRC_NAME and props[-1] == 2
            else:
                has_crc = has_prop_crc_slot(mv, pos, size)
            stored = stored_prop_crc(mv, pos, size) if has_crc else None
            if stored is not None and crc32(mv[pos:crc_start]) & 0x7FFFFFFF != stored:
                error = message_error(mv, pos, size, offsets[i])
                break
            data[out_pos:out_pos + size] = mv[pos:end]
            pack_phys(data, out_pos + _PHYSICAL_OFFSET_POS, tiered)
            if stored is not None:
                crc = crc32(memoryview(data)[out_pos:out_pos + size - CRC32_RESERVED_LEN]) & 0x7FFFFFFF
                data[out_pos + size - 11:out_pos + size - 1] = prop_crc_digits(crc)
            pack_unit(units, 20 * i, tiered, size, tags_codes[i])
            add_ts(store_ts)
            if add_keys is not None:
                add_keys(index_keys(text) if "KEY" in text else ())
            out_pos += size
            tiered += size
            count = i + 1
    if error is not None:
        del data[out_pos:]
        del units[20 * count:]
    return GroupBuild(count, data, units, timestamps, keys, error)


__all__ = ["GroupBuild", "build_group", "message_error"]
