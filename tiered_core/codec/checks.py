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

The loop works on a whole batch in one pass (precompiled structs, no full decode): it is
:func:`tiered_core.codec.batch_kernels.scan_units` (plain bytes and ints, the reference of a
compiled twin); the pure-Python reference the tests compare it with is ``decode_message``
plus field comparisons.
"""

from __future__ import annotations

import enum
from typing import Iterable, NamedTuple, Sequence

from tiered_core.codec.batch_kernels import (
    CHECK_QUEUE_OFFSET,
    CHECK_TAGS,
    PROP_CRC_IF_PRESENT,
    PROP_CRC_REQUIRE,
    VERIFY_CRC,
    scan_units,
)
from tiered_core.codec.consume_queue import ConsumeQueueUnit
from tiered_core.codec.message import Buffer, _as_buffer
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
    if not units:
        return UnitCheck([], None)
    buf = _as_buffer(buf)
    base = units[0][0] if buf_offset is None else buf_offset
    valid, reason, detail = scan_units(
        units, buf, base, topic.encode("utf-8", "surrogatepass"), queue_id,
        -1 if queue_offset is None else queue_offset,
        scan_flags(topic, queue_offset is not None, verify_crc, prop_crc, check_tags))
    positions = [unit[0] - base for unit in units[:valid]]
    if reason is None:
        return UnitCheck(positions, None)
    return UnitCheck(positions, unit_error(units[valid], valid, reason, detail, topic=topic, queue_id=queue_id,
                                           queue_offset=queue_offset))


def scan_flags(topic: str, check_queue_offset: bool = True, verify_crc: bool = True,
               prop_crc: PropCrcPolicy = PropCrcPolicy.IGNORE, check_tags: bool = True) -> int:
    """The :func:`~tiered_core.codec.batch_kernels.scan_units` flags of a :func:`check_units` call."""
    policy = PropCrcPolicy(prop_crc)
    flags = VERIFY_CRC if verify_crc else 0
    if check_tags and topic != SCHEDULE_TOPIC:
        flags |= CHECK_TAGS
    if check_queue_offset:
        flags |= CHECK_QUEUE_OFFSET
    if policy is PropCrcPolicy.IF_PRESENT:
        flags |= PROP_CRC_IF_PRESENT
    elif policy is PropCrcPolicy.REQUIRE:
        flags |= PROP_CRC_REQUIRE
    return flags


def unit_error(unit: tuple[int, int, int], index: int, reason: str, detail: str, *, topic: str, queue_id: int,
               queue_offset: int | None) -> CorruptData:
    """The CorruptData of unit number ``index`` of a batch (``queue_offset``: that of unit 0,
    None if unknown) that :func:`~tiered_core.codec.batch_kernels.scan_units` found bad."""
    unit_offset, size = unit[0], unit[1]
    qo = None if queue_offset is None else queue_offset + index
    where = f"{topic}/{queue_id}" + (f" queue offset {qo}" if qo is not None else "")
    return CorruptData(
        f"{where}: message at commit-log offset {unit_offset} ({size} bytes per its unit) {detail}",
        offset=unit_offset, reason=reason, topic=topic, queue_id=queue_id, queue_offset=qo, size=size)


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
    "scan_flags",
    "unit_error",
]
