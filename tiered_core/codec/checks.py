"""The one validation every tiered read applies: a message located by a consume-queue unit
must be exactly the message that unit and the request describe.

RocketMQ's body CRC (bodyCRC@8) covers the body only. A flipped byte in the header or the
properties of a stored message still decodes as a valid message -- of another topic, queue
or offset, or with other keys. So every tiered read (the fetcher, the Spark reader, the
metadata rebuild) passes what it read through :func:`check_units`, which checks, for each
unit, in this order (the first failure is the reason reported):

=========================  ====================================================================
reason                     check
=========================  ====================================================================
``unit_out_of_range``      the unit's size is > 0 and its bytes lie wholly inside what was read
``blank`` / ``bad_magic``  magic@4 is a message magic (V1 or V2)
``size_mismatch``          totalSize@0 == the unit's size
``length_mismatch``,       the record's lengths (body, topic, properties) add up to totalSize
``truncated``
``crc_mismatch``           body CRC@8 (skipped when the property CRC is verified instead)
``bad_encoding``           topic and properties are UTF-8
``topic_mismatch``         topic == the topic asked for
``queue_id_mismatch``      queueId@12 == the queue asked for
``queue_offset_mismatch``  queueOffset@20 == the unit's queue offset
``physical_offset_...``    physicalOffset@28 == the unit's commit-log offset (the tiered commit
                           log rewrites that field to the tiered offset at upload)
``tags_mismatch``          a non-zero tags code in the unit == ``hashCode(TAGS)`` (0 without
                           TAGS, as the local store computes it). A code of 0 means "not
                           recorded": the CompositeAccess SPI lets a writer leave it 0 (the
                           conformance suite does). Skipped for RocketMQ's
                           ``SCHEDULE_TOPIC_XXXX`` and ConsumeQueueExt addresses, whose tags
                           codes are not tag hashes
``prop_crc_mismatch``,     RocketMQ's whole-message CRC property ``__CRC32#`` (see
``prop_crc_missing``       :mod:`tiered_core.codec.prop_crc` and :class:`PropCrcPolicy`)
=========================  ====================================================================

What the format cannot protect without the property CRC
-------------------------------------------------------
Nothing in a RocketMQ message or its consume-queue unit repeats these fields, so a change
to them cannot be detected from the bytes alone: the properties (``KEYS``, the ``TAGS``
string beyond its 32-bit hash, ``UNIQ_KEY``, user properties), born and store
timestamps, born and store hosts, flag, sysFlag bits other than the host kinds,
reconsume times and the prepared-transaction offset. (A flipped store timestamp also
misleads time lookups, which read it without a unit to compare against.)

Full protection: set ``append_prop_crc = true`` (RocketMQ ``enabledAppendPropCRC``) so every
put appends the ``__CRC32#`` property over the whole message -- the tiered commit log
re-computes it after rewriting the physical offset, after checking the local bytes
against it -- and ``verify_prop_crc = true`` (``forceVerifyPropCRC``) so tiered reads
verify it and refuse a message without one. Turn on ``verify_prop_crc`` only once every
tiered message carries the property (a new store, or after older segments expired),
and never for a tiered directory uploaded by RocketMQ's Java tiered store: it rewrites
the physical offset without recomputing the CRC, so its CRCs are stale.

The loop works on a whole batch in one pass (precompiled structs, no full decode); the
pure-Python reference the tests compare it with is ``decode_message`` plus field
comparisons.
"""

from __future__ import annotations

import enum
import zlib
from typing import Iterable, NamedTuple, Sequence

from tiered_core.common import INT_MAX, INT_MIN
from tiered_core.codec.consume_queue import ConsumeQueueUnit
from tiered_core.codec.hashing import tags_hash_code
from tiered_core.codec.message import (
    _HEAD8,
    _MAGIC_TO_VERSION,
    _MIN_SIZE_V1,
    BLANK_MAGIC,
    Buffer,
    _as_buffer,
    _parse,
)
from tiered_core.codec.prop_crc import CRC32_RESERVED_LEN, stored_prop_crc
from tiered_core.errors import CorruptData, IllegalParam

#: RocketMQ's delay-message topic: its consume queue holds delivery times, not tag hashes.
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"

#: Reasons meaning "these bytes are not a well-formed message of the unit's size" (as
#: opposed to a well-formed message that is not the one asked for).
STRUCTURAL_REASONS = frozenset({
    "unit_out_of_range", "blank", "bad_magic", "size_mismatch", "length_mismatch", "truncated",
    "crc_mismatch", "bad_encoding",
})
#: Reasons of a well-formed message whose fields contradict the request or the unit.
FIELD_REASONS = frozenset({
    "topic_mismatch", "queue_id_mismatch", "queue_offset_mismatch", "physical_offset_mismatch",
    "tags_mismatch", "prop_crc_mismatch", "prop_crc_missing",
})


