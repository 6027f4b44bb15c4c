"""How one segment is laid out in the objects of an object store, and how its exact size is read back.

A segment at key ``K`` is a *base* object ``K`` plus zero or more *part* objects
``K#tiered-part/<segment id>/<position, 20 digits>``. The base's custom metadata holds
the segment id (a random id chosen when the base is first written) and, once sealed,
``tiered-sealed``. Every write of ``n`` bytes at ``p`` creates one part named by ``p``
with the backend's *exclusive create* (only one part per position can ever exist), so an
append is a single atomic upload and nothing has to be done after it for the bytes to
count. Where the backend can concatenate objects server-side (GCS compose), parts are
consolidated into the base from time to time and at seal; elsewhere they stay, and the
seal records the segment's final size in ``tiered-sealed-size``.

The size is computed from one listing of ``K`` (base and parts together):
``base size + the sizes of the parts that continue the base without a gap`` -- the
*chain*. Parts of another segment id (left by a deleted predecessor, or another writer's),
parts that lie inside the base (already consolidated, deletion pending), parts after a gap
and parts past a sealed size are garbage: never counted. Those of the segment's own id are
removed at seal and delete; those of another id are kept (see :meth:`SegmentView.own_garbage`). A sealed base
without ``tiered-sealed-size`` was consolidated at seal: its parts are all garbage.
After a crash at any point -- between an upload and a consolidation, between a
consolidation and the deletion of its parts, between a seal and the clean-up -- this
computation still gives exactly the bytes a reader can read.

Nothing here talks to a backend: :func:`interpret` works on :class:`ObjectInfo` records
that a driver's listing primitive produces (see
:class:`tiered_core.spi.objectstore.chained_driver.ChainedObjectDriver`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, NamedTuple

#: Separates a segment's key from its parts' names; a path or prefix may not contain it.
PART_MARK = "#tiered-part/"
#: Base metadata: the segment id (parts of another id are never counted).
META_ID = "tiered-segment-id"
#: Base metadata: ``"true"`` once sealed.
META_SEALED = "tiered-sealed"
#: Base metadata of a segment sealed without consolidation: its final size in bytes.
META_SEALED_SIZE = "tiered-sealed-size"


def part_key(key: str, segment_id: str, position: int) -> str:
    """The name of the part of segment ``key`` (id ``segment_id``) that starts at ``position``."""
    return f"{key}{PART_MARK}{segment_id}/{position:020d}"


class ObjectInfo(NamedTuple):
    """One stored object as a backend lists it, in backend-neutral terms (a named tuple: a
    listing makes one per object).

    ``name`` is the object's full key in its bucket or container; ``version`` an opaque
    token that changes whenever the object is replaced or its metadata is updated where
    the backend versions metadata (GCS generation, S3 ETag; ``""`` when the backend has
    none), compared for equality only; ``metadata`` the custom metadata, or None when the
    listing does not carry it (the driver then asks ``_stat_object``); ``checksum`` the
    backend's content checksum in the backend's own format (``""`` when unknown).
    """

    name: str
    size: int
    version: str = ""
    metadata: Mapping[str, str] | None = None
    checksum: str = ""


class Part(NamedTuple):
    """A part object of a segment, with its position parsed from its name (a named tuple:
    a listing of a long chain makes one per part, and each view is built anew)."""

    name: str
    segment_id: str
    position: int
    size: int
    version: str = ""
    checksum: str = ""

    def info(self) -> ObjectInfo:
        return ObjectInfo(self.name, self.size, self.version, None, self.checksum)


@dataclass
class SegmentView:
    """One listing of a segment's objects, interpreted."""

    key: str
    exists: bool = False
    base_size: int = 0
    version: str = ""
    segment_id: str = ""
    sealed: bool = False
    #: The final size a seal without consolidation recorded; None otherwise.
    sealed_size: int | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    base_checksum: str = ""
    chain: list[Part] = field(default_factory=list)
    garbage: list[Part] = field(default_factory=list)

    @property
    def size(self) -> int:
        return self.base_size + sum(p.size for p in self.chain)

    def own_garbage(self) -> list[Part]:
        """The garbage parts this segment's writers left (safe to remove): of its own id,
        those behind the chain's end (consolidated into the base, or a stale writer's) or at
        it (a writer racing the seal). Parts of another id are kept:
        nothing tells a deleted predecessor's leftovers from another writer's objects
        (another driver's layout on the same prefix). So is a part after a gap: no writer of
        this layout creates one (a write lands at the size it checked), and the fsspec
        driver's id is one constant that anyone's object may carry. A store never deletes
        what it cannot tell is its own."""
        return [p for p in self.garbage if self.segment_id and p.segment_id == self.segment_id
                and not self.after_a_gap(p)]

    def after_a_gap(self, part: Part) -> bool:
        """Whether ``part`` starts past the segment's end."""
        return part.position > self.size

    def pieces(self) -> list[tuple[str, int, int]]:
        """``(object name, start offset in the segment, length)`` in order."""
        out = [(self.key, 0, self.base_size)] if self.base_size else []
        for p in self.chain:
            out.append((p.name, p.position, p.size))
        return out


