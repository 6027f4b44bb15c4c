"""Inner loops of the batch read path: plain functions, bytes and ints in, bytes and ints out.

Each function here is the pure-Python reference of a compiled twin (the optional Cython
core may supply one with the same signature and results); keep them free of objects
other than ``bytes``/``memoryview``, ``int``, ``str`` and tuples/lists of those.

* :func:`cq_span` -- the consume-queue units of a read, trimmed to a byte budget, and the
  end of the commit-log span they point at.
* :func:`batch_items` -- ``(queue offset, bytes, tags code)`` of each message of a batch.
* :func:`scan_units` -- split + validate a commit-log span along its consume-queue units in
  one pass (the checks and their order are those documented in
  :mod:`tiered_core.codec.checks`, whose :func:`~tiered_core.codec.checks.check_units`
  wraps it).

The lazy decode of one validated record is :func:`tiered_core.codec.message.lazy_message_ext`
(``bytes`` and an optional topic in, a ``MessageExt`` out: one ``unpack_from`` of the header).
"""

from __future__ import annotations

import bisect
import struct
import zlib
from typing import Iterable, Union

from tiered_core.codec.hashing import tags_hash_code
from tiered_core.codec.prop_crc import CRC32_RESERVED_LEN

Buffer = Union[bytes, bytearray, memoryview]

#: :func:`scan_units` flags.
VERIFY_CRC = 1  # check the body CRC (unless the property CRC is verified instead)
CHECK_TAGS = 2  # compare a non-zero unit tags code with hashCode(TAGS)
CHECK_QUEUE_OFFSET = 4  # unit i must hold queue offset ``queue_offset + i``
PROP_CRC_IF_PRESENT = 8  # verify a (non-zero) __CRC32# property instead of the body CRC
PROP_CRC_REQUIRE = 16  # ... and refuse a message without one

MAGIC_V1 = 0xDAA320A7
MAGIC_V2 = 0xDAA320AB
BLANK_MAGIC = 0xCBD43194
#: The smallest record: an IPv4 header (88 bytes), 1-byte topic length, 2-byte properties length.
MIN_SIZE = 91
#: Header size by ``(sysFlag & 0x30) >> 4``: born host v6 (0x10) and store host v6 (0x20) add 12 each.
HEADER_SIZES = (88, 100, 100, 112)

#: totalSize@0 magic@4 bodyCRC@8 queueId@12 flag@16 queueOffset@20 physicalOffset@28 sysFlag@36
_HEAD40 = struct.Struct(">iIiiiqqi")
_I32 = struct.Struct(">i")
_U16 = struct.Struct(">H")
_CRC_NAME = b"__CRC32#\x01"
_UNIT = struct.Struct(">qiq")
_DIGITS = frozenset(b"0123456789")


def _stored_prop_crc(data: Buffer, pos: int, total: int) -> int:
    """:func:`tiered_core.codec.prop_crc.stored_prop_crc`, with 0 for "none" (its None)."""
    if total < CRC32_RESERVED_LEN:
        return 0
    end = pos + total
    start = end - CRC32_RESERVED_LEN
    if data[start:start + 9] != _CRC_NAME or data[end - 1] != 2:
        return 0
    digits = bytes(data[end - 11:end - 1])
    if not _DIGITS.issuperset(digits):
        return -1
    value = int(digits[::-1])
    return value if value <= 0x7FFFFFFF else -1


def _tags_value(props: bytes) -> bytes | None:
    """The value ``parse_properties`` keeps for ``TAGS``: the last non-empty one."""
    hay = b"\x02" + props
    end = len(hay)
    while True:
        j = hay.rfind(b"\x02TAGS\x01", 0, end)
        if j < 0:
            return None
        start = j + 6
        stop = hay.find(b"\x02", start)
        if stop < 0:
            stop = len(hay)
        if stop > start:
            return hay[start:stop]
        end = j


def cq_span(cq: Buffer, max_bytes: int) -> tuple[list[tuple[int, int, int]], int]:
    """The units to read from the consume-queue bytes ``cq`` and where their span ends.

    ``units``: ``(commitlog_offset, size, tags_code)`` of each whole 20-byte unit of ``cq``,
    then only the longest prefix (at least one unit) whose span from the first unit's offset
    stays within ``max_bytes``; a unit pointing before the first one ends the prefix after
    itself (validation then reports it). ``end``: the commit-log offset after the furthest
    message those units point at (0 when there is none)."""
    whole = len(cq) - len(cq) % _UNIT.size
    units = list(_UNIT.iter_unpack(memoryview(cq)[:whole] if whole != len(cq) else cq))
    if not units:
        return units, 0
    first = units[0][0]
    limit = first + max_bytes
    for n, (off, size, _tags) in enumerate(units):
        if n and off + size > limit:
            units = units[:n]
            break
        if off < first:
            units = units[:n + 1]
            break
    return units, max(off + size for off, size, _ in units)


