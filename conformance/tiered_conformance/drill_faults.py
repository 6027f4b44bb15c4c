"""How each fault of the drill kit is planted (:mod:`tiered_conformance.drills` is the API).

:class:`Drill` holds the raw driver and the metadata store of one closed store and what a
fault needs of them (its queues, their units, rewriting an object); each ``plant_*``
function plants one fault and returns its :class:`PlantedFault`. :data:`PLANTERS` maps
the fault names to them.
"""

from __future__ import annotations

import random
import struct
import zlib
from dataclasses import dataclass
from typing import Any, Callable

from tiered_core.codec.consume_queue import CQ_UNIT_SIZE, decode_cq_units
from tiered_core.codec.hashing import index_key_hash
from tiered_core.codec.index_keys import message_index_keys
from tiered_core.codec.message import BODY_CRC_POS, lazy_message_ext, message_fields
from tiered_core.codec.prop_crc import PROPERTY_CRC32
from tiered_core.codec.naming import INDEX_TOPIC, segment_path
from tiered_core.codec.tiered_index import (
    COMPACT_ITEM,
    COMPACT_ITEM_SIZE,
    HEADER_SIZE,
    SLOT_SIZE,
    IndexHeader,
)
from tiered_core.common import FileSegmentType, SegmentStatus
from tiered_core.errors import IllegalParam
from tiered_core.flat.ownership import OWNER_DIR, OwnerRecord, owner_prefix, tier_prefix
from tiered_core.ops.findings import FindingKind
from tiered_core.spi.driver import SegmentDriver
from tiered_core.spi.metadata import FileSegmentMetadata, TieredMetadataStore

#: The store id the ``stale_owner`` drill writes on the newer owner record.
DRILL_OWNER_ID = "drill-other-store"

@dataclass(frozen=True)
class PlantedFault:
    """One planted fault: ``fault`` (a name of :data:`FAULTS`), the finding verify reports
    for it (``expected_kind``), its ``subject`` (backend path, or the tier prefix), what was
    done (``detail``), the queue (``topic``, ``queue_id``) and the queue offsets ``[from, to)``
    whose messages it damaged (``queue_offsets``; None: no message is damaged)."""

    fault: str
    expected_kind: FindingKind
    subject: str
    detail: str
    queue_offsets: tuple[int, int] | None = None
    topic: str | None = None
    queue_id: int | None = None
    deep: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"fault": self.fault, "expected_kind": self.expected_kind.value, "subject": self.subject,
                "detail": self.detail, "topic": self.topic, "queue_id": self.queue_id,
                "queue_offsets": None if self.queue_offsets is None else list(self.queue_offsets),
                "deep": self.deep}


# -- the store's segments ------------------------------------------------------------------


@dataclass
class _Queue:
    topic: str
    queue_id: int
    cq: list[FileSegmentMetadata]
    cl: list[FileSegmentMetadata]