def parse_part(key: str, info: ObjectInfo) -> Part | None:
    """The part ``info`` names below segment ``key``; None for a name that is not a part's."""
    return _parse_part(len(key) + len(PART_MARK), info)


def _parse_part(skip: int, info: ObjectInfo) -> Part | None:
    seg_id, _, pos = info.name[skip:].partition("/")
    if not seg_id or not pos.isdigit():
        return None
    return Part(info.name, seg_id, int(pos), int(info.size), info.version, info.checksum)


def interpret(key: str, items: Iterable[ObjectInfo]) -> SegmentView:
    """Build the view of segment ``key`` from listed objects (others are ignored)."""
    view = SegmentView(key)
    parts: list[Part] = []
    part_prefix = key + PART_MARK
    skip = len(part_prefix)
    for item in items:
        name = item.name
        if name == key:
            meta = dict(item.metadata or {})
            view.exists = True
            view.base_size = int(item.size)
            view.version = item.version
            view.metadata = meta
            view.segment_id = meta.get(META_ID, "")
            view.sealed = meta.get(META_SEALED, "") == "true"
            sealed_size = meta.get(META_SEALED_SIZE, "")
            view.sealed_size = int(sealed_size) if view.sealed and sealed_size.isdigit() else None
            view.base_checksum = item.checksum
        elif name.startswith(part_prefix):
            part = _parse_part(skip, item)
            if part is not None:
                parts.append(part)
    if not view.exists or not view.segment_id or (view.sealed and view.sealed_size is None):
        view.garbage = parts
        return view
    end = view.base_size
    limit = view.sealed_size
    segment_id = view.segment_id
    chain, garbage = view.chain, view.garbage
    parts.sort(key=_position_then_name)
    for part in parts:
        fits = limit is None or part.position + part.size <= limit
        if part.segment_id == segment_id and part.position == end and part.size > 0 and fits:
            chain.append(part)
            end += part.size
        else:
            garbage.append(part)
    return view


def _position_then_name(part: Part) -> tuple[int, str]:
    return part.position, part.name


def segment_key(name: str) -> str:
    """The key of the segment an object belongs to (a part's base, or the name itself)."""
    return name.split(PART_MARK, 1)[0]


def group_listing(items: Iterable[ObjectInfo]) -> dict[str, list[ObjectInfo]]:
    """Listed objects grouped by the segment key they belong to (bases and parts)."""
    groups: dict[str, list[ObjectInfo]] = {}
    for item in items:
        groups.setdefault(segment_key(item.name), []).append(item)
    return groups


__all__ = [
    "META_ID", "META_SEALED", "META_SEALED_SIZE", "PART_MARK", "ObjectInfo", "Part", "SegmentView",
    "group_listing", "interpret", "parse_part", "part_key", "segment_key",
]