def cq_units_ends(cq: Buffer) -> tuple[list[tuple[int, int, int]], list[int] | None]:
    """The units of the consume-queue bytes ``cq`` and, when they are a healthy queue's,
    where each unit's message ends.

    ``units``: ``(commitlog_offset, size, tags_code)`` of each whole 20-byte unit of ``cq``.
    ``ends``: ``offset + size`` of each unit when every size is > 0 and each message ends at
    or before the next one starts (then offsets and ends both ascend, so a run of units can
    be found by bisection); otherwise (and for no units) None."""
    whole = len(cq) - len(cq) % _UNIT.size
    units = list(_UNIT.iter_unpack(memoryview(cq)[:whole] if whole != len(cq) else cq))
    if not units or min(size for _off, size, _tags in units) <= 0:
        return units, None
    ends = [off + size for off, size, _tags in units]
    for k in range(1, len(units)):
        if ends[k - 1] > units[k][0]:
            return units, None
    return units, ends


def cq_runs(cq: Buffer, bases: list[int], max_bytes: int) -> list[tuple[int, int, int, int]] | None:
    """How a healthy queue's units ``cq`` split into reads of the commit log whose segments
    start at ``bases`` (ascending): ``(i, j, first, end)`` per run -- units ``i..j-1``,
    commit-log bytes ``[first, end)`` -- where a run starts at unit ``i``'s offset, stays in
    the segment holding it, and takes the units whose messages end within ``max_bytes`` of
    it (at least one). None when the units are not a healthy queue's (see
    :func:`cq_units_ends`), the first points below ``bases[0]``, or there are no units or
    no bases: the caller then looks at each unit."""
    units, ends = cq_units_ends(cq)
    if ends is None or not bases or units[0][0] < bases[0]:
        return None
    runs = []
    i, n = 0, len(units)
    while i < n:
        first = units[i][0]
        k = bisect.bisect_right(bases, first)
        limit = first + max_bytes
        if k < len(bases):
            limit = min(limit, bases[k])
        j = bisect.bisect_right(ends, limit, i + 1, n)
        runs.append((i, j, first, ends[j - 1]))
        i = j
    return runs


def scan_cq_units(cq: Buffer, data: Buffer, base: int, topic: bytes, queue_id: int, queue_offset: int,
                  flags: int) -> tuple[int, str | None, str]:
    """:func:`scan_units` of the whole 20-byte units of the consume-queue bytes ``cq``."""
    whole = len(cq) - len(cq) % _UNIT.size
    units = list(_UNIT.iter_unpack(memoryview(cq)[:whole] if whole != len(cq) else cq))
    return scan_units(units, data, base, topic, queue_id, queue_offset, flags)


def batch_items(units: list[tuple[int, int, int]], data: Buffer, base: int,
                queue_offset: int) -> list[tuple[int, bytes, int]]:
    """``(queue_offset + i, data[off - base:off - base + size], tags_code)`` for each unit
    ``(off, size, tags_code)`` (``data`` holds the commit log from ``base``)."""
    return [(queue_offset + i, data[off - base:off - base + size], tags)
            for i, (off, size, tags) in enumerate(units)]