class PropCrcPolicy(str, enum.Enum):
    """What to do with RocketMQ's whole-message CRC property ``__CRC32#``.

    * ``IGNORE``: body CRC only; the property is not read (``forceVerifyPropCRC=false``,
      RocketMQ's default, and the only choice for tiered data uploaded by RocketMQ's Java
      tiered store, whose CRCs are stale).
    * ``IF_PRESENT``: a message with a (non-zero) property is verified by it, instead of by
      the body CRC it covers; one without falls back to the body CRC. For recovery tools,
      which have no config to tell them more.
    * ``REQUIRE``: like ``IF_PRESENT``, and a message without the property is corrupt
      (``prop_crc_missing``) -- RocketMQ's ``forceVerifyPropCRC=true``. This also catches a
      flip in the property's own name or separators, which would otherwise turn the
      check off for that message.
    """

    IGNORE = "ignore"
    IF_PRESENT = "if_present"
    REQUIRE = "require"

    @classmethod
    def from_config(cls, verify_prop_crc: bool) -> "PropCrcPolicy":
        """The policy of a store whose ``verify_prop_crc`` is as given."""
        return cls.REQUIRE if verify_prop_crc else cls.IGNORE


class UnitCheck(NamedTuple):
    """The result of :func:`check_units`.

    ``positions[i]`` is where unit ``i``'s message starts in the buffer, for each unit
    before the first bad one; ``error`` says why ``units[len(positions)]`` is bad (None
    when every unit passed).
    """

    positions: list[int]
    error: CorruptData | None

    @property
    def valid(self) -> int:
        """How many units, from the first, passed."""
        return len(self.positions)


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