class Drill:
    """The raw driver and the metadata of one closed store, and what a fault needs of them."""

    def __init__(self, config: Any, seed: int) -> None:
        self.config = config
        self.cluster, self.broker = config.cluster, config.broker
        self.prefix = tier_prefix(self.cluster, self.broker)
        self.rng = random.Random(seed)
        self.driver: SegmentDriver = config.open_driver()
        try:
            self.metadata: TieredMetadataStore = config.open_metadata()
        except BaseException:
            self.driver.close()
            raise

    def close(self) -> None:
        try:
            self.metadata.close()
        finally:
            self.driver.close()

    def path(self, meta: FileSegmentMetadata) -> str:
        broker, topic, queue = meta.path.split("/")
        return segment_path(self.cluster, broker, topic, int(queue), FileSegmentType(meta.type), meta.base_offset)

    def queues(self, topic: str | None, queue_id: int | None) -> list[_Queue]:
        found: dict[tuple[str, int], _Queue] = {}
        for meta in self.metadata.iterate_file_segments():
            if meta.status == SegmentStatus.DELETED or meta.type == FileSegmentType.INDEX:
                continue
            _broker, t, q = meta.path.split("/")
            if t == INDEX_TOPIC or (topic is not None and t != topic) or (queue_id is not None and int(q) != queue_id):
                continue
            queue = found.setdefault((t, int(q)), _Queue(t, int(q), [], []))
            (queue.cq if meta.type == FileSegmentType.CONSUME_QUEUE else queue.cl).append(meta)
        out = []
        for key in sorted(found):
            queue = found[key]
            queue.cq.sort(key=lambda m: m.base_offset)
            queue.cl.sort(key=lambda m: m.base_offset)
            if queue.cq and queue.cl and any(m.size for m in queue.cq):
                out.append(queue)
        return out

    def pick_queue(self, fault: str, topic: str | None, queue_id: int | None,
                   allows: Callable[[_Queue], bool] = lambda q: True) -> _Queue:
        candidates = [q for q in self.queues(topic, queue_id) if allows(q)]
        if not candidates:
            where = "" if topic is None else f" of topic {topic!r}" + ("" if queue_id is None else f" queue {queue_id}")
            raise IllegalParam(f"drill {fault!r}: the store has no queue{where} this fault can be planted in",
                               fault=fault, topic=topic, queue_id=queue_id)
        return self.rng.choice(candidates)

    def units(self, queue: _Queue) -> list[tuple[int, int, int]]:
        """``(queue offset, commit-log offset, size)`` of every committed unit of ``queue``."""
        out = []
        for meta in queue.cq:
            if not meta.size:
                continue
            data = self.driver.read(self.path(meta), 0, meta.size - meta.size % CQ_UNIT_SIZE)
            for i, unit in enumerate(decode_cq_units(data, base_offset=meta.base_offset)):
                if unit.is_valid:
                    out.append(((meta.base_offset // CQ_UNIT_SIZE) + i, unit.commitlog_offset, unit.size))
        return out

    def units_in(self, queue: _Queue, base: int, end: int) -> list[tuple[int, int, int]]:
        return [u for u in self.units(queue) if base <= u[1] < end]

    def rewrite(self, path: str, data: bytes) -> None:
        """Replace the object at ``path`` with ``data`` (sealed again when it was)."""
        sealed = self.driver.is_sealed(path)
        self.driver.delete(path)
        self.driver.create(path)
        if data:
            self.driver.write(path, 0, data)
        if sealed:
            self.driver.seal(path)

    def read_all(self, path: str) -> bytes:
        size = self.driver.size(path)
        return self.driver.read(path, 0, size) if size else b""

    def update(self, meta: FileSegmentMetadata, **changes: Any) -> None:
        for name, value in changes.items():
            setattr(meta, name, value)
        self.metadata.update_file_segment(meta)
        self.metadata.flush()

    def index_segments(self) -> list[FileSegmentMetadata]:
        metas = [m for m in self.metadata.iterate_file_segments(int(FileSegmentType.INDEX))
                 if m.status != SegmentStatus.DELETED and m.size > 0]
        if not metas:
            raise IllegalParam("the store holds no uploaded key-index file (upload one first: the store's "
                               "index.roll_file() and index.compact_and_upload())")
        return sorted(metas, key=lambda m: m.base_offset)

    def topic_of_id(self, topic_id: int) -> str | None:
        for t in self.metadata.iterate_topics():
            if t.topic_id == topic_id:
                return t.topic
        return None


def _with_messages(drill: Drill, queue: _Queue) -> list[FileSegmentMetadata]:
    """The commit-log segments of ``queue`` that hold at least one message a unit names."""
    starts = {u[1] for u in drill.units(queue)}
    return [m for m in queue.cl if m.size and any(m.base_offset <= s < m.base_offset + m.size for s in starts)]


def _offsets(units: list[tuple[int, int, int]]) -> tuple[int, int] | None:
    return (units[0][0], units[-1][0] + 1) if units else None


# -- the faults ---------------------------------------------------------------------------------


@dataclass
class _Message:
    """One message of a commit-log segment, read for a fault: the segment's backend ``path``
    and bytes (``data``, to change), where the message starts in them (``rel``), its header
    fields, header size and where its properties start (:func:`message_fields`)."""

    path: str
    data: bytearray
    rel: int
    fields: tuple
    header: int
    props: int

    @property
    def body(self) -> slice:
        return slice(self.rel + self.header, self.rel + self.header + self.fields[16])


def _message(d: Drill, fault: str, queue: _Queue, unit: tuple[int, int, int]) -> _Message:
    qo, offset, _size = unit
    meta = next(m for m in queue.cl if m.base_offset <= offset < m.base_offset + max(m.size, 1))
    path = d.path(meta)
    data = bytearray(d.read_all(path))
    rel = offset - meta.base_offset
    msg = _Message(path, data, rel, *message_fields(data, rel))
    if msg.fields[16] <= 0:
        raise IllegalParam(f"drill {fault!r}: the message at queue offset {qo} has no body", offset=qo)
    return msg


def plant_flipped_byte(d: Drill, topic: str | None, queue_id: int | None) -> PlantedFault:
    queue = d.pick_queue("flipped_byte", topic, queue_id, lambda q: bool(d.units(q)))
    qo, offset, size = unit = d.rng.choice(d.units(queue))
    msg = _message(d, "flipped_byte", queue, unit)
    path, data = msg.path, msg.data
    at = msg.body.start + d.rng.randrange(msg.fields[16])
    data[at] ^= 0xFF
    d.rewrite(path, bytes(data))
    return PlantedFault("flipped_byte", FindingKind.CORRUPT_MESSAGE, path,
                        f"flipped the byte at {at} (body of the message at queue offset {qo}, commit-log offset "
                        f"{offset})", (qo, qo + 1), queue.topic, queue.queue_id, deep=True)


def plant_replaced_message(d: Drill, topic: str | None, queue_id: int | None) -> PlantedFault:
    """Another message in place of one of a segment the store recorded a checksum for: a body
    of the same length, its body CRC right, its times and every header field unchanged, so
    the message passes every read check (as another store's restored object of the same name
    and size would). Only its checksum tells."""
    def candidates(q: _Queue) -> list[tuple[int, int, int]]:
        return [u for u in d.units(q) if any(m.checksum is not None and m.base_offset <= u[1]
                                             and u[1] + u[2] <= m.base_offset + m.checksum_size for m in q.cl)]

    queue = d.pick_queue("replaced_message", topic, queue_id, lambda q: bool(candidates(q)))
    qo, offset, size = unit = d.rng.choice(candidates(queue))
    msg = _message(d, "replaced_message", queue, unit)
    path, data, rel = msg.path, msg.data, msg.rel
    if PROPERTY_CRC32.encode() in data[msg.props:rel + msg.fields[0]]:
        raise IllegalParam(f"drill 'replaced_message': the message at queue offset {qo} has a whole-message CRC "
                           "property, which the change would break", offset=qo)
    body = bytes(b ^ 0x01 for b in data[msg.body])
    data[msg.body] = body
    data[rel + BODY_CRC_POS:rel + BODY_CRC_POS + 4] = (zlib.crc32(body) & 0x7FFFFFFF).to_bytes(4, "big")
    d.rewrite(path, bytes(data))
    return PlantedFault("replaced_message", FindingKind.CHECKSUM_MISMATCH, path,
                        f"replaced the body of the message at queue offset {qo} (commit-log offset {offset}) by "
                        "another of the same length, its CRC right", (qo, qo + 1), queue.topic, queue.queue_id,
                        deep=True)


def plant_truncated_segment(d: Drill, topic: str | None, queue_id: int | None) -> PlantedFault:
    queue = d.pick_queue("truncated_segment", topic, queue_id, lambda q: bool(_with_messages(d, q)))
    meta = d.rng.choice(_with_messages(d, queue))
    path = d.path(meta)
    data = d.read_all(path)
    units = d.units_in(queue, meta.base_offset, meta.base_offset + meta.size)
    # cut inside the last message the segment holds (it and nothing before it is lost)
    _qo, last_off, last_size = units[-1]
    keep = last_off - meta.base_offset + last_size // 2
    d.rewrite(path, data[:keep])
    lost = [u for u in units if u[1] + u[2] > meta.base_offset + keep]
    return PlantedFault("truncated_segment", FindingKind.LOST_BYTES, path,
                        f"rewrote the object with its first {keep} of {len(data)} bytes", _offsets(lost),
                        queue.topic, queue.queue_id)


def plant_deleted_object(d: Drill, topic: str | None, queue_id: int | None) -> PlantedFault:
    queue = d.pick_queue("deleted_object", topic, queue_id, lambda q: bool(_with_messages(d, q)))
    meta = d.rng.choice(_with_messages(d, queue))
    path = d.path(meta)
    d.driver.delete(path)
    units = d.units_in(queue, meta.base_offset, meta.base_offset + meta.size)
    return PlantedFault("deleted_object", FindingKind.MISSING_OBJECT, path,
                        f"deleted the commit-log segment ({meta.size} bytes)", _offsets(units),
                        queue.topic, queue.queue_id)


def plant_extra_object(d: Drill, topic: str | None, queue_id: int | None) -> PlantedFault:
    path = f"{d.prefix}drill-extra/stray-{d.rng.randrange(1 << 30):010d}.bin"
    data = bytes(d.rng.randrange(256) for _ in range(100))
    d.driver.create(path)
    d.driver.write(path, 0, data)
    return PlantedFault("extra_object", FindingKind.UNLISTED_OBJECT, path,
                        f"created a {len(data)}-byte object that is not a segment under the prefix")


def plant_unlisted_segment(d: Drill, topic: str | None, queue_id: int | None) -> PlantedFault:
    queue = d.pick_queue("unlisted_segment", topic, queue_id,
                         lambda q: len([m for m in q.cq if m.size]) >= 2 and q.cq[-1].size > 0)
    meta = queue.cq[-1]
    path = d.path(meta)
    d.metadata.delete_file_segment(int(meta.type), meta.path, meta.base_offset)
    d.metadata.flush()
    return PlantedFault("unlisted_segment", FindingKind.UNLISTED_OBJECT, path,
                        f"removed the metadata record of the queue's last consume-queue segment (base "
                        f"{meta.base_offset}, {meta.size} bytes): the object continues its file (adoptable)",
                        None, queue.topic, queue.queue_id)


def plant_metadata_past_end(d: Drill, topic: str | None, queue_id: int | None) -> PlantedFault:
    queue = d.pick_queue("metadata_past_end", topic, queue_id, lambda q: bool(q.cl) and q.cl[-1].size > 0)
    meta = queue.cl[-1]
    path = d.path(meta)
    backend = d.driver.size(path)
    raised = backend + 64 + d.rng.randrange(64)
    d.update(meta, size=raised)
    return PlantedFault("metadata_past_end", FindingKind.LOST_BYTES, path,
                        f"raised the metadata size of the queue's last commit-log segment from {backend} to "
                        f"{raised} (the backend holds {backend})", None, queue.topic, queue.queue_id)


def plant_wrong_sealed_flag(d: Drill, topic: str | None, queue_id: int | None) -> PlantedFault:
    queue = d.pick_queue("wrong_sealed_flag", topic, queue_id,
                         lambda q: q.cl[-1].status != SegmentStatus.SEALED and q.cl[-1].size > 0)
    meta = queue.cl[-1]
    path = d.path(meta)
    if d.rng.random() < 0.5 or not d.driver.capabilities.seal:
        d.update(meta, status=SegmentStatus.SEALED, seal_timestamp=meta.create_timestamp or 1)
        what = "recorded the queue's last commit-log segment as sealed in the metadata (the backend object is not)"
    else:
        d.driver.seal(path)
        what = "sealed the queue's last commit-log segment in the backend (the metadata records it open)"
    return PlantedFault("wrong_sealed_flag", FindingKind.SEALED_MISMATCH, path, what, None,
                        queue.topic, queue.queue_id)


def plant_bad_tail(d: Drill, topic: str | None, queue_id: int | None) -> PlantedFault:
    queue = d.pick_queue("bad_tail", topic, queue_id, lambda q: q.cl[-1].status != SegmentStatus.SEALED)
    meta = queue.cl[-1]
    path = d.path(meta)
    if meta.size == 0 and not d.driver.exists(path):
        d.driver.create(path)
    size = d.driver.size(path)
    # a totalSize of 0x7FFFFFFF and a wrong magic: no message reads back from it
    garbage = struct.pack(">iI", 0x7FFFFFFF, 0x0BADF00D) + bytes(d.rng.randrange(256) for _ in range(56))
    d.driver.write(path, size, garbage)
    return PlantedFault("bad_tail", FindingKind.BAD_TAIL, path,
                        f"appended {len(garbage)} bytes of garbage at {size}, past the committed end",
                        None, queue.topic, queue.queue_id)


def plant_bad_times(d: Drill, topic: str | None, queue_id: int | None) -> PlantedFault:
    queue = d.pick_queue("bad_times", topic, queue_id,
                         lambda q: any(m.status == SegmentStatus.SEALED and m.size for m in _with_messages(d, q)))
    meta = d.rng.choice([m for m in _with_messages(d, queue) if m.status == SegmentStatus.SEALED])
    shift = 3_600_000 * (1 + d.rng.randrange(24))
    before = (meta.begin_timestamp, meta.end_timestamp)
    d.update(meta, begin_timestamp=meta.begin_timestamp + shift, end_timestamp=meta.end_timestamp + shift)
    return PlantedFault("bad_times", FindingKind.TIME_BOUNDS_MISMATCH, d.path(meta),
                        f"moved the sealed segment's metadata times {before} by +{shift} ms", None,
                        queue.topic, queue.queue_id, deep=True)


def plant_index_entry_wrong(d: Drill, topic: str | None, queue_id: int | None) -> PlantedFault:
    for meta in d.rng.sample(d.index_segments(), len(d.index_segments())):
        path = d.path(meta)
        data = bytearray(d.read_all(path))
        header = IndexHeader.decode(bytes(data[:HEADER_SIZE]), path)
        slots = (len(data) - HEADER_SIZE - header.item_count * COMPACT_ITEM_SIZE) // SLOT_SIZE
        start = HEADER_SIZE + slots * SLOT_SIZE
        order = list(range(header.item_count))
        d.rng.shuffle(order)
        for i in order:
            pos = start + i * COMPACT_ITEM_SIZE
            h, tid, qid, off, size, diff = COMPACT_ITEM.unpack_from(data, pos)
            t = d.topic_of_id(tid)
            if t is None or (topic is not None and t != topic) or (queue_id is not None and qid != queue_id):
                continue
            queues = d.queues(t, qid)
            if not queues:
                continue
            other = _other_message(d, queues[0], off, t, h)
            if other is None:
                continue
            new_off, new_size, qo = other
            COMPACT_ITEM.pack_into(data, pos, h, tid, qid, new_off, new_size, diff)
            d.rewrite(path, bytes(data))
            return PlantedFault("index_entry_wrong", FindingKind.INDEX_ENTRY_WRONG, path,
                                f"pointed index item {i} (hash {h}, {t}/{qid} commit-log offset {off}) at the "
                                f"message at commit-log offset {new_off} (queue offset {qo}), which has no key "
                                "with that hash", None, t, qid, deep=True)
    raise IllegalParam("drill 'index_entry_wrong': no uploaded index item names a message of the chosen queue")


def _other_message(d: Drill, queue: _Queue, offset: int, topic: str, hash_code: int) -> tuple[int, int, int] | None:
    """A message of ``queue`` other than the one at ``offset`` with no key hashing to ``hash_code``."""
    units = d.units(queue)
    d.rng.shuffle(units)
    for qo, off, size in units[:50]:
        if off == offset:
            continue
        meta = next((m for m in queue.cl if m.base_offset <= off < m.base_offset + m.size), None)
        if meta is None:
            continue
        raw = d.driver.read(d.path(meta), off - meta.base_offset, size)
        if len(raw) != size:
            continue
        keys = message_index_keys(lazy_message_ext(raw, topic))
        if all(index_key_hash(topic, k) != hash_code for k in keys):
            return off, size, qo
    return None


def plant_index_deleted(d: Drill, topic: str | None, queue_id: int | None) -> PlantedFault:
    meta = d.rng.choice(d.index_segments())
    path = d.path(meta)
    d.driver.delete(path)
    return PlantedFault("index_deleted", FindingKind.INDEX_MISSING, path,
                        f"deleted the uploaded key-index file ({meta.size} bytes)")


def plant_index_unreadable(d: Drill, topic: str | None, queue_id: int | None) -> PlantedFault:
    meta = d.rng.choice(d.index_segments())
    path = d.path(meta)
    data = bytearray(d.read_all(path))
    data[0:4] = b"\x00\x00\x00\x00"  # the magic
    data[24:28] = struct.pack(">i", -1 - d.rng.randrange(1000))  # a negative item count
    d.rewrite(path, bytes(data))
    return PlantedFault("index_unreadable", FindingKind.INDEX_UNREADABLE, path,
                        "overwrote the header's magic and item count")


def _owners(d: Drill) -> list[tuple[int, str]]:
    out = []
    for path, _size in d.driver.list(owner_prefix(d.cluster, d.broker)):
        name = path.rsplit("/", 1)[-1]
        if name.isdigit():
            out.append((int(name), path))
    return sorted(out)


def plant_stale_owner(d: Drill, topic: str | None, queue_id: int | None) -> PlantedFault:
    owners = _owners(d)
    epoch = (owners[-1][0] if owners else 0) + 1
    path = f"{owner_prefix(d.cluster, d.broker)}{epoch:020d}"
    record = OwnerRecord(DRILL_OWNER_ID, epoch, "drill-host", 1, "/nonexistent/drill-store", 1)
    if not d.driver.write_if_absent(path, record.encode()):
        raise IllegalParam(f"drill 'stale_owner': owner record {path!r} exists already", path=path)
    return PlantedFault("stale_owner", FindingKind.OWNER_OTHER, d.prefix,
                        f"created owner record {path!r} of store {DRILL_OWNER_ID!r} at epoch {epoch}")


def plant_owner_deleted(d: Drill, topic: str | None, queue_id: int | None) -> PlantedFault:
    owners = _owners(d)
    for _epoch, path in owners:
        d.driver.delete(path)
    return PlantedFault("owner_deleted", FindingKind.OWNER_MISSING, d.prefix,
                        f"deleted {len(owners)} owner record(s) under {d.prefix}{OWNER_DIR}/")


PLANTERS: dict[str, Callable[[Drill, str | None, int | None], PlantedFault]] = {
    "flipped_byte": plant_flipped_byte,
    "replaced_message": plant_replaced_message,
    "truncated_segment": plant_truncated_segment,
    "deleted_object": plant_deleted_object,
    "extra_object": plant_extra_object,
    "unlisted_segment": plant_unlisted_segment,
    "metadata_past_end": plant_metadata_past_end,
    "wrong_sealed_flag": plant_wrong_sealed_flag,
    "index_entry_wrong": plant_index_entry_wrong,
    "index_deleted": plant_index_deleted,
    "index_unreadable": plant_index_unreadable,
    "bad_tail": plant_bad_tail,
    "bad_times": plant_bad_times,
    "stale_owner": plant_stale_owner,
    "owner_deleted": plant_owner_deleted,
}


__all__ = ["DRILL_OWNER_ID", "Drill", "PLANTERS", "PlantedFault"]
