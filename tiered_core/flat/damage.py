"""Damaged tiered segments: what the backend holds short of what the metadata records.

A segment whose backend object is gone, or holds fewer bytes than the metadata records
as committed, is *damaged*. Damage stays local: the bytes before it are still served,
and only the range past it answers as damaged (a
:class:`~tiered_core.errors.CorruptData` with reason ``segment_missing`` or
``segment_truncated``). A flat file finds damage when a read fails and the backend's
size (the truth) says the bytes are not there (:meth:`FlatAppendFile.read
<tiered_core.flat.append_file.FlatAppendFile.read>`); :func:`scan_listing` finds it for
every segment at once from one listing of the store's prefix (``tiered stat``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from tiered_core.common import FileSegmentType
from tiered_core.errors import CorruptData

#: CorruptData reasons of a damaged segment.
SEGMENT_MISSING = "segment_missing"
SEGMENT_TRUNCATED = "segment_truncated"
DAMAGE_REASONS = frozenset({SEGMENT_MISSING, SEGMENT_TRUNCATED})


@dataclass(frozen=True)
class SegmentDamage:
    """One damaged segment of the flat file ``file_path`` (``broker/topic/queue``).

    ``path`` is its backend object, which covers offsets ``[base_offset, base_offset +
    recorded)`` per the metadata; the backend holds ``found`` bytes of it (0 and
    ``missing`` when the object is gone). Bytes ``[0, readable)`` of the segment can
    still be read.
    """

    file_path: str
    file_type: FileSegmentType
    path: str
    base_offset: int
    recorded: int
    found: int
    missing: bool
    #: The queue offsets ``[from, to)`` it lost (units or messages), when known.
    queue_offsets: tuple[int, int] | None = None
    #: A hole: the metadata records ``found`` bytes (rebuilt from an object cut short) and
    #: the next segment starts ``recorded`` bytes after this one's start.
    gap: bool = False

    @property
    def reason(self) -> str:
        return SEGMENT_MISSING if self.missing else SEGMENT_TRUNCATED

    @property
    def readable(self) -> int:
        """Bytes from the segment's start that can still be read."""
        return 0 if self.missing else min(self.found, self.recorded)

    @property
    def lost(self) -> tuple[int, int]:
        """The file offsets ``[from, to)`` that cannot be read."""
        return self.base_offset + self.readable, self.base_offset + self.recorded

    @property
    def problem(self) -> str:
        """What is wrong, in words."""
        if self.missing:
            return f"missing from the backend (the metadata records {self.recorded} committed bytes)"
        if self.gap:
            return (f"short: it holds {self.found} bytes and the next segment starts {self.recorded} bytes after its "
                    "start (a hole; the metadata was rebuilt from an object cut short)")
        return f"truncated: the backend holds {self.found} of the {self.recorded} committed bytes the metadata records"

    def covers(self, offset: int, size: int = 1) -> bool:
        """Whether the ``size`` bytes at file offset ``offset`` reach into the lost range."""
        lo, hi = self.lost
        return offset < hi and offset + size > lo

    def describe(self) -> str:
        lo, hi = self.base_offset, self.base_offset + self.recorded
        lost = "" if self.queue_offsets is None else \
            f", queue offsets {self.queue_offsets[0]}..{self.queue_offsets[1] - 1} lost"
        return f"{self.file_type.name} segment {self.path!r} (file offsets {lo}..{hi}{lost}): {self.problem}"

    def error(self, offset: int) -> CorruptData:
        """The CorruptData of a read at file offset ``offset``, which lies in the lost range."""
        return CorruptData(
            f"{self.file_path} {self.file_type.name} offset {offset} cannot be read: {self.describe()}",
            reason=self.reason, path=self.path, offset=offset, file_type=self.file_type.name,
            base_offset=self.base_offset, backend_size=self.found, recorded_size=self.recorded)

    def as_dict(self) -> dict[str, Any]:
        lo, hi = self.lost
        return {"segment": self.path, "type": self.file_type.name, "base_offset": self.base_offset,
                "reason": self.reason, "recorded_bytes": self.recorded, "backend_bytes": self.found,
                "lost_offsets": [lo, hi],
                "queue_offsets": None if self.queue_offsets is None else list(self.queue_offsets),
                "problem": self.problem}


def check_segment(file_path: str, file_type: FileSegmentType, path: str, base_offset: int, recorded: int,
                  found: int | None) -> SegmentDamage | None:
    """The damage of a segment recorded with ``recorded`` committed bytes whose object holds
    ``found`` bytes (None: not there); None when it holds them all."""
    if recorded <= 0 or (found is not None and found >= recorded):
        return None
    return SegmentDamage(file_path, FileSegmentType(file_type), path, base_offset, recorded,
                         found or 0, found is None)


def scan_listing(segments: Iterable[tuple[str, FileSegmentType, str, int, int]],
                 listing: Mapping[str, int]) -> list[SegmentDamage]:
    """Damage of each ``(file_path, file_type, path, base_offset, recorded)`` segment, given
    ``listing`` (backend path -> size, one listing of the store's prefix)."""
    out = []
    for file_path, file_type, path, base, recorded in segments:
        damage = check_segment(file_path, file_type, path, base, recorded, listing.get(path))
        if damage is not None:
            out.append(damage)
    return out


__all__ = ["DAMAGE_REASONS", "SEGMENT_MISSING", "SEGMENT_TRUNCATED", "SegmentDamage", "check_segment", "scan_listing"]