def check_units(
    units: Sequence[ConsumeQueueUnit] | Iterable[tuple[int, int, int]],
    buf: Buffer,
    buf_offset: int | None = None,
    *,
    topic: str,
    queue_id: int,
    queue_offset: int | None,
    verify_crc: bool = True,
    prop_crc: PropCrcPolicy = PropCrcPolicy.IGNORE,
    check_tags: bool = True,
) -> UnitCheck:
    """Validate the messages ``units`` point at in ``buf`` (the commit log from ``buf_offset``).

    ``buf_offset`` defaults to the first unit's commit-log offset. Unit ``i`` is expected to
    be queue offset ``queue_offset + i`` of ``topic``/``queue_id`` (``queue_offset=None``
    skips that check, for callers that do not know it); ``check_tags=False`` skips the
    tags-code check (for callers without a real unit). ``verify_crc=False`` skips the body
    CRC. Every check is listed in the module docstring.

    Stops at the first bad unit and returns the positions of the good ones before it and a
    :class:`~tiered_core.errors.CorruptData` with ``offset`` (the unit's commit-log offset),
    ``reason``, ``topic``, ``queue_id``, ``queue_offset`` and ``size``. Never raises for bad
    bytes; IllegalParam for a topic that is not a string.
    """
    if not isinstance(topic, str):
        raise IllegalParam(f"topic {topic!r} must be a string", topic=topic)
    units = units if isinstance(units, list) else list(units)
    positions: list[int] = []
    if not units:
        return UnitCheck(positions, None)
    buf = _as_buffer(buf)
    is_view = isinstance(buf, memoryview)
    base = units[0][0] if buf_offset is None else buf_offset
    limit = len(buf)
    topic_b = topic.encode("utf-8", "surrogatepass")
    topic_len = len(topic_b)
    tags_on = check_tags and topic != SCHEDULE_TOPIC
    policy = PropCrcPolicy(prop_crc)
    head = _HEAD8.unpack_from
    magics = _MAGIC_TO_VERSION
    parse = _parse
    append = positions.append
    q = queue_offset
    view = memoryview(buf) if policy is not PropCrcPolicy.IGNORE else None
    crc32 = zlib.crc32

    def fail(i: int, unit_offset: int, size: int, reason: str, detail: str) -> UnitCheck:
        qo = None if queue_offset is None else queue_offset + i
        where = f"{topic}/{queue_id}" + (f" queue offset {qo}" if qo is not None else "")
        return UnitCheck(positions, CorruptData(
            f"{where}: message at commit-log offset {unit_offset} ({size} bytes per its unit) {detail}",
            offset=unit_offset, reason=reason, topic=topic, queue_id=queue_id, queue_offset=qo, size=size))

    for i, (cl_off, size, tags_code) in enumerate(units):
        pos = cl_off - base
        if size < _MIN_SIZE_V1 or pos < 0 or pos + size > limit:
            if size > 0 and pos >= 0 and pos + size <= limit:
                return fail(i, cl_off, size, "size_mismatch",
                            f"cannot be a message: the smallest is {_MIN_SIZE_V1} bytes")
            return fail(i, cl_off, size, "unit_out_of_range",
                        f"lies outside the {limit} bytes read from offset {base}")
        total, magic = head(buf, pos)
        ver = magics.get(magic)
        if ver is None:
            if magic == BLANK_MAGIC:
                return fail(i, cl_off, size, "blank", "is a blank (end-of-file) record, not a message")
            return fail(i, cl_off, size, "bad_magic", f"has a bad magic 0x{magic:08X}")
        if total != size:
            return fail(i, cl_off, size, "size_mismatch", f"says its total size is {total}")
        stored = None if policy is PropCrcPolicy.IGNORE else stored_prop_crc(buf, pos, total)
        try:
            fields, _bs, _be, topic_start, topic_end, props_start, end = parse(
                buf, pos, total, ver, base, verify_crc and stored is None)
        except CorruptData as exc:
            return fail(i, cl_off, size, exc.reason, exc.message.partition(": ")[2] or exc.message)
        props = buf[props_start:end]
        if is_view:
            props = bytes(props)
        if not props.isascii():
            try:
                props.decode("utf-8")
            except UnicodeDecodeError as exc:
                return fail(i, cl_off, size, "bad_encoding", f"has properties that are not UTF-8 ({exc.reason})")
        if topic_end - topic_start != topic_len or buf[topic_start:topic_end] != topic_b:
            found = bytes(buf[topic_start:topic_end])
            try:
                name = found.decode("utf-8")
            except UnicodeDecodeError as exc:
                return fail(i, cl_off, size, "bad_encoding", f"has a topic that is not UTF-8 ({exc.reason})")
            return fail(i, cl_off, size, "topic_mismatch", f"belongs to topic {name!r}, not {topic!r}")
        if fields[3] != queue_id:
            return fail(i, cl_off, size, "queue_id_mismatch", f"belongs to queue {fields[3]}, not {queue_id}")
        if q is not None and fields[5] != q + i:
            return fail(i, cl_off, size, "queue_offset_mismatch",
                        f"holds queue offset {fields[5]}, not {q + i}")
        if fields[6] != cl_off:
            return fail(i, cl_off, size, "physical_offset_mismatch",
                        f"holds physical offset {fields[6]}, not its commit-log offset {cl_off}")
        if tags_on and tags_code and INT_MIN <= tags_code <= INT_MAX:
            tags = _tags_value(props) if b"TAGS\x01" in props else None
            expected = tags_hash_code(tags.decode("utf-8")) if tags else 0
            if expected != tags_code:
                return fail(i, cl_off, size, "tags_mismatch",
                            f"has tags {tags.decode('utf-8') if tags else None!r} (hash {expected}) but "
                            f"its unit's tags code is {tags_code}")
        if stored is not None:
            actual = crc32(view[pos:pos + total - CRC32_RESERVED_LEN]) & 0x7FFFFFFF  # type: ignore[index]
            if actual != stored:
                return fail(i, cl_off, size, "prop_crc_mismatch",
                            f"has a __CRC32# property of {stored} but its bytes give {actual}")
        elif policy is PropCrcPolicy.REQUIRE:
            return fail(i, cl_off, size, "prop_crc_missing",
                        "has no __CRC32# property (verify_prop_crc / forceVerifyPropCRC requires one)")
        append(pos)
    return UnitCheck(positions, None)


def check_message(
    buf: Buffer,
    position: int = 0,
    *,
    commitlog_offset: int,
    size: int,
    topic: str,
    queue_id: int,
    queue_offset: int | None = None,
    tags_code: int | None = None,
    verify_crc: bool = True,
    prop_crc: PropCrcPolicy = PropCrcPolicy.IGNORE,
) -> None:
    """:func:`check_units` for one message at ``buf[position]`` (``size`` bytes, stored at
    ``commitlog_offset``): raises its CorruptData. ``queue_offset``/``tags_code`` None skip
    those checks (e.g. an index entry knows neither)."""
    unit = ConsumeQueueUnit(commitlog_offset, size, 0 if tags_code is None else tags_code)
    result = check_units([unit], buf, commitlog_offset - position, topic=topic, queue_id=queue_id,
                         queue_offset=queue_offset, verify_crc=verify_crc, prop_crc=prop_crc,
                         check_tags=tags_code is not None)
    if result.error is not None:
        raise result.error


__all__ = [
    "SCHEDULE_TOPIC",
    "STRUCTURAL_REASONS",
    "FIELD_REASONS",
    "PropCrcPolicy",
    "UnitCheck",
    "check_units",
    "check_message",
]
