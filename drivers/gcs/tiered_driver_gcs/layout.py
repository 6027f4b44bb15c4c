"""How one segment is laid out in GCS objects, and how its exact size is read back.

A segment at key ``K`` is a *base* object ``K`` plus zero or more *part* objects
``K#tiered-part/<segment id>/<position, 20 digits>``. The base's custom metadata holds
the segment id (a random id chosen when the base is first written) and, once sealed,
``tiered-sealed``. Every write of ``n`` bytes at ``p`` uploads one part named by ``p``
(with ``ifGenerationMatch=0``: only one part per position can ever exist), so an append
is a single atomic upload and nothing has to be done after it for the bytes to count.
From time to time, and at seal, parts are composed into the base.

The size is computed from one listing of ``K`` (base and parts together):
``base size + the sizes of the parts that continue the base without a gap`` -- the
*chain*. Parts of another segment id (left by a deleted predecessor), parts that lie
inside the base (already composed, deletion pending) and parts after a gap are garbage:
never counted, removed at seal and delete. After a crash at any point -- between an
upload and a compose, between a compose and the deletion of its parts -- this
computation still gives exactly the bytes a reader can read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

PART_MARK = "#tiered-part/"
META_ID = "tiered-segment-id"
META_SEALED = "tiered-sealed"
#: A compose call takes at most 32 sources: the base and 31 parts.
MAX_COMPOSE_SOURCES = 32


def part_key(key: str, segment_id: str, position: int) -> str:
    return f"{key}{PART_MARK}{segment_id}/{position:020d}"


@dataclass(frozen=True)
class Part:
    name: str
    segment_id: str
    position: int
    size: int
    generation: int
    md5: str = ""


@dataclass
class SegmentView:
    """One listing of a segment's objects, interpreted."""

    key: str
    exists: bool = False
    base_size: int = 0
    generation: int = 0
    segment_id: str = ""
    sealed: bool = False
    metadata: dict[str, str] = field(default_factory=dict)
    base_md5: str = ""
    chain: list[Part] = field(default_factory=list)
    garbage: list[Part] = field(default_factory=list)

    @property
    def size(self) -> int:
        return self.base_size + sum(p.size for p in self.chain)

    def pieces(self) -> list[tuple[str, int, int]]:
        """``(object name, start offset in the segment, length)`` in order."""
        out = [(self.key, 0, self.base_size)] if self.base_size else []
        for p in self.chain:
            out.append((p.name, p.position, p.size))
        return out


def parse_part(key: str, name: str, item: dict[str, Any]) -> Part | None:
    rest = name[len(key) + len(PART_MARK):]
    seg_id, _, pos = rest.partition("/")
    if not seg_id or not pos.isdigit():
        return None
    return Part(name, seg_id, int(pos), int(item.get("size", 0)), int(item.get("generation", 0)),
                item.get("md5Hash", ""))


def interpret(key: str, items: Iterable[dict[str, Any]]) -> SegmentView:
    """Build the view of segment ``key`` from listed objects (others are ignored)."""
    view = SegmentView(key)
    parts: list[Part] = []
    for item in items:
        name = item.get("name", "")
        if name == key:
            meta = dict(item.get("metadata") or {})
            view.exists = True
            view.base_size = int(item.get("size", 0))
            view.generation = int(item.get("generation", 0))
            view.metadata = meta
            view.segment_id = meta.get(META_ID, "")
            view.sealed = meta.get(META_SEALED, "") == "true"
            view.base_md5 = item.get("md5Hash", "")
        elif name.startswith(key + PART_MARK):
            part = parse_part(key, name, item)
            if part is not None:
                parts.append(part)
    if not view.exists or view.sealed or not view.segment_id:
        view.garbage = parts
        return view
    end = view.base_size
    for part in sorted(parts, key=lambda p: (p.position, p.name)):
        if part.segment_id == view.segment_id and part.position == end and part.size > 0:
            view.chain.append(part)
            end += part.size
        else:
            view.garbage.append(part)
    return view


def group_listing(items: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Listed objects grouped by the segment key they belong to (bases and parts)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        name = item.get("name", "")
        base = name.split(PART_MARK, 1)[0]
        groups.setdefault(base, []).append(item)
    return groups