def scan_units(
    units: Iterable[tuple[int, int, int]],
    data: Buffer,
    base: int,
    topic: bytes,
    queue_id: int,
    queue_offset: int,
    flags: int,
) -> tuple[int, str | None, str]:
    """Validate, in order, the messages ``units`` point at in ``data`` (the commit log from
    offset ``base``); stop at the first bad one.

    ``units``: ``(commitlog_offset, size, tags_code)`` triples (a list of tuples, or
    ``struct.iter_unpack(">qiq", cq_bytes)``). ``topic``: the expected topic, UTF-8
    (``surrogatepass``). Unit ``i`` must be a message of ``topic``/``queue_id``, of
    exactly ``size`` bytes, whose physical offset is its ``commitlog_offset`` and, with
    ``CHECK_QUEUE_OFFSET``, whose queue offset is ``queue_offset + i``. ``flags``: see the
    module constants.

    Returns ``(valid, reason, detail)``: how many units from the first passed; for the
    unit after them the reason (a :mod:`tiered_core.codec.checks` reason) and the text
    that follows "message at commit-log offset X (N bytes per its unit)" -- or
    ``(valid, None, "")`` when every unit passed. Never raises for bad bytes.
    """
    limit = len(data)
    is_bytes = isinstance(data, bytes)
    head = _HEAD40.unpack_from
    i32 = _I32.unpack_from
    u16 = _U16.unpack_from
    crc32 = zlib.crc32
    view = memoryview(data)
    topic_len = len(topic)
    verify_crc = flags & VERIFY_CRC
    check_tags = flags & CHECK_TAGS
    check_q = flags & CHECK_QUEUE_OFFSET
    prop_crc = flags & (PROP_CRC_IF_PRESENT | PROP_CRC_REQUIRE)
    require = flags & PROP_CRC_REQUIRE
    sizes = HEADER_SIZES
    tags_cache: dict[bytes, int] = {}
    q = queue_offset
    i = 0
    for cl_off, size, tags_code in units:
        pos = cl_off - base
        if size < MIN_SIZE or pos < 0 or pos + size > limit:
            if size > 0 and pos >= 0 and pos + size <= limit:
                return i, "size_mismatch", f"cannot be a message: the smallest is {MIN_SIZE} bytes"
            return i, "unit_out_of_range", f"lies outside the {limit} bytes read from offset {base}"
        total, magic, body_crc, qid, _flag, qoff, phys, sys_flag = head(data, pos)  # size >= 91: in range
        if magic == MAGIC_V1:
            tl = 1
        elif magic == MAGIC_V2:
            tl = 2
        elif magic == BLANK_MAGIC:
            return i, "blank", "is a blank (end-of-file) record, not a message"
        else:
            return i, "bad_magic", f"has a bad magic 0x{magic:08X}"
        if total != size:
            return i, "size_mismatch", f"says its total size is {total}"
        stored = _stored_prop_crc(data, pos, total) if prop_crc else 0
        end = pos + total
        # -- the record's lengths (codec.message._parse, same order and texts)
        hs = sizes[(sys_flag & 0x30) >> 4]
        if hs + tl + 2 > total:
            return i, "length_mismatch", f"total size {total} is too small for its {hs}-byte header"
        body_len = i32(data, pos + hs - 4)[0]
        body_start = pos + hs
        body_end = body_start + body_len
        if body_len < 0 or body_end + tl + 2 > end:
            return i, "length_mismatch", f"body length {body_len} does not fit the total size {total}"
        t_len = data[body_end] if tl == 1 else u16(data, body_end)[0]
        t_start = body_end + tl
        t_end = t_start + t_len
        if t_end + 2 > end:
            return i, "length_mismatch", f"topic length {t_len} does not fit the total size {total}"
        p_start = t_end + 2
        p_len = u16(data, t_end)[0]
        if p_start + p_len != end:
            return i, "length_mismatch", (f"parts add up to {p_start + p_len - pos} bytes but total size "
                                          f"is {total}")
        if verify_crc and not stored:
            crc = crc32(view[body_start:body_end]) & 0x7FFFFFFF
            if crc != body_crc:
                return i, "crc_mismatch", f"body CRC {crc} does not match the stored {body_crc}"
        # -- what the request and the unit say
        props = data[p_start:end] if is_bytes else bytes(view[p_start:end])
        if not props.isascii():
            try:
                props.decode("utf-8")
            except UnicodeDecodeError as exc:
                return i, "bad_encoding", f"has properties that are not UTF-8 ({exc.reason})"
        if t_len != topic_len or data[t_start:t_end] != topic:
            found = bytes(view[t_start:t_end])
            try:
                name = found.decode("utf-8")
            except UnicodeDecodeError as exc:
                return i, "bad_encoding", f"has a topic that is not UTF-8 ({exc.reason})"
            asked = topic.decode("utf-8", "surrogatepass")
            return i, "topic_mismatch", f"belongs to topic {name!r}, not {asked!r}"
        if qid != queue_id:
            return i, "queue_id_mismatch", f"belongs to queue {qid}, not {queue_id}"
        if check_q and qoff != q + i:
            return i, "queue_offset_mismatch", f"holds queue offset {qoff}, not {q + i}"
        if phys != cl_off:
            return i, "physical_offset_mismatch", f"holds physical offset {phys}, not its commit-log offset {cl_off}"
        if check_tags and tags_code and -0x80000000 <= tags_code <= 0x7FFFFFFF:
            j = props.find(b"TAGS\x01")
            if j < 0:
                tags = None
            elif props.find(b"TAGS\x01", j + 5) >= 0:
                tags = _tags_value(props)  # several: the last non-empty one at a pair's start
            elif j and props[j - 1] != 2:
                tags = None  # the only one ends another name
            else:
                k = props.find(b"\x02", j + 5)
                tags = props[j + 5:k if k >= 0 else len(props)] or None
            if tags:
                expected = tags_cache.get(tags)
                if expected is None:
                    expected = tags_cache[tags] = tags_hash_code(tags.decode("utf-8"))
            else:
                expected = 0
            if expected != tags_code:
                return i, "tags_mismatch", (f"has tags {tags.decode('utf-8') if tags else None!r} (hash {expected}) "
                                            f"but its unit's tags code is {tags_code}")
        if stored:
            actual = crc32(view[pos:end - CRC32_RESERVED_LEN]) & 0x7FFFFFFF
            if actual != stored:
                return i, "prop_crc_mismatch", f"has a __CRC32# property of {stored} but its bytes give {actual}"
        elif require:
            return i, "prop_crc_missing", ("has no __CRC32# property (verify_prop_crc / forceVerifyPropCRC "
                                           "requires one)")
        i += 1
    return i, None, ""


__all__ = [
    "VERIFY_CRC", "CHECK_TAGS", "CHECK_QUEUE_OFFSET", "PROP_CRC_IF_PRESENT", "PROP_CRC_REQUIRE",
    "MIN_SIZE", "HEADER_SIZES", "batch_items", "cq_runs", "cq_span", "cq_units_ends", "scan_cq_units", "scan_units",
]
