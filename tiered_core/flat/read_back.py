"""Whether bytes past a flat file's committed end are this store's own records.

A backend may hold bytes past the end the metadata records: a commit whose upload landed
before its metadata update was cut short, or someone else's object in the segment's name.
Both the open (:meth:`FlatAppendFile._recover_last_size
<tiered_core.flat.append_file.FlatAppendFile._recover_last_size>`, which adopts them) and
``tiered verify``/``repair`` ask these checks; bytes that fail them are never adopted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from tiered_core.codec.checks import PropCrcPolicy, check_message
from tiered_core.codec.consume_queue import CQ_UNIT_SIZE
from tiered_core.codec.message import MAGIC_END, MAGIC_V1, MAGIC_V2, lazy_message_ext, peek_magic, peek_total_size
from tiered_core.errors import CorruptData
from tiered_core.flat.batch_check import decode_units


#: ``witness(topic, queue_id, messages)`` asks whoever else holds this store's messages (its
#: local disk) about whole messages read past a committed end, ``(queue offset, body, store
#: time)`` each, in order: why they are not the messages this store acknowledged at those
#: offsets, or None (the same ones, or offsets it holds no more).
TailWitness = Callable[[str, int, "list[tuple[int, bytes, int]]"], "str | None"]


def tail_messages(data: bytes, good_bytes: int) -> list[tuple[int, bytes, int]]:
    """``(queue offset, body, store time)`` of the whole messages in ``data[:good_bytes]``
    (bytes :func:`read_back_messages` passed)."""
    out, pos = [], 0
    while pos < good_bytes:
        total = peek_total_size(data, pos)
        m = lazy_message_ext(bytes(data[pos:pos + total]))
        out.append((m.queue_offset, bytes(m.body), m.store_timestamp))
        pos += total
    return out


@dataclass(frozen=True)
class ReadBack:
    """What bytes past a committed end (or a whole unlisted object) read back as: ``ok``
    when they are whole records, maybe ending in a torn one (a write cut short); ``records``
    whole messages or units, ``good_bytes`` their bytes, ``torn_bytes`` what a last,
    incomplete one left; ``reason`` why not ok."""

    ok: bool
    records: int
    good_bytes: int
    torn_bytes: int
    reason: str | None = None

    def describe(self) -> str:
        torn = f" and a torn record of {self.torn_bytes} bytes" if self.torn_bytes else ""
        return f"{self.records} whole record(s){torn}"

    def facts(self) -> dict[str, Any]:
        return {"read_back": "ok" if self.ok else self.reason, "records": self.records,
                "good_bytes": self.good_bytes, "torn_bytes": self.torn_bytes}


def read_back_messages(data: bytes, start: int, topic: str, queue_id: int,
                       prop_crc: PropCrcPolicy = PropCrcPolicy.IF_PRESENT) -> ReadBack:
    """Whether ``data`` (commit-log bytes of ``topic``/``queue_id`` from absolute offset
    ``start``) is whole messages of that queue, each through the read checks and stored
    at its own offset, maybe ending in the head of a torn one."""
    pos, n, records = 0, len(data), 0
    while pos < n:
        if n - pos < MAGIC_END:
            return ReadBack(True, records, pos, n - pos)
        magic, total = peek_magic(data, pos), peek_total_size(data, pos)
        if magic not in (MAGIC_V1, MAGIC_V2) or total <= MAGIC_END:
            return ReadBack(False, records, pos, 0, f"no message at offset {start + pos} (magic {magic:#010x}, "
                                                     f"total size {total})")
        if pos + total > n:
            return ReadBack(True, records, pos, n - pos)
        try:
            check_message(data, pos, commitlog_offset=start + pos, size=total, topic=topic, queue_id=queue_id,
                          prop_crc=prop_crc)
        except CorruptData as exc:
            return ReadBack(False, records, pos, 0, f"the message at offset {start + pos}: {exc.message}")
        pos += total
        records += 1
    return ReadBack(True, records, pos, 0)


def read_back_units(data: bytes, commit_log_end: int | None = None) -> ReadBack:
    """Whether ``data`` is whole consume-queue units pointing forward (size > 0, offset >=
    0) and, when ``commit_log_end`` is given, inside the committed commit log; maybe ending
    in a torn unit."""
    whole = len(data) - len(data) % CQ_UNIT_SIZE
    last_end = -1
    for i, (offset, size, _tags) in enumerate(decode_units(data[:whole])):
        why = None
        if offset < 0 or size <= 0:
            why = "is not a valid unit"
        elif offset < last_end:
            why = "points backwards"
        elif commit_log_end is not None and offset + size > commit_log_end:
            why = f"points past the committed commit log (which ends at {commit_log_end})"
        if why is not None:
            return ReadBack(False, i, i * CQ_UNIT_SIZE, 0, f"unit {i} (commit-log offset {offset}, size {size}) {why}")
        last_end = offset + size
    return ReadBack(True, whole // CQ_UNIT_SIZE, whole, len(data) - whole)


__all__ = ["ReadBack", "read_back_messages", "read_back_units"]
